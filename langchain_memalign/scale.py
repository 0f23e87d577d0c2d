"""The judge's scale: what a score (and a human label) may be."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model

from langchain_memalign.errors import InvalidFeedbackError

ScaleKind = Literal["bool", "numeric", "categorical", "pairwise"]
ScaleSpec = Any  # bool | tuple[num, num] | list[str] | "pairwise" | Scale | dict

_TRUE = {"true", "yes", "pass", "passed", "y", "1", "correct"}
_FALSE = {"false", "no", "fail", "failed", "n", "0", "incorrect"}
_PAIRWISE_CHOICES = ("A", "B", "tie")
_PAIRWISE_ALIASES = {
    "a": "A", "1": "A", "response_1": "A", "response 1": "A", "first": "A",
    "b": "B", "2": "B", "response_2": "B", "response 2": "B", "second": "B",
    "tie": "tie", "0": "tie", "draw": "tie", "equal": "tie",
}  # fmt: skip
_RATIONALE_MAX_CHARS = 600
# Integer ranges up to this size are offered to the model as an enum, which
# grammar-constrained local servers enforce better than min/max bounds.
_MAX_ENUM_RANGE = 20


class Scale(BaseModel):
    """A judge's scale.

    Build one from the short forms `MemAlignJudge` accepts with `Scale.of`:
    `bool` (pass/fail), a `(low, high)` numeric range, a list of category
    names, or `"pairwise"` (values `"A"`, `"B"`, `"tie"`).
    """

    model_config = ConfigDict(frozen=True)

    kind: ScaleKind
    low: float | None = None
    high: float | None = None
    integer: bool = False
    choices: tuple[str, ...] = ()

    @classmethod
    def of(cls, spec: ScaleSpec) -> Scale:
        """Build a scale from `bool`, `(low, high)`, a list of names, `"pairwise"` or a dict."""
        if isinstance(spec, Scale):
            return spec
        if spec is bool or spec == "bool":
            return cls(kind="bool")
        if spec == "pairwise":
            return cls(kind="pairwise", choices=_PAIRWISE_CHOICES)
        if isinstance(spec, dict):
            return cls.model_validate(spec)
        if isinstance(spec, Sequence) and not isinstance(spec, str):
            items = list(spec)
            if len(items) == 2 and all(_is_number(x) for x in items):
                low, high = items
                if low >= high:
                    raise ValueError(f"numeric scale needs low < high, got {spec!r}")
                integer = all(isinstance(x, int) for x in items)
                return cls(kind="numeric", low=low, high=high, integer=integer)
            if items and all(isinstance(x, str) and x.strip() for x in items):
                if len({x.lower() for x in items}) != len(items):
                    raise ValueError(f"categorical scale has duplicate names: {items!r}")
                return cls(kind="categorical", choices=tuple(items))
        raise ValueError(
            f"unsupported scale {spec!r}: use bool, a (low, high) numeric range, "
            "a list of category names, or 'pairwise'"
        )

    def validate_value(self, value: Any, *, feedback_id: str | None = None) -> Any:
        """Return `value` in the scale's canonical form, or raise `InvalidFeedbackError`."""
        where = f"feedback {feedback_id!r}: " if feedback_id is not None else ""
        if self.kind == "bool":
            if isinstance(value, bool):
                return value
            if _is_number(value) and value in (0, 1):
                return bool(value)
            if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
                return value.strip().lower() in _TRUE
            raise InvalidFeedbackError(
                f"{where}value {value!r} is not a pass/fail value (use True or False)",
                feedback_id=feedback_id,
            )
        if self.kind == "numeric":
            number: Any = value
            if isinstance(value, str):
                try:
                    number = float(value)
                except ValueError:
                    number = value
            if not _is_number(number) or math.isnan(number):
                raise InvalidFeedbackError(
                    f"{where}value {value!r} is not a number on the {self.describe_range()} scale",
                    feedback_id=feedback_id,
                )
            assert self.low is not None and self.high is not None
            if not self.low <= number <= self.high:
                raise InvalidFeedbackError(
                    f"{where}value {value!r} is outside the {self.describe_range()} scale",
                    feedback_id=feedback_id,
                )
            if self.integer:
                if number != int(number):
                    raise InvalidFeedbackError(
                        f"{where}value {value!r} is not a whole number on the "
                        f"{self.describe_range()} scale",
                        feedback_id=feedback_id,
                    )
                return int(number)
            return float(number) if isinstance(number, float) else number
        lookup = {c.lower(): c for c in self.choices}
        if self.kind == "pairwise":
            lookup.update(_PAIRWISE_ALIASES)
        key = str(value).strip().lower() if isinstance(value, str | int) else None
        if key is not None and not isinstance(value, bool) and key in lookup:
            return lookup[key]
        raise InvalidFeedbackError(
            f"{where}value {value!r} is not one of {', '.join(self.choices)}",
            feedback_id=feedback_id,
        )

    def label_numbers(self) -> dict[str, int]:
        """The number that stands for each label of a categorical or pairwise scale.

        One mapping for the whole package: a `JudgeResult`'s `score`, the LangSmith
        feedback config we write, and the numbers `validate_value` reads as labels.
        Categories are numbered by position (0 for the first); pairwise labels by
        the numbers reviewers and datasets use for them: `"A"` 1, `"B"` 2, `"tie"` 0.
        """
        if self.kind == "pairwise":
            return {"A": 1, "B": 2, "tie": 0}
        return {c: i for i, c in enumerate(self.choices)}

    def describe_range(self) -> str:
        """Human-readable range, e.g. `1–5`."""
        return f"{_fmt(self.low)}–{_fmt(self.high)}"

    def describe(self) -> str:
        """Instruction for the model about what the score means."""
        if self.kind == "bool":
            return "The score is true if the output meets the criteria and false if it does not."
        if self.kind == "numeric":
            unit = "a whole number" if self.integer else "a number"
            return f"The score is {unit} from {_fmt(self.low)} (worst) to {_fmt(self.high)} (best)."
        if self.kind == "pairwise":
            return (
                'The score is "A" if the first response is better, "B" if the second '
                'response is better, or "tie" if neither is better.'
            )
        return "The score is exactly one of: " + ", ".join(f'"{c}"' for c in self.choices) + "."

    def score_type(self) -> Any:
        """The Python type of a score, as offered to the model's structured output."""
        if self.kind == "bool":
            return bool
        if self.kind == "numeric":
            assert self.low is not None and self.high is not None
            if self.integer and self.high - self.low <= _MAX_ENUM_RANGE:
                values = tuple(range(int(self.low), int(self.high) + 1))
                return Literal[values]
            return int if self.integer else float
        return Literal[self.choices]

    def verdict_schema(self, *, score_first: bool = False) -> type[BaseModel]:
        """A pydantic model of the judge's verdict: `{rationale, score}`, or `{score, rationale}`.

        The order is the order the model writes the fields in (a JSON schema's properties
        keep it, and grammar-constrained servers enforce it): `score_first` decides
        whether the model commits to its score before or after it reasons.
        """
        score_field: Any
        score_type: Any = self.score_type()
        if self.kind == "numeric":
            # pydantic reads `true` as 1 for an int or a Literal[1, ...]: a model
            # answering true/false on a 1-5 scale must be retried, not scored 1.
            score_type = Annotated[score_type, BeforeValidator(_no_bool)]
        if self.kind == "numeric" and self.score_type() in (int, float):
            score_field = (score_type, Field(ge=self.low, le=self.high))
        else:
            score_field = (score_type, Field(description=self.describe()))
        rationale_field = (
            str,
            Field(
                description="Brief reasoning for the score.",
                # Grammar-constrained servers enforce this; without it a small
                # model can ramble for thousands of tokens.
                json_schema_extra={"maxLength": _RATIONALE_MAX_CHARS},
            ),
        )
        if score_first:
            return create_model(
                "JudgeVerdict",
                __doc__="The judge's verdict: the score, then a short rationale.",
                score=score_field,
                rationale=rationale_field,
            )
        return create_model(
            "JudgeVerdict",
            __doc__="The judge's verdict: a short rationale, then the score.",
            rationale=rationale_field,
            score=score_field,
        )


def _no_bool(v: Any) -> Any:
    if isinstance(v, bool):
        raise ValueError(f"{v!r} is not a score on a numeric scale (give a number)")
    return v


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _fmt(x: float | None) -> str:
    if x is None:
        return "?"
    return str(int(x)) if float(x).is_integer() else str(x)
