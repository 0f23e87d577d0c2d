"""The state of the align and unalign graphs, and what one reflection task takes and gives.

Kept apart from the nodes so that every step module (`classify`, `reflect`, `merge`,
...) reads the same types without importing the graph.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Annotated, Any, TypedDict

from langchain_memalign.feedback import Feedback
from langchain_memalign.memory.semantic import Proposal
from langchain_memalign.reports import (
    CalibrationReport,
    CheckReport,
    GuidelineCheck,
    RejectedGuideline,
    Usage,
)


@dataclass
class ReflectionResult:
    """The outcome of reflecting on one batch."""

    batch_ids: list[str]
    proposals: list[Proposal] = field(default_factory=list)
    error: str | None = None
    # The batch and the contrast cases the prompt showed: a remark copied from any of
    # them is a copy, whichever sources the model cited.
    shown_ids: list[str] = field(default_factory=list)


class AlignState(TypedDict, total=False):
    """State of one alignment."""

    # The call's feedback (validated), and its ids as `classify` sorted them.
    feedback: list[Feedback]
    # The judge's verdicts on some of the cases from before it learned them, by feedback
    # id: (verdict, where it came from). `merge` records them in the agreement series.
    prior_verdicts: dict[str, tuple[Any, str]]
    # The feedback ids whose review `merge` added to the agreement series.
    recorded: list[str]
    added: list[str]
    updated: list[str]
    retagged: list[str]
    unchanged: list[str]
    # The new and changed items: stored and learned from by this align.
    to_store: list[Feedback]
    # The feedback reflected on in this align (new, changed and pending items with a
    # rationale), and the batches (or contrast pairs) it is reflected in.
    to_reflect: list[Feedback]
    batches: list[list[Feedback]]
    # Case vectors already computed for this align, by feedback id: (text hash, vector).
    case_vectors: dict[str, tuple[str, Any]]
    reflections: Annotated[list[ReflectionResult], operator.add]
    usages: Annotated[list[Usage], operator.add]
    failed: Annotated[list[str], operator.add]
    errors: Annotated[list[str], operator.add]
    new_guidelines: list[str]
    rejected: Annotated[list[RejectedGuideline], operator.add]
    validation: list[GuidelineCheck]
    calibration: CalibrationReport
    check_reports: list[CheckReport]


class ReflectInput(TypedDict, total=False):
    """Input of one `reflect` task."""

    batch: list[Feedback]
    # The feedback this task reflects on; the rest of the batch (a stored contrast
    # partner) is shown, not reflected (default: the whole batch).
    reflecting: list[str]


class UnalignState(TypedDict, total=False):
    """State of one unalign: the feedback ids removed, then what became of the guidelines."""

    ids: list[str]
    removed: list[str]
    rederived: list[str]
    check_reports: list[CheckReport]
    errors: list[str]
    usage: Usage
