"""benchmarks/quality.py: which seen cases a stage judges when --max-seen caps them."""

from __future__ import annotations

import sys
from pathlib import Path

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
