"""A corrupt folder raises MemoryFormatError naming the problem."""

from __future__ import annotations

import math
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import HOURS, RUDE, SWEATER, fb
from fakes import HashEmbeddings

from langchain_memalign import (
    Feedback,
    InvalidFeedbackError,
    MemAlignError,
    MemAlignJudge,
    MemoryFormatError,
)
from langchain_memalign.memory.store import DB_FILE, INDEX_FILE, MemoryStore

# CI runs 24 seeds; MEMALIGN_FLIP_SEEDS=400 runs the figure quoted in docs/persistence.md.
SEEDS = range(int(os.environ.get("MEMALIGN_FLIP_SEEDS", "24")))
CASE = {"inputs": "My sweater looks different, I'm disappointed.", "outputs": "Colors vary."}


@pytest.fixture
def saved(make_judge: Any, tmp_path: Path) -> Path:
    folder = tmp_path / "template"
    judge = make_judge()
    judge.align([SWEATER, HOURS, RUDE])
    judge.save(folder)
    judge.close()
    return folder


def _exercise(folder: Path, model: Any) -> str:
    """Open a folder and use it the way a user would; return how far it got."""
    judge = MemAlignJudge.load(folder, model=model, embeddings=HashEmbeddings())
    for fid in judge.feedback_ids:
        judge.get_feedback(fid)
    judge.history()
    judge.stats()
    judge.invoke(CASE)
    if judge.feedback_ids:
        judge.unalign([judge.feedback_ids[0]])
    judge.align([fb("new", "A new case about refunds.", "Refunds take 5 days.", True)])
    judge.save(folder)
    judge.close()
    return "used"


@pytest.mark.parametrize("seed", SEEDS)
def test_byte_flipped_database_raises_only_memory_format_error(
    saved: Path, model: Any, tmp_path: Path, seed: int
) -> None:
    folder = tmp_path / f"flip{seed}"
    shutil.copytree(saved, folder)
    (folder / INDEX_FILE).unlink()  # exercise the database, not the cache
    data = bytearray((folder / DB_FILE).read_bytes())
    rng = np.random.default_rng(seed)
    # Past the 100-byte file header (flipping it mostly gives "not a database").
    for pos in rng.integers(100, len(data), size=16):
        data[pos] ^= int(rng.integers(1, 256))
    (folder / DB_FILE).write_bytes(bytes(data))
    try:
        _exercise(folder, model)
    except MemAlignError as e:
        # Every error a corrupt folder causes is documented; a format error names the folder.
        if isinstance(e, MemoryFormatError):
            assert str(folder) in str(e) or "memory" in str(e)


@pytest.mark.parametrize("keep", [0.5, 0.1, 200 / 1e9])
def test_truncated_database(saved: Path, model: Any, tmp_path: Path, keep: float) -> None:
    folder = tmp_path / "cut"
    shutil.copytree(saved, folder)
    data = (folder / DB_FILE).read_bytes()
    (folder / DB_FILE).write_bytes(data[: max(1, int(len(data) * keep))])
    with pytest.raises(MemoryFormatError):
        _exercise(folder, model)


def test_empty_database_file_is_not_a_memory(saved: Path, model: Any) -> None:
    (saved / DB_FILE).write_bytes(b"")
    with pytest.raises(MemoryFormatError, match="not a MemAlign memory"):
        MemAlignJudge.load(saved, model=model, embeddings=HashEmbeddings())


@pytest.mark.parametrize("version", ["99", "1.0", "true", '"1"', "null", "[1]"])
def test_wrong_schema_version(saved: Path, model: Any, version: str) -> None:
    with sqlite3.connect(saved / DB_FILE) as conn:
        conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (version,))
    with pytest.raises(MemoryFormatError, match="version"):
        MemAlignJudge.load(saved, model=model, embeddings=HashEmbeddings())


@pytest.mark.parametrize("key", ["schema_version", "config", "embeddings", "change_seq"])
def test_garbage_json_in_meta_names_the_key(saved: Path, model: Any, key: str) -> None:
    with sqlite3.connect(saved / DB_FILE) as conn:
        conn.execute("UPDATE meta SET value='{not json' WHERE key=?", (key,))
    with pytest.raises(MemoryFormatError, match=f"meta.{key}"):
        _exercise(saved, model)


def test_dropped_table_and_garbage_rows(saved: Path, model: Any, tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(saved, other)
    with sqlite3.connect(saved / DB_FILE) as conn:
        conn.execute("DROP TABLE guideline_sources")
    with pytest.raises(MemoryFormatError, match="guideline_sources"):
        _exercise(saved, model)
    (other / INDEX_FILE).unlink()
    with sqlite3.connect(other / DB_FILE) as conn:
        conn.execute("UPDATE feedback SET payload='{\"id\": 5}' WHERE id='hours'")
        conn.execute("UPDATE episodes SET vector=x'0102' WHERE feedback_id='rude'")
        conn.execute("UPDATE guidelines SET created_at='yesterday'")
    with pytest.raises(MemoryFormatError, match="corrupt"):
        _exercise(other, model)


def test_garbage_in_a_cli_style_open(saved: Path) -> None:
    with sqlite3.connect(saved / DB_FILE) as conn:
        conn.execute("UPDATE feedback SET payload='garbage' WHERE id='hours'")
    store = MemoryStore.open(saved)
    with pytest.raises(MemoryFormatError, match="feedback payload"):
        store.get_feedback(["hours"])
    store.close()


# -- NaN and Infinity -----------------------------------------------------------------------


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("where", ["value", "inputs", "metadata", "outputs"])
def test_nan_and_infinity_are_refused_not_stored_as_null(
    make_judge: Any, bad: float, where: str
) -> None:
    judge = make_judge(scale=(0.0, 1.0))
    item: dict[str, Any] = {"id": "x", "inputs": "q", "outputs": "a", "value": 0.5}
    if where == "value":
        item["value"] = bad
    elif where == "metadata":
        item["metadata"] = {"scores": [1.0, bad]}
    else:
        item[where] = {"nested": {"n": bad}}
    with pytest.raises(InvalidFeedbackError, match="x"):
        judge.align([item])
    assert judge.feedback_ids == []
    with pytest.raises(ValueError, match="NaN or Infinity"):
        Feedback(**item)


def test_store_refuses_unstorable_feedback_without_partial_write(tmp_path: Path) -> None:
    store = MemoryStore.create(tmp_path)
    good = Feedback(id="ok", inputs="q", value=True)
    # Built without validation: the store is the last line of defence.
    nan = Feedback.model_construct(id="nan", inputs={"x": math.nan}, value=True, metadata={})
    lone = Feedback.model_construct(id="lone", inputs="\ud800", value=True, metadata={})
    seq = store.change_seq()
    for bad in (nan, lone):
        with pytest.raises(InvalidFeedbackError, match=bad.id), store.transaction() as conn:
            store.put_feedback(conn, good, reflected=True)
            store.put_feedback(conn, bad, reflected=True)
    assert store.feedback_ids() == [] and store.change_seq() == seq
    store.close()


def test_unserializable_content_is_refused_before_any_model_call(
    make_judge: Any, model: Any
) -> None:
    judge = make_judge()
    calls = len(model.calls)
    item = {"id": "obj", "inputs": {"x": object()}, "value": True, "rationale": "Because."}
    with pytest.raises(InvalidFeedbackError, match="cannot be stored as JSON"):
        judge.align([item])
    assert len(model.calls) == calls and judge.feedback_ids == []
