"""Readers see other writers' commits: a judge open on a memory another judge changes.

Issue 47: a second process on a folder never saw another's commits. Process
B opens a folder; process A unaligns `b0` and `b1` and aligns `n0`; B's next
judgment still applied the two rules distilled from the unaligned rationales
and never saw `n0` until it reopened. "Unalign removes everything derived
from the feedback" has to hold for a reader that was already open, on a
folder and on PostgreSQL, in another process (the honest case) and in
another judge object of this process (another connection), for every way of
judging (sync, async, batch).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import uuid
from pathlib import Path
from typing import Any

import pytest
import reader_worker
from conftest import fb
from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel

from langchain_memalign import MemAlignJudge

B0 = fb(
    "b0",
    "My parcel is late again and I'm annoyed.",
    "It will arrive when it arrives.",
    False,
    "Apologize for the delay before anything else.",
)
B1 = fb(
    "b1",
    "Where is my parcel? It is late and I'm annoyed.",
    "Parcels are sometimes late.",
    False,
    "Offer a tracking link whenever a parcel is late.",
)
N0 = fb(
    "n0",
    "My parcel is late, I'm annoyed, where is it?",
    "Sorry! Thank you for waiting; it arrives tomorrow.",
    True,
    "Thank the customer for their patience.",
)
CASE = {"inputs": "My parcel is late and I'm annoyed.", "outputs": "It will arrive."}
# What the unaligned feedback taught and showed: its rules and its cases.
GONE = [B0.rationale, B1.rationale, B0.outputs, B1.outputs]


@pytest.fixture(params=["folder", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A memory's location: a folder, or a judge of a fresh PostgreSQL database."""
    if request.param == "folder":
        return str(tmp_path / "memory")
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    db: str = request.getfixturevalue("pg_server").new_database()
    return f"{db}?judge=j{uuid.uuid4().hex[:8]}"


def open_reader(location: str) -> tuple[MemAlignJudge, ScriptedChatModel]:
    model = ScriptedChatModel(responder=RoleResponder())
    return MemAlignJudge.load(location, model=model, embeddings=HashEmbeddings()), model


def read_by(model: ScriptedChatModel, results: list[Any]) -> list[dict[str, Any]]:
    """What each of the last `len(results)` judgments read (one judge call each)."""
    calls = model.calls[-len(results) :]
    return [
        {
            "prompt": "\n".join(str(m.content) for m in call),
            "episode_ids": list(r["metadata"]["episode_ids"]),
            "guideline_ids": list(r["metadata"]["guideline_ids"]),
        }
        for call, r in zip(calls, results, strict=True)
    ]


def assert_read_before(read: dict[str, Any]) -> None:
    assert sorted(read["episode_ids"]) == ["b0", "b1"]
    assert all(text in read["prompt"] for text in GONE)


def assert_read_after(read: dict[str, Any], writer: MemAlignJudge) -> None:
    """The reader's judgment after the writer's unalign and align: nothing of b0, b1; n0."""
    leaked = [text for text in GONE if text in read["prompt"]]
    assert not leaked, f"the reader still read unaligned feedback: {leaked}"
    assert read["episode_ids"] == ["n0"]
    assert read["guideline_ids"] == [g.id for g in writer.guidelines]
    assert N0.rationale in read["prompt"] and N0.outputs in read["prompt"]


def change(writer: MemAlignJudge) -> None:
    writer.unalign(["b0", "b1"])
    writer.align([N0])


def test_a_reader_in_another_process_sees_an_unalign_and_an_align(
    make_judge: Any, location: str
) -> None:
    writer = make_judge(path=location, k=3)
    writer.align([B0, B1])
    ctx = multiprocessing.get_context("spawn")
    ready, go, out = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = ctx.Process(
        target=reader_worker.judge_before_and_after, args=(location, CASE, ready, go, out)
    )
    proc.start()
    try:
        assert ready.wait(120)
        change(writer)
        go.set()
        got = out.get(timeout=120)
    finally:
        proc.join(60)
    assert proc.exitcode == 0
    assert_read_before(got["before"])
    assert_read_after(got["after"], writer)
    writer.close()


@pytest.mark.parametrize("how", ["invoke", "ainvoke", "batch", "abatch"])
def test_another_judge_on_the_memory_sees_an_unalign_and_an_align(
    make_judge: Any, location: str, how: str
) -> None:
    writer = make_judge(path=location, k=3)
    writer.align([B0, B1])
    reader, model = open_reader(location)

    def judge() -> list[Any]:
        if how == "invoke":
            return [reader.invoke(CASE)]
        if how == "ainvoke":
            return [asyncio.run(reader.ainvoke(CASE))]
        if how == "batch":
            return reader.batch([CASE, CASE])
        return asyncio.run(reader.abatch([CASE, CASE]))

    for read in read_by(model, judge()):
        assert_read_before(read)
    change(writer)
    for read in read_by(model, judge()):
        assert_read_after(read, writer)
    # The public reads between judgments are the newest version too.
    assert [g.id for g in reader.guidelines] == [g.id for g in writer.guidelines]
    assert sorted(reader.memory.index.ids().tolist()) == sorted(writer.memory.index.ids().tolist())
    reader.close()
    writer.close()


def test_the_guidelines_and_rules_a_reader_lists_are_the_newest(
    make_judge: Any, location: str
) -> None:
    writer = make_judge(path=location, k=3)
    writer.align([B0, B1])
    reader, _ = open_reader(location)
    change(writer)
    expected = [g.id for g in writer.guidelines]
    assert [g.id for g in reader.guidelines] == expected  # no judgment in between
    assert [r.id for r in reader.rules.list()] == expected
    reader.close()
    writer.close()


def test_a_writer_catches_up_before_it_writes(make_judge: Any, location: str) -> None:
    """A judge that aligns after another's commits builds on them (its index included)."""
    first = make_judge(path=location, k=3)
    first.align([B0, B1])
    second, _ = open_reader(location)
    first.unalign(["b0"])
    first.align([N0])  # as many episodes as before: a count alone would not tell
    second.align([fb("h", "What are your hours?", "9 to 6.", True, "Direct answer.")])
    stored = sorted(second.memory.store.episode_rowids())
    assert sorted(second.memory.index.ids().tolist()) == stored
    assert sorted(second.feedback_ids) == ["b1", "h", "n0"]
    assert {s for g in second.guidelines for s in g.source_ids} == {"b1", "h", "n0"}
    second.close()
    first.close()


def test_judging_an_unchanged_folder_reads_no_more_than_the_change_check(
    make_judge: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check before a judgment is one small read; the memory is reloaded only on a change."""
    writer = make_judge(path=tmp_path, k=3)
    writer.align([B0, B1])
    reader, _ = open_reader(str(tmp_path))
    reader.invoke(CASE)
    store = reader.memory.store
    loads: list[int] = []
    original = store.load_guidelines

    def counted() -> Any:
        loads.append(1)
        return original()

    monkeypatch.setattr(store, "load_guidelines", counted)  # the reader's store only
    for _ in range(5):
        reader.invoke(CASE)
    assert loads == []  # nothing moved: no reload
    writer.align([N0])
    reader.invoke(CASE)
    assert len(loads) == 1  # one catch-up for the commit
    reader.invoke(CASE)
    assert len(loads) == 1
    reader.close()
    writer.close()
