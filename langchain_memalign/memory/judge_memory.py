"""The dual memory of one judge: SQLite store, FAISS episodes and guideline snapshot.

Readers (judgments) work on immutable versions of the memory (`MemoryView`),
so many threads can judge while an alignment writes: a writer commits to
SQLite first, then changes its own copy of the index (copy-on-write) and
publishes a new view in one assignment. A reader that takes one view per
judgment sees guidelines and episodes of the same committed version.

The checks of a stored configuration live in `_config_checks` and the
integrations' state in `_integration_state`; `CONFIG_BOUNDS`,
`check_config_bounds` and `IntegrationState` are importable from here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from langchain_memalign._text import render, stable_hash, truncate
from langchain_memalign.config import JudgeConfig
from langchain_memalign.errors import EmbeddingMismatchError, MemoryFormatError
from langchain_memalign.feedback import Feedback
from langchain_memalign.memory._config_checks import CONFIG_BOUNDS as CONFIG_BOUNDS
from langchain_memalign.memory._config_checks import _check_identity, _stored_config
from langchain_memalign.memory._config_checks import check_config_bounds as check_config_bounds
from langchain_memalign.memory._files import write_atomic
from langchain_memalign.memory._integration_state import _CORE_META
from langchain_memalign.memory._integration_state import IntegrationState as IntegrationState
from langchain_memalign.memory.episodic import Episode, EpisodicIndex, as_matrix
from langchain_memalign.memory.semantic import Guideline, select_guidelines, total_tokens
from langchain_memalign.memory.store import INDEX_FILE, MemoryStore, remove_leftovers
from langchain_memalign.models import embeddings_fingerprint
from langchain_memalign.reports import Usage

logger = logging.getLogger(__name__)

# Views kept by version number, so the steps of one judgment can share one.
# Each kept view pins its own copy of the FAISS index, so only the current
# and the previous version are kept: a judgment that outlives two writes
# continues on the newest version.
_KEPT_VIEWS = 2


@dataclass(frozen=True, eq=False)
class MemoryView:
    """One committed version of the memory, as judgments read it.

    `seq` is the memory's change sequence at that version; the guidelines,
    their vectors and the episode index all belong to it, and episodes are
    fetched as of it (see `JudgeMemory.retrieve`).
    """

    seq: int
    guidelines: tuple[Guideline, ...]
    guideline_vectors: np.ndarray | None
    index: EpisodicIndex


class JudgeMemory:
    """Semantic and episodic memory behind one judge."""

    def __init__(self, store: MemoryStore, embeddings: Embeddings, config: JudgeConfig) -> None:
        self.store = store
        self.embeddings = embeddings
        self.config = config
        # Serializes align/unalign/save; judgments never take it.
        self.write_lock = threading.RLock()
        # The writer's index: changed after each commit, then published in a view.
        self.index = EpisodicIndex(**self._index_options())
        self._view = MemoryView(0, (), None, self.index.frozen())
        self._views: OrderedDict[int, MemoryView] = OrderedDict()
        # Every view still referenced (by a running judgment or `_views`).
        self._live: weakref.WeakSet[MemoryView] = weakref.WeakSet()
        # Every embedding call of this memory, for callers that report costs
        # (embedding models have no LangChain callbacks to count them with).
        self._embedding_lock = threading.Lock()
        self._embedding_calls = 0
        self._embedded_texts = 0

    # -- opening -------------------------------------------------------------------

    @classmethod
    def create(
        cls, folder: str | os.PathLike[str] | None, embeddings: Embeddings, config: JudgeConfig
    ) -> JudgeMemory:
        """Open (or start) the memory in `folder` for this config; `None` keeps it in process."""
        check_config_bounds(config.model_dump(mode="json"), where=None)
        store = MemoryStore.create(folder)
        try:
            stored = store.get_meta("config")
            if stored is None:
                store.set_meta("config", config.model_dump(mode="json"))
                store.set_meta("embeddings", embeddings_fingerprint(embeddings))
            else:
                _check_identity(_stored_config(stored, folder), config, folder)
                store.set_meta("config", config.model_dump(mode="json"))
            memory = cls(store, embeddings, config)
            memory._check_embeddings()
            memory.reload()
        except BaseException:
            store.close()
            raise
        return memory

    @classmethod
    def load(
        cls, folder: str | os.PathLike[str], embeddings: Embeddings, **overrides: Any
    ) -> JudgeMemory:
        """Open a saved memory; makes no embedding call."""
        store = MemoryStore.open(folder)
        try:
            stored = store.get_meta("config")
            if stored is None:
                raise MemoryFormatError(f"{folder}: memory has no judge configuration")
            old = _stored_config(stored, folder)
            config = JudgeConfig.model_validate({**stored, **overrides})
            check_config_bounds(config.model_dump(mode="json"), where=None)
            _check_identity(old, config, folder)
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

    def reload(self) -> None:
        """Rebuild the in-process views from the store (index from cache or stored vectors)."""
        with self.write_lock:
            cached = self._read_index_cache()
            self.index = cached if cached is not None else self._rebuild_index()
            self._publish()

    def _index_options(self) -> dict[str, Any]:
        return {
            "hnsw_threshold": self.config.hnsw_threshold,
            "ef_search": self.config.hnsw_ef_search,
        }

    def _rebuild_index(self) -> EpisodicIndex:
        ids, vectors = self.store.all_vectors()
        return EpisodicIndex.build(ids, vectors, **self._index_options())

    def _read_index_cache(self) -> EpisodicIndex | None:
        """The cached index if it describes exactly the stored episodes, else None.

        The cache is trusted only if its header names this memory (id), this
        content version and the stored dimension and count, its bytes match
        their digest and its ids are the stored episodes' row ids. Anything
        else (another judge's file, a file from before a later commit, damaged
        bytes, whatever FAISS raises) rebuilds the index from the stored
        vectors, and the untrusted file is deleted: it may hold vectors of
        feedback unaligned since.
        """
        folder = self.store.folder
        if folder is None or not (folder / INDEX_FILE).is_file():
            return None
        path = folder / INDEX_FILE
        identity = self.store.identity()
        rowids = self.store.episode_rowids()
        dim = self.store.episode_dim()
        try:
            head = EpisodicIndex.read_header(str(path))
            expected = {**identity, "count": len(rowids), "dim": dim}
            if any(head.get(key) != value for key, value in expected.items()):
                return self._drop_cache(path)
            index = EpisodicIndex.read(str(path), **self._index_options())
            if index.dim != dim or not np.array_equal(index.ids(), np.asarray(rowids)):
                return self._drop_cache(path)
        except Exception:  # a damaged cache is rebuilt, never trusted
            return self._drop_cache(path)
        return index

    @staticmethod
    def _drop_cache(path: Path) -> None:
        logger.warning("%s: damaged, stale or foreign index cache; rebuilding it", path)
        with contextlib.suppress(OSError):  # a read-only folder still opens
            path.unlink()
        return None

    def save(self, folder: str | os.PathLike[str]) -> None:
        """Write the memory to `folder` atomically, with a fresh index cache."""
        target = Path(folder)
        with self.write_lock:
            if self.store.folder is None or target.resolve() != self.store.folder.resolve():
                self.store.backup_to(target)
            else:
                remove_leftovers(target)
            identity = self.store.identity()
            if self._view.seq != identity["change_seq"] or len(self.index) != self.store.count(
                "episodes"
            ):
                # A write committed but failed before updating the index: the
                # stored vectors are the truth.
                self.index = self._rebuild_index()
                self._publish()
            if not len(self.index):
                (target / INDEX_FILE).unlink(missing_ok=True)
            else:
                index = self.index
                write_atomic(target / INDEX_FILE, lambda p: index.write(p, header=identity))

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """Run one align or unalign as a single transaction: whole or not at all.

        Holds the write lock. The steps inside commit as savepoints and are
        published to judgments as they complete; if anything raises, every
        step is rolled back and the in-process index and views are rebuilt
        from the store, so the memory is exactly as before.
        """
        with self.write_lock:
            if self.store.in_atomic:  # joined by an enclosing unit
                yield
                return
            start = self._view.seq
            try:
                with self.store.atomic():
                    yield
            except BaseException:
                self._views = OrderedDict((s, v) for s, v in self._views.items() if s <= start)
                self.index = self._rebuild_index()
                self._publish()
                raise

    # -- embedding -------------------------------------------------------------------

    def case_text(self, inputs: Any, outputs: Any = None) -> str:
        """The text embedded for a case: identical for stored episodes and new cases."""
        text = render(inputs)
        if self.config.embed == "inputs_outputs" and outputs is not None:
            text = f"{text}\n{render(outputs)}"
        return truncate(text, self.config.embed_max_chars) or "(empty)"

    def embed(self, texts: Sequence[str], usage: Usage | None = None) -> np.ndarray:
        """Embed texts in one call."""
        vectors = self.embeddings.embed_documents(list(texts))
        self._count(usage, len(texts))
        return as_matrix(vectors)

    async def aembed(self, texts: Sequence[str], usage: Usage | None = None) -> np.ndarray:
        """Async twin of `embed`."""
        vectors = await self.embeddings.aembed_documents(list(texts))
        self._count(usage, len(texts))
        return as_matrix(vectors)

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

    def snapshot(self, seq: int | None = None) -> MemoryView:
        """The newest published version of the memory, or version `seq` if still kept.

        A judgment should take one view and pass it to `select_guidelines`,
        `retrieve` and `needs_query_vector`, so all three read one version
        even while an align commits. Steps that run apart can share the view
        by its `seq`; an unknown `seq` gives the newest view.
        """
        if seq is not None:
            view = self._views.get(seq)
            if view is not None:
                return view
        return self._view

    @property
    def guidelines(self) -> tuple[Guideline, ...]:
        """The current guidelines (an immutable snapshot)."""
        return self._view.guidelines

    @property
    def guideline_vectors(self) -> np.ndarray | None:
        """Vectors of the current guidelines, row-aligned with `guidelines`."""
        return self._view.guideline_vectors

    def needs_query_vector(self, view: MemoryView | None = None) -> bool:
        """Whether a judgment needs the case embedded (nothing to retrieve: no call)."""
        view = view or self._view
        over_budget = total_tokens(view.guidelines) > self.config.guideline_token_budget
        return (len(view.index) > 0 and self.config.k > 0) or over_budget

    def select_guidelines(
        self, query_vector: Any, view: MemoryView | None = None
    ) -> list[Guideline]:
        """Guidelines for a judgment's working memory, within the token budget."""
        view = view or self._view
        q = None if query_vector is None else np.asarray(query_vector, dtype=np.float32)
        return select_guidelines(
            view.guidelines, view.guideline_vectors, q, self.config.guideline_token_budget
        )

    def retrieve(
        self, query_vector: Any, k: int | None = None, view: MemoryView | None = None
    ) -> list[Episode]:
        """The `k` most similar past cases, as of one version of the memory."""
        view = view or self._view
        k = self.config.k if k is None else k
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

    # -- publishing a version after a committed write ------------------------------------

    def _publish(self) -> None:
        """Make the committed store and the writer's index the version readers see.

        Readers switch in one assignment; the writer's later index changes
        copy the FAISS object first, so this view never changes.
        """
        with self.write_lock:
            seq = self.store.change_seq()
            if len(self.index) != self.store.count("episodes"):
                # An earlier write committed but failed before updating the
                # index: the stored vectors are the truth.
                self.index = self._rebuild_index()
            guidelines, vectors = self.store.load_guidelines()
            view = MemoryView(seq, tuple(guidelines), vectors, self.index.frozen())
            self._views[seq] = view
            self._views.move_to_end(seq)
            while len(self._views) > _KEPT_VIEWS:
                self._views.popitem(last=False)
            self._view = view
            self._live.add(view)
            self.store.forget_versions(min(v.seq for v in list(self._live)))

    def refresh_guidelines(self) -> None:
        """Publish the committed guidelines and the updated index as one new version.

        Writers call this after each commit, once the index has been updated.
        """
        self._publish()
