"""Align, re-align, update, unalign, provenance, consolidation and failure handling."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import HOURS, RUDE, SWEATER, fb

from langchain_memalign import Feedback, InvalidFeedbackError, UnknownFeedbackError
from langchain_memalign.errors import ReflectionError


def test_align_reports_and_provenance(make_judge: Any, embeddings: Any) -> None:
    judge = make_judge()
    report = judge.align([SWEATER, HOURS, RUDE])
    assert report.added == ["sweater", "hours", "rude"]
    assert report.updated == [] and report.unchanged == [] and report.failed == []
    assert report.llm_calls == 1  # one reflection batch
    assert report.usage.embedding_calls == 1  # episodes and guidelines in one call
    assert report.usage.embedded_texts == 6
    assert report.total_tokens > 0 and report.seconds >= 0
    assert sorted(report.guidelines_added) == sorted(g.id for g in judge.guidelines)
    sources = {g.source_ids for g in judge.guidelines}
    assert sources == {("sweater",), ("hours",), ("rude",)}
    assert judge.stats() == {"feedback": 3, "episodes": 3, "guidelines": 3, "history": 1}


def test_realigning_same_feedback_costs_nothing(
    make_judge: Any, embeddings: Any, model: Any
) -> None:
    judge = make_judge()
    judge.align([SWEATER, HOURS])
    calls, emb_calls, history = len(model.calls), embeddings.calls, len(judge.history())
    report = judge.align([SWEATER, HOURS])
    assert report.unchanged == ["sweater", "hours"] and not report.added
    assert report.llm_calls == 0 and report.usage.embedding_calls == 0
    assert len(model.calls) == calls and embeddings.calls == emb_calls
    assert len(judge.history()) == history  # nothing written either


def test_only_new_items_are_embedded(make_judge: Any, embeddings: Any) -> None:
    judge = make_judge()
    judge.align([SWEATER, HOURS])
    embeddings.texts.clear()
    judge.align([SWEATER, HOURS, RUDE])
    assert RUDE.inputs in embeddings.texts
    assert SWEATER.inputs not in embeddings.texts and HOURS.inputs not in embeddings.texts


def test_same_id_new_rationale_replaces_old(make_judge: Any, embeddings: Any) -> None:
    judge = make_judge()
    judge.align([SWEATER, HOURS])
    old_ids = {g.id for g in judge.guidelines if "sweater" in g.source_ids}
    changed = SWEATER.model_copy(update={"rationale": "Too long-winded for a complaint."})
    embeddings.texts.clear()
    report = judge.align([changed, HOURS])
    assert report.updated == ["sweater"] and report.unchanged == ["hours"]
    # the case text did not change, so the episode is not re-embedded
    assert SWEATER.inputs not in embeddings.texts
    texts = [g.text for g in judge.guidelines if "sweater" in g.source_ids]
    assert texts == ["Rule: Too long-winded for a complaint."]
    assert not old_ids & {g.id for g in judge.guidelines}
    assert judge.get_feedback("sweater").rationale == "Too long-winded for a complaint."
    assert len(judge.feedback_ids) == 2


def test_same_id_new_value_replaces_old(make_judge: Any) -> None:
    judge = make_judge()
    judge.align([HOURS])
    report = judge.align([HOURS.model_copy(update={"value": False})])
    assert report.updated == ["hours"]
    assert judge.get_feedback("hours").value is False


def test_unalign_removes_episode_and_orphaned_guideline(make_judge: Any) -> None:
    judge = make_judge()
    judge.align([SWEATER, HOURS, RUDE])
    report = judge.unalign(["sweater"])
    assert report.removed == ["sweater"]
    assert len(report.guidelines_removed) == 1 and report.llm_calls == 0
    assert all("sweater" not in g.source_ids for g in judge.guidelines)
    assert "sweater" not in judge.feedback_ids
    result = judge.invoke({"inputs": SWEATER.inputs, "outputs": SWEATER.outputs})
    assert "sweater" not in result["metadata"]["episode_ids"]
    assert result["score"] is True  # the empathy rule is gone


def test_unalign_rederives_guideline_with_remaining_sources(
    make_judge: Any, responder: Any
) -> None:
    shared = [
        fb("a", "Refund please, I'm upset", "Refunds take 5 days.", False, "Cold reply."),
        fb("b", "My order is late and I'm angry", "It ships soon.", False, "Cold reply."),
        fb("c", "What time do you open?", "9am.", True, "Direct."),
    ]
    judge = make_judge()
    judge.align(shared)
    cold = [g for g in judge.guidelines if g.text == "Rule: Cold reply."]
    assert len(cold) == 1 and cold[0].source_ids == ("a", "b")  # no duplicate, union provenance
    report = judge.unalign(["a"])
    assert report.guidelines_rederived == [cold[0].id] and report.llm_calls == 1
    rederived = next(g for g in judge.guidelines if g.id == cold[0].id)
    assert rederived.source_ids == ("b",)
    # distilled from b alone
    assert rederived.text == "Rule restated from My order is late and I'm angry"
    assert "rederive" in responder.roles


def test_same_rule_from_new_feedback_widens_provenance(make_judge: Any) -> None:
    judge = make_judge()
    judge.align([fb("a", "Refund please, I'm upset", "Refunds take 5 days.", False, "Cold reply.")])
    report = judge.align([fb("b", "My order is late", "It ships soon.", False, "cold reply")])
    (g,) = judge.guidelines
    assert report.guidelines_updated == [g.id] and not report.guidelines_added
    assert g.source_ids == ("a", "b")


def test_unalign_unknown_ids_is_an_error_and_removes_nothing(make_judge: Any) -> None:
    judge = make_judge()
    judge.align([SWEATER, HOURS])
    with pytest.raises(UnknownFeedbackError, match="'nope'"):
        judge.unalign(["sweater", "nope"])
    assert judge.feedback_ids == ["sweater", "hours"]


def test_failed_reflection_is_kept_pending_and_retried(make_judge: Any, responder: Any) -> None:
    judge = make_judge(options={"max_retries": 1})
    responder.fail_reflect = True
    with pytest.raises(ReflectionError, match="sweater") as exc:
        judge.align([SWEATER, HOURS])
    report = exc.value.report
    assert report.failed == ["hours", "sweater"] and report.llm_calls == 2
    assert judge.feedback_ids == ["sweater", "hours"]  # episodes are stored
    assert judge.guidelines == []
    responder.fail_reflect = False
    report = judge.align([])  # pending feedback is retried even with nothing new
    assert report.failed == [] and len(judge.guidelines) == 2


def test_failed_reflection_can_be_reported_instead_of_raised(
    make_judge: Any, responder: Any
) -> None:
    judge = make_judge(options={"max_retries": 0})
    responder.fail_reflect = True
    report = judge.align([SWEATER], raise_on_failure=False)
    assert report.failed == ["sweater"] and report.errors


def test_one_failed_batch_does_not_drop_the_others(make_judge: Any, model: Any) -> None:
    original = model.responder

    def flaky(messages: Any) -> Any:
        # The prompt names feedback by handles: rude's is told by its case.
        if "grading rules of a team" in str(messages[0].content) and RUDE.inputs in str(
            messages[-1].content
        ):
            return "garbage"
        return original(messages)

    model.responder = flaky
    judge = make_judge(options={"reflection": {"batch_size": 1}, "max_retries": 0})
    report = judge.align([SWEATER, HOURS, RUDE], raise_on_failure=False)
    assert report.failed == ["rude"]
    assert {s for g in judge.guidelines for s in g.source_ids} == {"sweater", "hours"}


def test_feedback_without_rationale_is_an_episode_but_teaches_no_guideline(
    make_judge: Any, model: Any
) -> None:
    judge = make_judge()
    report = judge.align([fb("n", "hi", "hello", True)])
    assert report.added == ["n"] and report.llm_calls == 0 and judge.guidelines == []
    assert judge.feedback_ids == ["n"]


def test_consolidation_keeps_union_of_provenance(make_judge: Any) -> None:
    items = [
        fb(f"f{i}", f"question {i}", "answer", True, f"Specific rule number {i} " + "word " * 30)
        for i in range(6)
    ]
    judge = make_judge(options={"reflection": {"guideline_token_budget": 100, "batch_size": 3}})
    report = judge.align(items)
    assert len(judge.guidelines) == 1
    assert judge.guidelines[0].text == "Consolidated rule."
    assert set(judge.guidelines[0].source_ids) == {f"f{i}" for i in range(6)}
    assert report.guidelines_added == [judge.guidelines[0].id]
    assert report.llm_calls == 3  # two reflection batches + one consolidation
    assert any(h["action"] == "consolidate" for h in judge.history())
    judge.unalign(["f0"])  # provenance survives consolidation
    assert "f0" not in judge.guidelines[0].source_ids


def test_judgments_stay_within_guideline_budget(make_judge: Any, model: Any) -> None:
    items = [
        fb(f"f{i}", f"topic{i} question", "a", True, f"rule {i} " + "w " * 40) for i in range(5)
    ]
    # consolidation that changes nothing: guidelines stay over budget
    original = model.responder

    def no_merge(messages: Any) -> Any:
        if "grown too long" in str(messages[0].content):
            return {"guidelines": []}
        return original(messages)

    model.responder = no_merge
    judge = make_judge(options={"reflection": {"guideline_token_budget": 60}})
    judge.align(items)
    assert sum(g.tokens for g in judge.guidelines) > 60
    result = judge.invoke({"inputs": "topic3 question", "outputs": "another answer"})
    chosen = result["metadata"]["guideline_ids"]
    assert 0 < len(chosen) < len(judge.guidelines)
    assert sum(g.tokens for g in judge.guidelines if g.id in chosen) <= 60


def test_history_records_changes_with_their_feedback(make_judge: Any) -> None:
    judge = make_judge()
    judge.align([SWEATER])
    judge.unalign(["sweater"])
    actions = [(h["action"], h["feedback_ids"]) for h in judge.history()]
    assert actions == [("align", ["sweater"]), ("unalign", ["sweater"])]


@pytest.mark.parametrize(
    ("item", "match"),
    [
        ({"id": "x", "inputs": "q", "value": "maybe"}, "feedback 'x'.*maybe"),
        ({"id": "x", "inputs": "q"}, "feedback 'x' is malformed"),
        ({"inputs": "q", "value": True}, "feedback item #1 is malformed"),
        ({"id": " ", "inputs": "q", "value": True}, "malformed"),
    ],
)
def test_bad_feedback_is_rejected_before_anything_is_stored(
    make_judge: Any, item: dict[str, Any], match: str
) -> None:
    judge = make_judge()
    with pytest.raises(InvalidFeedbackError, match=match):
        judge.align([HOURS, item])
    assert judge.feedback_ids == []


def test_out_of_scale_numeric_label_names_the_feedback(make_judge: Any) -> None:
    judge = make_judge(scale=(1, 5))
    with pytest.raises(InvalidFeedbackError, match="feedback 'seven'.*outside the 1–5"):
        judge.align([Feedback(id="seven", inputs="q", value=7)])


def test_duplicate_ids_in_one_call_are_rejected(make_judge: Any) -> None:
    with pytest.raises(InvalidFeedbackError, match="appears twice"):
        make_judge().align([HOURS, HOURS])


def test_numeric_scores_stay_numbers(make_judge: Any, model: Any) -> None:
    model.responder = lambda m: (
        {"rationale": "ok", "score": 4}
        if "expert evaluator" in str(m[0].content)
        else {"guidelines": []}
    )
    judge = make_judge(scale=(1, 5))
    judge.align([Feedback(id="n", inputs="q", outputs="a", value="3", rationale="meh")])
    assert judge.get_feedback("n").value == 3 and isinstance(judge.get_feedback("n").value, int)
    result = judge.invoke({"inputs": "q", "outputs": "b"})
    assert result["score"] == 4 and isinstance(result["score"], int)
    seen = judge.invoke({"inputs": "q", "outputs": "a"})  # the expert's own verdict, reused
    assert seen["score"] == 3 and isinstance(seen["score"], int)


async def test_async_align_and_unalign(make_judge: Any) -> None:
    judge = make_judge()
    report = await judge.aalign([SWEATER, HOURS])
    assert report.added == ["sweater", "hours"]
    undo = await judge.aunalign(["sweater"])
    assert undo.removed == ["sweater"] and judge.feedback_ids == ["hours"]


def test_unalign_refuses_a_bare_string_and_ignores_an_empty_list(make_judge: Any) -> None:
    judge = make_judge()
    judge.align([SWEATER, HOURS])
    history = len(judge.history())
    with pytest.raises(TypeError, match=r"\['sweater'\]"):
        judge.unalign("sweater")  # type: ignore[arg-type]
    report = judge.unalign([])
    assert report.removed == [] and report.llm_calls == 0
    assert len(judge.history()) == history and judge.feedback_ids == ["sweater", "hours"]
