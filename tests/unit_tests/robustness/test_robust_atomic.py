"""Every align, unalign and calibrate is one transaction: a failure anywhere in it changes
nothing.

Replacing a changed item removes the old version's guideline in the same transaction as
the merge, so a merge that fails afterwards (an embedding outage) leaves the guideline,
the item and its status as they were, and the caller gets an `AlignFailedError`, not a
raw `ConnectionError`. The tests run on every backend (`where`: in process, a folder, a
PostgreSQL judge on the server of the `pg_server` fixture).
"""

from __future__ import annotations

import dataclasses
import functools
import re
import sqlite3
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import HOURS, RUDE, SWEATER, fb
from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel
from langchain_core.messages import BaseMessage

from langchain_memalign import AlignFailedError, Feedback, MemAlignJudge
from langchain_memalign.graphs.align import build_align_graph, build_unalign_graph
from langchain_memalign.graphs.calibrate import Calibrate
from langchain_memalign.graphs.consolidate import Consolidate
from langchain_memalign.graphs.forget import Forget
from langchain_memalign.graphs.merge import Merge
from langchain_memalign.graphs.reflect import Reflect
from langchain_memalign.graphs.validate import Validate
from langchain_memalign.memory.backends import open_store
from langchain_memalign.memory.store import DB_FILE

BACKENDS = ["in-process", "folder", "postgres"]


@pytest.fixture(scope="module")
def atomic_db(pg_server: Any) -> str:
    """One database for this module; each test's memory is a judge of its own in it."""
    url: str = pg_server.new_database()
    return url


@pytest.fixture(params=BACKENDS)
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str | None:
    """Where the test's memory lives: nowhere (in process), a folder or a database judge."""
    if request.param == "in-process":
        return None
    if request.param == "folder":
        return tmp_path / "mem"
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    return f"{request.getfixturevalue('atomic_db')}?judge=j{uuid.uuid4().hex[:10]}"


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
    """Everything a memory holds, row by row (its version number and token too), and
    what judgments read of it."""
    out = dataclasses.asdict(judge.memory.store.dump())
    out["view"] = [(g.id, g.text, g.source_ids) for g in judge.guidelines]
    out["index"] = sorted(judge.memory.index.ids().tolist())
    out["pending"] = judge.memory.pending_ids()
    return out


CHANGED = SWEATER.model_copy(
    update={"rationale": "Cold: it must apologise for the disappointment before explaining."}
)


def test_a_failed_merge_of_a_replaced_item_changes_nothing(
    make_judge: Any, where: Path | str | None
) -> None:
    emb = FlakyEmbeddings()
    judge = make_judge(embeddings=emb, path=where)
    judge.align([SWEATER, HOURS])
    assert any("sweater" in g.source_ids for g in judge.guidelines)
    before = dump(judge)
    file_before = where.joinpath(DB_FILE).read_bytes() if isinstance(where, Path) else b""

    emb.down = True  # reflection succeeds, the merge's embedding call fails
    with pytest.raises(AlignFailedError, match="embedding service unreachable") as err:
        judge.align([CHANGED])
    assert isinstance(err.value.__cause__, ConnectionError)
    assert err.value.operation == "align"
    assert "rolled back; the memory is unchanged" in str(err.value)
    assert dump(judge) == before
    if isinstance(where, Path):
        # What another process opening the folder sees: the committed file, unchanged.
        with sqlite3.connect(where / DB_FILE) as other:
            rows = other.execute("SELECT id, reflected FROM feedback ORDER BY id").fetchall()
        assert rows == [("hours", 1), ("sweater", 1)]
        assert (where / DB_FILE).read_bytes() == file_before
    if isinstance(where, str):
        # What another process sees in the database: the version before the align.
        other = open_store(where, create=False)
        try:
            assert dataclasses.asdict(other.dump()) == {
                k: v for k, v in before.items() if k not in ("view", "index", "pending")
            }
        finally:
            other.close()

    # The memory still works, and the same align goes through once the service is back.
    emb.down = False
    judge.invoke({"inputs": SWEATER.inputs, "outputs": SWEATER.outputs})
    report = judge.align([CHANGED])
    assert report.updated == ["sweater"]
    assert judge.get_feedback("sweater").rationale == CHANGED.rationale
    assert judge.memory.pending_ids() == []
    judge.close()


def test_a_failed_unalign_changes_nothing(make_judge: Any, where: Path | str | None) -> None:
    """Re-deriving a guideline that keeps other sources embeds: an outage there rolls back."""
    emb = FlakyEmbeddings()
    judge = make_judge(embeddings=emb, path=where)
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
    judge.close()


LONG = (
    "Too curt: a customer asking where a parcel is needs the tracking status, what happens "
    "next and an apology for the delay, and a one-word reply leaves them with nothing."
)


# The align graph's nodes, by step: the step's class and the method the graph calls.
ALIGN_STEPS: dict[str, tuple[type, str]] = {
    "forget": (Forget, "replaced"),
    "reflect": (Reflect, "__call__"),
    "merge": (Merge, "__call__"),
    "validate": (Validate, "__call__"),
    "calibrate": (Calibrate, "__call__"),
    "consolidate": (Consolidate, "__call__"),
}


def _fail_after(
    monkeypatch: pytest.MonkeyPatch,
    step: tuple[type, str],
    judge: MemAlignJudge,
    where: Path | str | None,
    seen: dict[str, Any],
) -> None:
    """Make the step's method do its work, note what readers see, then raise."""
    cls, method = step
    original = getattr(cls, method)

    @functools.wraps(original)  # the same signature: LangGraph passes `config` by it
    def faulty(self: Any, *args: Any) -> Any:
        original(self, *args)
        mem = judge.memory
        seen["inside"] = mem.store.change_seq()  # the unit's own, uncommitted version

        def outside() -> None:  # a judgment of another thread of this process
            seen["outside"] = mem.snapshot().seq, [g.id for g in mem.snapshot().guidelines]

        reader = threading.Thread(target=outside)
        reader.start()
        reader.join(60)
        if isinstance(where, str):  # and another process, on a database
            other = open_store(where, create=False)
            try:
                seen["other"] = dataclasses.asdict(other.dump())
            finally:
                other.close()
        raise OSError(f"fault in {cls.__name__}.{method}")

    monkeypatch.setattr(cls, method, faulty)
    # The graphs bind their nodes' methods when built: rebuild them to pick up the patch.
    judge._run.align_graph = build_align_graph(judge._align_nodes)
    judge._run.unalign_graph = build_unalign_graph(judge._align_nodes)


@pytest.mark.parametrize("step", list(ALIGN_STEPS))
def test_a_fault_at_any_step_of_a_replacing_align_changes_nothing(
    make_judge: Any, where: Path | str | None, step: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The forget step commits first: a fault at it or any later step undoes everything,
    and until then readers outside the align see the version before it on a shared store."""
    judge = make_judge(
        path=where,
        options={"reflection": {"guideline_token_budget": 50}, "validation": {"mode": "sources"}},
    )
    judge.align([SWEATER, HOURS])
    before = dump(judge)
    start = before["meta"]["change_seq"]
    seen: dict[str, Any] = {}
    _fail_after(monkeypatch, ALIGN_STEPS[step], judge, where, seen)
    cls, method = ALIGN_STEPS[step]
    fault = re.escape(f"OSError: fault in {cls.__name__}.{method}")
    with pytest.raises(AlignFailedError, match=f"rolled back.*{fault}"):
        judge.align([CHANGED, fb("x", "Where is my parcel?", "Lost.", False, LONG)])
    # The steps before the fault had written (the old version's guideline was forgotten).
    assert seen["inside"] > start
    if judge.memory.shared:
        assert seen["outside"] == (start, [g[0] for g in before["view"]])
        assert seen["other"] == {
            k: v for k, v in before.items() if k not in ("view", "index", "pending")
        }
    assert dump(judge) == before

    monkeypatch.undo()
    judge._run.align_graph = build_align_graph(judge._align_nodes)
    report = judge.align([CHANGED])
    assert report.updated == ["sweater"] and judge.memory.pending_ids() == []
    judge.close()


def test_a_fault_after_the_unalign_step_changes_nothing(
    make_judge: Any, where: Path | str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    judge = make_judge(path=where)
    judge.align([SWEATER, HOURS, RUDE])
    before = dump(judge)
    seen: dict[str, Any] = {}
    _fail_after(monkeypatch, (Forget, "unalign"), judge, where, seen)
    with pytest.raises(AlignFailedError, match="unalign failed and was rolled back"):
        judge.unalign(["sweater", "rude"])
    assert seen["inside"] > before["meta"]["change_seq"]
    if judge.memory.shared:
        assert seen["outside"][0] == before["meta"]["change_seq"]
        assert seen["other"]["feedback"] == before["feedback"]
    assert dump(judge) == before
    monkeypatch.undo()
    judge._run.unalign_graph = build_unalign_graph(judge._align_nodes)
    judge.unalign(["sweater", "rude"])
    assert judge.feedback_ids == ["hours"]
    judge.close()


def test_a_failure_after_several_steps_rolls_all_of_them_back(
    make_judge: Any, where: Path | str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Consolidation commits after the merge: a crash there undoes the merge too."""
    judge = make_judge(path=where, options={"reflection": {"guideline_token_budget": 50}})
    judge.align([HOURS])
    before = dump(judge)

    def crash(self: Any, state: Any, config: Any) -> Any:
        raise OSError("disk unplugged")

    monkeypatch.setattr(Consolidate, "__call__", crash)
    # The graph binds its nodes' methods when built: rebuild it to pick up the patch.
    judge._run.align_graph = build_align_graph(judge._align_nodes)
    with pytest.raises(AlignFailedError, match="OSError: disk unplugged"):
        judge.align([SWEATER, fb("x", "Where is my parcel?", "Lost.", False, LONG)])
    assert dump(judge) == before
    judge.close()


def test_judgments_during_a_failed_align_and_after_see_a_whole_memory(
    make_judge: Any, where: Path | str | None
) -> None:
    emb = FlakyEmbeddings()
    judge = make_judge(embeddings=emb, path=where)
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
    judge.align([RUDE])
    if judge.memory.shared:
        # No reader saw the rolled-back steps' versions: the next commit takes the next one.
        assert judge.memory.snapshot().seq == seq + 1
    else:
        # Readers in process saw the steps: the next commit gets a version number no
        # rolled-back step had.
        assert judge.memory.snapshot().seq > seq + 1
    judge.close()


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


# -- the chat provider failing in a step that asks the model many things ----------------------


class Outage:
    """A chat provider that answers as `answer` does, except that it is down for the roles
    in `down` (`RoleResponder` names the roles); `refused` lists the calls it refused."""

    def __init__(self, answer: Any = None) -> None:
        self.answer = answer or RoleResponder()
        self.down: set[str] = set()
        self.refused: list[str] = []

    def __call__(self, messages: list[BaseMessage]) -> Any:
        role = RoleResponder._role(str(messages[0].content))
        if role in self.down:
            self.refused.append(role)
            return ConnectionError(f"chat provider unreachable ({role})")
        return self.answer(messages)


def scores_three(messages: list[BaseMessage]) -> Any:
    """A judge that gives 3 to every case, and a reflection that learns nothing."""
    if RoleResponder._role(str(messages[0].content)) == "judge":
        return {"rationale": "Fine.", "score": 3}
    return {"guidelines": []}


def scored(*values: int, start: int = 0) -> list[Feedback]:
    return [
        Feedback(id=f"c{i}", inputs=f"question {i}", outputs=f"answer {i}", value=v)
        for i, v in enumerate(values, start)
    ]


CALM = fb("calm", "What time do you close?", "We close at six.", True, "Direct answer.")
ABROAD = fb("abroad", "Do you ship abroad?", "Yes, to most countries.", True, "Clear answer.")


@pytest.mark.parametrize("failing", ["every case", "one case"])
def test_calibrate_with_the_provider_down_changes_nothing(
    make_judge: Any, where: Path | str | None, failing: str
) -> None:
    """`calibrate` replaces the pairs of every case it grades: one grading that the
    provider failed would drop that case's pair, all of them the whole calibration."""
    outage = Outage(scores_three)
    model = ScriptedChatModel(responder=outage)
    # k=0: no past case in any prompt, so every grading and judgment is calibrated.
    judge = make_judge(model=model, path=where, scale=(1, 5), k=0)
    judge.align(scored(2, 2, 2, 3))
    assert dict(judge.memory.calibration.mapping) == {3: 2}
    before = dump(judge)

    if failing == "every case":
        outage.down = {"judge"}
    else:
        outage.answer = lambda m: (
            ConnectionError("chat provider unreachable")
            if "question 2" in str(m[-1].content)
            else scores_three(m)
        )
    with pytest.raises(AlignFailedError, match="calibrate failed and was rolled back") as err:
        judge.calibrate()
    assert err.value.operation == "calibrate"
    assert isinstance(err.value.__cause__, ConnectionError)
    assert dump(judge) == before  # no new version, every pair stored as it was
    assert dict(judge.memory.calibration.mapping) == {3: 2}  # and the one judgments use

    outage.down, outage.answer = set(), scores_three
    assert judge.invoke({"inputs": "new", "outputs": "new"})["score"] == 2  # still calibrated
    report = judge.calibrate()
    assert report.graded == ["c0", "c1", "c2", "c3"] and report.pairs == 4
    judge.close()


def _outage_in(
    step: str, make_judge: Any, where: Path | str | None
) -> tuple[MemAlignJudge, Outage, Any]:
    """A judge with some memory, its provider, and a call during which `step` asks the model."""
    outage = Outage()
    model = ScriptedChatModel(responder=outage)
    if step == "calibrate":  # align grades the cases it stores (integer scales)
        outage.answer = scores_three
        judge = make_judge(model=model, path=where, scale=(1, 5), k=0)
        judge.align(scored(2, 2, 2, 3))
        return judge, outage, lambda: judge.align(scored(2, 3, start=4))
    if step in ("validate", "narrow"):
        # k=0: the memory the judge sees is the guidelines alone. The sweater rule
        # ("acknowledge ...") fails every reply without "sorry": with it the new rules fix
        # two seen cases and break three, so validation grades them and asks for narrower
        # ones (within its call budget).
        validation = {"mode": "all", "max_calls": 100}
        judge = make_judge(model=model, path=where, k=0, options={"validation": validation})
        judge.align([RUDE])
        return judge, outage, lambda: judge.align([SWEATER, HOURS, CALM, ABROAD])
    if step == "score_first":
        judge = make_judge(model=model, path=where)
        judge.align([SWEATER, HOURS])
        return judge, outage, lambda: judge.align([RUDE], score_first=True)
    if step == "consolidate":
        judge = make_judge(
            model=model, path=where, options={"reflection": {"guideline_token_budget": 50}}
        )
        judge.align([HOURS])
        parcel = fb("x", "Where is my parcel?", "Lost.", False, LONG)
        return judge, outage, lambda: judge.align([SWEATER, parcel])
    assert step == "rederive"  # unalign re-derives a guideline that keeps other sources
    judge = make_judge(model=model, path=where)
    judge.align([SWEATER, RUDE])
    both = judge.guidelines[0].model_copy(update={"source_ids": ("sweater", "rude")})
    with judge.memory.store.transaction() as conn:
        judge.memory.store.put_guideline(conn, both, None, 0)
    judge.memory.refresh_guidelines()
    return judge, outage, lambda: judge.unalign(["sweater"])


# The role that fails in each step (the graders of validation, calibration and score_first
# are judge calls).
OUTAGE_ROLES = {
    "score_first": "judge",
    "validate": "judge",
    "narrow": "narrow",
    "calibrate": "judge",
    "consolidate": "consolidate",
    "rederive": "rederive",
}


@pytest.mark.parametrize("step", list(OUTAGE_ROLES))
def test_a_provider_outage_in_a_step_of_align_or_unalign_changes_nothing(
    make_judge: Any, where: Path | str | None, step: str
) -> None:
    """Only an unusable answer is the step's to absorb (`MalformedOutputError`); the
    provider failing is the call failing, not a grading to skip, a guideline to drop, a
    consolidation to put off or a verdict to go without."""
    judge, outage, call = _outage_in(step, make_judge, where)
    before, pairs = dump(judge), judge.memory.calibration.pairs
    outage.down = {OUTAGE_ROLES[step]}
    with pytest.raises(AlignFailedError, match="rolled back.*chat provider unreachable") as err:
        call()
    assert outage.refused  # the step did ask the model
    assert isinstance(err.value.__cause__, ConnectionError)
    assert dump(judge) == before and judge.memory.calibration.pairs == pairs

    outage.down = set()
    call()  # the same call goes through once the provider is back
    assert dump(judge) != before
    judge.close()
