"""The dual memory of one judge: SQLite store, FAISS episodes and guideline snapshot.

Readers (judgments) work on immutable versions of the memory (`MemoryView`),
so many threads can judge while an alignment writes: a writer commits to
SQLite first, then changes its own copy of the index (copy-on-write) and
publishes a new view in one assignment. A reader that takes one view per
judgment sees guidelines and episodes of the same committed version.

On a PostgreSQL memory (`postgresql://` URL, see `memory.postgres`) other
processes commit too: the index is built from the stored vectors at open,
a judgment first checks the change sequence (at most every `max_staleness`
seconds) and catches up from the changed episodes, and the write lock also
takes the judge's advisory lock in the database, so the align and unalign
runs of all processes serialize.

The checks of a stored configuration live in `_config_checks` and the
integrations' state in `_integration_state`; `CONFIG_BOUNDS`,
`check_config_bounds` and `IntegrationState` are importable from here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
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
from langchain_memalign.memory.calibration import META_KEY as CALIBRATION_KEY
from langchain_memalign.memory.calibration import ScoreCalibration
from langchain_memalign.memory.episodic import Episode, EpisodicIndex, as_matrix
from langchain_memalign.memory.postgres import PostgresStore, is_postgres_url
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

# Where a memory lives: a SQLite folder (or in process) or a PostgreSQL database.
Store = MemoryStore | PostgresStore
Location = str | os.PathLike[str]


class _WriteLock:
    """The memory's write lock: re-entrant in process, and across processes on a database.

    On a folder memory it is a plain re-entrant lock. On a database memory the
    outermost acquisition first takes the judge's writer lock in PostgreSQL
    (so align and unalign runs of all processes serialize), then this
    process's lock, then brings the memory up to the newest commit, so the
    writer decides on the current guidelines and feedback.
    """

    def __init__(self, memory: JudgeMemory, inner: threading.RLock) -> None:
        self._memory = weakref.ref(memory)
        self._inner = inner
        # One writer thread per process at a time: the others wait here, not on
        # the database lock, so they hold no pooled connection while waiting and
        # the index lock stays free for judgments to catch up meanwhile.
        self._writers = threading.Lock()
        self._local = threading.local()

    def __enter__(self) -> _WriteLock:
        depth = getattr(self._local, "depth", 0)
        memory = self._memory()
        store = None if memory is None else memory.store
        if depth == 0:
            self._writers.acquire()
            try:
                if isinstance(store, PostgresStore):
                    cm = store.lock_writers()
                    cm.__enter__()
                    self._local.cm = cm
                self._inner.acquire()
            except BaseException:
                self._release_db()
                self._writers.release()
                raise
        else:
            self._inner.acquire()
        self._local.depth = depth + 1
        if depth == 0 and memory is not None and isinstance(store, PostgresStore):
            try:
                memory._catch_up()
            except BaseException:
                self.__exit__(None, None, None)
                raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._local.depth -= 1
        self._inner.release()
        if self._local.depth == 0:
            try:
                self._release_db()
            finally:
                self._writers.release()

    def _release_db(self) -> None:
        cm = getattr(self._local, "cm", None)
        self._local.cm = None
        if cm is not None:
            cm.__exit__(None, None, None)


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
    calibration: ScoreCalibration = field(default_factory=ScoreCalibration)


def is_other_answer(past: Feedback, inputs: Any, outputs: Any) -> bool:
    """Whether a past case answers these inputs with other outputs.

    The same question with another answer: its verdict is not this case's. Compared
    as rendered, as the judge tells a case the experts graded (`expert_verdict`).
    """
    return render(past.inputs) == render(inputs) and render(past.outputs) != render(outputs)


class JudgeMemory:
    """Semantic and episodic memory behind one judge."""

    def __init__(self, store: Store, embeddings: Embeddings, config: JudgeConfig) -> None:
        self.store: Store = store
        self.embeddings = embeddings
        self.config = config
        # Guards the writer's index and the published views (in process).
        self._index_lock = threading.RLock()
        # Serializes align/unalign/save; judgments never take it. On a database
        # memory it also serializes the writers of all processes.
        self.write_lock = _WriteLock(self, self._index_lock)
        # The change sequence the writer's index reflects, and when a judgment
        # last asked the database whether the memory moved on (database only).
        self._index_seq = 0
        self._checked_at = float("-inf")
        # The background build of a database memory's HNSW index (see `_open_index`).
        self._index_ready = threading.Event()
        self._index_ready.set()
        self._hnsw_token: object | None = None
        # Seconds a judgment may lag behind the newest commit (database only).
        self.max_staleness = store.staleness if isinstance(store, PostgresStore) else 0.0
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
        cls, folder: Location | None, embeddings: Embeddings, config: JudgeConfig
    ) -> JudgeMemory:
        """Open (or start) the memory in `folder` for this config; `None` keeps it in process.

        `folder` may be a `postgresql://` URL (see `PostgresTarget`).
        """
        check_config_bounds(config.model_dump(mode="json"), where=None)
        store: Store = (
            PostgresStore.create(str(folder))
            if is_postgres_url(folder)
            else MemoryStore.create(folder)
        )
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
    def load(cls, folder: Location, embeddings: Embeddings, **overrides: Any) -> JudgeMemory:
        """Open a saved memory (a folder or a `postgresql://` URL); makes no embedding call."""
        store: Store = (
            PostgresStore.open(str(folder)) if is_postgres_url(folder) else MemoryStore.open(folder)
        )
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
        with self._index_lock:
            if isinstance(self.store, PostgresStore):
                with self.store.consistent():
                    self._index_seq = self.store.change_seq()
                    ids, vectors = self.store.all_vectors()
                    self.index = self._open_index(ids, vectors)
                    self._publish()
                return
            cached = self._read_index_cache()
            self.index = cached if cached is not None else self._rebuild_index()
            self._publish()

    def _index_options(self) -> dict[str, Any]:
        return {
            "hnsw_threshold": self.config.hnsw_threshold,
            "ef_search": self.config.hnsw_ef_search,
        }

    def _open_index(self, ids: list[int], vectors: np.ndarray | None) -> EpisodicIndex:
        """The index of a database memory at open: exact at once, approximate later.

        A database memory has no index file, so every process builds its index
        from the stored vectors. An exact (flat) index takes a second for
        100,000 vectors; an HNSW graph takes a minute on two cores. So past
        `hnsw_threshold` the process opens with the exact index (judgments are
        exact meanwhile) and builds the HNSW graph in a background thread,
        which swaps it in with the changes made since (`wait_for_index`).
        """
        options = self._index_options()
        self._hnsw_token = token = object()
        if len(ids) <= options["hnsw_threshold"] or vectors is None:
            self._index_ready.set()
            return EpisodicIndex.build(ids, vectors, **options)
        # No switch to HNSW inside a judgment's catch-up while the graph is built.
        flat = EpisodicIndex.build(ids, vectors, **{**options, "hnsw_threshold": 2**62})
        self._index_ready.clear()
        threading.Thread(
            target=self._build_hnsw, args=(ids, vectors, token), daemon=True,
            name="memalign-hnsw-build",
        ).start()  # fmt: skip
        return flat

    def _build_hnsw(self, ids: list[int], vectors: np.ndarray, token: object) -> None:
        try:
            hnsw = EpisodicIndex.build(ids, vectors, **self._index_options())
            with self._index_lock:
                if self._hnsw_token is not token:  # reopened or rebuilt meanwhile
                    return
                # Bring the graph to what the exact index holds now: episodes
                # added and removed since the build started.
                live_ids, live_vectors = self.index._live()
                built = np.asarray(ids, dtype=np.int64)
                hnsw.remove(np.setdiff1d(built, live_ids).tolist())
                new = ~np.isin(live_ids, built)
                if new.any():
                    hnsw.add(live_ids[new].tolist(), live_vectors[new])
                self.index = hnsw
                self._publish()
        except Exception:  # a closed store, a damaged vector: keep the exact index
            if not (isinstance(self.store, PostgresStore) and self.store.closed):
                logger.exception("building the approximate episode index failed")
        finally:
            if self._hnsw_token is token:
                self._index_ready.set()

    def wait_for_index(self, timeout: float | None = None) -> bool:
        """Wait until the episode index is complete; False if `timeout` passed first.

        Only a database memory larger than `hnsw_threshold` builds its
        approximate (HNSW) index in the background after opening; judgments
        use the exact index until then. Any other memory is always ready.
        """
        return self._index_ready.wait(timeout)

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

    def save(self, folder: Location) -> None:
        """Write the memory to `folder` atomically, with a fresh index cache.

        `folder` may be a `postgresql://` URL: the judge named there becomes a
        copy of this memory, in one transaction. A database memory saved to a
        folder writes a SQLite memory there. Saving a memory to itself only
        refreshes a folder's index cache.
        """
        if is_postgres_url(folder):
            self._save_to_database(str(folder))
            return
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

    def _save_to_database(self, url: str) -> None:
        from langchain_memalign.memory.postgres import PostgresTarget, dump_sqlite

        store = self.store
        if isinstance(store, PostgresStore):
            target = PostgresTarget.parse(url)
            if (target.conninfo, target.judge) == (store.target.conninfo, store.judge):
                return
        with self.write_lock:
            if isinstance(store, PostgresStore):
                dump = store.dump()
            else:
                with store.lock:
                    dump = dump_sqlite(store._conn)
            dest = PostgresStore.create(url)
            try:
                dest.replace_with(dump)
            finally:
                dest.close()

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """Run one align or unalign as a single transaction: whole or not at all.

        Holds the write lock. The steps inside commit as savepoints and are
        published to judgments as they complete; if anything raises, every
        step is rolled back and the in-process index and views are rebuilt
        from the store, so the memory is exactly as before.
        """
        with self.write_lock:
            if self.store.in_atomic or not self.store.supports_atomic:
                # Joined by an enclosing unit; or a database store, whose steps
                # commit one by one (each all-or-nothing; see docs/postgres.md).
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
        elif isinstance(self.store, PostgresStore):
            self._refresh_if_stale()
        return self._view

    def _refresh_if_stale(self) -> None:
        """Before a judgment on a database memory: catch up if the memory moved on.

        One indexed read of the judge row per judgment (or per `max_staleness`
        seconds). A judgment never waits for a writer of this process: while
        one holds the index it publishes its own commits, and the judgment
        reads the version published last.
        """
        now = time.monotonic()
        if now - self._checked_at < self.max_staleness:
            return
        self._checked_at = now
        if self.store.change_seq() == self._view.seq:
            return
        if self._index_lock.acquire(blocking=False):
            try:
                self._catch_up()
            finally:
                self._index_lock.release()

    def _catch_up(self) -> None:
        """Bring the writer's index and the published view to the newest commit.

        Reads the changed episodes since the index's version (ids of removed
        ones, vectors of added ones: no embedding call) at one consistent
        version of the database, then publishes that version.
        """
        with self._index_lock:
            self._publish()

    @property
    def shared(self) -> bool:
        """Whether other processes may change this memory (a PostgreSQL memory)."""
        return isinstance(self.store, PostgresStore)

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

    def stored_calibration(self) -> ScoreCalibration:
        """The calibration as stored now (writers read it here, not from a view)."""
        return ScoreCalibration.from_json(
            self.store.get_meta(CALIBRATION_KEY), self.config.scale, where=self.store._where()
        )

    def put_calibration(self, calibration: ScoreCalibration) -> None:
        """Store a calibration (inside the caller's transaction, when there is one)."""
        self.store.set_meta(CALIBRATION_KEY, calibration.to_json() if calibration.pairs else None)

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
        self,
        query_vector: Any,
        k: int | None = None,
        view: MemoryView | None = None,
        *,
        floors: bool = True,
        case: tuple[Any, Any] | None = None,
    ) -> list[Episode]:
        """The `k` most similar past cases, as of one version of the memory.

        Those below their similarity floor (`min_episode_similarity`, or
        `min_episode_similarity_with_rationale` for those with a rationale) are left
        out; `floors=False` returns the `k` nearest. `case`: the (inputs, outputs) being
        judged; with `show_other_answers=False`, past cases with its inputs and other
        outputs are left out too.
        """
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
            floor = (
                self.config.min_episode_similarity_with_rationale
                if fb.rationale
                else self.config.min_episode_similarity
            )
            if floors and floor is not None and score < floor:
                continue
            if (
                case is not None
                and not self.config.show_other_answers
                and is_other_answer(fb, *case)
            ):
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
        with self._index_lock:
            if isinstance(self.store, PostgresStore):
                with self.store.consistent():
                    self._publish_locked()
            else:
                self._publish_locked()

    def _publish_locked(self) -> None:
        seq = self.store.change_seq()
        if isinstance(self.store, PostgresStore) and seq != self._index_seq:
            # Other processes' commits (and this one's, which the writer
            # applied already: both steps are idempotent).
            removed, added, vectors = self.store.episode_changes(self._index_seq)
            self.index.remove(removed)
            if added:
                have = set(self.index.ids().tolist())
                keep = [i for i, rowid in enumerate(added) if rowid not in have]
                if keep and vectors is not None:
                    self.index.add([added[i] for i in keep], vectors[keep])
        if len(self.index) != self.store.count("episodes"):
            # An earlier write committed but failed before updating the
            # index: the stored vectors are the truth.
            self.index = self._rebuild_index()
        self._index_seq = seq
        guidelines, vectors = self.store.load_guidelines()
        view = MemoryView(
            seq, tuple(guidelines), vectors, self.index.frozen(), self.stored_calibration()
        )
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
