"""Reports returned by `align` and `unalign`, and the cost counter behind them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class Usage(BaseModel):
    """Model calls and tokens spent: the cost of an operation."""

    llm_calls: int = 0
    embedding_calls: int = 0
    embedded_texts: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            llm_calls=self.llm_calls + other.llm_calls,
            embedding_calls=self.embedding_calls + other.embedding_calls,
            embedded_texts=self.embedded_texts + other.embedded_texts,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
        )

    @classmethod
    def sum(cls, items: Any) -> Usage:
        """Add up a sequence of usages."""
        total = cls()
        for u in items:
            total = total + u
        return total


class RejectedGuideline(BaseModel):
    """A guideline reflection proposed that was not stored, and why."""

    text: str
    reason: str = Field(description="'restates a case' or 'no cited rationale supports it'.")


class GuidelineCheck(BaseModel):
    """How a new guideline did on seen cases, graded with and without it."""

    guideline_id: str
    text: str = Field(description="The guideline as proposed.")
    cases: list[str] = Field(default_factory=list, description="Seen feedback ids graded.")
    fixed: list[str] = Field(
        default_factory=list, description="Graded as the experts did only with the guideline."
    )
    broken: list[str] = Field(
        default_factory=list, description="Graded as the experts did only without it."
    )
    action: str = Field(
        description="'kept', 'narrowed' (the text was restated), 'dropped', or "
        "'unchecked' (the call budget ran out)."
    )
    narrowed_text: str | None = None


class AlignReport(BaseModel):
    """What an `align` call changed and what it cost."""

    added: list[str] = Field(
        default_factory=list, description="Feedback ids stored for the first time."
    )
    updated: list[str] = Field(
        default_factory=list, description="Ids whose value, rationale or case changed."
    )
    unchanged: list[str] = Field(default_factory=list, description="Ids already stored as given.")
    guidelines_added: list[str] = Field(default_factory=list)
    guidelines_removed: list[str] = Field(default_factory=list)
    guidelines_updated: list[str] = Field(
        default_factory=list, description="Guidelines that gained sources or were re-derived."
    )
    failed: list[str] = Field(
        default_factory=list,
        description="Feedback ids whose reflection failed; kept pending and retried "
        "by the next align.",
    )
    guidelines_rejected: list[RejectedGuideline] = Field(
        default_factory=list,
        description="Proposals not stored: case summaries and rules no cited rationale supports.",
    )
    validation: list[GuidelineCheck] = Field(
        default_factory=list,
        description="Each new guideline's effect on seen cases, and what was done about it.",
    )
    errors: list[str] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    seconds: float = 0.0

    @property
    def llm_calls(self) -> int:
        """LLM calls made."""
        return self.usage.llm_calls

    @property
    def total_tokens(self) -> int:
        """Tokens spent on LLM calls."""
        return self.usage.total_tokens


class UnalignReport(BaseModel):
    """What an `unalign` call removed and re-derived, and what it cost."""

    removed: list[str] = Field(default_factory=list, description="Feedback ids removed.")
    guidelines_removed: list[str] = Field(
        default_factory=list, description="Guidelines left with no source, or no longer supported."
    )
    guidelines_rederived: list[str] = Field(
        default_factory=list, description="Guidelines re-distilled from their remaining sources."
    )
    errors: list[str] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    seconds: float = 0.0

    @property
    def llm_calls(self) -> int:
        """LLM calls made."""
        return self.usage.llm_calls
