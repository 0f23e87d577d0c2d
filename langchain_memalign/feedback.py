"""Human feedback: the expert's verdict and rationale on one judged case."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticSerializationError, to_json

from langchain_memalign import limits
from langchain_memalign._text import stable_hash
from langchain_memalign.errors import InvalidFeedbackError


class Feedback(BaseModel):
    """One expert judgment that the judge should learn from.

    `value` is validated against the judge's scale when the feedback is
    aligned; `rationale` is the natural-language explanation that guidelines
    are distilled from. Feedback without a rationale is still remembered as an
    episode, but teaches no guideline.
    """

    model_config = ConfigDict(frozen=True)

    id: str = Field(description="Stable id; aligning the same id again replaces the old item.")
    inputs: Any = Field(description="The inputs of the judged case.")
    outputs: Any = Field(default=None, description="The judged output.")
    reference_outputs: Any = Field(default=None, description="Optional reference output.")
    value: bool | int | float | str = Field(description="The expert's score on the judge's scale.")
    rationale: str | None = Field(default=None, description="Why the expert gave this score.")
    annotator: str | None = Field(default=None, description="Who gave the feedback.")
    created_at: datetime | None = Field(default=None, description="When it was given.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Anything else to keep.")

    @field_validator("id")
    @classmethod
    def _id_not_blank(cls, v: str) -> str:
        if not v or not v.strip():
            raise ValueError("feedback id must be a non-empty string")
        return v

    @field_validator("rationale")
    @classmethod
    def _blank_rationale_is_none(cls, v: str | None) -> str | None:
        return v if v and v.strip() else None

    @model_validator(mode="after")
    def _storable(self) -> Feedback:
        # Refuse here what could not be stored as it is: JSON has no NaN or
        # Infinity (they would come back as null) and SQLite's UTF-8 text has
        # no lone surrogates. Refusing at construction means no model call is
        # spent on feedback that would fail to store.
        for field in ("inputs", "outputs", "reference_outputs", "value", "metadata"):
            problem = storable_problem(getattr(self, field))
            if problem:
                raise ValueError(f"{field} {problem}")
        for field in ("id", "rationale", "annotator"):
            problem = storable_problem(getattr(self, field))
            if problem:
                raise ValueError(f"{field} {problem}")
        return self

    def content_hash(self) -> str:
        """Hash of everything that changes what the judge learns from this item."""
        return stable_hash(
            [self.inputs, self.outputs, self.reference_outputs, self.value, self.rationale,
             self.annotator]
        )  # fmt: skip


# Deeper nesting than this is refused rather than risking a RecursionError
# while hashing, serializing or rendering the content.
MAX_NESTING = 64


def storable_problem(value: Any, depth: int = 0) -> str | None:
    """Why `value` cannot be stored as JSON text unchanged, or None if it can."""
    if depth > MAX_NESTING:
        return f"is nested more than {MAX_NESTING} levels deep"
    if isinstance(value, float):
        return None if math.isfinite(value) else f"holds {value!r} (JSON has no NaN or Infinity)"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "holds text that is not valid Unicode (a lone surrogate)"
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            problem = storable_problem(k, depth + 1) or storable_problem(v, depth + 1)
            if problem:
                return problem
        return None
    if isinstance(value, list | tuple | set | frozenset):
        for v in value:
            problem = storable_problem(v, depth + 1)
            if problem:
                return problem
        return None
    if isinstance(value, BaseModel):
        return storable_problem(value.model_dump(), depth + 1)
    if value is None or isinstance(value, bool | int):
        return None
    # Anything else (dates, UUIDs, custom objects) is stored as pydantic writes
    # it: find out now, before an align spends model calls on it.
    try:
        to_json(value)
    except (PydanticSerializationError, ValueError, TypeError, RecursionError):
        return f"holds a {type(value).__name__} that cannot be stored as JSON"
    return None


# The fields PostgreSQL keeps as text columns (the id) or passes on into them (a
# rationale becomes guideline text); the other fields are stored as JSON, which
# writes a NUL as the escape `\u0000`, on every backend.
_NUL_FIELDS = ("id", "rationale")


def check_nul(fb: Feedback) -> None:
    """Raise `InvalidFeedbackError` if `fb` holds a NUL where PostgreSQL cannot store it.

    Refused on every memory, with the same message, before any model call:
    a folder's memory can be saved to a database later, and an `align` on a
    database would otherwise fail at its first write, after its model calls.
    """
    for field in _NUL_FIELDS:
        if "\x00" in (getattr(fb, field) or ""):
            raise InvalidFeedbackError(
                f"feedback {_shown(fb.id)}: the {field} holds a NUL character, which a "
                "PostgreSQL memory cannot store (refused on every memory)",
                feedback_id=fb.id,
            )


def _shown(fid: str) -> str:
    text = repr(fid)
    return text if len(text) <= 80 else text[:77] + "..."


def id_problem(fid: object, *, nul_ok: bool = True) -> str | None:
    """Why no stored feedback can have the id `fid`, or None if one can.

    `align` refuses such ids (pydantic's validation, `limits.check_feedback`),
    so a lookup or removal of one is answered without reading the memory.
    `nul_ok`: whether the memory's text may hold NUL (PostgreSQL's cannot).
    """
    if not isinstance(fid, str):
        return f"not a string but a {type(fid).__name__}"
    if not fid.strip():
        return "empty"
    if len(fid) > limits.MAX_ID_CHARS:
        return f"{len(fid):,} characters, over limits.MAX_ID_CHARS ({limits.MAX_ID_CHARS:,})"
    if storable_problem(fid):
        return "not valid Unicode (a lone surrogate)"
    if not nul_ok and "\x00" in fid:
        return "holds a NUL character, which PostgreSQL text cannot hold"
    return None
