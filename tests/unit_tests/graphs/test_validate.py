"""Validation of proposed guidelines on seen cases: a guideline that breaks more cases than
it fixes is dropped or narrowed, a break that does not happen again is not counted, and
validation stays within its call budget and leaves each case's own episode out."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from conftest import fb
from fakes import RoleResponder, ScriptedChatModel, handles_of

from langchain_memalign.config import merge_options
from langchain_memalign.feedback import Feedback

UPSET = fb("upset", "My order is late and I'm furious!", "It ships Thursday.", False,
           "Open with an apology when the customer is upset.")  # fmt: skip
CALM = fb("calm", "What time do you close?", "We close at six.", True, "Direct answer.")
CALM2 = fb("calm2", "Do you ship abroad?", "Yes, to most countries.", True, "Clear answer.")
BROAD = "When replying, fail everything."
NARROW = "When the customer is upset, fail a reply without an apology."


def guidelines_in(memory: str) -> str:
    m = re.search(r"follow these guidelines[^\n]*\n((?:- .*\n)+)", memory)
    return m.group(1) if m else ""


def judge_rule(case: str, memory: str) -> dict[str, Any]:
    rules = guidelines_in(memory)
    if BROAD in rules:
        return {"rationale": "The rule says fail.", "score": False}
    if NARROW in rules and "furious" in case:
        return {"rationale": "Upset and no apology.", "score": False}
    return {"rationale": "Fine.", "score": True}


def make(
    make_judge: Any,
    proposal: tuple[str, Feedback] = (BROAD, UPSET),
    rule: Callable[[str, str], Any] = judge_rule,
    options: dict[str, Any] | None = None,
) -> tuple[Any, RoleResponder, ScriptedChatModel]:
    """A judge whose reflection proposes `proposal` (text, source) and whose grading
    follows `rule` (by default `judge_rule`)."""
    responder = RoleResponder(judge_rule=rule)
    text, source = proposal

    def respond(messages: list[Any]) -> Any:
        if "grading rules" in str(messages[0].content):
            cited = handles_of(messages, [source])
            return {"guidelines": [{"text": text, "source_ids": cited, "existing_id": ""}]}
        return responder(messages)

    model = ScriptedChatModel(responder=respond)
    judge = make_judge(
        model=model, options=merge_options({"validation": {"mode": "sources"}}, options or {})
    )
    return judge, responder, model


def judge_calls(model: ScriptedChatModel) -> int:
    return sum(str(c[0].content).startswith("You are an expert evaluator") for c in model.calls)


def test_a_guideline_that_breaks_more_than_it_fixes_is_dropped(make_judge: Any) -> None:
    judge, _, model = make(make_judge)
    report = judge.align([UPSET, CALM, CALM2])
    assert judge.guidelines == []
    [check] = report.validation
    assert check.text == BROAD and check.action == "dropped"
    assert check.fixed == ["upset"] and sorted(check.broken) == ["calm", "calm2"]
    assert report.guidelines_added == []  # added, then dropped within the same align
    assert check.unconfirmed == []  # both breaks happened again when graded once more
    # with and without the guideline, on 3 cases; both again on the 2 broken ones; one
    # narrowing call (it returned nothing)
    assert judge_calls(model) == 6 + 4
    assert report.usage.llm_calls == 1 + 6 + 4 + 1
    assert judge.history()[-1]["action"] == "validate"


def test_a_break_that_does_not_happen_again_is_not_counted(make_judge: Any) -> None:
    # The local server, decoding two requests together, does not always give the same
    # verdict to the same prompt; a guideline is not dropped on a break that does not
    # happen again.
    graded_with_broad: dict[str, int] = {}

    def once(case: str, memory: str) -> dict[str, Any]:
        if BROAD in guidelines_in(memory) and "abroad" in case:
            graded_with_broad["calm2"] = graded_with_broad.get("calm2", 0) + 1
            if graded_with_broad["calm2"] > 1:  # the second time, as without it
                return {"rationale": "Fine.", "score": True}
        return judge_rule(case, memory)

    judge, _, model = make(make_judge, rule=once)
    report = judge.align([UPSET, CALM, CALM2])
    [check] = report.validation
    assert check.fixed == ["upset"] and check.broken == ["calm"]
    assert check.unconfirmed == ["calm2"]
    assert check.action == "kept" and [g.text for g in judge.guidelines] == [BROAD]
    assert judge_calls(model) == 6 + 4  # calm and calm2 graded again, without and with


def test_breaks_are_not_graded_again_past_the_call_budget(make_judge: Any) -> None:
    judge, _, model = make(
        make_judge, options={"validation": {"max_calls": 6}}
    )  # the first grading's 6 calls
    report = judge.align([UPSET, CALM, CALM2])
    [check] = report.validation
    assert sorted(check.broken) == ["calm", "calm2"] and check.unconfirmed == []
    assert check.action == "dropped" and judge_calls(model) == 6


def test_a_guideline_that_fixes_as_many_as_it_breaks_is_kept(make_judge: Any) -> None:
    # Measured: dropping ties changed nothing on support-apology (no tie in two runs, while
    # identical runs disagreed on the apology rule itself); see docs/benchmarks.md.
    judge, _, model = make(make_judge)
    report = judge.align([UPSET, CALM])
    [check] = report.validation
    assert check.fixed == ["upset"] and check.broken == ["calm"]
    assert check.action == "kept" and [g.text for g in judge.guidelines] == [BROAD]
    assert judge_calls(model) == 4  # a break that rejects nothing is not graded again


def test_require_fix_drops_a_tie_and_keeps_its_narrowing_only_if_that_fixes_more(
    make_judge: Any,
) -> None:
    judge, responder, _ = make(make_judge, options={"_ablation": {"require_fix": True}})
    report = judge.align([UPSET, CALM])  # fixes upset, breaks calm: kept by default
    [check] = report.validation
    assert check.fixed == ["upset"] and check.broken == ["calm"]
    assert check.action == "dropped" and judge.guidelines == []

    judge, responder, _ = make(make_judge, options={"_ablation": {"require_fix": True}})
    responder.narrowed_text = NARROW  # fixes upset and breaks nothing
    report = judge.align([UPSET, CALM])
    assert report.validation[0].action == "narrowed"
    assert [g.text for g in judge.guidelines] == [NARROW]


def test_require_fix_drops_a_guideline_that_changes_nothing_without_narrowing(
    make_judge: Any,
) -> None:
    polite = "When replying to any customer, be polite."
    judge, _, model = make(make_judge, proposal=(polite, CALM))
    report = judge.align([CALM, CALM2])
    [check] = report.validation
    assert (check.fixed, check.broken, check.action) == ([], [], "kept")  # the default
    assert [g.text for g in judge.guidelines] == [polite]

    judge, _, model = make(
        make_judge, proposal=(polite, CALM), options={"_ablation": {"require_fix": True}}
    )
    report = judge.align([CALM, CALM2])
    [check] = report.validation
    assert (check.fixed, check.broken, check.action) == ([], [], "dropped")
    assert judge.guidelines == [] and report.guidelines_added == []
    # graded with and without it on both cases; no narrowing call (nothing was broken)
    assert judge_calls(model) == 4
    assert report.usage.llm_calls == 1 + 4


def test_a_guideline_is_narrowed_when_the_narrower_rule_stops_breaking(make_judge: Any) -> None:
    judge, responder, _ = make(make_judge)
    responder.narrowed_text = NARROW
    report = judge.align([UPSET, CALM, CALM2])
    assert [(g.text, g.source_ids) for g in judge.guidelines] == [(NARROW, ("upset",))]
    [check] = report.validation
    assert check.action == "narrowed" and check.narrowed_text == NARROW
    # the narrowed rule now grades every seen case as the experts did
    verdicts = judge.batch([{"inputs": f.inputs, "outputs": f.outputs} for f in (UPSET, CALM)])
    assert [v["score"] for v in verdicts] == [False, True]


def test_a_narrowing_that_restates_a_case_is_dropped_without_grading(make_judge: Any) -> None:
    judge, responder, model = make(make_judge)
    # the model "narrows" the rule into a summary of the broken case
    responder.narrowed_text = "When asked what time do you close, pass the reply."
    report = judge.align([UPSET, CALM, CALM2])
    [check] = report.validation
    assert check.action == "dropped" and judge.guidelines == []
    # with and without the rule, both again on its 2 breaks; the narrowing is not graded
    assert judge_calls(model) == 6 + 4


def test_validation_respects_its_call_budget(make_judge: Any) -> None:
    judge, _, model = make(make_judge, options={"validation": {"max_calls": 2}})
    report = judge.align([UPSET, CALM, CALM2])
    [check] = report.validation
    assert check.cases == ["upset"] and check.fixed == ["upset"] and check.action == "kept"
    assert judge_calls(model) == 2
    assert [g.text for g in judge.guidelines] == [BROAD]


def test_validation_off_spends_nothing(make_judge: Any) -> None:
    judge, _, model = make(make_judge, options={"validation": {"max_calls": 0}})
    report = judge.align([UPSET, CALM])
    assert report.validation == [] and judge_calls(model) == 0
    judge2, _, model2 = make(make_judge)
    judge2.memory.config.options.validation.mode = "off"
    assert judge2.align([UPSET]).validation == [] and judge_calls(model2) == 0


def test_validate_all_checks_every_seen_case(make_judge: Any) -> None:
    judge, _, _ = make(make_judge, options={"validation": {"max_calls": 100}})
    judge.memory.config.options.validation.mode = "all"
    extra = [fb(f"c{i}", f"Question {i}?", "Answer.", True, "Fine.") for i in range(4)]
    report = judge.align([UPSET, CALM, CALM2, *extra])
    [check] = report.validation
    assert sorted(check.cases) == sorted(["upset", "calm", "calm2", "c0", "c1", "c2", "c3"])


def test_validation_leaves_each_case_own_episode_out(make_judge: Any) -> None:
    judge, _, model = make(make_judge)
    judge.align([UPSET, CALM, CALM2])
    prompts = [
        "\n".join(str(m.content) for m in c[1:])
        for c in model.calls
        if str(c[0].content).startswith("You are an expert evaluator")
    ]
    assert prompts
    for p in prompts:
        memory, _, case = p.rpartition("<case>")
        graded = next(f for f in (UPSET, CALM, CALM2) if str(f.inputs) in case)
        assert memory  # the other seen cases are there, as earlier turns
        assert str(graded.inputs) not in memory


def test_a_case_validation_cannot_grade_is_reported_not_counted(make_judge: Any) -> None:
    # An answer that stays unusable; a provider error fails the align instead
    # (robustness/test_robust_atomic.py).
    def flaky(case: str, memory: str) -> Any:
        if "abroad" in case:
            return "no verdict here"
        return judge_rule(case, memory)

    judge, _, _ = make(make_judge, rule=flaky)
    report = judge.align([UPSET, CALM, CALM2])
    [check] = report.validation
    assert "calm2" not in check.cases and check.broken == ["calm"] and check.fixed == ["upset"]
    assert any("calm2" in e for e in report.errors)


def test_neighbors_with_other_scores_are_checked_at_the_default_floors(make_judge: Any) -> None:
    # the floors are for judgments; a guideline is never a near duplicate of a case
    judge, _, _ = make(
        make_judge,
        options={"retrieval": {"min_similarity": 0.9, "min_similarity_with_rationale": 0.9}},
    )
    [check] = judge.align([UPSET, CALM, CALM2]).validation
    assert check.cases[0] == "upset" and sorted(check.cases[1:]) == ["calm", "calm2"]


def test_the_nearest_non_sources_are_checked_whatever_their_score(make_judge: Any) -> None:
    # sources with both verdicts leave no case with "another score"; the cases a rule is
    # over-applied to (here the calm ones) must still be checked
    def respond(messages: list[Any]) -> Any:
        if "grading rules" in str(messages[0].content):
            cited = handles_of(messages, [UPSET, CALM])
            rule = {"text": BROAD, "source_ids": cited, "existing_id": ""}
            return {"guidelines": [rule]}
        return RoleResponder(judge_rule=judge_rule)(messages)

    happy = fb("happy", "Thanks, all good!", "Glad to help.", True, "Friendly answer.")
    judge = make_judge(
        model=ScriptedChatModel(responder=respond), options={"validation": {"mode": "sources"}}
    )
    [check] = judge.align([UPSET, CALM, CALM2, happy]).validation
    assert check.cases[:2] == ["upset", "calm"] and sorted(check.cases[2:]) == ["calm2", "happy"]
    # BROAD fails every case: it fixes "upset" and breaks the three calm ones
    assert check.fixed == ["upset"] and sorted(check.broken) == ["calm", "calm2", "happy"]
    assert check.action == "dropped" and judge.guidelines == []
