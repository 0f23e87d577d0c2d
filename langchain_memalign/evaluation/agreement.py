"""Agreement between a judge and human labels, and between the humans themselves.

`evaluate_agreement` batch-judges labelled cases and returns an
`AgreementReport`; `agreement_report` builds one from results already in hand.
The report holds:

- accuracy, Cohen's kappa (weighted for ordinal scales), CCC and MAE for
  numeric scales, a confusion matrix (see `metrics`);
- the **disagreements**, with the human's and the judge's rationales;
- **inter-annotator agreement** where cases carry several human labels
  (`Feedback.metadata["annotator_labels"]`). Annotators differ from case to
  case in most data sets (crowd workers), so the primary measure is
  **Krippendorff's alpha**, which needs no fixed set of raters and allows a
  different number of labels per case; Fleiss' kappa is reported when every
  case has the same number of labels, and the plain pairwise agreement (the
  share of agreeing label pairs) is given for both humans and judge, so the
  judge's agreement with individual annotators can be read against the
  annotators' agreement with each other.

Undefined metrics are `None` in the report.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from langchain_core.runnables import RunnableConfig

from langchain_memalign.evaluation.metrics import (
    AlphaLevel,
    accuracy,
    ccc,
    cohen_kappa,
    confusion_matrix,
    fleiss_kappa,
    krippendorff_alpha,
    label_order,
    mae,
    pairwise_agreement,
)
from langchain_memalign.evaluation.report import (
    AgreementReport,
    CaseResult,
    ConfusionMatrix,
    Disagreement,
    InterAnnotatorAgreement,
)
from langchain_memalign.evaluation.usage import UsageCallbackHandler, with_callback
from langchain_memalign.feedback import Feedback
from langchain_memalign.reports import Usage
from langchain_memalign.result import label_of
from langchain_memalign.scale import Scale, ScaleSpec

__all__ = [
    "ANNOTATOR_LABELS_KEY",
    "AgreementReport",
    "BatchJudge",
    "CaseResult",
    "ConfusionMatrix",
    "Disagreement",
    "InterAnnotatorAgreement",
    "aevaluate_agreement",
    "agreement_report",
    "embedding_usage",
    "evaluate_agreement",
]

logger = logging.getLogger(__name__)

ANNOTATOR_LABELS_KEY = "annotator_labels"
"""`Feedback.metadata` key holding the individual annotators' labels of a case."""


def _none_if_nan(x: float) -> float | None:
    return None if x is None or math.isnan(x) else round(float(x), 6)


class BatchJudge(Protocol):
    """Anything that judges cases in a batch like a LangChain `Runnable` does."""

    def batch(
        self,
        inputs: list[dict[str, Any]],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """Judge many cases: `{"inputs", "outputs", "reference_outputs"}` -> result."""
        ...


def _scale_labels(scale: Scale, *series: Iterable[Any]) -> list[Any]:
    if scale.kind == "bool":
        return [False, True]
    if scale.kind in ("categorical", "pairwise"):
        return list(scale.choices)
    assert scale.low is not None and scale.high is not None
    if scale.integer and scale.high - scale.low <= 100:
        return list(range(int(scale.low), int(scale.high) + 1))
    return label_order(None, *series)


def _is_ordinal(scale: Scale, ordinal: bool | None) -> bool:
    if ordinal is not None:
        return ordinal
    return scale.kind == "numeric"


def _annotator_labels(fb: Feedback, scale: Scale) -> list[Any]:
    raw = fb.metadata.get(ANNOTATOR_LABELS_KEY) or []
    out = []
    for v in raw:
        try:
            out.append(scale.validate_value(v))
        except ValueError:
            logger.info("feedback %r: annotator label %r is off the scale; left out", fb.id, v)
    return out


def agreement_report(
    feedback: Sequence[Feedback],
    results: Sequence[Any],
    scale: ScaleSpec,
    *,
    name: str = "judge",
    ordinal: bool | None = None,
    usage: Usage | None = None,
    seconds: float = 0.0,
) -> AgreementReport:
    """Compare judge results with the feedback's human labels (no model calls).

    Args:
        feedback: The labelled cases; `value` is the human label (validated
            against the scale), `metadata["annotator_labels"]` optional
            individual labels.
        results: One per feedback item, in order: a judge result dict
            (`{"score", "comment"}`), a bare score, or an exception / `None`
            for a failed judgment.
        scale: The judge's scale.
        name: The judge's feedback key.
        ordinal: Whether the scale is ordered, for the weighted kappa and the
            ordinal alpha. Defaults to True for numeric scales; pass True for
            ordered categories (e.g. Excellent / Acceptable / Bad).
        usage: Cost of producing `results`, stored in the report.
        seconds: Time spent producing `results`.
    """
    sc = Scale.of(scale)
    if len(feedback) != len(results):
        raise ValueError(f"{len(feedback)} feedback items but {len(results)} results")
    cases: list[CaseResult] = []
    for fb, res in zip(feedback, results, strict=True):
        human = sc.validate_value(fb.value, feedback_id=fb.id)
        score: Any = None
        comment: str | None = None
        error: str | None = None
        if isinstance(res, BaseException):
            error = f"{type(res).__name__}: {res}"
        elif isinstance(res, dict):
            score, comment = label_of(res), res.get("comment")
        else:
            score = res
        if error is None and score is None:
            error = "no score"
        if score is not None:
            try:
                score = sc.validate_value(score)
            except ValueError as e:
                score, error = None, f"score off the scale: {e}"
        cases.append(
            CaseResult(
                id=fb.id, human=human, judge=score,
                correct=None if score is None else score == human,
                human_rationale=fb.rationale, judge_rationale=comment,
                annotator_labels=_annotator_labels(fb, sc), error=error,
            )
        )  # fmt: skip
    scored = [c for c in cases if c.judge is not None]
    y_true, y_pred = [c.human for c in scored], [c.judge for c in scored]
    labels = _scale_labels(sc, y_true, y_pred)
    is_ord = _is_ordinal(sc, ordinal)
    report = AgreementReport(
        name=name,
        scale=sc,
        n=len(cases),
        n_scored=len(scored),
        accuracy=_none_if_nan(accuracy(y_true, y_pred)),
        strict_accuracy=(
            _none_if_nan(sum(bool(c.correct) for c in cases) / len(cases)) if cases else None
        ),
        kappa=_none_if_nan(cohen_kappa(y_true, y_pred, labels=labels)),
        weighted_kappa=(
            _none_if_nan(cohen_kappa(y_true, y_pred, labels=labels, weights="quadratic"))
            if is_ord
            else None
        ),
        cases=cases,
        usage=usage or Usage(),
        seconds=seconds,
    )
    if sc.kind == "numeric":
        report.ccc = _none_if_nan(ccc(y_true, y_pred))
        report.mae = _none_if_nan(mae(y_true, y_pred))
    report.confusion = ConfusionMatrix(
        labels=labels, counts=confusion_matrix(y_true, y_pred, labels).tolist()
    )
    by_id = {fb.id: fb for fb in feedback}
    report.disagreements = [
        Disagreement(
            id=c.id, inputs=by_id[c.id].inputs, outputs=by_id[c.id].outputs, human=c.human,
            judge=c.judge, human_rationale=c.human_rationale, judge_rationale=c.judge_rationale,
        )
        for c in scored
        if not c.correct
    ]  # fmt: skip
    report.inter_annotator = _inter_annotator(cases, sc, labels, is_ord)
    return report


def _inter_annotator(
    cases: Sequence[CaseResult], scale: Scale, labels: list[Any], ordinal: bool
) -> InterAnnotatorAgreement | None:
    multi = [c for c in cases if len(c.annotator_labels) >= 2]
    if not multi:
        return None
    units = [c.annotator_labels for c in multi]
    level: AlphaLevel = "nominal"
    if scale.kind == "numeric":
        level = "interval"
    elif ordinal:
        level = "ordinal"
    all_labels = label_order(labels, *units)
    sizes = {len(u) for u in units}
    pairs_agree = pairs = 0
    for c in multi:
        if c.judge is None:
            continue
        for v in c.annotator_labels:
            pairs += 1
            pairs_agree += v == c.judge
    with_judge = [[*c.annotator_labels, c.judge] for c in multi]
    return InterAnnotatorAgreement(
        n_cases=len(multi),
        n_labels=sum(len(u) for u in units),
        krippendorff_alpha=_none_if_nan(
            krippendorff_alpha(units, level=level, labels=_alpha_labels(scale, all_labels))
        ),
        level=level,
        fleiss_kappa=_none_if_nan(fleiss_kappa(units, labels=all_labels))
        if len(sizes) == 1
        else None,
        pairwise_agreement=_none_if_nan(pairwise_agreement(units)),
        judge_annotator_agreement=_none_if_nan(pairs_agree / pairs) if pairs else None,
        alpha_with_judge=_none_if_nan(
            krippendorff_alpha(with_judge, level=level, labels=_alpha_labels(scale, all_labels))
        ),
    )


def _alpha_labels(scale: Scale, labels: list[Any]) -> list[Any] | None:
    # Numbers keep their values (interval distances); named scales use their order.
    return None if scale.kind == "numeric" else labels


def _prepare(
    judge: Any,
    feedback: Iterable[Feedback | dict[str, Any]],
    config: RunnableConfig | None,
    scale: ScaleSpec | None,
    max_concurrency: int | None,
) -> tuple[list[Feedback], list[dict[str, Any]], ScaleSpec, RunnableConfig, UsageCallbackHandler]:
    items = [fb if isinstance(fb, Feedback) else Feedback.model_validate(fb) for fb in feedback]
    spec = scale if scale is not None else getattr(judge, "scale", None)
    if spec is None:
        raise ValueError("pass `scale=` for a judge without a `scale` attribute")
    counter = UsageCallbackHandler()
    cfg = with_callback(config, counter)
    if max_concurrency is not None:
        cfg["max_concurrency"] = max_concurrency
    cases = [
        {"inputs": fb.inputs, "outputs": fb.outputs, "reference_outputs": fb.reference_outputs}
        for fb in items
    ]
    return items, cases, spec, cfg, counter


def evaluate_agreement(
    judge: BatchJudge,
    feedback: Iterable[Feedback | dict[str, Any]],
    config: RunnableConfig | None = None,
    *,
    scale: ScaleSpec | None = None,
    ordinal: bool | None = None,
    max_concurrency: int | None = None,
) -> AgreementReport:
    """Judge every labelled case (with `judge.batch`) and compare with the human labels.

    Args:
        judge: A `MemAlignJudge` or any runnable taking `{"inputs", "outputs",
            "reference_outputs"}` and returning `{"score", "comment"}`.
        feedback: The labelled cases (`Feedback` or dicts of its fields).
        config: A runnable config for the judgments (callbacks, tags).
        scale: The scale; defaults to `judge.scale`.
        ordinal: See `agreement_report`.
        max_concurrency: Parallel judgments (overrides the config's).

    A judgment that fails is recorded in the report, not raised. LLM calls and
    tokens are counted with a callback handler; seconds are wall time.
    """
    items, cases, spec, cfg, counter = _prepare(judge, feedback, config, scale, max_concurrency)
    started = time.perf_counter()
    embedded = embedding_usage(judge)
    results = judge.batch(cases, cfg, return_exceptions=True) if cases else []
    return agreement_report(
        items,
        results,
        spec,
        name=str(getattr(judge, "name", None) or "judge"),
        ordinal=ordinal,
        usage=counter.usage() + embedding_usage(judge, since=embedded),
        seconds=time.perf_counter() - started,
    )


async def aevaluate_agreement(
    judge: Any,
    feedback: Iterable[Feedback | dict[str, Any]],
    config: RunnableConfig | None = None,
    *,
    scale: ScaleSpec | None = None,
    ordinal: bool | None = None,
    max_concurrency: int | None = None,
) -> AgreementReport:
    """Async twin of `evaluate_agreement` (judges with `judge.abatch`)."""
    items, cases, spec, cfg, counter = _prepare(judge, feedback, config, scale, max_concurrency)
    started = time.perf_counter()
    embedded = embedding_usage(judge)
    results = await judge.abatch(cases, cfg, return_exceptions=True) if cases else []
    return agreement_report(
        items,
        results,
        spec,
        name=str(getattr(judge, "name", None) or "judge"),
        ordinal=ordinal,
        usage=counter.usage() + embedding_usage(judge, since=embedded),
        seconds=time.perf_counter() - started,
    )


def embedding_usage(judge: Any, *, since: Usage | None = None) -> Usage:
    """The embedding calls of a judge's memory (since an earlier reading), else none.

    Embedding models report no LangChain callbacks, so a `MemAlignJudge`'s
    memory counts them; other judges count as making none.
    """
    read = getattr(getattr(judge, "memory", None), "embedding_usage", None)
    now = read() if callable(read) else Usage()
    if since is None:
        return Usage(embedding_calls=now.embedding_calls, embedded_texts=now.embedded_texts)
    return Usage(
        embedding_calls=now.embedding_calls - since.embedding_calls,
        embedded_texts=now.embedded_texts - since.embedded_texts,
    )
