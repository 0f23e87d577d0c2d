"""Contrast-pair reflection: each feedback item beside the most similar case graded otherwise."""

from __future__ import annotations

import re
from typing import Any

from conftest import fb
from fakes import ScriptedChatModel

from langchain_memalign.graphs.pairs import contrast_groups

# Two refund questions (graded apart), two shipping questions (graded apart), one more
# shipping question graded like its nearest neighbour.
REFUND_BAD = fb(
    "refund-bad",
    "I want a refund for my broken kettle",
    "Refunds take 5 days.",
    False,
    "Cold: an upset customer gets an apology first.",
)
REFUND_OK = fb(
    "refund-ok",
    "I want a refund for my broken toaster",
    "Sorry about the toaster! Refunds take 5 days.",
    True,
    "Apologises, then answers.",
)
SHIP_BAD = fb(
    "ship-bad", "Where is my parcel shipping status", "Check the site.", False, "Too curt."
)
SHIP_OK = fb(
    "ship-ok",
    "Where is my parcel shipping status today",
    "It left the depot today.",
    True,
    "Direct and specific.",
)


def groups_of(judge: Any, items: list[Any]) -> list[list[str]]:
    mem = judge.memory
    vectors = mem.embed([mem.case_text(f.inputs, f.outputs) for f in items])
    return [[f.id for f in g] for g in contrast_groups(mem, items, vectors)]


def test_each_item_meets_its_nearest_case_with_another_score(make_judge: Any) -> None:
    groups = groups_of(make_judge(), [REFUND_BAD, SHIP_BAD, REFUND_OK, SHIP_OK])
    assert sorted(map(sorted, groups)) == [["refund-bad", "refund-ok"], ["ship-bad", "ship-ok"]]


def test_an_item_with_no_case_of_another_score_stands_alone(make_judge: Any) -> None:
    assert groups_of(make_judge(), [REFUND_BAD, SHIP_BAD]) == [["refund-bad"], ["ship-bad"]]


def test_partners_come_from_stored_memory_too(make_judge: Any) -> None:
    judge = make_judge()
    judge.align([REFUND_OK])
    assert groups_of(judge, [REFUND_BAD]) == [["refund-bad", "refund-ok"]]


def test_pairwise_cases_are_reflected_alone(make_judge: Any) -> None:
    judge = make_judge(scale="pairwise")
    a = fb("a", "q", {"a": "x", "b": "y"}, "A", "A is kind.")
    b = fb("b", "q", {"a": "y", "b": "x"}, "B", "B is kind.")
    assert groups_of(judge, [a, b]) == [["a"], ["b"]]


def test_align_reflects_once_per_pair_and_cites_both_cases(
    make_judge: Any, responder: Any, embeddings: Any
) -> None:
    judge = make_judge(options={"reflection": {"mode": "pairs"}})
    before = embeddings.calls
    report = judge.align([REFUND_BAD, SHIP_BAD, REFUND_OK, SHIP_OK])
    assert responder.roles.count("pair") == 2 and "reflect" not in responder.roles
    assert report.usage.llm_calls == 2
    # The cases are embedded once, to find the pairs; storing them reuses those vectors.
    assert embeddings.calls - before == 2  # cases, then the guideline texts
    sources = sorted(sorted(g.source_ids) for g in judge.guidelines)
    assert sources == [["refund-bad", "refund-ok"], ["ship-bad", "ship-ok"]]
    assert any("an upset customer gets an apology first" in g.text for g in judge.guidelines)


def test_a_stored_partner_is_shown_but_not_reflected_again(
    make_judge: Any, model: Any, responder: Any
) -> None:
    judge = make_judge(options={"reflection": {"mode": "pairs"}})
    judge.align([REFUND_OK])
    judge.align([REFUND_BAD])
    assert responder.roles.count("pair") == 2  # one for each align
    prompt = model.calls[-1][1].content
    # Both cases, named by handles (a prompt never shows an id).
    assert 'id="F1"' in prompt and 'id="F2"' in prompt
    assert str(REFUND_BAD.outputs) in prompt and str(REFUND_OK.outputs) in prompt
    assert judge.memory.store.pending_reflection() == []


def test_a_pairs_rule_has_its_pair_as_sources_whatever_the_support_threshold(
    make_judge: Any, responder: Any
) -> None:
    def rule_in_other_words(messages: list[Any]) -> Any:
        if '{"rule"' in str(messages[0].content):
            return {"rule": "Acknowledge feelings before facts."}
        if "grading rules" in str(messages[0].content):
            ids = re.findall(r'<feedback id="([^"]+)">', str(messages[-1].content))
            text = "Acknowledge feelings before facts."
            return {"guidelines": [{"text": text, "source_ids": ids, "existing_id": ""}]}
        return responder(messages)

    for reflection, kept in (("pairs", True), ("batch", False)):
        judge = make_judge(
            model=ScriptedChatModel(responder=rule_in_other_words),
            # no rationale is that close to the rule's words
            options={"reflection": {"mode": reflection, "source_support": 0.9}},
        )
        report = judge.align([REFUND_BAD, REFUND_OK])
        assert bool(judge.guidelines) is kept, reflection
        if kept:
            assert set(judge.guidelines[0].source_ids) == {"refund-bad", "refund-ok"}
        else:
            assert report.guidelines_rejected[0].reason == "no cited rationale supports it"


def test_a_rule_that_echoes_the_request_is_not_kept(make_judge: Any, responder: Any) -> None:
    def echo(messages: list[Any]) -> Any:
        if '{"rule"' in str(messages[0].content):
            return {"rule": "The output must not do what, so that it applies to other cases too."}
        return responder(messages)

    judge = make_judge(
        model=ScriptedChatModel(responder=echo), options={"reflection": {"mode": "pairs"}}
    )
    report = judge.align([REFUND_BAD, REFUND_OK])
    assert judge.guidelines == [] and report.failed == []
    assert judge.memory.store.pending_reflection() == []  # reflected on, nothing to learn
