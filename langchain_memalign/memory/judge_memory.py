"""The dual memory of one judge: a store, FAISS episodes and guideline snapshots.

`JudgeMemory` is what the graphs read and write: it opens a memory (a
folder, in process, or a `postgresql://` URL) for a judge's configuration,
embeds cases, retrieves past cases and guidelines for a judgment, saves and
copies the memory, and runs an align or unalign as one unit (`atomic`) whose
steps each write through `write` (commit, episode index, publish; `_writes`).

Readers (judgments) work on immutable versions of the memory (`MemoryView`),
so many threads can judge while an alignment writes; the index and the
publishing of versions live in `_views`. The memory works on any `Store`
(`memory.base`) and asks the store what it can do rather than what it is:
on a `shared` store (PostgreSQL, see `memory.postgres`) other processes
commit too, and the memory catches up with them.

The checks of a stored configuration live in `_config_checks` and the
integrations' state in `_integration_state`; `CONFIG_BOUNDS`,
`check_config_bounds`, `IntegrationState` and `MemoryView` are importable
from here.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from langchain_memalign import _ablation
from langchain_memalign._text import render, stable_hash, truncate
from langchain_memalign.config import JudgeConfig, config_with_overrides, upgrade_stored_config
from langchain_memalign.errors import EmbeddingMismatchError, MemoryBusyError, MemoryFormatError
from langchain_memalign.feedback import Feedback
from langchain_memalign.memory._config_checks import CONFIG_BOUNDS as CONFIG_BOUNDS
from langchain_memalign.memory._config_checks import _check_identity, _stored_config
from langchain_memalign.memory._config_checks import check_config_bounds as check_config_bounds
from langchain_memalign.memory._files import write_atomic
from langchain_memalign.memory._integration_state import _CORE_META
from langchain_memalign.memory._integration_state import IntegrationState as IntegrationState
from langchain_memalign.memory._store_base import (
    MemoryFileAppeared,
    holding_memory_file,
    os_error,
)
from langchain_memalign.memory._views import MemoryView as MemoryView
from langchain_memalign.memory._views import PublishingMemory
from langchain_memalign.memory._writes import MemoryWrite as MemoryWrite
from langchain_memalign.memory.backends import memory_exists, open_store
from langchain_memalign.memory.base import Store
from langchain_memalign.memory.calibration import ScoreCalibration
from langchain_memalign.memory.episodic import Episode, as_matrix
from langchain_memalign.memory.location import Location, is_postgres_url
from langchain_memalign.memory.postgres import PostgresStore
from langchain_memalign.memory.semantic import Guideline, select_guidelines, total_tokens
from langchain_memalign.memory.store import INDEX_FILE, remove_leftovers, undone_if_it_fails
from langchain_memalign.models import embeddings_fingerprint
from langchain_memalign.reports import Usage


def is_other_answer(past: Feedback, inputs: Any, outputs: Any) -> bool:
    """Whether a past case answers these inputs with other outputs.

    The same question with another answer: its verdict is not this case's. Compared
    as rendered, as the judge tells a case the experts graded (`expert_verdict`).
    """
    return render(past.inputs) == render(inputs) and render(past.outputs) != render(outputs)


class JudgeMemory(PublishingMemory):
    """Semantic and episodic memory behind one judge."""

    def __init__(self, store: Store, embeddings: Embeddings, config: JudgeConfig) -> None:
        super().__init__(store, config)
        self.embeddings = embeddings
        # Every embedding call of this memory, for callers that report costs
        # (embedding models have no LangChain callbacks to count them with).
        self._embedding_lock = threading.Lock()
        self._embedding_calls = 0
        self._embedded_texts = 0

    # -- opening -------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        folder: Location | None,
        embeddings: Embeddings,
        config: JudgeConfig,
        setup: Callable[[JudgeMemory], None] | None = None,
    ) -> JudgeMemory:
        """Open (or start) the memory in `folder` for this config; `None` keeps it in process.

        `folder` may be a `postgresql://` URL (see `PostgresTarget`). `setup` runs
        on the opened memory before it is returned (a judge's own setup). If
        anything raises, the memory is left as it was: a folder, memory file or
        judge this call created is removed again, and a changed configuration
        is not stored.
        """
        check_config_bounds(config.model_dump(mode="json"), where=None)
        # Together, in one statement: a memory whose configuration is stored without
        # its embedding model would open later with any embeddings at all. A new
        # memory gets them in the transaction that creates it.
        meta = {
            "config": config.model_dump(mode="json"),
            "embeddings": embeddings_fingerprint(embeddings),
        }
        store = open_store(folder, create=True, meta=meta)
        try:
            stored = store.get_meta("config")
            if stored is not None:
                where = store.describe()
                _check_identity(_stored_config(stored, where), config, where)
            memory = cls(store, embeddings, config)
            memory._check_embeddings()
            memory.reload()
            if setup is not None:
                setup(memory)
            # Written last, in one statement: a call that fails before writes nothing.
            if stored is None:  # a memory an earlier version made without them
                store.set_metas(meta)
            elif stored != meta["config"]:
                # Only a changed configuration is written: a read-only memory opens
                # with the one it stores.
                store.set_meta("config", meta["config"])
        except BaseException:
            # Removes only what this call created (`Store.discard`).
            store.discard()
            raise
        return memory

    @classmethod
    def load(cls, folder: Location, embeddings: Embeddings, **overrides: Any) -> JudgeMemory:
        """Open a saved memory (a folder or a `postgresql://` URL); makes no embedding call.

        `overrides` (`k`, `options`) change the stored configuration; the options given
        replace the stored ones field by field (`config.config_with_overrides`).
        """
        store = open_store(folder, create=False)
        try:
            stored = store.get_meta("config")
            where = store.describe()  # a URL without its credentials
            if stored is None:
                raise MemoryFormatError(f"{where}: memory has no judge configuration")
            old = _stored_config(stored, where)
            # A configuration stored flat by earlier versions is overridden as read, nested.
            config = JudgeConfig.model_validate(
                config_with_overrides(upgrade_stored_config(stored), overrides)
            )
            check_config_bounds(config.model_dump(mode="json"), where=None)
            _check_identity(old, config, where)
            memory = cls(store, embeddings, config)
            memory._check_embeddings()
            memory.reload()
        except BaseException:
            store.close()
            raise
        return memory

    def _check_embeddings(self) -> None:
        stored = self.store.get_meta("embeddings")
        current = embeddings_fingerprint(self.embeddings)
        if stored is not None and stored != current:
            raise EmbeddingMismatchError(
                f"this memory was built with embeddings {stored!r} but is opened with "
                f"{current!r}; vectors from different models cannot be compared. Open it with "
                "the original embedding model."
            )

    def save(self, folder: Location, *, overwrite: bool = False) -> None:
        """Write the memory to `folder` atomically, with a fresh index cache.

        `folder` may be a `postgresql://` URL: the judge named there becomes a
        copy of this memory, in one transaction. A database memory saved to a
        folder writes a SQLite memory there. Saving a memory to itself only
        refreshes a folder's index cache.

        A folder or judge that holds the memory of a judge of another name or
        scale is not replaced unless `overwrite` is true: `MemoryFormatError`,
        and nothing is written. A folder that cannot be written raises
        `MemoryReadOnlyError`, a full disk `MemoryFullError` (both `OSError`s);
        the previous folder is left whole.
        """
        if is_postgres_url(folder):
            self._save_to_database(str(folder), overwrite)
            return
        target = Path(folder)
        try:
            self._save_to_folder(target, overwrite)
        except OSError as e:
            error = os_error(e, str(target))
            if error is e:
                raise
            raise error from e

    def _check_replaceable(self, dest: Store, overwrite: bool) -> None:
        """Refuse to replace the memory of another judge (name or scale) unless asked to.

        `save(URL?judge=hr)` from a judge named `support` would otherwise make
        the judge `hr` a copy of `support`, silently losing everything `hr` learned.
        """
        if overwrite:
            return
        stored = dest.get_meta("config")
        if stored is None:
            return
        where = dest.describe()
        old = _stored_config(stored, where)
        new = self.config
        if (old.name, old.scale) != (new.name, new.scale):
            raise MemoryFormatError(
                f"{where}: holds the memory of judge {old.name!r} ({old.scale.kind} scale); "
                f"saving judge {new.name!r} ({new.scale.kind} scale) there would replace it. "
                "Save with overwrite=True to replace it, or save to another folder or judge."
            )

    def _save_to_folder(self, target: Path, overwrite: bool) -> None:
        with self.write_lock:
            identity = self.store.identity()
            if self._view.seq != identity["change_seq"] or len(self.index) != self.store.count(
                "episodes"
            ):
                # A write committed but failed before updating the index: the
                # stored vectors are the truth.
                self.index = self._rebuild_index()
                self._publish()
            index = self.index

            def write_index() -> None:
                if not len(index):
                    (target / INDEX_FILE).unlink(missing_ok=True)
                else:
                    write_atomic(target / INDEX_FILE, lambda p: index.write(p, header=identity))

            if self.store.is_at(target):
                remove_leftovers(target)
                write_index()
                return
            # A save that fails leaves a target without a memory as it was: what it made
            # there goes again, the folders it created too.
            copy = (identity["memory_id"], identity["content_version"])
            with undone_if_it_fails(target, copy):
                self._replace_folder(target, overwrite, write_index)

    def _replace_folder(
        self, target: Path, overwrite: bool, write_index: Callable[[], None]
    ) -> None:
        """Make `target`'s memory file a copy of this memory, checked and replaced as one step.

        The target's file stays write-locked from the check of what it holds to the
        rename of the copy over it (`holding_memory_file`), so no other save or writer
        comes between; a target without a memory file gets the copy only if none
        appeared meanwhile (else it is checked like any other, and again). The index
        cache is written before the copy, so that the copy's rename is the last step:
        a save that fails before it leaves the memory file as it was (an index cache
        of other content is rebuilt when the memory opens).
        """
        for _ in range(8):
            with holding_memory_file(target) as found:
                if not overwrite and found != "absent" and memory_exists(target):
                    dest = open_store(target, create=False)
                    try:
                        self._check_replaceable(dest, overwrite)
                    finally:
                        dest.close()
                target.mkdir(parents=True, exist_ok=True)
                write_index()
                try:
                    self.store.backup_to(target, exclusive=found == "absent")
                except MemoryFileAppeared:
                    continue  # another save put a memory there first: check that one
                return
        raise MemoryBusyError(f"{target}: other saves kept creating a memory there; try again")

    def _save_to_database(self, url: str, overwrite: bool) -> None:
        if self.store.is_at(url):
            return
        with self.write_lock:
            dump = self.store.dump()
            # Tables, not the judge: `replace_with` adds the judge's row in the transaction
            # that copies the content, so a save that fails leaves no empty judge behind.
            dest = PostgresStore.create(url, add_judge=False)
            try:
                # Checked inside the replacing transaction, once it holds the judge's
                # row: no other save or write of that judge comes between.
                dest.replace_with(dump, check=lambda: self._check_replaceable(dest, overwrite))
            finally:
                dest.close()

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """Run one align or unalign as a single transaction: whole or not at all.

        Holds the write lock. The steps inside commit as savepoints; if anything
        raises, every step is rolled back and the in-process index and views are
        rebuilt from the store, so the memory is exactly as before. On a folder
        judgments see each step as it completes; on a `shared` store (PostgreSQL)
        they keep the version before the unit until it commits, as other
        processes do, while the unit's own threads see its steps.
        """
        with self.write_lock:
            if self.store.in_atomic or not self.store.supports_atomic:
                # Joined by an enclosing unit; or a store whose steps commit one
                # by one (each all-or-nothing).
                yield
                return
            start = self._view.seq
            if self.store.shared:
                self._held = self._view
            try:
                with self.store.atomic():
                    if not self.store.shared and self.store.newer_commit(start) is not None:
                        # Another process committed to the folder. A folder has no
                        # writer lock across processes but the unit's own transaction,
                        # which now keeps their commits out: catching up here lets the
                        # unit decide on the newest guidelines, feedback and episodes.
                        self._publish()
                    yield
            except BaseException:
                self._views = OrderedDict((s, v) for s, v in self._views.items() if s <= start)
                self.index = self._rebuild_index()
                self._publish()
                raise
            finally:
                self._held = None

    # -- embedding -------------------------------------------------------------------

    def case_text(self, inputs: Any, outputs: Any = None) -> str:
        """The text embedded for a case: identical for stored episodes and new cases."""
        text = render(inputs)
        if self.config.options.retrieval.embed == "inputs_outputs" and outputs is not None:
            text = f"{text}\n{render(outputs)}"
        return truncate(text, self.config.options.retrieval.embed_max_chars) or "(empty)"

    def embed(self, texts: Sequence[str], usage: Usage | None = None) -> np.ndarray:
        """Embed texts in one call (`EmbeddingMismatchError`: not the memory's dimension)."""
        vectors = self.embeddings.embed_documents(list(texts))
        self._count(usage, len(texts))
        return self._check_dimension(as_matrix(vectors))

    async def aembed(self, texts: Sequence[str], usage: Usage | None = None) -> np.ndarray:
        """Async twin of `embed`."""
        vectors = await self.embeddings.aembed_documents(list(texts))
        self._count(usage, len(texts))
        return self._check_dimension(as_matrix(vectors))

    def dimension(self, view: MemoryView | None = None) -> int | None:
        """The dimension of this memory's vectors, or None while it holds none."""
        view = view or self._view
        if view.index.dim is not None:
            return int(view.index.dim)
        vectors = view.guideline_vectors
        if vectors is not None and vectors.ndim == 2 and vectors.shape[0]:
            return int(vectors.shape[1])
        return None

    def _check_dimension(self, vectors: np.ndarray) -> np.ndarray:
        # A memory that does not name its embedding model (`meta.embeddings`) is
        # opened with any: the first vector of another size is where that shows.
        dim = self.dimension()
        if vectors.size and dim is not None and vectors.shape[1] != dim:
            raise EmbeddingMismatchError(
                f"{self.store.describe()}: this memory's vectors have {dim} dimensions, but "
                f"the embedding model {embeddings_fingerprint(self.embeddings)!r} returns "
                f"{vectors.shape[1]}: it is not the model the memory was built with. Open it "
                "with the original embedding model."
            )
        return vectors

    def _count(self, usage: Usage | None, n: int) -> None:
        with self._embedding_lock:
            self._embedding_calls += 1
            self._embedded_texts += n
        if usage is not None:
            usage.embedding_calls += 1
            usage.embedded_texts += n

    def embedding_usage(self) -> Usage:
        """Embedding calls and texts embedded by this memory so far (all threads)."""
        with self._embedding_lock:
            return Usage(embedding_calls=self._embedding_calls, embedded_texts=self._embedded_texts)

    @staticmethod
    def text_hash(text: str) -> str:
        """Hash of an embedded text, to skip re-embedding unchanged cases."""
        return stable_hash(text)

    # -- reading ---------------------------------------------------------------------

    @property
    def shared(self) -> bool:
        """Whether other processes may change this memory (a PostgreSQL memory)."""
        return self.store.shared

    @property
    def guidelines(self) -> tuple[Guideline, ...]:
        """The current guidelines (an immutable snapshot)."""
        return self._view.guidelines

    @property
    def guideline_vectors(self) -> np.ndarray | None:
        """Vectors of the current guidelines, row-aligned with `guidelines`."""
        return self._view.guideline_vectors

    @property
    def calibration(self) -> ScoreCalibration:
        """The current score calibration (seen cases' pairs and the remapping)."""
        return self._view.calibration

    def needs_query_vector(self, view: MemoryView | None = None) -> bool:
        """Whether a judgment needs the case embedded (nothing to retrieve: no call)."""
        view = view or self._view
        budget = self.config.options.reflection.guideline_token_budget
        over_budget = total_tokens(view.guidelines) > budget
        return (len(view.index) > 0 and self.config.k > 0) or over_budget

    def select_guidelines(
        self, query_vector: Any, view: MemoryView | None = None
    ) -> list[Guideline]:
        """Guidelines for a judgment's working memory, within the token budget."""
        view = view or self._view
        q = None if query_vector is None else np.asarray(query_vector, dtype=np.float32)
        budget = self.config.options.reflection.guideline_token_budget
        return select_guidelines(view.guidelines, view.guideline_vectors, q, budget)

    def retrieve(
        self,
        query_vector: Any,
        k: int | None = None,
        view: MemoryView | None = None,
        *,
        floors: bool = True,
        case: tuple[Any, Any] | None = None,
    ) -> list[Episode]:
        """The `k` most similar past cases, as of one version of the memory.

        Those below their similarity floor (`options.retrieval.min_similarity`, or
        `min_similarity_with_rationale` for those with a rationale) are left out;
        `floors=False` returns the `k` nearest. `case`: the (inputs, outputs) being
        judged; in the `show_other_answers=False` ablation (`_ablation`), past cases with
        its inputs and other outputs are left out too.
        """
        view = view or self._view
        k = self.config.k if k is None else k
        show_other_answers = _ablation.of(self.config).show_other_answers
        if query_vector is None or k <= 0:
            return []
        hits = view.index.search(query_vector, k)
        # As of the view's version: an align or unalign committed since then
        # must not change or remove the episodes this view's index found.
        rows = self.store.episodes_by_rowid([i for i, _ in hits], as_of=view.seq)
        episodes = []
        for rowid, score in hits:
            fb = rows.get(rowid)
            if fb is None:  # older than the kept before-images (64 commits ago)
                continue
            floor = self.config.floor(with_rationale=bool(fb.rationale))
            if floors and floor is not None and score < floor:
                continue
            if case is not None and not show_other_answers and is_other_answer(fb, *case):
                continue
            episodes.append(
                Episode(
                    feedback_id=fb.id, inputs=fb.inputs, outputs=fb.outputs,
                    reference_outputs=fb.reference_outputs, value=fb.value,
                    rationale=fb.rationale, annotator=fb.annotator, similarity=score,
                )
            )  # fmt: skip
        return episodes

    def stored_ids(self, ids: Iterable[str]) -> set[str]:
        """Which of `ids` are stored feedback."""
        return set(self.store.feedback_state(ids))

    def feedback(self, ids: Iterable[str]) -> dict[str, Feedback]:
        """The stored feedback among `ids`, by id (unknown ids are left out)."""
        return self.store.get_feedback(ids)

    def pending_ids(self) -> list[str]:
        """Stored feedback whose reflection failed; the next `align` retries it."""
        return self.store.pending_reflection()

    # -- integrations' own state ---------------------------------------------------------

    @contextmanager
    def integration_state(self, namespace: str) -> Iterator[IntegrationState]:
        """Read and write an integration's own state, stored with the memory.

        An integration that feeds the judge (a feedback source, a queue) keeps
        what it has seen here, so that the state and the memory it describes
        are saved, copied and deleted together. The block holds the memory's
        write lock: no other align, unalign or save runs meanwhile, but the
        block itself may align and unalign (the lock is re-entrant).

        ```python
        with judge.memory.integration_state("my_source:project-1") as state:
            seen = state.get() or {}
            ...
            state.set(seen)  # saved at once: a later failure keeps it
        ```

        Args:
            namespace: The integration's key, e.g. `"langsmith_sync:<key>:<scope>"`;
                the memory's own keys (`config`, `embeddings`, ...) are refused.
        """
        if not namespace or namespace in _CORE_META:
            raise ValueError(f"{namespace!r} is not an integration namespace")
        with self.write_lock:
            yield IntegrationState(self.store, namespace)

    # -- writing ------------------------------------------------------------------------

    @contextmanager
    def write(self) -> Iterator[MemoryWrite]:
        """One write step: commit it, update the episode index, publish the new version.

        The writes made through the yielded `MemoryWrite` commit in one store
        transaction. Then the episode index takes the episodes they stored and
        deleted, and judgments see the new version (guidelines, episodes,
        calibration) at once. An exception rolls the step back and leaves the
        index and the published version as they were. Inside `atomic` the step
        is part of the one align or unalign, as any transaction is.

        ```python
        with memory.write() as w:
            w.put_guideline(guideline, vector, w.next_position())
            w.log("align", guideline.source_ids, [guideline.id])
        ```
        """
        with self.store.transaction() as conn:
            step = MemoryWrite(self.store, conn)
            yield step
        with self._index_lock:
            self.index.remove(step.removed_rows)
            if step.added_rows:
                self.index.add(step.added_rows, np.stack(step.added_vectors))
            self._publish()
