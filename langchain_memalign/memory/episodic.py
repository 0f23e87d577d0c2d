"""Episodic memory: past cases in a FAISS index, retrieved by similarity.

Raw FAISS over L2-normalized vectors (inner product = cosine similarity), not
LangChain's pickle-based wrapper. Ids are the episodes' SQLite row ids, so
upserts and deletes touch only the changed items and the index can always be
rebuilt from the stored vectors.

Small memories use an exact flat index. Past `hnsw_threshold` vectors the
index becomes HNSW (approximate, sub-linear search). HNSW cannot delete, so
removals become tombstones filtered out at search time, and the graph is
rebuilt from its live vectors once tombstones exceed `rebuild_ratio`.

Readers get frozen views (`frozen`): a writer that changes the index after a
view was taken first copies the FAISS object, so a judgment never sees half
of a write. The cache file starts with a JSON header naming the content it
indexes (see `write` and `read_header`), so a stale file is detected before
FAISS parses a byte of it; a header can be copied, so the memory opening a
cache also checks that it `holds` the stored vectors.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
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


# Cache file: MAGIC, a 4-byte little-endian header length, the JSON header,
# then FAISS's own serialization of the index.
MAGIC = b"MEMALIGN-FAISS\n"
_MAX_HEADER = 1 << 16


class IndexFileError(ValueError):
    """An index cache file that is not one this library wrote, or is damaged."""


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
        # True once a frozen view shares `_index`: the next change copies it first.
        self._shared = False
        self._frozen = False
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

    def frozen(self) -> EpisodicIndex:
        """A read-only view of the index as it is now, unaffected by later changes.

        The view shares the FAISS object; the next change to this index copies
        it first (copy-on-write), so taking a view costs nothing and a write
        costs one copy of the index.
        """
        with self._lock:
            view = EpisodicIndex.__new__(EpisodicIndex)
            view._lock = threading.RLock()
            view._index = self._index
            view._tombstones = set(self._tombstones)
            view._selector = None
            view._shared = True
            view._frozen = True
            for name in ("dim", "hnsw_threshold", "hnsw_m", "ef_construction", "ef_search"):
                setattr(view, name, getattr(self, name))
            view.rebuild_ratio = self.rebuild_ratio
            self._shared = self._index is not None
            return view

    def copy(self) -> EpisodicIndex:
        """A changeable copy of this index (or of a frozen view of it).

        The copy shares the FAISS object until its first change, which copies
        it (as `frozen` does): taking a copy costs nothing, the first write to
        it one copy of the index. Neither side sees the other's changes.
        """
        with self._lock:
            copy = self.frozen()
            copy._frozen = False
            return copy

    def _own(self) -> None:
        """Before a change: refuse on a view, copy the FAISS object if a view shares it."""
        if self._frozen:
            raise RuntimeError("a frozen view of the episode index cannot change")
        if self._shared and self._index is not None:
            self._index = faiss.clone_index(self._index)
            self._selector = None
        self._shared = False

    def add(self, ids: Sequence[int], vectors: Any) -> None:
        """Add vectors under new ids (episode row ids are never reused)."""
        if len(ids) == 0:
            return
        mat = as_matrix(vectors)
        if mat.shape[0] != len(ids):
            raise ValueError(f"{len(ids)} ids but {mat.shape[0]} vectors")
        with self._lock:
            self._own()
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
                self._own()
                self._index.remove_ids(np.asarray(ids, dtype=np.int64))
                return
            # HNSW removal only adds tombstones: the shared graph is not touched.
            if self._frozen:
                raise RuntimeError("a frozen view of the episode index cannot change")
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
        self._shared = False
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

    def holds(self, ids: Sequence[int], vectors: Any) -> bool:
        """Whether the index holds exactly `ids`, each with its row of `vectors`.

        `vectors` as stored (before `add` normalizes them). The vectors are
        compared bit for bit: the index holds what `as_matrix` made of the
        same stored vectors, and a difference costs only a rebuild.
        """
        theirs_ids = np.asarray(ids, dtype=np.int64)
        # One thread: normalizing a block is a millisecond's work, and a process opening
        # its memory would otherwise start (and spin-wait) an OpenMP team for it.
        with self._lock, _faiss_threads(1):
            if self._index is None or len(self) == 0:
                return theirs_ids.size == 0
            if vectors is None or len(vectors) != theirs_ids.size or len(self) != theirs_ids.size:
                return False
            if self._tombstones:  # never in a file `write` wrote: compare the live rows
                mine_ids, mine = self._live()
            else:
                mine_ids, mine = faiss.vector_to_array(self._index.id_map).astype(np.int64), None
            mine_order, theirs_order = _sort_order(mine_ids), _sort_order(theirs_ids)
            if not np.array_equal(_sorted(mine_ids, mine_order), _sorted(theirs_ids, theirs_order)):
                return False
            if mine is None and mine_order is None and theirs_order is None:
                # Row i of the index is row i of `vectors` (the usual case: row ids grow,
                # and both sides list them in that order): compare a block at a time, with
                # no second copy of every vector (a million of them take 1.5 GB).
                inner = self._index.index
                for start in range(0, theirs_ids.size, _COMPARED_ROWS):
                    block = as_matrix(vectors[start : start + _COMPARED_ROWS])
                    if not np.array_equal(inner.reconstruct_n(start, len(block)), block):
                        return False
                return True
            if mine is None:
                mine = self._index.index.reconstruct_n(0, int(self._index.ntotal))
            theirs = as_matrix(vectors)
            if theirs.shape != mine.shape:
                return False
            return bool(np.array_equal(_sorted(mine, mine_order), _sorted(theirs, theirs_order)))

    def ids(self) -> np.ndarray:
        """The live ids, ascending."""
        with self._lock:
            if self._index is None:
                return np.zeros(0, dtype=np.int64)
            ids = faiss.vector_to_array(self._index.id_map).astype(np.int64)
            if self._tombstones:
                ids = ids[~np.isin(ids, np.fromiter(self._tombstones, dtype=np.int64))]
            return np.sort(ids)

    def write(self, path: str, header: dict[str, Any] | None = None) -> None:
        """Write the index to `path` (callers make this atomic).

        Tombstoned vectors are dropped first, so the file holds only live ones.
        The file starts with a JSON header: `header` (what the index describes)
        plus the dimension, the count and a digest of the FAISS bytes.
        """
        with self._lock:
            if self._tombstones:
                if self._frozen:  # a view cannot compact itself: write a compact copy
                    copy = EpisodicIndex(**self._options())
                    copy.dim, copy._index = self.dim, self._index
                    copy._tombstones, copy._shared = set(self._tombstones), True
                    copy.write(path, header)
                    return
                self._rebuild(hnsw=self.kind == "hnsw")
            body = b"" if self._index is None else faiss.serialize_index(self._index).tobytes()
            meta = {
                **(header or {}),
                "dim": self.dim,
                "count": len(self),
                "digest": hashlib.blake2b(body, digest_size=16).hexdigest(),
            }
        head = json.dumps(meta, sort_keys=True).encode()
        with open(path, "wb") as f:
            f.write(MAGIC + struct.pack("<I", len(head)) + head + body)

    def _options(self) -> dict[str, Any]:
        return {
            "hnsw_threshold": self.hnsw_threshold, "hnsw_m": self.hnsw_m,
            "ef_construction": self.ef_construction, "ef_search": self.ef_search,
            "rebuild_ratio": self.rebuild_ratio,
        }  # fmt: skip

    @staticmethod
    def read_header(path: str) -> dict[str, Any]:
        """The JSON header of an index file (`IndexFileError` if it has none)."""
        with open(path, "rb") as f:
            head = _read_header(f)
        return head

    @classmethod
    def read(cls, path: str, **options: Any) -> EpisodicIndex:
        """Read an index written by `write` (or a plain FAISS file from older versions).

        Raises `IndexFileError` if the bytes do not match the header's digest,
        dimension or count: damaged bytes never reach FAISS's parser.
        """
        with open(path, "rb") as f:
            start = f.read(len(MAGIC))
            if start == MAGIC:
                f.seek(0)
                head = _read_header(f)
                body = f.read()
                digest = hashlib.blake2b(body, digest_size=16).hexdigest()
                if digest != head.get("digest"):
                    raise IndexFileError(f"{path}: index bytes do not match their digest")
                raw: Any = faiss.deserialize_index(np.frombuffer(body, dtype=np.uint8))
            else:
                head = None
                raw = faiss.read_index(path)
        index = cls(**options)
        index._index = raw
        index.dim = int(raw.d)
        if head is not None and (head.get("dim") != index.dim or head.get("count") != len(index)):
            raise IndexFileError(f"{path}: index does not match its header")
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


# Rows per block when `holds` compares an index with the stored vectors (12 MB at 384-d).
_COMPARED_ROWS = 8192


def _sort_order(ids: np.ndarray) -> np.ndarray | None:
    """The permutation that sorts `ids`, or None when they are sorted already."""
    if ids.size < 2 or bool(np.all(ids[1:] > ids[:-1])):
        return None
    return np.argsort(ids, kind="stable")


def _sorted(rows: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    return rows if order is None else rows[order]


def _read_header(f: Any) -> dict[str, Any]:
    if f.read(len(MAGIC)) != MAGIC:
        raise IndexFileError("not a MemAlign index file")
    raw = f.read(4)
    if len(raw) != 4:
        raise IndexFileError("truncated index file")
    (n,) = struct.unpack("<I", raw)
    if n > _MAX_HEADER:
        raise IndexFileError("index file header too large")
    try:
        head = json.loads(f.read(n))
    except ValueError as e:
        raise IndexFileError(f"unreadable index file header ({e})") from e
    if not isinstance(head, dict):
        raise IndexFileError("index file header is not an object")
    return head
