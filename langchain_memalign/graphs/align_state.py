"""The state of the align and unalign graphs, by step, and what one reflection task takes and gives.

`AlignState` is the union of what each step writes (`Classified`, `Batched`, ...); each
step's signature names the groups it reads and the one it writes. Kept apart from the
steps so that every step module (`classify`, `reflect`, `merge`, ...) reads the same
types without importing the graph.
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


# Each group below is what one step writes (the steps read the groups named in their
# signatures); `AlignState`, the graph's state, is their union. Keys with a reducer
# (`operator.add`) are appended to by every step or task that writes them; the others
# are written by one step only.


class Costs(TypedDict, total=False):
    """What any step adds: the calls it made, and the errors it absorbed (to the report)."""

    usages: Annotated[list[Usage], operator.add]
    errors: Annotated[list[str], operator.add]


class AlignInput(TypedDict, total=False):
    """The graph's input (`alignment.AlignmentRun`); read by `classify` and `merge`."""

    # The call's feedback, validated (`MemAlignJudge.align`).
    feedback: list[Feedback]
    # The judge's verdicts on some of the cases from before it learned them, by feedback
    # id: (verdict, where it came from). `merge` records them in the agreement series.
    prior_verdicts: dict[str, tuple[Any, str]]


class Classified(TypedDict, total=False):
    """Written by `classify`: the feedback's ids as sorted, and what this align stores.

    Read by `forget` (`updated`), `batch` and `calibrate` (`to_store`), `merge` and `checks`.
    """

    added: list[str]
    updated: list[str]
    retagged: list[str]
    unchanged: list[str]
    # The new and changed items: stored and learned from by this align.
    to_store: list[Feedback]


class Batched(Costs, total=False):
    """Written by `batch`; read by `route_batches`, and by `merge` (`case_vectors`)."""

    # The feedback reflected on in this align (new, changed and pending items with a
    # rationale), and the batches (or contrast pairs) it is reflected in.
    to_reflect: list[Feedback]
    batches: list[list[Feedback]]
    # Case vectors already computed for this align, by feedback id: (text hash, vector).
    case_vectors: dict[str, tuple[str, Any]]


class Reflected(Costs, total=False):
    """Appended to by each `reflect` task; read by `merge` and `checks`."""

    reflections: Annotated[list[ReflectionResult], operator.add]
    failed: Annotated[list[str], operator.add]


class Merged(Costs, total=False):
    """Written by `merge`; `validate` reads `new_guidelines`."""

    # The feedback ids whose review `merge` added to the agreement series.
    recorded: list[str]
    new_guidelines: list[str]
    rejected: Annotated[list[RejectedGuideline], operator.add]


class Validated(Costs, total=False):
    """Written by `validate`."""

    validation: list[GuidelineCheck]


class Calibrated(Costs, total=False):
    """Written by `calibrate`."""

    calibration: CalibrationReport


class ChecksLearned(Costs, total=False):
    """Written by `checks`."""

    check_reports: list[CheckReport]


class MergeInput(AlignInput, Classified, Batched, Reflected, total=False):
    """What `merge` reads: the input, the sorted feedback, its case vectors and reflections."""


class ChecksInput(Classified, Reflected, total=False):
    """What `checks` reads: whether this align changed the memory."""


class AlignState(
    AlignInput, Classified, Batched, Reflected, Merged, Validated, Calibrated, ChecksLearned,
    total=False,
):  # fmt: skip
    """State of one alignment: every step's keys, grouped by the step that writes them."""


class ReflectInput(TypedDict, total=False):
    """Input of one `reflect` task."""

    batch: list[Feedback]
    # The feedback this task reflects on; the rest of the batch (a stored contrast
    # partner) is shown, not reflected (default: the whole batch).
    reflecting: list[str]


class UnalignState(TypedDict, total=False):
    """State of one unalign: the feedback ids removed, then what became of the guidelines.

    The input is `ids`; `forget` writes the rest, `checks` its reports and adds to
    `usage` and `errors`.
    """

    ids: list[str]
    removed: list[str]
    rederived: list[str]
    check_reports: list[CheckReport]
    errors: list[str]
    usage: Usage
