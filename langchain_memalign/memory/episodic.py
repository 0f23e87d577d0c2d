"""Episodic memory: past cases in a FAISS index, retrieved by similarity.

Raw FAISS over L2-normalized vectors (inner product = cosine similarity), not
LangChain's pickle-based wrapper. Ids are the episodes' SQLite row ids, so
upserts and deletes touch only the changed items and the index can always be
rebuilt from the stored vectors.

Small memories use an exact flat index. Past `hnsw_threshold` vectors the
index becomes HNSW (approximate, sub-linear search). HNSW cannot delete, so
removals become tombstones filtered out at search time, and the graph is
rebuilt from its live vectors once tombstones exceed `rebuild_ratio`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import faiss
import numpy as np
from pydantic import BaseModel, ConfigDict


def _default_search_threads() -> int:
    env = os.environ.get("OMP_NUM_THREADS")
    return max(1, int(env)) if env and env.isdigit() else 1


_search_threads = _default_search_threads()


def configure_faiss_threads(n: int | None = None) -> None:
    """Set the OpenMP threads of the judge's own FAISS searches.

    A judge searches one vector at a time from many Python threads; letting
    each search fan out over every core oversubscribes a small machine. The
    default is 1 unless `OMP_NUM_THREADS` says otherwise. Bulk builds (HNSW)
    use every core. Either count is set around our FAISS calls only and
    restored after them: the process's own FAISS setting is left as it was.
    """
    global _search_threads
    _search_threads = _default_search_threads() if n is None else max(1, n)


# OpenMP's thread count is a per-thread setting, so it is set (and restored) in
# the thread that makes the call: a search from a new Python thread (LangGraph
# runs parallel nodes in fresh ones) would otherwise use every core and
# spin-wait, costing tens of ms of CPU on a small machine. Reading and setting
# it costs about 0.1 µs.
@contextmanager
def _faiss_threads(n: int) -> Iterator[None]:
    before = faiss.omp_get_max_threads()
    if before == n:
        yield
        return
    faiss.omp_set_num_threads(n)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def _all_cores() -> AbstractContextManager[None]:
    return _faiss_threads(os.cpu_count() or 1)


class Episode(BaseModel):
    """A retrieved past case with the expert's verdict."""

    model_config = ConfigDict(frozen=True)

    feedback_id: str
    inputs: Any
    outputs: Any = None
    reference_outputs: Any = None
    value: bool | int | float | str
    rationale: str | None = None
    annotator: str | None = None
    similarity: float = 0.0


def as_matrix(vectors: Any) -> np.ndarray:
    """Vectors as a C-contiguous, L2-normalized float32 matrix."""
    arr = np.array(vectors, dtype=np.float32, order="C", copy=True)
    if arr.ndim == 1:
        arr = arr.reshape(1, -1)
    if arr.size:
        faiss.normalize_L2(arr)
    return arr


class EpisodicIndex:
    """A thread-safe FAISS index keyed by int64 episode ids."""

    def __init__(
        self,
        dim: int | None = None,
        *,
        hnsw_threshold: int = 50_000,
        hnsw_m: int = 32,
        ef_construction: int = 80,
        ef_search: int = 96,
        rebuild_ratio: float = 0.2,
    ) -> None:
        self._lock = threading.RLock()
        self._index: Any = None
        self._tombstones: set[int] = set()
        self._selector: Any = None
        self.dim = dim
        self.hnsw_threshold = hnsw_threshold
        self.hnsw_m = hnsw_m
        self.ef_construction = ef_construction
        self.ef_search = ef_search
        self.rebuild_ratio = rebuild_ratio
        if dim is not None:
            self._index = self._new_flat(dim)

    @staticmethod
    def _new_flat(dim: int) -> Any:
        return faiss.IndexIDMap2(faiss.IndexFlatIP(dim))

    def _new_hnsw(self, dim: int) -> Any:
        hnsw = faiss.IndexHNSWFlat(dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        hnsw.hnsw.efConstruction = self.ef_construction
        hnsw.hnsw.efSearch = self.ef_search
        return faiss.IndexIDMap2(hnsw)

    @property
    def kind(self) -> str:
        """`"flat"` (exact) or `"hnsw"` (approximate)."""
        with self._lock:
            if self._index is None:
                return "flat"
            inner = faiss.downcast_index(self._index.index)
            return "hnsw" if isinstance(inner, faiss.IndexHNSWFlat) else "flat"

    def __len__(self) -> int:
        with self._lock:
            if self._index is None:
                return 0
            return int(self._index.ntotal) - len(self._tombstones)

    @property
    def tombstones(self) -> int:
        """Deleted vectors still in an HNSW graph."""
        return len(self._tombstones)

    def add(self, ids: Sequence[int], vectors: Any) -> None:
        """Add vectors under new ids (episode row ids are never reused)."""
        if len(ids) == 0:
            return
        mat = as_matrix(vectors)
        if mat.shape[0] != len(ids):
            raise ValueError(f"{len(ids)} ids but {mat.shape[0]} vectors")
        with self._lock:
            if self._index is None:
                self.dim = int(mat.shape[1])
                self._index = self._new_flat(self.dim)
            if mat.shape[1] != self.dim:
                raise ValueError(
                    f"embedding dimension changed: the memory holds {self.dim}-d vectors, "
                    f"got {mat.shape[1]}-d"
                )
            id_arr = np.asarray(ids, dtype=np.int64)
            if self.kind == "hnsw":
                with _all_cores():
                    self._index.add_with_ids(mat, id_arr)
            else:
                self._index.add_with_ids(mat, id_arr)
                if self._index.ntotal > self.hnsw_threshold:
                    self._rebuild(hnsw=True)

    def remove(self, ids: Sequence[int]) -> None:
        """Remove vectors by id; unknown ids are ignored."""
        if len(ids) == 0:
            return
        with self._lock:
            if self._index is None:
                return
            if self.kind == "flat":
                self._index.remove_ids(np.asarray(ids, dtype=np.int64))
                return
            present = faiss.vector_to_array(self._index.id_map)
            self._tombstones.update(int(i) for i in np.intersect1d(present, ids))
            self._selector = None
            if len(self._tombstones) > self.rebuild_ratio * max(1, int(self._index.ntotal)):
                self._rebuild(hnsw=len(self) > self.hnsw_threshold)

    def _live(self) -> tuple[np.ndarray, np.ndarray]:
        ids = faiss.vector_to_array(self._index.id_map).astype(np.int64)
        vectors = self._index.index.reconstruct_n(0, int(self._index.ntotal))
        if self._tombstones:
            keep = ~np.isin(ids, np.fromiter(self._tombstones, dtype=np.int64))
            ids, vectors = ids[keep], vectors[keep]
        return ids, np.ascontiguousarray(vectors)

    def _rebuild(self, *, hnsw: bool) -> None:
        assert self.dim is not None
        ids, vectors = self._live()
        index = self._new_hnsw(self.dim) if hnsw else self._new_flat(self.dim)
        with _all_cores():
            index.add_with_ids(vectors, ids)
        self._index = index
        self._tombstones = set()
        self._selector = None

    def search(self, vector: Any, k: int) -> list[tuple[int, float]]:
        """Return up to `k` (id, cosine similarity) pairs, most similar first."""
        query = as_matrix(vector)
        with self._lock, _faiss_threads(_search_threads):
            if self._index is None or len(self) == 0 or k <= 0:
                return []
            if query.shape[1] != self.dim:
                raise ValueError(f"query has {query.shape[1]} dimensions, the memory {self.dim}")
            k = min(k, len(self))
            if self._tombstones:
                if self._selector is None:
                    dead = np.fromiter(self._tombstones, dtype=np.int64)
                    self._selector = faiss.IDSelectorNot(faiss.IDSelectorBatch(dead))
                # (missing from faiss-cpu's bundled stubs, present at run time)
                params = faiss.SearchParametersHNSW(  # type: ignore[attr-defined]
                    sel=self._selector, efSearch=self.ef_search
                )
                scores, ids = self._index.search(query, k, params=params)
            else:
                scores, ids = self._index.search(query, k)
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0], strict=True) if i != -1]

    def write(self, path: str) -> None:
        """Write the index to `path` (callers make this atomic).

        Tombstoned vectors are dropped first, so the file holds only live ones.
        """
        with self._lock:
            if self._index is None:
                return
            if self._tombstones:
                self._rebuild(hnsw=self.kind == "hnsw")
            faiss.write_index(self._index, path)

    @classmethod
    def read(cls, path: str, **options: Any) -> EpisodicIndex:
        """Read an index written by `write`."""
        index = cls(**options)
        raw: Any = faiss.read_index(path)
        index._index = raw
        index.dim = int(raw.d)
        if index.kind == "hnsw":  # the file carries the efSearch it was saved with
            inner: Any = faiss.downcast_index(raw.index)
            inner.hnsw.efSearch = index.ef_search
        return index

    @classmethod
    def build(cls, ids: Sequence[int], vectors: Any, **options: Any) -> EpisodicIndex:
        """Build an index over stored vectors in one go (HNSW directly when large)."""
        index = cls(**options)
        if len(ids) == 0:
            return index
        mat = as_matrix(vectors)
        index.dim = int(mat.shape[1])
        big = len(ids) > index.hnsw_threshold
        index._index = index._new_hnsw(index.dim) if big else index._new_flat(index.dim)
        with _all_cores():
            index._index.add_with_ids(mat, np.asarray(ids, dtype=np.int64))
        return index
