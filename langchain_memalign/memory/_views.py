"""Versions of a memory as judgments read them: views, the episode index, the write lock.

Readers (judgments) work on immutable versions of the memory (`MemoryView`),
so many threads can judge while an alignment writes: a writer commits to
the store first, then changes its own copy of the index (copy-on-write) and
publishes a new view in one assignment. A reader that takes one view per
judgment sees guidelines and episodes of the same committed version.

`PublishingMemory` is that part of `JudgeMemory`: it opens the episode index
(from a folder's cache file, or built from the stored vectors), publishes
views after commits, and catches up with other processes' commits (on a
folder or a database: `Store.others_commit`) before a judgment (on a
database at most every `max_staleness` seconds) and before a write.
`_WriteLock` is the memory's write lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from langchain_memalign.config import JudgeConfig
from langchain_memalign.memory.base import Store
from langchain_memalign.memory.calibration import META_KEY as CALIBRATION_KEY
from langchain_memalign.memory.calibration import ScoreCalibration
from langchain_memalign.memory.episodic import EpisodicIndex
from langchain_memalign.memory.rulebook import Check, load_rulebook
from langchain_memalign.memory.semantic import Guideline
from langchain_memalign.memory.store import INDEX_FILE

logger = logging.getLogger(__name__)

# How long a judgment at staleness 0 waits for a writer of this process to publish
# a commit it saw, before it reads that commit into a private copy of the index.
_WRITER_PUBLISH_WAIT = 0.2

# Views kept by version number, so the steps of one judgment can share one.
# Each kept view pins its own copy of the FAISS index, so only the current
# and the previous version are kept: a judgment that outlives two writes
# continues on the newest version.
_KEPT_VIEWS = 2


def _apply(
    index: EpisodicIndex, removed: list[int], added: list[int], vectors: np.ndarray | None
) -> None:
    """Apply episode changes to `index`; ids it holds already are not added twice."""
    index.remove(removed)
    if added and vectors is not None:
        have = set(index.ids().tolist())
        keep = [i for i, rowid in enumerate(added) if rowid not in have]
        if keep:
            index.add([added[i] for i in keep], vectors[keep])


class _WriteLock:
    """The memory's write lock: re-entrant in process, and across processes on a database.

    The outermost acquisition first takes the store's writer lock (on a
    `shared` store, the judge's lock in the database, so align and unalign
    runs of all processes serialize; on others nothing), then this process's
    lock; on a shared store it then brings the memory up to the newest
    commit, so the writer decides on the current guidelines and feedback.
    """

    def __init__(self, memory: PublishingMemory, inner: threading.RLock) -> None:
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
                if store is not None:
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
        if depth == 0 and memory is not None and store is not None and store.shared:
            try:
                memory._publish()
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

    @property
    def busy(self) -> bool:
        """Whether a writer of this process holds (or is taking) the lock."""
        return self._writers.locked()

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
    # The guidelines' checks (rulebook), by guideline id, of this version.
    checks: Mapping[str, Check] = field(default_factory=dict)


class PublishingMemory:
    """The episode index and the published versions of a judge's memory (see the module doc)."""

    def __init__(self, store: Store, config: JudgeConfig) -> None:
        self.store: Store = store
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
        self.max_staleness = store.staleness
        # The writer's index: changed after each commit, then published in a view.
        self.index = EpisodicIndex(**self._index_options())
        # While an align or unalign of a shared store is open (`JudgeMemory.atomic`):
        # the committed version, which readers outside the unit keep seeing.
        self._held: MemoryView | None = None
        self._view = MemoryView(0, (), None, self.index.frozen())
        self._views: OrderedDict[int, MemoryView] = OrderedDict()
        # Views judgments built while a writer held the index (`_private_view`).
        self._private_lock = threading.Lock()
        self._private_views: OrderedDict[int, MemoryView] = OrderedDict()
        # Every view still referenced (by a running judgment or `_views`).
        self._live: weakref.WeakSet[MemoryView] = weakref.WeakSet()

    @property
    def _view(self) -> MemoryView:
        """The newest published version, as this thread may see it.

        Outside a running unit of a shared store, that is the version committed
        before it (`_held`); the unit's own threads see its steps.
        """
        held = self._held
        if held is not None and not self.store.in_atomic:
            return held
        return self._current

    @_view.setter
    def _view(self, view: MemoryView) -> None:
        self._current = view

    # -- the episode index ----------------------------------------------------------

    def reload(self) -> None:
        """Rebuild the in-process views from the store (index from cache or stored vectors)."""
        with self._index_lock:
            if self.store.shared:
                with self.store.consistent():
                    self._index_seq = self.store.change_seq()
                    ids, vectors = self.store.all_vectors()
                    self.index = self._open_index(ids, vectors)
                    self._publish()
                return
            # One read of the stored vectors serves both ways: the proof a cache must
            # give before it is trusted, or the rebuild.
            with self.store.consistent():
                identity = self.store.identity()
                ids, vectors = self.store.all_vectors()
            cached = self._read_index_cache(identity, ids, vectors)
            self.index = (
                cached
                if cached is not None
                else EpisodicIndex.build(ids, vectors, **self._index_options())
            )
            self._publish()

    def _index_options(self) -> dict[str, Any]:
        return {
            "hnsw_threshold": self.config.options.retrieval.hnsw_threshold,
            "ef_search": self.config.options.retrieval.hnsw_ef_search,
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
            if not self.store.closed:
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

    def _read_index_cache(
        self, identity: dict[str, Any], ids: list[int], vectors: np.ndarray | None
    ) -> EpisodicIndex | None:
        """The cached index if it holds exactly the stored episodes, else None.

        `identity`, `ids` and `vectors` are what the store holds. The cache is
        trusted only if its header names this memory (id), this content version
        and the stored dimension and count, its bytes match their digest, and
        it holds the stored episodes' row ids with their stored vectors. A
        header is only a claim (anyone can copy one onto another memory's
        index); the vectors are the proof, and checking them costs about what
        hashing them would. Anything else (another judge's file, a file from
        before a later commit, damaged bytes, whatever FAISS raises) rebuilds
        the index from the stored vectors, and the untrusted file is deleted:
        it may hold vectors of feedback unaligned since.
        """
        folder = self.store.folder
        if folder is None or not (folder / INDEX_FILE).is_file():
            return None
        path = folder / INDEX_FILE
        dim = None if vectors is None else int(vectors.shape[1])
        try:
            head = EpisodicIndex.read_header(str(path))
            expected = {**identity, "count": len(ids), "dim": dim}
            if any(head.get(key) != value for key, value in expected.items()):
                return self._drop_cache(path)
            index = EpisodicIndex.read(str(path), **self._index_options())
            if index.dim != dim or not index.holds(ids, vectors):
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

    # -- the version a judgment reads ------------------------------------------------

    def snapshot(self, seq: int | None = None) -> MemoryView:
        """The newest published version of the memory, or version `seq` if still kept.

        A judgment should take one view and pass it to `select_guidelines`,
        `retrieve` and `needs_query_vector`, so all three read one version
        even while an align commits. Steps that run apart can share the view
        by its `seq`; an unknown `seq` gives the newest view.
        """
        if seq is not None:
            view = self._views.get(seq)
            if view is None:
                with self._private_lock:
                    view = self._private_views.get(seq)
            if view is not None:
                return view
        elif self.store.others_commit and not self.store.closed:
            # A closed memory keeps its last version for readers (`judge.guidelines`).
            return self._refresh_if_stale()
        return self._view

    async def asnapshot(self) -> MemoryView:
        """Async twin of `snapshot()`, off the event loop where taking a view reads the store.

        A folder or a database may catch up with other processes' commits first.
        """
        if self.store.others_commit:
            return await asyncio.to_thread(self.snapshot)
        return self.snapshot()

    def _refresh_if_stale(self) -> MemoryView:
        """Before a judgment: the view to judge on, caught up with other processes if needed.

        One small read per judgment (`Store.newer_commit`: on a database an
        indexed read of the judge row, or one per `max_staleness` seconds; on a
        folder `PRAGMA data_version`). With `max_staleness` 0 the view returned holds every commit
        made before that read, whatever else this process is doing: the judgment
        waits for another judgment's catch-up (short); while a writer of this
        process holds the index (an align, whose own steps stay invisible to
        other threads until it commits: see `_view`), a commit of another
        process is read into a private copy of the index after at most
        `_WRITER_PUBLISH_WAIT`. With a staleness, a judgment never waits: it
        takes the published version if the index is busy.
        """
        now = time.monotonic()
        view = self._view
        if now - self._checked_at < self.max_staleness:
            return view
        self._checked_at = now
        newer = self.store.newer_commit(view.seq)
        if newer is None:
            return view
        seq = newer
        if self.max_staleness > 0:
            if self._index_lock.acquire(blocking=False):
                try:
                    self._publish()
                finally:
                    self._index_lock.release()
            return self._view
        waited_from: float | None = None
        while True:
            # Polled in short slices: a writer of this process publishes the
            # commit without releasing the lock, which ends the wait too.
            if self._index_lock.acquire(timeout=0.01):
                try:
                    if self._view.seq < seq:
                        self._publish()
                    return self._view
                finally:
                    self._index_lock.release()
            view = self._view
            if view.seq >= seq:
                return view
            if not self.write_lock.busy:
                continue  # another judgment's catch-up: it ends soon
            waited_from = time.monotonic() if waited_from is None else waited_from
            if time.monotonic() - waited_from >= _WRITER_PUBLISH_WAIT:
                return self._private_view(view)

    def _private_view(self, base: MemoryView) -> MemoryView:
        """The newest commit as a view of its own, built from `base` without the index lock.

        For a judgment at staleness 0 while a writer of this process holds the
        index: the writer's index is left alone; a copy of `base`'s index (which
        shares the FAISS object until it changes) takes the episodes added and
        removed since `base`, and the view is kept by its version so the other
        steps of the judgment find it.
        """
        with self.store.consistent():
            seq = self.store.change_seq()
            changes = self.store.episode_changes(base.seq)
            if changes is None:  # a folder: computed against the base's index
                changes = self.store.external_episode_changes(base.index.ids, record=False)
            count = self.store.count("episodes")
            guidelines, guideline_vectors = self.store.load_guidelines()
            calibration = self.stored_calibration()
            checks = self.stored_checks()
            index = base.index.copy()
            if changes is not None:
                _apply(index, *changes)
            if len(index) != count:
                index = self._rebuild_index()
        view = MemoryView(
            seq, tuple(guidelines), guideline_vectors, index.frozen(), calibration, checks
        )
        # Kept apart from the writer's `_views` (guarded by the index lock) for the
        # other steps of the judgment, which find it by its version (`snapshot(seq)`).
        with self._private_lock:
            view = self._private_views.setdefault(seq, view)
            self._private_views.move_to_end(seq)
            while len(self._private_views) > _KEPT_VIEWS:
                self._private_views.popitem(last=False)
        return view

    def stored_calibration(self) -> ScoreCalibration:
        """The calibration as stored now (writers read it here, not from a view)."""
        return ScoreCalibration.from_json(
            self.store.get_meta(CALIBRATION_KEY), self.config.scale, where=self.store.describe()
        )

    def stored_checks(self) -> dict[str, Check]:
        """The guidelines' checks as stored now, by guideline id."""
        return load_rulebook(self.store).checks

    # -- publishing a version after a committed write ------------------------------------

    def _publish(self) -> None:
        """Make the committed store and the writer's index the version readers see.

        This is also how the memory catches up with other processes' commits: the
        episodes changed since the index's version are read (ids of removed ones,
        vectors of added ones: no embedding call) at one consistent version of the
        store, and that version is published. Readers switch in one assignment;
        the writer's later index changes copy the FAISS object first, so this view
        never changes.
        """
        with self._index_lock, self.store.consistent():
            self._publish_locked()

    def _publish_locked(self) -> None:
        seq = self.store.change_seq()
        changes = self.store.episode_changes(self._index_seq) if seq != self._index_seq else None
        if changes is None:
            # A folder another process committed to: its changes against the index.
            changes = self.store.external_episode_changes(self.index.ids)
        if changes is not None:
            # Other processes' commits on a shared store or a folder (and this
            # one's, which the writer applied already: `_apply` is idempotent).
            _apply(self.index, *changes)
        if len(self.index) != self.store.count("episodes"):
            # An earlier write committed but failed before updating the
            # index: the stored vectors are the truth.
            self.index = self._rebuild_index()
        self._index_seq = seq
        guidelines, vectors = self.store.load_guidelines()
        view = MemoryView(
            seq, tuple(guidelines), vectors, self.index.frozen(), self.stored_calibration(),
            self.stored_checks(),
        )  # fmt: skip
        self._views[seq] = view
        self._views.move_to_end(seq)
        while len(self._views) > _KEPT_VIEWS:
            self._views.popitem(last=False)
        self._view = view
        self._live.add(view)
        self.store.forget_versions(min(v.seq for v in list(self._live)))

    def refresh_guidelines(self) -> None:
        """Publish what is committed as one new version (guidelines, index, calibration).

        `JudgeMemory.write` publishes its own steps; call this only after
        writing the store by other means.
        """
        self._publish()
