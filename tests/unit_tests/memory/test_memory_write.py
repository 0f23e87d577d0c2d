"""`JudgeMemory.write`: one call commits a step, updates the episode index and publishes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import HOURS, RUDE, SWEATER

from langchain_memalign.memory.episodic import EpisodicIndex
from langchain_memalign.memory.semantic import Guideline


def _case_vector(judge: Any, fb: Any) -> Any:
    return judge.memory.embed([judge.memory.case_text(fb.inputs, fb.outputs)])[0]


def test_a_write_commits_indexes_and_publishes_together(make_judge: Any) -> None:
    judge = make_judge()
    mem = judge.memory
    vector = _case_vector(judge, SWEATER)
    rule = Guideline(id="g-kind", text="Acknowledge the customer first.", source_ids=("sweater",))
    before = mem.snapshot()
    with mem.write() as w:
        w.put_feedback(SWEATER, reflected=True)
        w.put_episode(SWEATER.id, mem.text_hash("sweater text"), vector)
        w.put_guideline(rule, mem.embed([rule.text])[0], w.next_position())
        w.log("align", [SWEATER.id], [rule.id])
    view = mem.snapshot()
    # Committed: the store has it, and the history names it.
    assert mem.store.get_feedback([SWEATER.id]) and mem.store.count("episodes") == 1
    assert mem.store.history()[-1]["action"] == "align"
    # Indexed and published: one new version whose index finds the episode and whose
    # guidelines hold the rule; the version judgments had before is unchanged.
    assert view.seq == before.seq + 1 and len(before.index) == 0
    assert [e.feedback_id for e in mem.retrieve(vector, view=view)] == [SWEATER.id]
    assert [g.id for g in view.guidelines] == [rule.id]


def test_a_write_that_raises_changes_nothing(make_judge: Any) -> None:
    judge = make_judge()
    judge.align([HOURS])
    mem = judge.memory
    before = (mem.snapshot(), len(mem.index), mem.store.history())
    with pytest.raises(RuntimeError, match="boom"), mem.write() as w:
        w.put_feedback(SWEATER, reflected=True)
        w.put_episode(SWEATER.id, "h", _case_vector(judge, SWEATER))
        raise RuntimeError("boom")
    assert mem.snapshot() is before[0] and len(mem.index) == before[1]
    assert mem.store.history() == before[2] and not mem.store.get_feedback([SWEATER.id])


def test_deleting_and_replacing_episodes_move_the_index_with_the_store(make_judge: Any) -> None:
    judge = make_judge()
    judge.align([SWEATER, RUDE])
    mem = judge.memory
    old_rows = {fid: row for fid, (row, _) in mem.store.episode_keys(["sweater", "rude"]).items()}
    new_vector = _case_vector(judge, HOURS)
    with mem.write() as w:
        w.delete_feedback(["rude"])
        w.put_episode("sweater", "other text", new_vector)
    rows = set(mem.index.ids().tolist())
    assert rows == set(mem.store.episode_rowids()) and len(rows) == 1
    assert not rows & set(old_rows.values())  # both old vectors left the index
    assert [e.feedback_id for e in mem.retrieve(new_vector, k=1)] == ["sweater"]


@pytest.mark.parametrize("where", ["folder", "in-process"])
def test_writes_update_the_index_in_place_and_never_rebuild_it(
    make_judge: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A write hands its episodes to the index itself. Publishing would rebuild an index
    that missed them from the stored vectors, so a write that skipped the update would
    still leave a correct index: only the count of full builds shows it (issue 45)."""
    judge = make_judge(path=tmp_path / "memory" if where == "folder" else None)
    mem = judge.memory
    judge.align([SWEATER])
    index = mem.index
    builds: list[int] = []
    build = EpisodicIndex.build.__func__  # type: ignore[attr-defined]

    def counting(cls: type[EpisodicIndex], ids: Any, vectors: Any, **kw: Any) -> EpisodicIndex:
        builds.append(len(ids))
        return build(cls, ids, vectors, **kw)  # type: ignore[no-any-return]

    monkeypatch.setattr(EpisodicIndex, "build", classmethod(counting))
    judge.align([HOURS, RUDE])  # episodes added
    judge.unalign(["rude"])  # one removed
    judge.align([SWEATER.model_copy(update={"outputs": "Sorry! Returns are free."})])  # replaced
    assert builds == []  # no write fell back on rebuilding the whole index
    assert mem.index is index  # the writer's index, changed in place
    assert sorted(mem.index.ids().tolist()) == mem.store.episode_rowids()
    judge.close()
