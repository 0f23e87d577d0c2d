"""Reports returned by `align` and `unalign`, and the cost counter behind them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

__all__ = [
    "AlignReport",
    "CalibrationReport",
    "CheckReport",
    "GuidelineCheck",
    "RejectedGuideline",
    "UnalignReport",
    "Usage",
]


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
    reason: str = Field(
        description="'restates a case', 'no cited rationale supports it', 'names the topic "
        "of one case (<id>), not a rule', 'an expert rejected this rule (<id>, by <author>: "
        "<reason>)', or the guideline limit."
    )


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
    unconfirmed: list[str] = Field(
        default_factory=list,
        description="Broken on the first grading only: graded again, with and without the "
        "guideline, the break did not happen again, so it is not counted in `broken`.",
    )
    action: str = Field(
        description="'kept', 'narrowed' (the text was restated), 'dropped', or "
        "'unchecked' (the call budget ran out)."
    )
    narrowed_text: str | None = None


class CheckReport(BaseModel):
    """What an align or unalign did to one guideline's check (`options.checks`)."""

    rule_id: str
    action: str = Field(
        description="'written' (the first candidate was kept), 'rephrased' (a later one "
        "was), 'tested' (a stored check, tested again), 'rewritten' (a stored check no "
        "longer agreed and was replaced by new candidates, reported again below), "
        "'dropped' (no candidate agreed with the experts' cases), 'covered' (it caught "
        "nothing another check does not, and is not asked while that one is), 'none' "
        "(the model wrote no check for the rule), 'removed' (its rule is gone)."
    )
    check: str = Field(default="", description="The check's questions and consequence.")
    agreement: str = Field(default="", description="How it did on the experts' cases.")
    tried: int = Field(default=0, description="Candidate phrasings tested.")


class CalibrationReport(BaseModel):
    """What an align's calibration step graded, and the score remapping it left."""

    graded: list[str] = Field(
        default_factory=list,
        description="Feedback ids graded as unseen whose (judge, expert) scores were kept.",
    )
    past_case_shown: list[str] = Field(
        default_factory=list,
        description="Ids whose grading showed another past case: no pair kept (the "
        "calibration applies only to judgments without one).",
    )
    over_budget: list[str] = Field(
        default_factory=list,
        description="Ids not graded: `options.calibration.max_calls` was spent.",
    )
    pairs: int = Field(default=0, description="Calibration pairs stored after the align.")
    mapping: dict[str, int | float] = Field(
        default_factory=dict,
        description="Judge score -> the score judgments give instead, after the step.",
    )
    errors: list[str] = Field(
        default_factory=list, description="Gradings that failed (their cases keep no pair)."
    )
    usage: Usage = Field(
        default_factory=Usage, description="What the gradings cost (part of an align's usage)."
    )


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
    calibration: CalibrationReport | None = Field(
        default=None,
        description="The calibration step on integer scales (None when it did not run).",
    )
    checks: list[CheckReport] = Field(
        default_factory=list,
        description="Each guideline's check: written, rephrased, tested, dropped, with its "
        "agreement with the experts' cases.",
    )
    graded_first: list[str] = Field(
        default_factory=list,
        description="New feedback ids the judge graded before learning them "
        "(`align(score_first=True)`): one judgment each, counted in `usage`.",
    )
    agreement_recorded: list[str] = Field(
        default_factory=list,
        description="New feedback ids recorded in the agreement series beside the judge's "
        "verdict from before it learned them (graded first, or given as `prior_verdicts`).",
    )
    errors: list[str] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    seconds: float = 0.0

    @property
    def llm_calls(self) -> int:
        """LLM calls made."""
        return self.usage.llm_calls

    @classmethod
    def merge(cls, reports: Sequence[AlignReport]) -> AlignReport:
        """One report for successive `align` calls on one judge, given in order.

        Ids and costs add up; rejected proposals and validation checks are listed in
        call order. A guideline added by one call and removed by a
        later one (a consolidation) is in neither list. `failed` is the last
        call's: every `align` retries the feedback whose reflection failed
        before, so an item that failed in an early call and is not failed in
        the last one was retried successfully and is not failed.
        """

        def cat(name: str) -> list[str]:
            return list(dict.fromkeys(x for r in reports for x in getattr(r, name)))

        added, removed = set(cat("guidelines_added")), set(cat("guidelines_removed"))
        return cls(
            added=cat("added"),
            updated=cat("updated"),
            unchanged=cat("unchanged"),
            guidelines_added=sorted(added - removed),
            guidelines_removed=sorted(removed - added),
            guidelines_updated=sorted(set(cat("guidelines_updated")) - added - removed),
            failed=sorted(set(reports[-1].failed)) if reports else [],
            guidelines_rejected=[x for r in reports for x in r.guidelines_rejected],
            validation=[c for r in reports for c in r.validation],
            checks=[c for r in reports for c in r.checks],
            calibration=_merge_calibration([r.calibration for r in reports]),
            graded_first=cat("graded_first"),
            agreement_recorded=cat("agreement_recorded"),
            errors=[e for r in reports for e in r.errors],
            usage=Usage.sum(r.usage for r in reports),
            seconds=sum(r.seconds for r in reports),
        )

    @property
    def total_tokens(self) -> int:
        """Tokens spent on LLM calls."""
        return self.usage.total_tokens


def _merge_calibration(steps: Sequence[CalibrationReport | None]) -> CalibrationReport | None:
    """Successive calls' calibration steps as one: ids in order, the last call's state."""
    done = [c for c in steps if c is not None]
    if not done:
        return None

    def cat(name: str) -> list[str]:
        return list(dict.fromkeys(x for c in done for x in getattr(c, name)))

    graded = cat("graded")
    return CalibrationReport(
        graded=graded,
        past_case_shown=[i for i in cat("past_case_shown") if i not in graded],
        over_budget=[i for i in cat("over_budget") if i not in graded],
        pairs=done[-1].pairs,
        mapping=done[-1].mapping,
        errors=[e for c in done for e in c.errors],
        usage=Usage.sum(c.usage for c in done),
    )


class UnalignReport(BaseModel):
    """What an `unalign` call removed and re-derived, and what it cost."""

    removed: list[str] = Field(default_factory=list, description="Feedback ids removed.")
    guidelines_removed: list[str] = Field(
        default_factory=list, description="Guidelines left with no source, or no longer supported."
    )
    guidelines_rederived: list[str] = Field(
        default_factory=list, description="Guidelines re-distilled from their remaining sources."
    )
    checks: list[CheckReport] = Field(
        default_factory=list, description="Checks tested again without the removed feedback."
    )
    errors: list[str] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    seconds: float = 0.0

    @property
    def llm_calls(self) -> int:
        """LLM calls made."""
        return self.usage.llm_calls
