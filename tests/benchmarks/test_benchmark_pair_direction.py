"""`pair_direction.py` decides with the package's own direction check, on given vectors."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from pair_direction import kept

ROW: dict[str, Any] = {
    "scale": "bool", "value": True, "direction": "fail", "rule": "rule",
    "text": "praise",
}  # fmt: skip


def _vectors(**sims: float) -> dict[str, np.ndarray]:
    """Unit vectors whose cosine with the rule's vector is given per text."""
    out = {"rule": np.array([1.0, 0.0])}
    for text, sim in sims.items():
        out[text] = np.array([sim, float(np.sqrt(1 - sim * sim))])
    return out


def test_a_requirement_is_kept_when_the_other_reason_states_it_as_well() -> None:
    assert kept(ROW, (False, "blame"), _vectors(praise=0.53, blame=0.50), 0.4)
    # the failed case's reason states something else: the praised case alone decides
    assert not kept(ROW, (False, "blame"), _vectors(praise=0.53, blame=0.30), 0.4)


def test_an_order_to_raise_is_decided_by_the_named_case_alone() -> None:
    row = {**ROW, "scale": "numeric", "value": 1, "direction": "higher"}
    assert not kept(row, (5, "blame"), _vectors(praise=0.59, blame=0.59), 0.4)
