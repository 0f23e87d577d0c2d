"""Agreement between a judge and human labels, and between the humans themselves.

Pure metric functions (no model calls) and `evaluate_agreement`, which
batch-judges labelled cases and returns an `AgreementReport`:

- **accuracy**: exact match, for every scale;
- **Cohen's kappa**: chance-corrected agreement; with `weights="quadratic"`
  the weighted kappa for ordinal scales (numeric ranges, ordered categories),
  where being one step off costs less than being four steps off;
- **CCC** (Lin's concordance correlation coefficient) and **MAE** for numeric
  scales: CCC rewards agreement in level and spread, not only correlation;
- a **confusion matrix** (rows: human, columns: judge);
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

Undefined metrics (kappa when both raters always give one and the same label,
CCC on a single case) are `nan` from the functions and `None` in the report.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Hashable, Iterable, Sequence
from itertools import combinations
from typing import Any, Literal, Protocol
from uuid import UUID

import numpy as np
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import ensure_config
from pydantic import BaseModel, ConfigDict, Field

from langchain_memalign.feedback import Feedback
from langchain_memalign.reports import Usage
from langchain_memalign.scale import Scale, ScaleSpec

KappaWeights = Literal["linear", "quadratic"]
AlphaLevel = Literal["nominal", "ordinal", "interval"]

ANNOTATOR_LABELS_KEY = "annotator_labels"
"""`Feedback.metadata` key holding the individual annotators' labels of a case."""


# -- metric functions -------------------------------------------------------------------------


def _pairs(a: Sequence[Any], b: Sequence[Any]) -> None:
    if len(a) != len(b):
        raise ValueError(f"need as many predictions as labels, got {len(a)} and {len(b)}")


def accuracy(y_true: Sequence[Any], y_pred: Sequence[Any]) -> float:
    """Share of exact matches; `nan` for no cases."""
    _pairs(y_true, y_pred)
    if not y_true:
        return math.nan
    return sum(1 for t, p in zip(y_true, y_pred, strict=True) if t == p) / len(y_true)


def mae(y_true: Sequence[float], y_pred: Sequence[float]) -> float:
    """Mean absolute error; `nan` for no cases."""
    _pairs(y_true, y_pred)
    if not y_true:
        return math.nan
    return float(np.mean(np.abs(np.asarray(y_true, float) - np.asarray(y_pred, float))))


def ccc(y_true: Sequence[float], y_pred: Sequence[float]) -> float:
    r"""Lin's concordance correlation coefficient.

    `2 cov(x, y) / (var x + var y + (mean x - mean y)^2)` with population
    (1/n) moments: 1 for perfect agreement, 0 for none, negative for
    discordance. Identical constant series give 1; fewer than two cases `nan`.
    """
    _pairs(y_true, y_pred)
    if len(y_true) < 2:
        return math.nan
    x, y = np.asarray(y_true, float), np.asarray(y_pred, float)
    mx, my = x.mean(), y.mean()
    cov = float(np.mean((x - mx) * (y - my)))
    denom = float(x.var() + y.var() + (mx - my) ** 2)
    if denom == 0.0:  # both constant and equal
        return 1.0
    return 2.0 * cov / denom


def _labels(labels: Sequence[Any] | None, *series: Iterable[Any]) -> list[Any]:
    if labels is not None:
        out = list(labels)
        known = set(out)
        extra = [v for s in series for v in s if v not in known]
        if extra:
            raise ValueError(f"values {sorted(set(map(str, extra)))} are not among the labels")
        return out
    seen: dict[Any, None] = {}
    for s in series:
        for v in s:
            seen.setdefault(v, None)
    try:
        return sorted(seen)
    except TypeError:
        return list(seen)


def confusion_matrix(
    y_true: Sequence[Hashable], y_pred: Sequence[Hashable], labels: Sequence[Hashable] | None = None
) -> np.ndarray:
    """Counts of (human label, judge label): rows are `labels` as truth, columns as prediction.

    Labels default to the sorted union of the values seen.
    """
    _pairs(y_true, y_pred)
    order = _labels(labels, y_true, y_pred)
    index = {v: i for i, v in enumerate(order)}
    m = np.zeros((len(order), len(order)), dtype=np.int64)
    for t, p in zip(y_true, y_pred, strict=True):
        m[index[t], index[p]] += 1
    return m


def _weights(k: int, weights: KappaWeights | None) -> np.ndarray:
    i, j = np.indices((k, k))
    if weights is None:
        return np.asarray(i != j, dtype=float)
    d = np.abs(i - j) / max(k - 1, 1)
    if weights == "linear":
        return np.asarray(d, dtype=float)
    if weights == "quadratic":
        return np.asarray(d**2, dtype=float)
    raise ValueError(f"weights must be None, 'linear' or 'quadratic', got {weights!r}")


def cohen_kappa(
    a: Sequence[Hashable],
    b: Sequence[Hashable],
    *,
    labels: Sequence[Hashable] | None = None,
    weights: KappaWeights | None = None,
) -> float:
    """Cohen's kappa between two raters, optionally weighted.

    `kappa = 1 - sum(w * observed) / sum(w * expected)`, with expected counts
    from the raters' marginals. Unweighted, that is `(p_o - p_e) / (1 - p_e)`.
    For `"linear"` or `"quadratic"` weights the order of `labels` is the
    scale's order (defaults to the sorted values, right for numbers). `nan`
    when undefined (no cases, or both raters always give the same one label).
    """
    _pairs(a, b)
    if not a:
        return math.nan
    m = confusion_matrix(a, b, labels).astype(float)
    n = m.sum()
    expected = np.outer(m.sum(axis=1), m.sum(axis=0)) / n
    w = _weights(len(m), weights)
    denom = float((w * expected).sum())
    if denom == 0.0:
        return math.nan
    return 1.0 - float((w * m).sum()) / denom


def _units(units: Sequence[Sequence[Any]]) -> list[list[Any]]:
    return [[v for v in u if v is not None] for u in units]


def krippendorff_alpha(
    units: Sequence[Sequence[Any]],
    *,
    level: AlphaLevel = "nominal",
    labels: Sequence[Any] | None = None,
) -> float:
    """Krippendorff's alpha for cases rated by any number of annotators.

    `units[i]` holds the labels case `i` received (any count; `None` is a
    missing label); cases with fewer than two labels are not pairable and are
    skipped. `level` picks the distance: `"nominal"` (labels match or not),
    `"ordinal"` (ranks by `labels` order, or sorted values) or `"interval"`
    (numbers, or positions in `labels`). `alpha = 1 - D_o / D_e`: 1 is perfect
    agreement, 0 chance level. `nan` with no pairable case or a single value.
    """
    pairable = [u for u in _units(units) if len(u) >= 2]
    if not pairable:
        return math.nan
    order = _labels(labels, *pairable)
    index = {v: i for i, v in enumerate(order)}
    k = len(order)
    o = np.zeros((k, k))
    for u in pairable:
        idx = [index[v] for v in u]
        share = 1.0 / (len(u) - 1)
        for p in range(len(idx)):
            for q in range(len(idx)):
                if p != q:
                    o[idx[p], idx[q]] += share
    n_c = o.sum(axis=1)
    n = n_c.sum()
    if level == "nominal":
        delta = 1.0 - np.eye(k)
    elif level == "interval":
        pos = (
            np.asarray(order, float)
            if labels is None and all(_is_number(v) for v in order)
            else np.arange(k, dtype=float)
        )
        delta = (pos[:, None] - pos[None, :]) ** 2
    elif level == "ordinal":
        delta = np.zeros((k, k))
        for c in range(k):
            for d in range(k):
                lo, hi = min(c, d), max(c, d)
                delta[c, d] = (n_c[lo : hi + 1].sum() - (n_c[c] + n_c[d]) / 2.0) ** 2
    else:
        raise ValueError(f"level must be 'nominal', 'ordinal' or 'interval', got {level!r}")
    d_o = float((o * delta).sum()) / n
    d_e = float((np.outer(n_c, n_c) * delta).sum()) / (n * (n - 1))
    if d_e == 0.0:
        return math.nan
    return float(1.0 - d_o / d_e)


def fleiss_kappa(units: Sequence[Sequence[Any]], *, labels: Sequence[Any] | None = None) -> float:
    """Fleiss' kappa: every case rated by the same number (at least two) of annotators.

    Raises `ValueError` when the number of labels differs between cases (use
    `krippendorff_alpha` then). `nan` when undefined (a single label overall).
    """
    rows = _units(units)
    if not rows:
        return math.nan
    sizes = {len(u) for u in rows}
    if len(sizes) != 1 or min(sizes) < 2:
        raise ValueError(f"Fleiss' kappa needs the same number (>= 2) of labels per case: {sizes}")
    r = sizes.pop()
    order = _labels(labels, *rows)
    index = {v: i for i, v in enumerate(order)}
    counts = np.zeros((len(rows), len(order)))
    for i, u in enumerate(rows):
        for v in u:
            counts[i, index[v]] += 1
    p_i = ((counts * (counts - 1)).sum(axis=1)) / (r * (r - 1))
    p_j = counts.sum(axis=0) / counts.sum()
    p_bar, p_e = float(p_i.mean()), float((p_j**2).sum())
    if p_e == 1.0:
        return math.nan
    return (p_bar - p_e) / (1.0 - p_e)


def pairwise_agreement(units: Sequence[Sequence[Any]]) -> float:
    """Share of agreeing label pairs within cases (all pairs of each case's labels)."""
    agree = total = 0
    for u in _units(units):
        for x, y in combinations(u, 2):
            total += 1
            agree += x == y
    return agree / total if total else math.nan


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


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


# -- cost counting -----------------------------------------------------------------------------


class UsageCallbackHandler(BaseCallbackHandler):
    """Counts LLM calls and tokens of everything run with it as a callback.

    Tokens come from the messages' `usage_metadata` (or the provider's
    `token_usage`), so they are what the server reported. Thread-safe; pass it
    in `config={"callbacks": [handler]}`.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self.llm_calls = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.errors = 0

    def on_llm_end(
        self,
        response: LLMResult,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Count one finished call and its tokens."""
        tin = tout = 0
        found = False
        for gens in response.generations:
            for g in gens:
                meta = getattr(getattr(g, "message", None), "usage_metadata", None)
                if meta:
                    found = True
                    tin += int(meta.get("input_tokens", 0))
                    tout += int(meta.get("output_tokens", 0))
        if not found and response.llm_output:
            usage = response.llm_output.get("token_usage") or {}
            tin = int(usage.get("prompt_tokens", 0) or 0)
            tout = int(usage.get("completion_tokens", 0) or 0)
        with self._lock:
            self.llm_calls += 1
            self.input_tokens += tin
            self.output_tokens += tout

    def on_llm_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Count a failed call (it still cost a request)."""
        with self._lock:
            self.llm_calls += 1
            self.errors += 1

    def usage(self) -> Usage:
        """What was counted so far, as a `Usage`."""
        with self._lock:
            return Usage(
                llm_calls=self.llm_calls,
                input_tokens=self.input_tokens,
                output_tokens=self.output_tokens,
            )


def with_callback(config: RunnableConfig | None, handler: BaseCallbackHandler) -> RunnableConfig:
    """A copy of `config` with `handler` added to its callbacks."""
    cfg = ensure_config(config)
    callbacks = cfg.get("callbacks")
    if callbacks is None:
        cfg["callbacks"] = [handler]
    elif isinstance(callbacks, list):
        cfg["callbacks"] = [*callbacks, handler]
    else:  # a callback manager
        manager = callbacks.copy()
        manager.add_handler(handler, inherit=True)
        cfg["callbacks"] = manager
    return cfg


# -- the report ----------------------------------------------------------------------------------


class CaseResult(BaseModel):
    """One case: the human label and the judge's."""

    id: str
    human: Any = Field(description="The human label on the judge's scale.")
    judge: Any = Field(default=None, description="The judge's score; None when it failed.")
    correct: bool | None = Field(default=None, description="Exact match; None when it failed.")
    human_rationale: str | None = None
    judge_rationale: str | None = None
    annotator_labels: list[Any] = Field(
        default_factory=list, description="Individual annotators' labels, where known."
    )
    error: str | None = Field(default=None, description="Why the judge failed on this case.")


class Disagreement(BaseModel):
    """A case where the judge's score differs from the human label, with both reasons."""

    id: str
    inputs: Any = None
    outputs: Any = None
    human: Any
    judge: Any
    human_rationale: str | None = None
    judge_rationale: str | None = None


class ConfusionMatrix(BaseModel):
    """Counts of (human, judge) label pairs.

    `counts[i][j]` is the number of cases the human labelled `labels[i]` and
    the judge `labels[j]`.
    """

    labels: list[Any]
    counts: list[list[int]]


class InterAnnotatorAgreement(BaseModel):
    """Agreement among human annotators, and of the judge with them, on multi-annotated cases."""

    n_cases: int = Field(description="Cases with at least two human labels.")
    n_labels: int = Field(description="Human labels on those cases.")
    krippendorff_alpha: float | None = Field(
        default=None, description="Humans only; nominal, ordinal or interval by the scale."
    )
    level: AlphaLevel = "nominal"
    fleiss_kappa: float | None = Field(
        default=None, description="Humans only; None unless every case has the same count."
    )
    pairwise_agreement: float | None = Field(
        default=None, description="Share of agreeing pairs of human labels within a case."
    )
    judge_annotator_agreement: float | None = Field(
        default=None,
        description="Share of (judge, annotator) pairs that agree: comparable to "
        "`pairwise_agreement`.",
    )
    alpha_with_judge: float | None = Field(
        default=None, description="Krippendorff's alpha with the judge added as one more annotator."
    )


class AgreementReport(BaseModel):
    """How well a judge agrees with human labels.

    Metrics are computed on the cases the judge scored; `failed` lists the
    others and `strict_accuracy` counts them as wrong.
    """

    model_config = ConfigDict(arbitrary_types_allowed=False)

    name: str = Field(default="judge", description="The judge's feedback key.")
    scale: Scale
    n: int = Field(description="Cases evaluated.")
    n_scored: int = Field(description="Cases the judge scored (not failed).")
    accuracy: float | None = None
    strict_accuracy: float | None = Field(
        default=None, description="Exact matches over all cases, failures counted as wrong."
    )
    kappa: float | None = Field(default=None, description="Cohen's kappa (unweighted).")
    weighted_kappa: float | None = Field(
        default=None, description="Quadratic-weighted Cohen's kappa (ordinal scales only)."
    )
    ccc: float | None = Field(default=None, description="Numeric scales only.")
    mae: float | None = Field(default=None, description="Numeric scales only.")
    confusion: ConfusionMatrix | None = None
    disagreements: list[Disagreement] = Field(default_factory=list)
    inter_annotator: InterAnnotatorAgreement | None = None
    cases: list[CaseResult] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage, description="LLM calls and tokens of judging.")
    seconds: float = 0.0

    @property
    def failed(self) -> list[CaseResult]:
        """Cases the judge could not score."""
        return [c for c in self.cases if c.error is not None or c.judge is None]

    def summary(self) -> dict[str, Any]:
        """The headline numbers as a flat dict (for tables and logs)."""
        return {
            "n": self.n,
            "n_scored": self.n_scored,
            "accuracy": self.accuracy,
            "strict_accuracy": self.strict_accuracy,
            "kappa": self.kappa,
            "weighted_kappa": self.weighted_kappa,
            "ccc": self.ccc,
            "mae": self.mae,
            "llm_calls": self.usage.llm_calls,
            "total_tokens": self.usage.total_tokens,
            "seconds": round(self.seconds, 3),
        }


def _scale_labels(scale: Scale, *series: Iterable[Any]) -> list[Any]:
    if scale.kind == "bool":
        return [False, True]
    if scale.kind in ("categorical", "pairwise"):
        return list(scale.choices)
    assert scale.low is not None and scale.high is not None
    if scale.integer and scale.high - scale.low <= 100:
        return list(range(int(scale.low), int(scale.high) + 1))
    return _labels(None, *series)


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
            continue
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
            score, comment = res.get("score"), res.get("comment")
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
    all_labels = _labels(labels, *units)
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
    results = judge.batch(cases, cfg, return_exceptions=True) if cases else []
    return agreement_report(
        items,
        results,
        spec,
        name=str(getattr(judge, "name", None) or "judge"),
        ordinal=ordinal,
        usage=counter.usage(),
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
    results = await judge.abatch(cases, cfg, return_exceptions=True) if cases else []
    return agreement_report(
        items,
        results,
        spec,
        name=str(getattr(judge, "name", None) or "judge"),
        ordinal=ordinal,
        usage=counter.usage(),
        seconds=time.perf_counter() - started,
    )
