"""The index cache is trusted only for the exact content it indexes."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import HOURS, RUDE, SWEATER, fb
from fakes import HashEmbeddings

from langchain_memalign import AlignFailedError, MemAlignJudge
from langchain_memalign.memory.episodic import MAGIC, EpisodicIndex
from langchain_memalign.memory.store import INDEX_FILE, MemoryStore

# Two judges' feedback: same count, different cases.
OTHER = [
    fb("printer", "My printer is jammed again.", "Open tray 2 and remove the paper.", True),
    fb("invoice", "Where can I download my invoice?", "Under Account > Billing.", True),
    fb("refund", "I want my money back now!", "Refunds take 5-7 days.", False),
]


def _retrieval_hits(judge: MemAlignJudge, items: list[Any]) -> int:
    """How many stored cases retrieve themselves first (what a correct index gives)."""
    mem = judge.memory
    hits = 0
    for item in items:
        q = mem.embed([mem.case_text(item.inputs, item.outputs)])[0]
        found = mem.retrieve(q, k=1)
        hits += bool(found) and found[0].feedback_id == item.id
    return hits


def _index_matches_store(judge: MemAlignJudge) -> bool:
    mem = judge.memory
    ids, vectors = mem.store.all_vectors()
    assert vectors is not None
    raw = mem.index._index
    got = np.stack([raw.reconstruct(int(i)) for i in ids])
    norm = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return bool(np.allclose(got, norm, atol=1e-5))


def _two_memories(make_judge: Any, tmp_path: Path) -> tuple[Path, Path]:
    """Two closed folders of other judges, 3 cases each (row ids 1..3): mine, theirs."""
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    a = make_judge(path=mine)
    a.align([SWEATER, HOURS, RUDE])
    a.close()
    b = make_judge(path=theirs, name="tone")
    b.align(OTHER)
    b.close()
    return mine, theirs


def test_foreign_cache_with_the_same_count_is_rejected_and_rebuilt(
    make_judge: Any, model: Any, tmp_path: Path
) -> None:
    mine, theirs = _two_memories(make_judge, tmp_path)
    # Another judge's cache, same number of vectors, same row ids 1..3.
    shutil.copy(theirs / INDEX_FILE, mine / INDEX_FILE)
    loaded = MemAlignJudge.load(mine, model=model, embeddings=HashEmbeddings())
    assert _index_matches_store(loaded)
    assert _retrieval_hits(loaded, [SWEATER, HOURS, RUDE]) == 3
    assert not (mine / INDEX_FILE).exists()  # the foreign file is gone
    loaded.close()
    assert (mine / INDEX_FILE).is_file()  # and a fresh one written on close
    again = MemAlignJudge.load(mine, model=model, embeddings=HashEmbeddings())
    assert _index_matches_store(again)


def _under_header(path: Path, fields: dict[str, Any]) -> bytes:
    """The index file at `path` with `fields` written into its header (its digest, of the
    FAISS bytes, still holds)."""
    data = path.read_bytes()
    head = EpisodicIndex.read_header(str(path))
    start = len(MAGIC) + 4 + struct.unpack("<I", data[len(MAGIC) : len(MAGIC) + 4])[0]
    forged = json.dumps({**head, **fields}, sort_keys=True).encode()
    return MAGIC + struct.pack("<I", len(forged)) + forged + data[start:]


def test_another_memory_s_cache_under_this_memory_s_header_is_rejected_and_rebuilt(
    make_judge: Any, model: Any, tmp_path: Path
) -> None:
    """A header is a claim anyone can copy: another judge's index, with the same dimension,
    count and row ids 1..3, under this memory's identity is caught by its vectors."""
    mine, theirs = _two_memories(make_judge, tmp_path)
    head = EpisodicIndex.read_header(str(mine / INDEX_FILE))
    identity = {k: head[k] for k in ("memory_id", "change_seq", "content_version")}
    (mine / INDEX_FILE).write_bytes(_under_header(theirs / INDEX_FILE, identity))
    loaded = MemAlignJudge.load(mine, model=model, embeddings=HashEmbeddings())
    assert _index_matches_store(loaded)
    assert _retrieval_hits(loaded, [SWEATER, HOURS, RUDE]) == 3
    assert not (mine / INDEX_FILE).exists()  # the forged file is gone
    loaded.close()
    assert EpisodicIndex.read_header(str(mine / INDEX_FILE))["count"] == 3  # a fresh one


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_a_cache_this_memory_wrote_is_used_without_a_rebuild(
    make_judge: Any, model: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """The proof a cache gives holds for every cache the memory writes itself: after
    aligns and an unalign (a tombstone in an HNSW graph), exact or approximate."""
    judge = make_judge(
        path=tmp_path, options={"retrieval": {"hnsw_threshold": 1 if kind == "hnsw" else 50_000}}
    )
    judge.align([SWEATER, HOURS, RUDE])
    judge.unalign(["hours"])
    judge.align([OTHER[0], OTHER[1]])
    assert judge.memory.index.kind == kind
    judge.close()

    def rebuilt(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the index was rebuilt")

    monkeypatch.setattr(EpisodicIndex, "build", rebuilt)
    loaded = MemAlignJudge.load(tmp_path, model=model, embeddings=HashEmbeddings())
    assert loaded.memory.index.kind == kind and _index_matches_store(loaded)
    assert _retrieval_hits(loaded, [SWEATER, RUDE, OTHER[0], OTHER[1]]) == 4
    assert (tmp_path / INDEX_FILE).is_file()


def test_stale_cache_from_an_older_version_is_rejected(
    make_judge: Any, model: Any, tmp_path: Path
) -> None:
    judge = make_judge(path=tmp_path)
    judge.align([SWEATER, HOURS])
    judge.save(tmp_path)
    old_cache = (tmp_path / INDEX_FILE).read_bytes()
    judge.unalign(["sweater"])
    judge.align([RUDE])  # same count as before, different content
    judge.save(tmp_path)
    judge.close()
    # A save killed after the database was written but before the cache was.
    (tmp_path / INDEX_FILE).write_bytes(old_cache)
    loaded = MemAlignJudge.load(tmp_path, model=model, embeddings=HashEmbeddings())
    assert _index_matches_store(loaded)
    assert _retrieval_hits(loaded, [HOURS, RUDE]) == 2
    assert not (tmp_path / INDEX_FILE).exists()


def test_diverged_copies_of_one_memory_do_not_share_caches(
    make_judge: Any, model: Any, tmp_path: Path
) -> None:
    judge = make_judge()
    judge.align([SWEATER, HOURS])
    judge.save(tmp_path / "a")
    judge.save(tmp_path / "b")
    a = MemAlignJudge.load(tmp_path / "a", model=model, embeddings=HashEmbeddings())
    b = MemAlignJudge.load(tmp_path / "b", model=model, embeddings=HashEmbeddings())
    a.unalign(["sweater"])
    a.align([RUDE])
    b.unalign(["hours"])
    b.align([OTHER[0]])
    a.close()
    b.close()
    shutil.copy(tmp_path / "a" / INDEX_FILE, tmp_path / "b" / INDEX_FILE)
    loaded = MemAlignJudge.load(tmp_path / "b", model=model, embeddings=HashEmbeddings())
    assert _index_matches_store(loaded)
    assert _retrieval_hits(loaded, [SWEATER, OTHER[0]]) == 2


@pytest.mark.parametrize("error", [ValueError, KeyError, MemoryError, TypeError, OSError])
def test_a_cache_that_raises_anything_is_rebuilt(
    make_judge: Any,
    model: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    error: type[BaseException],
) -> None:
    judge = make_judge(path=tmp_path)
    judge.align([SWEATER, HOURS])
    judge.close()

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise error("damaged")

    monkeypatch.setattr(EpisodicIndex, "read", broken)
    loaded = MemAlignJudge.load(tmp_path, model=model, embeddings=HashEmbeddings())
    assert len(loaded.memory.index) == 2 and _index_matches_store(loaded)


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "header"])
def test_damaged_cache_bytes_are_rebuilt(
    make_judge: Any, model: Any, tmp_path: Path, damage: str
) -> None:
    judge = make_judge(path=tmp_path)
    judge.align([SWEATER, HOURS, RUDE])
    judge.close()
    path = tmp_path / INDEX_FILE
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        data[-20] ^= 0x40  # inside a stored vector: FAISS itself would not notice
    elif damage == "empty":
        data = bytearray()
    else:
        data[20] ^= 0xFF
    path.write_bytes(bytes(data))
    loaded = MemAlignJudge.load(tmp_path, model=model, embeddings=HashEmbeddings())
    assert _index_matches_store(loaded)
    assert _retrieval_hits(loaded, [SWEATER, HOURS, RUDE]) == 3


def test_memory_id_and_content_version(tmp_path: Path) -> None:
    a, b = MemoryStore.create(tmp_path / "a"), MemoryStore.create(tmp_path / "b")
    assert a.identity()["memory_id"] != b.identity()["memory_id"]
    before = a.identity()
    with a.transaction():
        pass
    after = a.identity()
    assert after["memory_id"] == before["memory_id"]
    assert after["change_seq"] == before["change_seq"] + 1
    assert after["content_version"] != before["content_version"]
    a.close()
    b.close()


def test_a_write_that_failed_past_its_commit_is_rolled_back_and_the_index_rebuilt(
    make_judge: Any, model: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An align is one transaction: failing after its store step undoes that step too."""
    judge = make_judge(path=tmp_path)
    judge.align([SWEATER])

    def outage(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("index update failed after the commit")

    monkeypatch.setattr(EpisodicIndex, "add", outage)
    with pytest.raises(AlignFailedError, match="after the commit"):
        judge.align([HOURS])
    monkeypatch.undo()
    assert judge.stats()["episodes"] == 1 and len(judge.memory.index) == 1
    assert _index_matches_store(judge)
    judge.save(tmp_path)
    assert _retrieval_hits(judge, [SWEATER]) == 1
    judge.close()
    loaded = MemAlignJudge.load(tmp_path, model=model, embeddings=HashEmbeddings())
    assert _index_matches_store(loaded)
    monkeypatch.setattr(EpisodicIndex, "add", outage)
    with pytest.raises(AlignFailedError, match="after the commit"):
        loaded.align([RUDE])
    monkeypatch.undo()
    loaded.align([OTHER[0]])
    assert len(loaded.memory.index) == 2 and _index_matches_store(loaded)


def test_a_folder_from_before_cache_headers_opens_and_rebuilds(
    make_judge: Any, model: Any, tmp_path: Path
) -> None:
    import sqlite3

    import faiss

    judge = make_judge(path=tmp_path)
    judge.align([SWEATER, HOURS])
    judge.close()
    # What the previous version wrote: no memory id, a plain FAISS file.
    with sqlite3.connect(tmp_path / "memory.sqlite") as conn:
        conn.execute("DELETE FROM meta WHERE key IN ('memory_id', 'content_version')")
        conn.execute("INSERT INTO meta(key, value) VALUES('index_seq', '1')")
    faiss.write_index(faiss.IndexIDMap2(faiss.IndexFlatIP(64)), str(tmp_path / INDEX_FILE))
    loaded = MemAlignJudge.load(tmp_path, model=model, embeddings=HashEmbeddings())
    assert _index_matches_store(loaded) and len(loaded.memory.index) == 2
    assert loaded.memory.store.identity()["memory_id"]
    loaded.close()
    assert EpisodicIndex.read_header(str(tmp_path / INDEX_FILE))["count"] == 2
