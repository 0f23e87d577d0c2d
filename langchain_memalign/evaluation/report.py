"""The agreement report: per-case results, disagreements, confusion, inter-annotator."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from langchain_memalign.evaluation.metrics import AlphaLevel
from langchain_memalign.reports import Usage
from langchain_memalign.scale import Scale

__all__ = [
    "AgreementReport",
    "CaseResult",
    "ConfusionMatrix",
    "Disagreement",
    "InterAnnotatorAgreement",
]


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
            "embedding_calls": self.usage.embedding_calls,
            "seconds": round(self.seconds, 3),
        }
