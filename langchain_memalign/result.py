"""`JudgeResult`: what a judgment returns, the same dict everywhere.

It is shaped like openevals' `EvaluatorResult` and is a valid LangSmith
evaluation result as is (`langsmith.evaluation.EvaluationResult(**result)`),
so `langsmith.evaluate(evaluators=[judge])` works on every scale:

| scale | `score` | `value` |
|---|---|---|
| `bool` | `True` / `False` | absent |
| numeric | the number | absent |
| categorical | the label's position on the scale (0 for the first) | the label |
| pairwise | `1` for `"A"`, `2` for `"B"`, `0` for `"tie"` | the label |

The numbers are `Scale.label_numbers()`, which is also what the LangSmith
feedback config we write gives each category, so a verdict written to
LangSmith and a reviewer's pick read back mean the same thing. Compare a verdict with
a human label through `label_of(result)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

from langchain_memalign.scale import Scale

__all__ = ["JudgeResult", "label_of"]


class JudgeResult(TypedDict):
    """A judgment: the judge's key, its score, the rationale and what it was based on."""

    key: str
    """The feedback key: the judge's name."""
    score: bool | int | float
    """The verdict (bool and numeric scales) or the label's position on the scale."""
    value: NotRequired[str]
    """The label, for categorical and pairwise scales only."""
    comment: str
    """The judge's rationale."""
    metadata: dict[str, Any]
    """`guideline_ids` and `episode_ids` the judgment saw (and `expert_feedback_ids`
    when the experts' own verdict on the very same case was reused)."""
    evaluator_info: NotRequired[dict[str, Any]]
    """Set by the LangSmith evaluator functions only: the judge's mark and the
    memory ids it used, which LangSmith keeps as the feedback's source info."""


def to_result(scale: Scale, raw: Mapping[str, Any]) -> JudgeResult:
    """A `JudgeResult` from a verdict whose `score` is a label on `scale`."""
    label = raw["score"]
    result = JudgeResult(
        key=raw["key"],
        score=label,
        comment=raw.get("comment") or "",
        metadata=dict(raw.get("metadata") or {}),
    )
    if scale.kind in ("categorical", "pairwise"):
        result["score"] = scale.label_numbers()[label]
        result["value"] = label
    return result


def label_of(result: Mapping[str, Any]) -> Any:
    """The verdict on the judge's scale: the label if there is one, else the score.

    This is what compares with a human label (`Feedback.value`).
    """
    return result["value"] if result.get("value") is not None else result.get("score")
