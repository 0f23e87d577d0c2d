"""Scales: the verdicts each kind accepts and refuses, bad specs refused, the verdict
schema asking for the rationale before the score, and a round trip through JSON."""

from __future__ import annotations

import pytest

from langchain_memalign import InvalidFeedbackError, Scale


def test_bool_scale_accepts_pass_fail_forms_and_rejects_maybe() -> None:
    s = Scale.of(bool)
    assert s.validate_value(True) is True
    assert s.validate_value("FAIL") is False
    assert s.validate_value(1) is True
    with pytest.raises(InvalidFeedbackError, match="feedback 'f1'.*'maybe'"):
        s.validate_value("maybe", feedback_id="f1")


def test_numeric_scale_keeps_numbers_and_rejects_out_of_range() -> None:
    s = Scale.of((1, 5))
    assert s.validate_value(4) == 4 and isinstance(s.validate_value(4), int)
    assert isinstance(s.validate_value(4.0), int)
    assert s.validate_value("3") == 3
    with pytest.raises(InvalidFeedbackError, match="feedback 'x'.*7.*outside the 1–5 scale"):
        s.validate_value(7, feedback_id="x")
    with pytest.raises(InvalidFeedbackError, match="not a whole number"):
        s.validate_value(2.5)
    with pytest.raises(InvalidFeedbackError):
        s.validate_value(True)
    real = Scale.of((0.0, 1.0))
    assert real.validate_value(0.25) == 0.25


def test_categorical_and_pairwise() -> None:
    c = Scale.of(["Excellent", "Acceptable", "Bad"])
    assert c.validate_value("excellent") == "Excellent"
    with pytest.raises(InvalidFeedbackError, match="not one of Excellent, Acceptable, Bad"):
        c.validate_value("Great")
    p = Scale.of("pairwise")
    assert p.validate_value("response_1") == "A"
    assert p.validate_value("B") == "B"
    assert p.validate_value("tie") == "tie"


@pytest.mark.parametrize("spec", [(5, 1), ["a", "A"], "ternary", [], 3])
def test_bad_scale_specs(spec: object) -> None:
    with pytest.raises(ValueError):
        Scale.of(spec)


def test_verdict_schema_asks_for_rationale_before_score() -> None:
    for spec in (bool, (1, 5), ["a", "b"], "pairwise", (0.0, 10.0)):
        schema = Scale.of(spec).verdict_schema().model_json_schema()
        assert list(schema["properties"]) == ["rationale", "score"]
    assert Scale.of((1, 5)).verdict_schema().model_json_schema()["properties"]["score"]["enum"] == [
        1,
        2,
        3,
        4,
        5,
    ]
    big = Scale.of((0, 100)).verdict_schema().model_json_schema()["properties"]["score"]
    assert big["minimum"] == 0 and big["maximum"] == 100


def test_scale_round_trips_through_json() -> None:
    for spec in (bool, (1, 5), ["a", "b"], "pairwise"):
        s = Scale.of(spec)
        assert Scale.of(s.model_dump(mode="json")) == s
