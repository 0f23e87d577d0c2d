"""The rulebook: experts add, edit, pin and reject rules, on every memory backend."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import HOURS, RUDE, SWEATER, fb

from langchain_memalign import MemAlignJudge, limits
from langchain_memalign.errors import InvalidRuleError, UnknownRuleError
from langchain_memalign.graphs.validate import GuidelineValidator
from langchain_memalign.memory import _writes

BACKENDS = ["folder", "in-process", "postgres"]
CERTIFIED = "Queries must read the certified views."
COLD = [
    fb("a", "Refund please, I'm upset", "Refunds take 5 days.", False, "Cold reply."),
    fb("b", "My order is late and I'm angry", "It ships soon.", False, "Cold reply."),
    fb("c", "What time do you open?", "9am.", True, "Direct."),
]


@pytest.fixture(scope="module")
def rules_db(pg_server: Any) -> str:
    url: str = pg_server.new_database()
    return url


@pytest.fixture(params=BACKENDS)
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str | None:
    """A fresh memory location of each backend."""
    if request.param == "folder":
        return tmp_path / "memory"
    if request.param == "in-process":
        return None
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    db = request.getfixturevalue("rules_db")
    return f"{db}?judge=j{uuid.uuid4().hex[:8]}"


@pytest.fixture
def judge(make_judge: Any, where: Path | str | None) -> Any:
    j = make_judge(path=where)
    yield j
    j.close()


def rule_with_text(judge: MemAlignJudge, text: str) -> Any:
    return next(r for r in judge.rules.list() if r.text == text)


# -- add --------------------------------------------------------------------------------------


def test_an_added_rule_is_the_experts_and_goes_into_the_prompt(judge: Any, model: Any) -> None:
    judge.align([SWEATER, HOURS])
    rule = judge.rules.add("  Queries must read\nthe certified views. ", author="dana")
    assert rule.text == CERTIFIED and rule.author == "dana" and rule.source_ids == ()
    assert not rule.pinned and not rule.edited
    assert [r.id for r in judge.rules.list()][-1] == rule.id  # after the learned ones
    assert rule.id in {g.id for g in judge.guidelines}
    judge.invoke({"inputs": "Which table?", "outputs": "raw_events"})
    assert CERTIFIED in str(model.calls[-1])
    [change] = judge.rules.history()
    assert (change.action, change.rule_id, change.author) == ("add", rule.id, "dana")
    assert judge.history()[-1]["action"] == "rule_add"
    assert judge.history()[-1]["guideline_ids"] == [rule.id]


def test_unaligning_all_feedback_never_removes_an_added_rule(judge: Any) -> None:
    judge.align([SWEATER, HOURS])
    rule = judge.rules.add(CERTIFIED, author="dana")
    judge.unalign(["sweater", "hours"])
    assert [r.id for r in judge.rules.list()] == [rule.id]


# -- edit -------------------------------------------------------------------------------------


def test_an_edit_keeps_provenance_and_survives_rederivation(judge: Any, responder: Any) -> None:
    judge.align(COLD)
    cold = rule_with_text(judge, "Rule: Cold reply.")
    assert cold.source_ids == ("a", "b")
    edited = judge.rules.edit(
        cold.id, "Acknowledge an upset customer first.", author="ana", reason="too vague"
    )
    assert edited.id == cold.id and edited.source_ids == ("a", "b") and edited.edited_by == "ana"
    change = judge.rules.history()[-1]
    assert change.previous_text == "Rule: Cold reply." and change.reason == "too vague"
    report = judge.unalign(["a"])  # would re-derive it from b alone
    assert "rederive" not in responder.roles and report.guidelines_rederived == []
    after = judge.rules.get(cold.id)
    assert after.text == "Acknowledge an upset customer first." and after.source_ids == ("b",)
    # Its old wording proposed again from new feedback cites that feedback on the edit.
    report = judge.align([fb("d", "Where is my parcel?!", "Soon.", False, "Cold reply.")])
    assert report.guidelines_added == [] and report.guidelines_updated == [cold.id]
    assert judge.rules.get(cold.id).source_ids == ("b", "d")
    # Replacing its last source does not rewrite it either.
    judge.align([COLD[1].model_copy(update={"rationale": "Too slow."})])
    assert judge.rules.get(cold.id).text == "Acknowledge an upset customer first."


# -- pin --------------------------------------------------------------------------------------


def test_a_pinned_rule_survives_unaligning_all_its_sources(judge: Any) -> None:
    judge.align(COLD)
    cold = rule_with_text(judge, "Rule: Cold reply.")
    pinned = judge.rules.pin(cold.id, author="dana", reason="core policy")
    assert pinned.pinned and pinned.pinned_by == "dana"
    assert judge.rules.pin(cold.id, author="ana").pinned_by == "dana"  # no change
    assert [c.action for c in judge.rules.history()] == ["pin"]
    report = judge.unalign(["a", "b"])
    assert cold.id not in report.guidelines_removed
    kept = judge.rules.get(cold.id)
    assert kept.text == "Rule: Cold reply." and kept.source_ids == () and kept.pinned
    unpinned = judge.rules.unpin(cold.id, author="dana")
    assert not unpinned.pinned and judge.history()[-1]["action"] == "rule_unpin"


def test_consolidation_leaves_pinned_and_added_rules_alone(make_judge: Any) -> None:
    items = [
        fb(f"f{i}", f"question {i}", "answer", True, f"Specific rule number {i} " + "word " * 30)
        for i in range(6)
    ]
    judge = make_judge(options={"reflection": {"guideline_token_budget": 100, "batch_size": 3}})
    judge.align(items[:2])
    first = judge.guidelines[0]
    judge.rules.pin(first.id, author="dana")
    added = judge.rules.add(CERTIFIED, author="dana")
    judge.align(items[2:])
    texts = {g.id: g.text for g in judge.guidelines}
    assert "Consolidated rule." in texts.values()  # the others were merged
    assert texts[first.id] == first.text and texts[added.id] == CERTIFIED


def test_validation_never_checks_a_pinned_rule(make_judge: Any) -> None:
    judge = make_judge(options={"validation": {"mode": "all"}})
    judge.align(COLD)
    cold = rule_with_text(judge, "Rule: Cold reply.")
    judge.rules.pin(cold.id, author="dana")
    validator = GuidelineValidator(judge.memory, judge._judge_nodes, judge.reflection_model)
    checks, usage, _ = validator.run([cold.id], {})
    assert checks == [] and usage.llm_calls == 0
    assert judge.rules.get(cold.id).pinned


# -- reject -----------------------------------------------------------------------------------


def test_a_rejected_rule_is_not_learned_again(judge: Any, responder: Any) -> None:
    judge.align([SWEATER, HOURS])
    hours = rule_with_text(judge, "Rule: Direct and complete answer.")
    rejected = judge.rules.reject(hours.id, reason="too broad", author="dana")
    assert rejected.text == hours.text and rejected.author == "dana"
    assert hours.id not in {g.id for g in judge.guidelines}
    assert judge.rules.rejected() == [rejected]
    assert judge.history()[-1]["action"] == "rule_reject"
    assert "hours" in judge.feedback_ids  # the feedback stays
    # A new case whose rationale the scripted reflection turns into the same rule,
    # and one that says it in other words (the same bag of words to HashEmbeddings).
    report = judge.align(
        [
            fb("h2", "When do you close?", "6pm.", True, "Direct and complete answer."),
            fb("h3", "Are you open Sunday?", "No.", True, "answer complete, and direct!"),
        ]
    )
    assert not {g.text for g in judge.guidelines} & {
        "Rule: Direct and complete answer.",
        "Rule: answer complete, and direct!",
    }
    reasons = [r.reason for r in report.guidelines_rejected]
    assert len(reasons) == 2
    assert all(
        f"an expert rejected this rule ({hours.id}, by dana: too broad)" == r for r in reasons
    )


def test_rejecting_a_pinned_rule_needs_an_unpin_first(judge: Any) -> None:
    rule = judge.rules.add(CERTIFIED, author="dana")
    judge.rules.pin(rule.id, author="dana")
    with pytest.raises(InvalidRuleError, match="pinned"):
        judge.rules.reject(rule.id, reason="wrong", author="ana")
    assert judge.rules.get(rule.id).pinned
    judge.rules.unpin(rule.id, author="ana")
    judge.rules.reject(rule.id, reason="wrong", author="ana")
    assert judge.rules.list() == []
    # Stating it again lifts the rejection.
    judge.rules.add(CERTIFIED, author="dana")
    assert judge.rules.rejected() == []


# -- errors and atomicity ---------------------------------------------------------------------


def test_bad_input_is_refused_and_changes_nothing(judge: Any) -> None:
    judge.align([SWEATER])
    rule = judge.rules.add(CERTIFIED, author="dana")
    history = judge.history()
    with pytest.raises(UnknownRuleError, match="'g-nope'"):
        judge.rules.edit("g-nope", "x", author="dana")
    for call in (lambda: judge.rules.pin("g-nope", author="dana"),
                 lambda: judge.rules.reject("g-nope", reason="r", author="dana")):  # fmt: skip
        with pytest.raises(UnknownRuleError):
            call()
    with pytest.raises(InvalidRuleError, match="empty"):
        judge.rules.add("   ", author="dana")
    for bad in ("A rule\x00.", "A rule \ud800."):
        with pytest.raises(InvalidRuleError, match="NUL character or a lone surrogate"):
            judge.rules.add(bad, author="dana")
    with pytest.raises(InvalidRuleError, match="author is empty"):
        judge.rules.add("Another rule.", author=" ")
    with pytest.raises(InvalidRuleError, match="reason is empty"):
        judge.rules.reject(rule.id, reason="", author="dana")
    with pytest.raises(InvalidRuleError, match=f"rule {rule.id} already says this"):
        judge.rules.add("queries must read the certified views", author="ana")
    with pytest.raises(InvalidRuleError, match="already says this"):
        judge.rules.edit(rule.id, CERTIFIED, author="ana")
    with pytest.raises(InvalidRuleError, match="over the limit"):
        judge.rules.add("x" * (limits.MAX_GUIDELINE_CHARS + 1), author="dana")
    assert judge.history() == history and len(judge.rules.history()) == 1


def test_a_failed_action_changes_nothing(judge: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    rule = judge.rules.add(CERTIFIED, author="dana")
    before = (judge.rules.list(), judge.rules.history(), judge.history())

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(_writes.MemoryWrite, "log", broken)
    with pytest.raises(OSError, match="disk full"):
        judge.rules.edit(rule.id, "Queries read certified views only.", author="ana")
    with pytest.raises(OSError, match="disk full"):
        judge.rules.reject(rule.id, reason="r", author="ana")
    assert (judge.rules.list(), judge.rules.history(), judge.history()) == before


# -- persistence ------------------------------------------------------------------------------


def test_the_rulebook_round_trips_through_save_and_load(
    judge: Any, make_judge: Any, embeddings: Any, tmp_path: Path
) -> None:
    judge.align(COLD)
    cold = rule_with_text(judge, "Rule: Cold reply.")
    judge.rules.edit(cold.id, "Acknowledge an upset customer first.", author="ana")
    judge.rules.pin(cold.id, author="dana")
    judge.rules.add(CERTIFIED, author="dana")
    direct = rule_with_text(judge, "Rule: Direct.")
    judge.rules.reject(direct.id, reason="too broad", author="dana")
    saved = judge.save(tmp_path / "copy")
    copy = MemAlignJudge.load(saved, embeddings=embeddings, model=judge.model)
    try:
        assert copy.rules.list() == judge.rules.list()
        assert copy.rules.rejected() == judge.rules.rejected()
        assert copy.rules.history() == judge.rules.history()
    finally:
        copy.close()


def test_rules_of_a_judge_without_experts(make_judge: Any) -> None:
    judge = make_judge()
    judge.align([RUDE])
    [rule] = judge.rules.list()
    assert rule.source_ids == ("rude",) and rule.author is None
    assert judge.rules.rejected() == [] and judge.rules.history() == []
