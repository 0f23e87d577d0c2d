"""Every align and unalign is one transaction: a failure anywhere in it changes nothing.

Replacing a changed item removes the old version's guideline in the same transaction as
the merge, so a merge that fails afterwards (an embedding outage) leaves the guideline,
the item and its status as they were, and the caller gets an `AlignFailedError`, not a
raw `ConnectionError`.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import HOURS, RUDE, SWEATER, fb
from fakes import HashEmbeddings

from langchain_memalign import AlignFailedError, MemAlignJudge
from langchain_memalign.memory.store import DB_FILE


class FlakyEmbeddings(HashEmbeddings):
    """Bag-of-words embeddings that fail on demand (an embedding service outage)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.down:
            raise ConnectionError("embedding service unreachable")
        return super().embed_documents(texts)


def dump(judge: MemAlignJudge) -> dict[str, Any]:
    """Everything a memory holds, row by row (the change counters aside)."""
    conn = judge.memory.store._conn
    q = {
        "feedback": "SELECT id, payload, content_hash, reflected FROM feedback ORDER BY id",
        "episodes": "SELECT rowid, feedback_id, text_hash, vector FROM episodes ORDER BY rowid",
        "guidelines": "SELECT id, text, vector, position FROM guidelines ORDER BY id",
        "sources": "SELECT * FROM guideline_sources ORDER BY 1, 2",
        "history": "SELECT seq, action, feedback_ids, guideline_ids FROM history ORDER BY seq",
    }
    out = {k: conn.execute(v).fetchall() for k, v in q.items()}
    out["view"] = [(g.id, g.text, g.source_ids) for g in judge.guidelines]
    out["index"] = len(judge.memory.index)
    out["pending"] = judge.memory.pending_ids()
    return out


CHANGED = SWEATER.model_copy(
    update={"rationale": "Cold: it must apologise for the disappointment before explaining."}
)


@pytest.mark.parametrize("persisted", [False, True])
def test_a_failed_merge_of_a_replaced_item_changes_nothing(
    make_judge: Any, tmp_path: Path, persisted: bool
) -> None:
    emb = FlakyEmbeddings()
    judge = make_judge(embeddings=emb, path=tmp_path if persisted else None)
    judge.align([SWEATER, HOURS])
    assert any("sweater" in g.source_ids for g in judge.guidelines)
    before = dump(judge)
    file_before = (tmp_path / DB_FILE).read_bytes() if persisted else b""

    emb.down = True  # reflection succeeds, the merge's embedding call fails
    with pytest.raises(AlignFailedError, match="embedding service unreachable") as err:
        judge.align([CHANGED])
    assert isinstance(err.value.__cause__, ConnectionError)
    assert err.value.operation == "align"
    assert dump(judge) == before
    if persisted:
        # What another process opening the folder sees: the committed file, unchanged.
        with sqlite3.connect(tmp_path / DB_FILE) as other:
            rows = other.execute("SELECT id, reflected FROM feedback ORDER BY id").fetchall()
        assert rows == [("hours", 1), ("sweater", 1)]
        assert (tmp_path / DB_FILE).read_bytes() == file_before

    # The memory still works, and the same align goes through once the service is back.
    emb.down = False
    judge.invoke({"inputs": SWEATER.inputs, "outputs": SWEATER.outputs})
    report = judge.align([CHANGED])
    assert report.updated == ["sweater"]
    assert judge.get_feedback("sweater").rationale == CHANGED.rationale
    assert judge.memory.pending_ids() == []


def test_a_failed_unalign_changes_nothing(make_judge: Any, responder: Any) -> None:
    """Re-deriving a guideline that keeps other sources embeds: an outage there rolls back."""
    emb = FlakyEmbeddings()
    judge = make_judge(embeddings=emb)
    judge.align([SWEATER, RUDE])
    # One guideline citing both items, so unaligning one re-derives it from the other.
    g = judge.guidelines[0]
    both = g.model_copy(update={"source_ids": ("sweater", "rude")})
    with judge.memory.store.transaction() as conn:
        judge.memory.store.put_guideline(conn, both, None, 0)
    judge.memory.refresh_guidelines()
    before = dump(judge)
    emb.down = True
    with pytest.raises(AlignFailedError, match="unalign failed") as err:
        judge.unalign(["sweater"])
    assert isinstance(err.value.__cause__, ConnectionError)
    assert dump(judge) == before


LONG = (
    "Too curt: a customer asking where a parcel is needs the tracking status, what happens "
    "next and an apology for the delay, and a one-word reply leaves them with nothing."
)


def test_a_failure_after_several_steps_rolls_all_of_them_back(
    make_judge: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Consolidation commits after the merge: a crash there undoes the merge too."""
    judge = make_judge(guideline_token_budget=50)
    judge.align([HOURS])
    before = dump(judge)
    from langchain_memalign.graphs.align import AlignNodes

    def crash(self: Any, state: Any, config: Any) -> Any:
        raise OSError("disk unplugged")

    monkeypatch.setattr(AlignNodes, "consolidate", crash)
    # The graph binds its nodes' methods when built: rebuild it to pick up the patch.
    from langchain_memalign.graphs.align import build_align_graph

    judge._run.align_graph = build_align_graph(judge._align_nodes)
    with pytest.raises(AlignFailedError, match="OSError: disk unplugged"):
        judge.align([SWEATER, fb("x", "Where is my parcel?", "Lost.", False, LONG)])
    assert dump(judge) == before


def test_judgments_during_a_failed_align_and_after_see_a_whole_memory(
    make_judge: Any,
) -> None:
    emb = FlakyEmbeddings()
    judge = make_judge(embeddings=emb)
    judge.align([SWEATER, HOURS])
    seq = judge.memory.snapshot().seq
    emb.down = True
    with pytest.raises(AlignFailedError):
        judge.align([CHANGED])
    emb.down = False
    view = judge.memory.snapshot()
    assert view.seq == seq and [g.id for g in view.guidelines] == [
        g.id for g in judge.memory.store.load_guidelines()[0]
    ]
    # The next commit gets a fresh version number, never one a rolled-back step had.
    judge.align([RUDE])
    assert judge.memory.snapshot().seq > seq + 1


def test_realigning_with_only_new_metadata_updates_the_item(
    make_judge: Any, model: Any, tmp_path: Path
) -> None:
    """Feedback that differs only in its metadata is updated (and stored), not unchanged."""
    judge = make_judge(path=tmp_path)
    judge.align([SWEATER, HOURS])
    calls, guidelines = len(model.calls), dump(judge)["guidelines"]
    tagged = SWEATER.model_copy(update={"metadata": {"ticket": "T-42", "queue": "returns"}})
    report = judge.align([tagged, HOURS])
    assert report.updated == ["sweater"] and report.unchanged == ["hours"]
    assert judge.get_feedback("sweater").metadata == {"ticket": "T-42", "queue": "returns"}
    # Nothing to learn again: no model call, guidelines and the distilled status kept.
    assert len(model.calls) == calls and report.usage.llm_calls == 0
    assert dump(judge)["guidelines"] == guidelines and judge.memory.pending_ids() == []
    assert judge.align([tagged]).unchanged == ["sweater"]
    judge.close()
    loaded = MemAlignJudge.load(tmp_path, model=model, embeddings=HashEmbeddings())
    assert loaded.get_feedback("sweater").metadata["ticket"] == "T-42"


def test_a_reader_keeps_its_version_across_a_rolled_back_align_and_a_later_commit(
    make_judge: Any,
) -> None:
    """The steps of a rolled-back align took version numbers that are never reused; a
    reader of the version before it still reads that version after later commits."""
    emb = FlakyEmbeddings()
    judge = make_judge(embeddings=emb)
    judge.align([SWEATER, HOURS, RUDE])
    view = judge.memory.snapshot()
    qv = emb.embed_query(str(SWEATER.inputs))
    found = sorted(e.feedback_id for e in judge.memory.retrieve(qv, k=3, view=view))
    assert found == ["hours", "rude", "sweater"]
    emb.down = True
    with pytest.raises(AlignFailedError):
        judge.align([CHANGED])  # its forget step committed as a savepoint, then rolled back
    emb.down = False
    judge.unalign(["hours"])
    assert sorted(e.feedback_id for e in judge.memory.retrieve(qv, k=3, view=view)) == found
