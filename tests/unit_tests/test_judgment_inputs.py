"""Only a case reaches the judge graph; ids and vectors no memory can hold get documented errors.

`invoke` and `batch` take `inputs`, `outputs` and `reference_outputs` and nothing of the
graph's own state; the graph checks a `query_vector` a parent graph puts in its state;
`get_feedback` and `unalign` answer ids no feedback can have with
`InvalidFeedbackIdError` and never call a healthy memory corrupt; a memory that does not
name its embedding model, opened with one of another dimension, says so.
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import HOURS, RUDE, SWEATER
from fakes import HashEmbeddings

from langchain_memalign import (
    InvalidJudgeInputError,
    MemAlignJudge,
    MemoryFormatError,
    UnknownFeedbackError,
)
from langchain_memalign.errors import EmbeddingMismatchError, InvalidFeedbackIdError
from langchain_memalign.memory.store import DB_FILE

CASE = {"inputs": "My sweater looks different, I'm disappointed.", "outputs": "Colors vary."}
STATE_KEYS = ["query_vector", "memory_seq", "guidelines", "episodes", "result"]


@pytest.fixture
def judge(make_judge: Any) -> MemAlignJudge:
    judge: MemAlignJudge = make_judge()
    judge.align([SWEATER, HOURS, RUDE])
    return judge


@pytest.mark.parametrize("key", STATE_KEYS)
def test_graph_state_from_a_caller_is_refused(
    judge: MemAlignJudge, model: Any, embeddings: HashEmbeddings, key: str
) -> None:
    calls, embedded = len(model.calls), embeddings.calls
    with pytest.raises(InvalidJudgeInputError, match=key):
        judge.invoke({**CASE, key: [0.0] * embeddings.size})
    with pytest.raises(TypeError):  # as earlier versions raised for unknown keys
        judge.invoke({**CASE, key: None})
    out = judge.batch([CASE, {**CASE, key: 1}], return_exceptions=True)
    assert isinstance(out[1], InvalidJudgeInputError) and out[0]["score"] in (True, False)
    assert len(model.calls) == calls + 1 and embeddings.calls == embedded + 1  # the good case


async def test_graph_state_is_refused_by_the_async_calls_too(judge: MemAlignJudge) -> None:
    with pytest.raises(InvalidJudgeInputError):
        await judge.ainvoke({**CASE, "query_vector": [1.0]})
    out = await judge.abatch([{**CASE, "guidelines": []}], return_exceptions=True)
    assert isinstance(out[0], InvalidJudgeInputError)


BAD_VECTORS = {
    "wrong dimension": [0.1] * 3,
    "empty": [],
    "strings": ["0.1"] * 64,
    "booleans": [True] * 64,
    "nan": [math.nan] + [0.1] * 63,
    "infinity": [0.1] * 63 + [math.inf],
    "past float32": [1e39] * 64,
    "huge int": [10**400] + [0] * 63,
    "nested": [[0.1] * 64],
    "not a list": "0.1 0.2",
    "a number": 0.5,
    "a dict": {"v": [0.1] * 64},
    "2-d array": np.zeros((1, 64)),
    "complex array": np.zeros(64, dtype=complex),
    "object array": np.array([object()] * 64),
}


@pytest.mark.parametrize("name", sorted(BAD_VECTORS))
def test_the_graph_checks_a_supplied_vector(
    judge: MemAlignJudge, model: Any, embeddings: HashEmbeddings, name: str
) -> None:
    calls, embedded = len(model.calls), embeddings.calls
    with pytest.raises(InvalidJudgeInputError, match="query_vector"):
        judge.graph.invoke({**CASE, "query_vector": BAD_VECTORS[name]})
    assert len(model.calls) == calls and embeddings.calls == embedded


async def test_the_async_graph_checks_it_too(judge: MemAlignJudge) -> None:
    with pytest.raises(InvalidJudgeInputError, match="64"):
        await judge.graph.ainvoke({**CASE, "query_vector": [0.5] * 65})


def test_a_good_supplied_vector_is_used(judge: MemAlignJudge, embeddings: HashEmbeddings) -> None:
    vector = judge.memory.embed([judge.memory.case_text(CASE["inputs"], CASE["outputs"])])[0]
    embedded = embeddings.calls
    for given in (vector.tolist(), vector, tuple(vector.tolist())):
        out = judge.graph.invoke({**CASE, "query_vector": given})
        assert out["result"]["metadata"]["episode_ids"][0] == "sweater"
    assert embeddings.calls == embedded  # none embedded again


ODD_IDS = [5, None, 1.5, b"sweater", ["sweater"], "\ud800", "a\udfffb", "", "   ", "x" * 100_000]


@pytest.mark.parametrize("fid", ODD_IDS, ids=repr)
def test_get_feedback_with_an_odd_id(judge: MemAlignJudge, fid: Any) -> None:
    with pytest.raises(InvalidFeedbackIdError) as e:
        judge.get_feedback(fid)
    assert isinstance(e.value, UnknownFeedbackError) and isinstance(e.value, ValueError)
    assert len(str(e.value)) < 400  # a long id is cut in the message
    assert judge.get_feedback("hours").id == "hours"  # the memory is as healthy as before


def test_a_nul_in_an_id_is_an_ordinary_unknown_id_in_a_folder(judge: MemAlignJudge) -> None:
    with pytest.raises(UnknownFeedbackError) as e:
        judge.get_feedback("a\x00b")
    assert not isinstance(e.value, InvalidFeedbackIdError)


@pytest.mark.parametrize("ids", [["\ud800"], ["hours", "\ud800"], [7], ["hours", None]], ids=repr)
def test_unalign_with_an_odd_id_removes_nothing_and_calls_nothing_corrupt(
    judge: MemAlignJudge, ids: list[Any]
) -> None:
    before = (judge.feedback_ids, judge.stats())
    with pytest.raises(InvalidFeedbackIdError):
        judge.unalign(ids)
    assert (judge.feedback_ids, judge.stats()) == before
    with pytest.raises(TypeError):
        judge.unalign(None)  # type: ignore[arg-type]
    judge.unalign(["hours"])  # and it still works
    assert "hours" not in judge.feedback_ids


def test_calibrate_with_an_odd_id(make_judge: Any) -> None:
    judge = make_judge(scale=(1, 5))
    with pytest.raises(InvalidFeedbackIdError):
        judge.calibrate(["\ud800"])


def test_another_embedding_size_on_a_memory_that_does_not_name_its_model(
    judge: MemAlignJudge, model: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "old"
    judge.save(folder)
    judge.close()
    with sqlite3.connect(folder / DB_FILE) as conn:  # as an early version wrote it
        conn.execute("DELETE FROM meta WHERE key='embeddings'")
    other = MemAlignJudge.load(folder, model=model, embeddings=HashEmbeddings(size=32))
    for call in (
        lambda: other.invoke(CASE),
        lambda: other.align([SWEATER.model_copy(update={"id": "new", "inputs": "Other."})]),
    ):
        with pytest.raises(EmbeddingMismatchError, match="64 dimensions.*returns 32"):
            call()
    assert other.stats()["feedback"] == 3
    other.close()
    same = MemAlignJudge.load(folder, model=model, embeddings=HashEmbeddings())
    assert same.invoke(CASE)["metadata"]["episode_ids"][0] == "sweater"
    same.close()


def test_a_postgres_memory_refuses_a_nul_in_an_id_before_reading(
    make_judge: Any, pg_server: Any
) -> None:
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    judge = make_judge(path=pg_server.new_database() + "?judge=nul")
    judge.align([HOURS])
    with pytest.raises(InvalidFeedbackIdError, match="NUL"):
        judge.get_feedback("a\x00b")
    with pytest.raises(InvalidFeedbackIdError):
        judge.unalign(["hours\x00"])
    assert judge.feedback_ids == ["hours"]
    judge.close()


def test_no_odd_id_is_a_memory_format_error(judge: MemAlignJudge) -> None:
    for fid in ODD_IDS:
        try:
            judge.get_feedback(fid)
        except MemoryFormatError:  # pragma: no cover - the failure this guards against
            pytest.fail(f"{fid!r:.40} called a healthy memory corrupt")
        except UnknownFeedbackError:
            pass
