"""The FAISS index: exact while small, HNSW with tombstones when large."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from langchain_memalign.memory.episodic import EpisodicIndex, as_matrix


def vectors(n: int, dim: int = 16, seed: int = 0) -> np.ndarray:
    return as_matrix(np.random.default_rng(seed).normal(size=(n, dim)))


def test_flat_search_is_exact_and_returns_cosine() -> None:
    v = vectors(50)
    index = EpisodicIndex()
    index.add(list(range(100, 150)), v)
    hits = index.search(v[7], 3)
    assert hits[0][0] == 107 and hits[0][1] == pytest.approx(1.0, abs=1e-5)
    assert index.kind == "flat" and len(index) == 50
    index.remove([107, 999])
    assert len(index) == 49 and index.search(v[7], 1)[0][0] != 107


def test_switches_to_hnsw_past_threshold_and_keeps_ids() -> None:
    v = vectors(300)
    index = EpisodicIndex(hnsw_threshold=200)
    index.add(list(range(200)), v[:200])
    assert index.kind == "flat"
    index.add(list(range(200, 300)), v[200:])
    assert index.kind == "hnsw" and len(index) == 300
    found = sum(index.search(v[i], 1)[0][0] == i for i in range(300))
    assert found >= 295  # approximate, but near-exact at this size


def test_hnsw_deletes_are_tombstones_until_rebuild() -> None:
    v = vectors(300)
    index = EpisodicIndex.build(list(range(300)), v, hnsw_threshold=100, rebuild_ratio=0.2)
    assert index.kind == "hnsw"
    index.remove([5, 6, 7])
    assert index.tombstones == 3 and len(index) == 297
    assert all(hit[0] not in (5, 6, 7) for hit in index.search(v[5], 10))
    index.remove(list(range(10, 70)))  # 63 > 20% of 300: rebuild drops them for good
    assert index.tombstones == 0 and len(index) == 237 and index.kind == "hnsw"
    assert index.search(v[100], 1)[0][0] == 100


def test_write_read_round_trip_drops_tombstones(tmp_path: Path) -> None:
    v = vectors(300)
    index = EpisodicIndex.build(list(range(300)), v, hnsw_threshold=100)
    index.remove([1, 2])
    index.write(str(tmp_path / "i.faiss"))
    again = EpisodicIndex.read(str(tmp_path / "i.faiss"), hnsw_threshold=100)
    assert len(again) == 298 and again.kind == "hnsw" and again.tombstones == 0
    assert again.search(v[3], 1)[0][0] == 3


def test_dimension_mismatch_is_a_clear_error() -> None:
    index = EpisodicIndex()
    index.add([1], vectors(1, 16))
    with pytest.raises(ValueError, match="embedding dimension changed"):
        index.add([2], vectors(1, 8))
    with pytest.raises(ValueError, match="query has 8 dimensions"):
        index.search(vectors(1, 8)[0], 1)


def test_judge_memory_uses_hnsw_past_configured_size(make_judge: object) -> None:
    from conftest import fb

    judge = make_judge(options={"retrieval": {"hnsw_threshold": 20}})  # type: ignore[operator]
    items = [fb(f"f{i}", f"question alpha{i} beta{i}", "a", True) for i in range(30)]
    judge.align(items)
    assert judge.memory.index.kind == "hnsw"
    judge.unalign(["f3"])
    hits = judge.invoke({"inputs": "question alpha3 beta3", "outputs": "a"})
    assert "f3" not in hits["metadata"]["episode_ids"]
    judge.align([items[4].model_copy(update={"inputs": "changed alpha4"})])
    assert len(judge.memory.index) == 29 == judge.stats()["episodes"]


def test_ef_search_is_configurable_and_survives_a_round_trip(tmp_path: Path) -> None:
    import faiss

    index = EpisodicIndex.build(list(range(300)), vectors(300), hnsw_threshold=100, ef_search=40)
    assert faiss.downcast_index(index._index.index).hnsw.efSearch == 40
    index.write(str(tmp_path / "i.faiss"))
    again = EpisodicIndex.read(str(tmp_path / "i.faiss"), hnsw_threshold=100, ef_search=200)
    assert faiss.downcast_index(again._index.index).hnsw.efSearch == 200
