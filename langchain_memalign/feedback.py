"""Human feedback: the expert's verdict and rationale on one judged case."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from langchain_memalign._text import stable_hash


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

    def content_hash(self) -> str:
        """Hash of everything that changes what the judge learns from this item."""
        return stable_hash(
            [self.inputs, self.outputs, self.reference_outputs, self.value, self.rationale,
             self.annotator]
        )  # fmt: skip
