"""Agreement metrics against hand-computed and published values, and the agreement report."""

from __future__ import annotations

import math
from typing import Any

import pytest
from conftest import HOURS, RUDE, SWEATER, fb
from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel

from langchain_memalign import Feedback, MemAlignJudge, Scale
from langchain_memalign.evaluation.agreement import (
    AgreementReport,
    agreement_report,
    evaluate_agreement,
)
from langchain_memalign.evaluation.metrics import (
    accuracy,
    ccc,
    cohen_kappa,
    confusion_matrix,
    fleiss_kappa,
    krippendorff_alpha,
    mae,
    pairwise_agreement,
)
from langchain_memalign.evaluation.usage import UsageCallbackHandler

# -- pure functions -----------------------------------------------------------------------------


def test_accuracy_and_mae() -> None:
    assert accuracy([1, 2, 3, 4], [1, 2, 0, 0]) == 0.5
    assert math.isnan(accuracy([], []))
    assert mae([1, 2, 3], [2, 2, 5]) == 1.0  # (1 + 0 + 2) / 3
    with pytest.raises(ValueError, match="as many"):
        accuracy([1], [1, 2])


def test_ccc_hand_computed() -> None:
    assert ccc([1, 2, 3], [1, 2, 3]) == pytest.approx(1.0)
    # means 2 and 3, variances 2/3, covariance 2/3: 2(2/3) / (2/3 + 2/3 + 1) = 4/7
    assert ccc([1, 2, 3], [2, 3, 4]) == pytest.approx(4 / 7)
    assert ccc([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # perfectly correlated but twice the spread: Pearson would say 1.
    # var x = 2/3, var y = 8/3, cov = 4/3, means 2 and 4: 2(4/3) / (2/3 + 8/3 + 4) = 4/11
    assert ccc([1, 2, 3], [2, 4, 6]) == pytest.approx(4 / 11)
    assert ccc([3, 3], [3, 3]) == 1.0
    assert math.isnan(ccc([1], [1]))


def test_cohen_kappa_two_by_two() -> None:
    # The classic table: 20 yes/yes, 5 yes/no, 10 no/yes, 15 no/no.
    # p_o = 35/50 = 0.7; p_e = 0.5*0.6 + 0.5*0.4 = 0.5; kappa = 0.2/0.5 = 0.4
    a = ["yes"] * 25 + ["no"] * 25
    b = ["yes"] * 20 + ["no"] * 5 + ["yes"] * 10 + ["no"] * 15
    assert cohen_kappa(a, b) == pytest.approx(0.4)
    assert cohen_kappa(a, a) == pytest.approx(1.0)


def test_weighted_kappa_hand_computed() -> None:
    # Observed (1,1), (2,3), (3,3); marginals rows (1,1,1), columns (1,0,2); n = 3.
    # Unweighted: p_o = 2/3, p_e = (1 + 0 + 2)/9 = 1/3 -> 0.5.
    # Quadratic w = ((i-j)/2)^2: sum w*O = 0.25, sum w*E = 2/3 + 1/4 + 1/3 = 1.25 -> 0.8.
    # Linear w = |i-j|/2: sum w*O = 0.5, sum w*E = 2/3 + 1/2 + 1/3 = 1.5 -> 2/3.
    a, b = [1, 2, 3], [1, 3, 3]
    assert cohen_kappa(a, b, labels=[1, 2, 3]) == pytest.approx(0.5)
    assert cohen_kappa(a, b, labels=[1, 2, 3], weights="quadratic") == pytest.approx(0.8)
    assert cohen_kappa(a, b, labels=[1, 2, 3], weights="linear") == pytest.approx(2 / 3)


def test_weighted_kappa_uses_label_order() -> None:
    order = ["Excellent", "Acceptable", "Could be Improved", "Bad"]
    near = cohen_kappa(
        ["Excellent", "Bad", "Acceptable"],
        ["Acceptable", "Bad", "Acceptable"],
        labels=order,
        weights="quadratic",
    )
    far = cohen_kappa(
        ["Excellent", "Bad", "Acceptable"],
        ["Bad", "Bad", "Acceptable"],
        labels=order,
        weights="quadratic",
    )
    assert near > far


def test_kappa_undefined_and_unknown_labels() -> None:
    assert math.isnan(cohen_kappa([True, True], [True, True]))
    assert math.isnan(cohen_kappa([], []))
    with pytest.raises(ValueError, match="not among the labels"):
        cohen_kappa([1, 7], [1, 1], labels=[1, 2])


def test_confusion_matrix() -> None:
    m = confusion_matrix(["A", "B", "B", "tie"], ["A", "A", "B", "B"], labels=["A", "B", "tie"])
    assert m.tolist() == [[1, 0, 0], [1, 1, 0], [0, 1, 0]]


def test_krippendorff_alpha_hand_computed() -> None:
    # Units [1,1], [2,2], [1,2]: coincidences o11 = o22 = 2, o12 = o21 = 1; n1 = n2 = 3, n = 6.
    # D_o = 2/6, D_e = 2*3*3 / (6*5) = 0.6, alpha = 1 - (1/3)/0.6 = 4/9.
    assert krippendorff_alpha([[1, 1], [2, 2], [1, 2]]) == pytest.approx(4 / 9)
    assert krippendorff_alpha([["a", "a"], ["b", "b"]]) == pytest.approx(1.0)


def test_krippendorff_alpha_published_example() -> None:
    # Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability": 4 observers,
    # 12 units, missing values. Published: nominal .743, ordinal .815, interval .849.
    n = None
    obs = [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, n, n, n],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, n, 3],
        [n, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, n],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, n],
    ]
    units = [list(u) for u in zip(*obs, strict=True)]
    assert krippendorff_alpha(units) == pytest.approx(0.743, abs=5e-4)
    assert krippendorff_alpha(units, level="ordinal") == pytest.approx(0.815, abs=5e-4)
    assert krippendorff_alpha(units, level="interval") == pytest.approx(0.849, abs=5e-4)
    assert math.isnan(krippendorff_alpha([[1], [2]]))  # nothing pairable


def test_fleiss_kappa_published_example() -> None:
    # Fleiss (1971) style example (Wikipedia): 10 subjects, 14 raters, 5 categories -> 0.210.
    table = [
        [0, 0, 0, 0, 14],
        [0, 2, 6, 4, 2],
        [0, 0, 3, 5, 6],
        [0, 3, 9, 2, 0],
        [2, 2, 8, 1, 1],
        [7, 7, 0, 0, 0],
        [3, 2, 6, 3, 0],
        [2, 5, 3, 2, 2],
        [6, 5, 2, 1, 0],
        [0, 2, 2, 3, 7],
    ]
    units = [[c for c, k in enumerate(row) for _ in range(k)] for row in table]
    assert fleiss_kappa(units) == pytest.approx(0.210, abs=5e-4)
    with pytest.raises(ValueError, match="same number"):
        fleiss_kappa([[1, 1], [1, 2, 2]])


def test_pairwise_agreement() -> None:
    # pairs: (a,a) (a,b) (a,b) | (a,a) -> 2 of 4
    assert pairwise_agreement([["a", "a", "b"], ["a", "a"]]) == 0.5


# -- the report -----------------------------------------------------------------------------------


def _num(fid: str, value: int, labels: list[int] | None = None) -> Feedback:
    meta: dict[str, Any] = {"annotator_labels": labels} if labels else {}
    return Feedback(
        id=fid, inputs=f"q {fid}", outputs="a", value=value, rationale=f"why {fid}", metadata=meta
    )


def test_agreement_report_numeric() -> None:
    items = [_num("a", 1, [1, 1]), _num("b", 3, [3, 4]), _num("c", 5, [5, 5]), _num("d", 4)]
    results: list[Any] = [
        {"score": 1, "comment": "bad"},
        {"score": 4, "comment": "good"},
        RuntimeError("server down"),
        {"score": 4, "comment": "fine"},
    ]
    rep = agreement_report(items, results, (1, 5), name="quality")
    assert (rep.n, rep.n_scored) == (4, 3)
    assert rep.accuracy == pytest.approx(2 / 3)
    assert rep.strict_accuracy == pytest.approx(0.5)
    assert rep.mae == pytest.approx(1 / 3)
    # x = (1, 3, 4), y = (1, 4, 4): means 8/3, 3; var x = 14/9, var y = 2, cov = 5/3
    # CCC = (10/3) / (14/9 + 2 + 1/9) = 30/33
    assert rep.ccc == pytest.approx(30 / 33)
    assert rep.weighted_kappa is not None and rep.kappa is not None
    assert rep.confusion is not None and rep.confusion.labels == [1, 2, 3, 4, 5]
    assert rep.confusion.counts[2][3] == 1  # human 3, judge 4
    [dis] = rep.disagreements
    assert (dis.id, dis.human, dis.judge) == ("b", 3, 4)
    assert (dis.human_rationale, dis.judge_rationale) == ("why b", "good")
    assert [c.id for c in rep.failed] == ["c"]
    assert "server down" in (rep.failed[0].error or "")
    ia = rep.inter_annotator
    assert ia is not None and ia.level == "interval"
    assert (ia.n_cases, ia.n_labels) == (3, 6)
    assert ia.pairwise_agreement == pytest.approx(2 / 3)
    assert ia.fleiss_kappa is not None
    # judge vs annotators on the scored multi-annotated cases: a: 1~1,1 ; b: 4~3,4 -> 3/4
    assert ia.judge_annotator_agreement == pytest.approx(0.75)
    assert rep.summary()["n"] == 4
    again = AgreementReport.model_validate_json(rep.model_dump_json())
    assert again.ccc == rep.ccc


def test_agreement_report_maps_labels_and_flags_off_scale_scores() -> None:
    items = [
        fb("1", "x", "y", "PASS"),
        fb("2", "x", "y", "FAIL"),
        fb("3", "x", "y", True),
    ]
    rep = agreement_report(items, [{"score": "yes"}, {"score": 7}, True], bool)
    assert [c.human for c in rep.cases] == [True, False, True]
    assert rep.cases[1].judge is None and "off the scale" in (rep.cases[1].error or "")
    assert rep.accuracy == 1.0 and rep.strict_accuracy == pytest.approx(2 / 3)
    assert rep.weighted_kappa is None and rep.ccc is None
    assert rep.inter_annotator is None


def test_agreement_report_ordinal_categories() -> None:
    order = ["Excellent", "Acceptable", "Could be Improved", "Bad"]
    items = [
        fb("1", "q", "a", "Excellent", metadata={"annotator_labels": ["Excellent", "Acceptable"]}),
        fb("2", "q", "a", "Bad", metadata={"annotator_labels": ["Bad", "Bad", "Bad"]}),
    ]
    rep = agreement_report(items, ["Acceptable", "Bad"], order, ordinal=True)
    assert rep.weighted_kappa is not None
    ia = rep.inter_annotator
    assert ia is not None and ia.level == "ordinal" and ia.fleiss_kappa is None
    assert ia.krippendorff_alpha is not None and ia.alpha_with_judge is not None


# -- judging through a judge -------------------------------------------------------------


def test_evaluate_agreement_with_a_judge(make_judge: Any, model: ScriptedChatModel) -> None:
    judge = make_judge()
    rep = evaluate_agreement(judge, [SWEATER, HOURS, RUDE], max_concurrency=2)
    # The unaligned fake judge passes everything; humans: False, True, False.
    assert [c.judge for c in rep.cases] == [True, True, True]
    assert rep.accuracy == pytest.approx(1 / 3)
    # p_o = 1/3, p_e = (2*0 + 1*3)/9 = 1/3 -> kappa 0
    assert rep.kappa == pytest.approx(0.0)
    assert rep.confusion is not None and rep.confusion.counts == [[0, 2], [0, 1]]
    assert {d.id for d in rep.disagreements} == {"sweater", "rude"}
    dis = next(d for d in rep.disagreements if d.id == "sweater")
    assert dis.human_rationale == SWEATER.rationale
    assert dis.judge_rationale == "The reply answers the question."
    assert rep.usage.llm_calls == 3 == len(model.calls)
    assert rep.usage.input_tokens > 0 and rep.usage.output_tokens == 30
    assert rep.name == "helpfulness" and rep.seconds > 0

    judge.align([SWEATER])  # teaches "acknowledge": the fake now fails replies without "sorry"
    after = evaluate_agreement(judge, [SWEATER, HOURS, RUDE])
    assert [c.judge for c in after.cases] == [False, False, False]
    assert after.accuracy == pytest.approx(2 / 3)
    assert [d.id for d in after.disagreements] == ["hours"]


def test_evaluate_agreement_records_failures() -> None:
    def rule(case: str, memory: str) -> Any:
        if "boom" in case:
            return RuntimeError("model exploded")
        return {"rationale": "ok", "score": True}

    judge = MemAlignJudge(
        name="j",
        instructions="{inputs} {outputs}",
        model=ScriptedChatModel(responder=RoleResponder(judge_rule=rule)),
        embeddings=HashEmbeddings(),
        options={"max_retries": 0},
    )
    rep = evaluate_agreement(judge, [fb("1", "fine", "x", True), fb("2", "boom", "x", True)])
    assert rep.n == 2 and rep.n_scored == 1
    assert rep.accuracy == 1.0 and rep.strict_accuracy == 0.5
    assert "model exploded" in (rep.failed[0].error or "")


def test_evaluate_agreement_takes_any_batch_runnable() -> None:
    from langchain_core.runnables import RunnableLambda

    judge = RunnableLambda(lambda case: {"score": "A", "comment": "first is better"})
    items = [fb("1", "q", "a", "response_1"), fb("2", "q", "a", "tie")]
    rep = evaluate_agreement(judge, items, scale="pairwise")
    assert rep.accuracy == 0.5 and rep.scale == Scale.of("pairwise")
    with pytest.raises(ValueError, match="scale"):
        evaluate_agreement(judge, items)


def test_usage_handler_counts_calls_and_tokens() -> None:
    model = ScriptedChatModel(responder=lambda messages: "hi")
    handler = UsageCallbackHandler()
    model.invoke("hello there", config={"callbacks": [handler]})
    usage = handler.usage()
    assert usage.llm_calls == 1 and usage.output_tokens == 10 and usage.input_tokens >= 1


def test_judge_evaluate_reports_agreement_without_aligning(make_judge: Any) -> None:
    judge = make_judge()
    rep = judge.agreement([SWEATER, HOURS, RUDE], max_concurrency=2)
    assert rep.name == "helpfulness" and rep.n == 3
    assert rep.accuracy == pytest.approx(1 / 3)
    assert {d.id for d in rep.disagreements} == {"sweater", "rude"}
    assert judge.feedback_ids == [] and judge.guidelines == []  # graded, not learned
    judge.align([HOURS])  # now there is a past case to retrieve: each case is embedded
    rep = judge.agreement([SWEATER, RUDE])
    assert (rep.usage.embedding_calls, rep.usage.embedded_texts) == (1, 2)


async def test_judge_aevaluate_matches_evaluate(make_judge: Any, model: ScriptedChatModel) -> None:
    judge = make_judge()
    judge.align([SWEATER])
    sync = judge.agreement([SWEATER, HOURS, RUDE])
    calls = len(model.calls)
    rep = await judge.aagreement([SWEATER, HOURS, RUDE], max_concurrency=3)
    assert [c.judge for c in rep.cases] == [c.judge for c in sync.cases] == [False, False, False]
    # the sweater case is the expert's own: its verdict is reused without a model call
    assert rep.usage.llm_calls == 2 == len(model.calls) - calls
    assert [d.id for d in rep.disagreements] == ["hours"]
