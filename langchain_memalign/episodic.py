"""Episodic memory: past cases in a FAISS index, retrieved by similarity.

Raw FAISS (an ID-mapped inner-product index over L2-normalized vectors, so
scores are cosine similarities), not LangChain's pickle-based wrapper: ids are
the episodes' SQLite row ids, so upserts and deletes touch only the changed
items and the index can always be rebuilt from the stored vectors.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import faiss
import numpy as np
from pydantic import BaseModel, ConfigDict

_threads_configured = False


def configure_faiss_threads(n: int | None = None) -> None:
    """Limit FAISS's OpenMP threads.

    A judge searches one vector at a time from many Python threads; letting
    each search fan out over every core oversubscribes a small machine. The
    default is 1 unless `OMP_NUM_THREADS` says otherwise.
    """
    global _threads_configured
    if n is None:
        env = os.environ.get("OMP_NUM_THREADS")
        n = int(env) if env and env.isdigit() else 1
    faiss.omp_set_num_threads(max(1, n))
    _threads_configured = True


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
    arr = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))
    if arr.ndim == 1:
        arr = arr.reshape(1, -1)
    if arr.size:
        faiss.normalize_L2(arr)
    return arr


class EpisodicIndex:
    """A thread-safe FAISS index keyed by int64 episode ids."""

    def __init__(self, dim: int | None = None) -> None:
        if not _threads_configured:
            configure_faiss_threads()
        self._lock = threading.RLock()
        self._index: Any = None
        self.dim = dim
        if dim is not None:
            self._index = self._new(dim)

    @staticmethod
    def _new(dim: int) -> Any:
        return faiss.IndexIDMap2(faiss.IndexFlatIP(dim))

    def __len__(self) -> int:
        with self._lock:
            return 0 if self._index is None else int(self._index.ntotal)

    def upsert(self, ids: list[int], vectors: np.ndarray) -> None:
        """Add vectors under `ids`, replacing any already stored under those ids."""
        if not ids:
            return
        mat = as_matrix(vectors)
        if mat.shape[0] != len(ids):
            raise ValueError(f"{len(ids)} ids but {mat.shape[0]} vectors")
        with self._lock:
            if self._index is None:
                self.dim = int(mat.shape[1])
                self._index = self._new(self.dim)
            if mat.shape[1] != self.dim:
                raise ValueError(
                    f"embedding dimension changed: the memory holds {self.dim}-d vectors, "
                    f"got {mat.shape[1]}-d"
                )
            id_arr = np.asarray(ids, dtype=np.int64)
            self._index.remove_ids(id_arr)
            self._index.add_with_ids(mat, id_arr)

    def remove(self, ids: list[int]) -> None:
        """Remove vectors by id; unknown ids are ignored."""
        if not ids:
            return
        with self._lock:
            if self._index is not None:
                self._index.remove_ids(np.asarray(ids, dtype=np.int64))

    def search(self, vector: Any, k: int) -> list[tuple[int, float]]:
        """Return up to `k` (id, cosine similarity) pairs, most similar first."""
        with self._lock:
            if self._index is None or self._index.ntotal == 0 or k <= 0:
                return []
            query = as_matrix(vector)
            if query.shape[1] != self.dim:
                raise ValueError(f"query has {query.shape[1]} dimensions, the memory {self.dim}")
            scores, ids = self._index.search(query, min(k, int(self._index.ntotal)))
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0], strict=True) if i != -1]

    def write(self, path: str) -> None:
        """Write the index to `path` (callers make this atomic)."""
        with self._lock:
            if self._index is not None:
                faiss.write_index(self._index, path)

    @classmethod
    def read(cls, path: str) -> EpisodicIndex:
        """Read an index written by `write`."""
        index = cls()
        raw = faiss.read_index(path)
        index._index = raw
        index.dim = int(raw.d)
        return index
