"""Measuring a judge against human labels: agreement metrics and learning curves.

The names most callers need are here: the agreement report and how to compute it, the
judge's agreement over its reviews (`MemAlignJudge.agreement_history`), and learning
curves. The modules hold the rest, each with its own `__all__`: `agreement`, `report`,
`metrics`, `usage`, `learning_curve` and `plots` (the `[plot]` extra).

Importing this package loads neither the plots nor matplotlib; the judge itself loads
without it.
"""

from langchain_memalign.evaluation.agreement import aevaluate_agreement, evaluate_agreement
from langchain_memalign.evaluation.learning_curve import LearningCurve, learning_curve
from langchain_memalign.evaluation.report import AgreementReport
from langchain_memalign.prequential import (
    AgreementHistory,
    AgreementWindow,
    AlignMarker,
    ReviewPoint,
)

__all__ = [
    "AgreementHistory",
    "AgreementReport",
    "AgreementWindow",
    "AlignMarker",
    "LearningCurve",
    "ReviewPoint",
    "aevaluate_agreement",
    "evaluate_agreement",
    "learning_curve",
]
