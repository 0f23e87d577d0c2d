"""Score calibration: the score the experts give where the judge gives a score.

On an integer scale a judge can have scoring habits the experts do not share, which no
guideline changes. Seen cases graded as if unseen (each one's own past case left out)
give pairs (the judge's score, the expert's); a score the judge gives is then replaced by
the one the experts most often gave where the judge gave it, when enough seen cases say
so. Integer scales only (docs/decisions.md#score-calibration-on-integer-scales).

Each pair names its feedback, so unaligning that feedback removes the pair, and the
calibration is refitted from the rest whenever it is read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain_memalign.errors import InvalidFeedbackError, MemoryFormatError
from langchain_memalign.scale import Scale

# Seen cases with one judge score needed before that score is remapped, and by how many
# cases the experts' most frequent score must outnumber the judge's own among them. With
# a margin of 2, leaving any one seen case out never turns the remapping into a loss on
# the rest.
MIN_SUPPORT = 3
MARGIN = 2

# Where the pairs are stored (the memory's meta table).
META_KEY = "calibration"

# Integer scales with at most this many values are calibrated; a wider scale has too
# few seen cases per score for the rule above.
MAX_LEVELS = 11


def calibrates(scale: Scale) -> bool:
    """Whether scores on this scale are calibrated (integer scales of up to 11 values)."""
    if scale.kind != "numeric" or not scale.integer:
        return False
    assert scale.low is not None and scale.high is not None
    return scale.high - scale.low + 1 <= MAX_LEVELS


@dataclass(frozen=True)
class CalibrationPair:
    """One seen case: the judge's score graded as unseen, and the expert's score."""

    feedback_id: str
    judge: int
    expert: int


@dataclass(frozen=True)
class ScoreCalibration:
    """The seen cases' pairs and the remapping of judge scores fitted on them."""

    pairs: tuple[CalibrationPair, ...] = ()
    mapping: Mapping[int, int] = field(default_factory=dict)
    # The experts' scores behind each remapped judge score, counted once by `fit` so that
    # a judgment does not count the pairs again.
    support: Mapping[int, Mapping[int, int]] = field(default_factory=dict)

    @classmethod
    def fit(cls, pairs: Iterable[CalibrationPair]) -> ScoreCalibration:
        """Remap a judge score to the experts' most frequent one where enough cases say so."""
        pairs = tuple(pairs)
        by_judge: dict[int, Counter[int]] = {}
        for p in pairs:
            by_judge.setdefault(p.judge, Counter())[p.expert] += 1
        mapping: dict[int, int] = {}
        support: dict[int, dict[int, int]] = {}
        for judged, experts in by_judge.items():
            if sum(experts.values()) < MIN_SUPPORT:
                continue
            # Ties go to the score nearest the judge's: the smaller change.
            best = max(experts, key=lambda s: (experts[s], -abs(s - judged)))
            if best != judged and experts[best] - experts[judged] >= MARGIN:
                mapping[judged] = best
                support[judged] = dict(sorted(experts.items()))
        return cls(pairs, mapping, support)

    def apply(self, score: Any) -> tuple[Any, dict[str, Any] | None]:
        """The calibrated score, and what it rests on (None when the score stays)."""
        if isinstance(score, bool) or not isinstance(score, int) or score not in self.mapping:
            return score, None
        experts = self.support[score]
        evidence = {
            "judge_score": score,
            "seen_cases": sum(experts.values()),
            "expert_scores": {str(s): n for s, n in experts.items()},
        }
        return self.mapping[score], evidence

    def updated(
        self, new: Iterable[CalibrationPair], removed: Iterable[str] = ()
    ) -> ScoreCalibration:
        """Refitted with `new` pairs (replacing their feedback's) and `removed` ids left out."""
        new = tuple(new)
        drop = {*removed, *(p.feedback_id for p in new)}
        return ScoreCalibration.fit([*(p for p in self.pairs if p.feedback_id not in drop), *new])

    def to_json(self) -> dict[str, Any]:
        """The stored form: the pairs only (the mapping is refitted on reading)."""
        return {"pairs": [[p.feedback_id, p.judge, p.expert] for p in self.pairs]}

    @classmethod
    def from_json(cls, value: Any, scale: Scale, *, where: str) -> ScoreCalibration:
        """Read the stored form, or raise `MemoryFormatError` naming what is wrong."""
        if value is None:
            return cls()
        rows = value.get("pairs") if isinstance(value, dict) else None
        if not isinstance(rows, list):
            raise MemoryFormatError(
                f"{where}: meta.{META_KEY} is {value!r}, not {{'pairs': [...]}}"
            )
        pairs = []
        for row in rows:
            if not (isinstance(row, list) and len(row) == 3 and isinstance(row[0], str)):
                raise MemoryFormatError(
                    f"{where}: meta.{META_KEY} holds {row!r}, not [feedback id, judge score, "
                    "expert score]"
                )
            try:
                judge, expert = (scale.validate_value(v) for v in row[1:])
            except InvalidFeedbackError as e:
                raise MemoryFormatError(f"{where}: meta.{META_KEY}, pair {row!r}: {e}") from None
            pairs.append(CalibrationPair(row[0], judge, expert))
        return cls.fit(pairs)
