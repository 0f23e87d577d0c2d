"""Provenance of a guideline: one that restates a case or is about one case's topic is
rejected, and a guideline cites only the feedback whose rationale supports it."""

from __future__ import annotations

from typing import Any

import numpy as np
from conftest import fb
from fakes import RoleResponder, ScriptedChatModel, handles_of
from langchain_core.embeddings import Embeddings

from langchain_memalign.feedback import Feedback
from langchain_memalign.graphs.provenance import names_one_case, restates_case, supporting_sources

UPSET = fb("upset", "My order is late and I'm furious!", "It ships Thursday.", False,
           "The customer is angry and the reply does not open with an apology.")  # fmt: skip
CALM = fb("calm", "What time do you close?", "We close at 6pm.", True,
          "A calm question needs no apology; a direct answer is right.")  # fmt: skip


def proposing(*proposals: tuple[str, list[Feedback]]) -> ScriptedChatModel:
    """A model whose reflection proposes these (text, cited feedback) guidelines and that
    answers every other call as `RoleResponder` does."""
    responder = RoleResponder()

    def respond(messages: list[Any]) -> Any:
        if "grading rules" in str(messages[0].content):
            return {"guidelines": [{"text": t, "source_ids": handles_of(messages, cited),
                                    "existing_id": ""} for t, cited in proposals]}  # fmt: skip
        return responder(messages)

    return ScriptedChatModel(responder=respond)


def unit(*xs: float) -> np.ndarray:
    v = np.asarray(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_restates_case_catches_copied_runs_and_numbers() -> None:
    assert restates_case("Say the order my order is late and I'm furious", [UPSET])
    assert restates_case("Replies must say we close at 6pm.", [CALM])
    assert not restates_case("When the customer is upset, open with an apology.", [UPSET, CALM])
    # one-digit numbers are rule material ("a score of 1"), not case details
    assert not restates_case("Give a score of 1 to off-topic replies.", [fb("x", "1", "1", 1)])
    # a rationale the prompt cut, copied whole
    assert restates_case("Annotator 2 (Bad): This answer has noth...", [CALM])
    assert restates_case("Annotator 2 (Bad): This answer [...] is wrong.", [CALM])
    assert not restates_case("Answers that trail off mid-sentence are Bad.", [CALM])


def test_restates_case_on_outputs_false_allows_an_outputs_words_but_not_its_topic() -> None:
    good = fb("good", "How many tablets can I take?", "Take two, and confirm the dose with "
              "your pharmacist.", True, "Confirms the dose with a pharmacist.")  # fmt: skip
    rule = "Answers that suggest a dose must ask to confirm the dose with your pharmacist."
    assert restates_case(rule, [good])
    assert not restates_case(rule, [good], outputs=False)
    # the inputs (the case's topic) and its numbers still count
    assert restates_case("Say how many tablets can I take.", [good], outputs=False)


def test_restates_case_catches_a_copied_remark_but_not_a_quoted_rule() -> None:
    said = ("Annotator 1 (Bad): There isn't a lot of information here.  There is nothing "
            "in the answer about visiting care homes.\nAnnotator 2 (Bad): Vague.")  # fmt: skip
    remark = fb("r", "Can I visit my mother?", "Stay home.", False, said)
    copied = ("Annotator 1 (Bad): There isn't a lot of information here. There is nothing "
              "in the answer about visiting care homes.")  # fmt: skip
    assert restates_case(copied, [remark])
    # one sentence of it is a rule in the experts' words, as is a rule quoted from UPSET
    assert not restates_case("There isn't a lot of information here.", [remark])
    assert not restates_case(
        "The reply does not open with an apology. Replies to upset customers fail.", [UPSET]
    )
    assert not restates_case(
        "The customer is angry and the reply does not open with an apology.", [UPSET]
    )
    # quotes are not part of a word: 'FlexPower' copies "FlexPower" (seen on prometheus)
    ad = fb("ad", "Add an ad.", "FlexPower rocks", True,
            'The reply names "FlexPower" in the headline. It is short and casual.')  # fmt: skip
    quoted = "The reply names 'FlexPower' in the headline. It is short and casual."
    assert restates_case(quoted, [ad])


def test_restates_case_catches_a_remark_that_points_at_its_case() -> None:
    # one sentence copied, kept on feedbackqa at 50 items before the check
    said = "Annotator 1 (Bad): This answer does not address the question at all."
    remark = fb("r", "How do I renew my visa?", "Call us.", False, said)
    assert restates_case(said, [remark])
    assert restates_case("This response ignores what was asked.", [])  # copied or not
    assert not restates_case("An answer that does not address the question is Bad.", [remark])
    assert not restates_case("Whatever the question, an answer must address it.", [remark])


def test_restates_case_catches_one_copied_sentence_after_a_verdict() -> None:
    # kept on feedbackqa at 50 items (seed 1) after the two checks above
    said = ("Annotator 1 (Could be Improved): Some steps. Annotator 2 (Acceptable): Gives a "
            "decent answer and steps, but isn't that in-depth")  # fmt: skip
    remark = fb("r", "How do I apply?", "Fill in form A.", "Acceptable", said)
    verdicts = ("Excellent", "Acceptable", "Could be Improved", "Bad")
    copied = "Annotator 2 (Acceptable): Gives a decent answer and steps, but isn't that in-depth"
    assert restates_case(copied, [remark], verdicts)
    assert not restates_case(copied, [remark])  # without the scale, one sentence is a rule
    # the local model put annotator 2's remark under "Annotator 1": the header is not
    # copied, what follows it is
    assert restates_case(copied.replace("Annotator 2", "Annotator 1"), [remark], verdicts)
    # the remark without its header is a rule in the annotator's words
    rule = "Gives a decent answer and steps, but isn't that in-depth"
    assert not restates_case(rule, [remark], verdicts)
    # a verdict in parentheses before a rule that copies nothing is the rule's own wording
    own = "Answers with steps but no depth (Acceptable): they help, but not fully."
    assert not restates_case(own, [remark], verdicts)


def test_restates_case_catches_one_copied_sentence_that_grades_its_case() -> None:
    # kept on prometheus at 50 items (seed 0): a GPT-4 grader's first sentence, copied
    said = ("The implementation is correct, using Python's `re` module to create a function "
            "that validates email addresses. The explanation is clear.")  # fmt: skip
    graded = fb("g", "Validate an email.", "import re ...", 5, said)
    copied = ("The implementation is correct, using Python's `re` module to create a "
              "function that validates email addresses. It matches valid addresses.")  # fmt: skip
    assert restates_case(copied, [graded])
    # not copied: the model's own sentence about "the response" is left to the other checks
    assert not restates_case("The response is correct and uses a clear method.", [graded])
    # copied, but with a rule: a rule word, a sentence about a kind of case, or a subject
    # that is not the graded output
    said = "The reply must open with an apology. The reply is curt. The customer is upset."
    ruled = fb("r", "Fix my order!", "Done.", False, said)
    assert not restates_case("The reply must open with an apology.", [ruled])
    assert not restates_case("The reply is curt. Curt replies to upset customers fail.", [ruled])
    assert not restates_case("The customer is upset.", [ruled])
    assert restates_case("The reply is curt.", [ruled])
    assert not restates_case("Replies to upset customers must start by apologizing.", [UPSET])


def test_supporting_sources_keeps_only_rationales_that_support_the_rule() -> None:
    rule = unit(1, 0, 0)
    rationales = {"a": unit(0.95, 0.3, 0), "b": unit(0.9, 0.4, 0.1), "c": unit(0.1, 1, 0)}
    assert supporting_sources(rule, ["a", "b", "c"], rationales, 0.4) == ["a", "b"]
    # nothing cited supports it: no sources at all, so the guideline is rejected
    assert supporting_sources(unit(0, 0, 1), ["a", "c"], rationales, 0.4) == []
    # feedback without a rationale (absent from the vectors) cannot support a rule
    assert supporting_sources(rule, ["zzz"], rationales, 0.4) == []


class TableEmbeddings(Embeddings):
    """Embeddings that map known texts to chosen vectors (anything else: a far vector)."""

    def __init__(self, table: dict[str, list[float]], default: list[float] | None = None) -> None:
        self.table = table
        self.default = default or [0.0, 0.0, 1.0]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.table.get(t, self.default) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def test_align_cites_only_supporting_feedback_and_rejects_case_summaries(make_judge: Any) -> None:
    rule = "When the customer is upset, open with an apology."
    model = proposing(
        (rule, [UPSET, CALM]),
        ("Reply that my order is late and apologize.", [UPSET]),
        ("Be brief.", [CALM]),
    )

    table = {
        rule: [1.0, 0.0, 0.0],
        "Be brief.": [0.0, 0.0, 1.0],
        str(UPSET.rationale): [0.95, 0.2, 0.0],
        str(CALM.rationale): [0.1, 1.0, 0.0],
    }
    judge = make_judge(
        model=model,
        embeddings=TableEmbeddings(table),
        options={"reflection": {"source_support": 0.4}},
    )
    report = judge.align([UPSET, CALM])
    assert [(g.text, g.source_ids) for g in judge.guidelines] == [(rule, ("upset",))]
    assert {(r.text, r.reason) for r in report.guidelines_rejected} == {
        ("Reply that my order is late and apologize.", "restates a case"),
        ("Be brief.", "no cited rationale supports it"),
    }
    # unaligning the calm case, which the model cited but does not support the rule,
    # leaves the rule alone
    judge.unalign(["calm"])
    assert [g.text for g in judge.guidelines] == [rule]


def test_align_rejects_a_remark_copied_from_a_case_it_does_not_cite(make_judge: Any) -> None:
    # feedbackqa seed 1 at 50 items kept "Annotator 1 (Bad): Doesn't explain what the Early
    # Childhood Education package is." citing a case about visiting a lab
    curt = fb("curt", "Where is my refund?!", "Processing.", False,
              "The reply is curt and ignores the customer's anger.")  # fmt: skip
    kind = fb("kind", "Thanks, all sorted!", "Glad to help!", True, "Warm and fitting.")
    remark = "The reply is curt and ignores the customer's anger."
    responder = RoleResponder()

    def respond(messages: list[Any]) -> Any:
        if "grading rules" not in str(messages[0].content):
            return responder(messages)
        cite = handles_of(messages, [kind] if "Glad to help" in str(messages) else [curt])
        return {"guidelines": [{"text": remark, "source_ids": cite, "existing_id": ""}]}

    judge = make_judge(model=ScriptedChatModel(responder=respond))
    judge.align([curt])  # stored; shown as a contrast case when `kind` is reflected on
    report = judge.align([kind])
    assert not restates_case(remark, [kind])  # what the cited source alone would allow
    assert [(r.text, r.reason) for r in report.guidelines_rejected] == [(remark, "restates a case")]
    assert judge.guidelines == []


def test_unalign_keeps_a_rule_the_remaining_feedback_supports(make_judge: Any) -> None:
    rule = "When the customer is upset, open with an apology."
    upset2 = fb("upset2", "The blender broke. Terrible!", "Use the warranty form.", False,
                "Upset customer, no apology at the start.")  # fmt: skip
    table = {
        rule: [1.0, 0.0, 0.0],
        str(UPSET.rationale): [0.95, 0.2, 0.0],
        str(upset2.rationale): [0.9, 0.3, 0.0],
        str(CALM.rationale): [0.1, 1.0, 0.0],
    }
    model = proposing((rule, [UPSET, upset2, CALM]))
    judge = make_judge(
        model=model,
        embeddings=TableEmbeddings(table),
        options={"reflection": {"source_support": 0.4}},
    )
    judge.align([UPSET, upset2, CALM])
    [g] = judge.guidelines
    assert set(g.source_ids) == {"upset", "upset2"}
    model.calls.clear()
    report = judge.unalign(["upset"])
    assert [(x.id, x.text, x.source_ids) for x in judge.guidelines] == [(g.id, rule, ("upset2",))]
    assert report.guidelines_rederived == [g.id] and report.llm_calls == 0
    # the last source goes: nothing supports the rule any more
    assert judge.unalign(["upset2"]).guidelines_removed == [g.id] and judge.guidelines == []


def test_names_one_case_tells_a_topic_from_a_rule() -> None:
    # much closer to one case than to any other: that case's topic
    assert names_one_case([("a", 0.33), ("b", 0.08), ("c", 0.05)]) == "a"
    # equally close to several cases (a rule about a kind of case), or close to none
    assert names_one_case([("a", 0.5), ("b", 0.45)]) is None
    assert names_one_case([("a", 0.16), ("b", 0.08)]) is None
    # one stored case: nothing to tell it from
    assert names_one_case([("a", 0.9)]) is None


def test_align_rejects_a_guideline_about_one_case_topic(make_judge: Any) -> None:
    a = fb("a", "Can student workers get the grant?", "Only farm workers can.", False,
           "Bad: the answer is about farm workers, the question about students.")  # fmt: skip
    b = fb("b", "When do clinics open?", "At 8am on weekdays.", True, None)
    c = fb("c", "Is the vaccine free?", "Yes, for residents.", True, None)
    topic = "When the answer is about student workers, it is Bad."
    rule = "When the answer does not address the question asked, it is Bad."
    table = {
        str(a.inputs): [1.0, 0.0, 0.0, 0.0],
        str(b.inputs): [0.0, 1.0, 0.0, 0.0],
        str(c.inputs): [0.0, 0.0, 1.0, 0.0],
        topic: list(unit(0.6, 0.05, 0.0, 0.8)),
        rule: [0.0, 0.0, 0.0, 1.0],
        str(a.rationale): list(unit(0.6, 0.0, 0.0, 0.8)),
    }
    judge = make_judge(
        model=proposing((topic, [a]), (rule, [a])),
        embeddings=TableEmbeddings(table, default=[0.0, 0.0, 0.0, 1.0]),
        options={"reflection": {"source_support": 0.4}},
    )
    report = judge.align([a, b, c])
    assert [g.text for g in judge.guidelines] == [rule]
    assert [(r.text, r.reason) for r in report.guidelines_rejected] == [
        (topic, "names the topic of one case (a), not a rule")
    ]


def test_align_rejects_a_guideline_about_one_question_answered_several_times(
    make_judge: Any,
) -> None:
    # Three answers to one question are one topic (one embedded text, one vector); a
    # guideline about that question is as close to each of them: counted as three cases,
    # it would pass the gap test.
    question = "Write a Python function that validates email addresses."
    answers = [
        fb(f"e{i}", question, out, value, why)
        for i, (out, value, why) in enumerate([
            ("import re ...", True, "Correct: it validates email addresses with re."),
            ("def f(s): return '@' in s", False, "Too loose: any text with @ passes."),
            ("import re (no anchors)", False, "The regular expression lacks anchors."),
        ])
    ]  # fmt: skip
    other = fb("o", "When do clinics open?", "At 8am on weekdays.", True, None)
    topic = "The implementation is correct, using re to validate email addresses."
    rule = "A function that validates input must reject malformed values."
    table = {
        question: [1.0, 0.0, 0.0],
        str(other.inputs): [0.0, 1.0, 0.0],
        topic: list(unit(0.8, 0.0, 0.6)),
        rule: list(unit(0.2, 0.0, 1.0)),
        str(answers[0].rationale): list(unit(0.8, 0.0, 0.6)),
    }
    judge = make_judge(
        model=proposing((topic, [answers[0]]), (rule, [answers[0]])),
        embeddings=TableEmbeddings(table, default=[0.0, 0.0, 1.0]),
        options={"reflection": {"source_support": 0.4}},
    )
    report = judge.align([*answers, other])
    assert [g.text for g in judge.guidelines] == [rule]
    assert [(r.text, r.reason) for r in report.guidelines_rejected] == [
        (topic, "names the topic of one case (e0, e1, e2), not a rule")
    ]
