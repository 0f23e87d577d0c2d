"""Prequential agreement: is the judge getting better? `MemAlignJudge.agreement_history`.

Every review that arrives for a case the judge already graded is a free test:
the judge's verdict on the case from *before* it learned the review, against the
expert's. The memory keeps these pairs in arrival order (the agreement series),
with a mark where each align happened, so that the series reads as a learning
curve measured on data the judge had not seen, at no extra cost:

- on the LangSmith path (a feedback source, a review queue, `JudgeMonitor`), the
  judge's verdict is the one it wrote on the run, read from LangSmith before
  the review is learned: no judge call;
- `align(..., prior_verdicts={feedback_id: verdict})` records verdicts the
  caller kept (a `JudgeResult`, or its label);
- `align(..., score_first=True)` grades each new item once before learning it;
- `SelfCritique.record` records the critique's verdict beside the reviewer's.

`agreement_history(window=20)` cuts the series into consecutive windows of
`window` reviews (the last one may be shorter) and computes each window's
agreement. Windows are counted in reviews, not in time: reviews arrive in
bursts (a queue is worked through on some days, not on others), and a window
of a fixed count has the same statistical weight wherever it falls, so the
windows' numbers compare with each other. Each review's time is kept in the
points, and each window says when its first and last reviews were recorded.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_memalign.memory._codec_prequential import SeriesRow
from langchain_memalign.scale import Scale

__all__ = ["AgreementHistory", "AgreementWindow", "AlignMarker", "ReviewPoint", "history_of"]

# Integer scales up to this many steps get a quadratic-weighted kappa (beyond it,
# the scores are numbers rather than grades: MAE says more).
_KAPPA_MAX_STEPS = 100


@dataclass(frozen=True)
class ReviewPoint:
    """One review beside the judge's verdict on its case from before it learned it."""

    index: int
    """The review's position in the series, from 1."""
    feedback_id: str
    judge: Any
    """The judge's verdict (a label on its scale) from before it learned the review."""
    expert: Any
    """The expert's verdict."""
    at: str
    """When the review was recorded (ISO 8601, UTC)."""
    source: str | None
    """Where the judge's verdict came from: "langsmith" (its verdict written on the
    run), "score_first" (graded by `align(score_first=True)`), "self_critique" (the
    critique a `SelfCritique.record` confirms or corrects), "given"
    (`align(prior_verdicts=...)`) or the label a caller passed as `align(prior_source=...)`."""

    @property
    def agrees(self) -> bool:
        """Whether the judge gave the expert's verdict exactly."""
        return bool(self.judge == self.expert)


@dataclass(frozen=True)
class AlignMarker:
    """An align in the series: it happened after the first `after` reviews."""

    number: int
    """The align's number in the series, from 1."""
    after: int
    """Reviews recorded before it: on a plot over reviews it sits between review
    `after` and review `after + 1`."""
    at: str
    """When it happened (ISO 8601, UTC)."""
    learned: int
    """How many new or changed feedback items it learned."""


@dataclass(frozen=True)
class AgreementWindow:
    """The agreement of one window of consecutive reviews.

    A metric that does not apply to the scale, or that is undefined on the
    window (kappa when both sides gave one and the same label throughout, or on
    a single review), is None.
    """

    first: int
    """The position of the window's first review, from 1."""
    last: int
    """The position of its last review."""
    count: int
    """Reviews in the window."""
    start: str
    """When its first review was recorded."""
    end: str
    """When its last review was recorded."""
    accuracy: float | None
    """The share of reviews where the judge gave the expert's verdict (pass/fail,
    categorical and pairwise scales, and integer numeric scales)."""
    kappa: float | None
    """Cohen's kappa: chance-corrected agreement (quadratic-weighted on integer
    numeric scales; None on continuous ones)."""
    mae: float | None
    """Mean absolute difference between the judge's and the expert's scores
    (numeric scales only)."""
    aligns: int
    """Aligns that happened between this window's first and last review."""


@dataclass(frozen=True)
class AgreementHistory:
    """The agreement series of a judge, by windows of `window` reviews, with its aligns.

    `windows` read as a learning curve measured on reviews the judge had not
    learned yet; `aligns` say where it learned (see `AlignMarker.after`).
    """

    judge: str
    """The judge's name."""
    scale: Scale
    window: int
    """Reviews per window (the last window may hold fewer)."""
    windows: tuple[AgreementWindow, ...]
    aligns: tuple[AlignMarker, ...]
    points: tuple[ReviewPoint, ...]
    overall: AgreementWindow | None
    """Every review as one window (None without reviews)."""

    @property
    def metric(self) -> Literal["accuracy", "mae"]:
        """The main metric of the scale: MAE on numeric scales, accuracy otherwise."""
        return "mae" if self.scale.kind == "numeric" else "accuracy"


def history_of(
    rows: Sequence[SeriesRow], scale: Scale, *, judge: str, window: int = 20
) -> AgreementHistory:
    """The `AgreementHistory` of a stored agreement series (`Store.prequential`)."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a whole number of reviews, at least 1: {window!r}")
    points: list[ReviewPoint] = []
    aligns: list[AlignMarker] = []
    for row in rows:
        if row["kind"] == "review":
            assert row["feedback_id"] is not None
            points.append(
                ReviewPoint(
                    index=len(points) + 1,
                    feedback_id=row["feedback_id"],
                    judge=row["judge"],
                    expert=row["expert"],
                    at=row["at"],
                    source=row["source"],
                )
            )
        else:
            aligns.append(
                AlignMarker(
                    number=len(aligns) + 1, after=len(points), at=row["at"],
                    learned=row["learned"] or 0,
                )
            )  # fmt: skip
    windows = tuple(
        _window(points[i : i + window], aligns, scale) for i in range(0, len(points), window)
    )
    return AgreementHistory(
        judge=judge,
        scale=scale,
        window=window,
        windows=windows,
        aligns=tuple(aligns),
        points=tuple(points),
        overall=_window(points, aligns, scale) if points else None,
    )


def _window(
    points: Sequence[ReviewPoint], aligns: Sequence[AlignMarker], scale: Scale
) -> AgreementWindow:
    # The evaluation toolkit's metrics, imported when used: the judge loads without it.
    from langchain_memalign.evaluation import metrics

    first, last = points[0].index, points[-1].index
    expert = [p.expert for p in points]
    judge = [p.judge for p in points]
    accuracy = kappa = mae = None
    if scale.kind == "numeric":
        mae = metrics.mae(expert, judge)
        if scale.integer:
            accuracy = metrics.accuracy(expert, judge)
            assert scale.low is not None and scale.high is not None
            if scale.high - scale.low <= _KAPPA_MAX_STEPS and len(points) > 1:
                labels = list(range(int(scale.low), int(scale.high) + 1))
                kappa = metrics.cohen_kappa(expert, judge, labels=labels, weights="quadratic")
    else:
        accuracy = metrics.accuracy(expert, judge)
        if len(points) > 1:
            labels_: list[Any] = [False, True] if scale.kind == "bool" else list(scale.choices)
            kappa = metrics.cohen_kappa(expert, judge, labels=labels_)
    return AgreementWindow(
        first=first,
        last=last,
        count=len(points),
        start=points[0].at,
        end=points[-1].at,
        accuracy=_number(accuracy),
        kappa=_number(kappa),
        mae=_number(mae),
        aligns=sum(1 for a in aligns if first <= a.after < last),
    )


def _number(x: float | None) -> float | None:
    return None if x is None or math.isnan(x) else float(x)
