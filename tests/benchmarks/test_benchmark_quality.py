"""benchmarks/quality.py: which seen cases a stage judges when --max-seen caps them."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import quality

from langchain_memalign import Feedback


def _pool(n: int) -> list[Feedback]:
    return [Feedback(id=f"f{i}", inputs={"q": str(i)}, outputs="a", value=True) for i in range(n)]


def test_seen_sample_keeps_every_case_under_the_cap() -> None:
    pool = _pool(10)
    assert quality.seen_sample(pool, None) == pool
    assert quality.seen_sample(pool, 10) == pool
    assert quality.seen_sample(pool, 20) == pool


def test_seen_sample_spreads_over_early_and_late_feedback() -> None:
    pool = _pool(50)
    picked = [fb.id for fb in quality.seen_sample(pool, 20)]
    assert len(picked) == len(set(picked)) == 20
    assert picked[0] == "f0"  # the first feedback aligned
    assert int(picked[-1][1:]) >= 45  # and some of the last
    assert picked == sorted(picked, key=lambda i: int(i[1:]))  # in the aligned order


def test_evaluate_records_the_same_judgments_without_calibration() -> None:
    # A judge whose first two scores were calibrated (3 -> 2) and whose third was not.
    class Judge:
        name, memory, scale = "j", None, (1, 5)

        def batch(self, cases: Any, config: Any = None, **kw: Any) -> list[Any]:
            cal = {"calibration": {"judge_score": 3, "seen_cases": 4, "expert_scores": {}}}
            return [
                {"score": 2, "comment": "", "metadata": cal},
                {"score": 2, "comment": "", "metadata": cal},
                {"score": 4, "comment": "", "metadata": {}},
            ]

    cases = [Feedback(id=f"c{i}", inputs=f"q{i}", value=v) for i, v in enumerate([2, 3, 4])]
    bench = quality.Bench.__new__(quality.Bench)
    bench.args = SimpleNamespace(max_concurrency=1)
    spec = SimpleNamespace(scale=(1, 5), ordinal=True)
    out = bench.evaluate(Judge(), cases, spec)
    assert [p["judge"] for p in out["predictions"]] == [2, 2, 4] and out["correct"] == 2
    assert out["calibrated"] == 2
    raw = out["uncalibrated"]
    assert [p["judge"] for p in raw["predictions"]] == [3, 3, 4] and raw["correct"] == 2
    assert quality.uncalibrated({"score": 5, "metadata": {}}) == {"score": 5, "metadata": {}}
