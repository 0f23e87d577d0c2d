"""The mapping, conflict and report types of a LangSmith feedback source.

`FeedbackMapping` says which LangSmith fields become which parts of a
`Feedback`; `ConflictPolicy`, `Vote` and `Conflict` describe how reviews of
one run that disagree are resolved, and `_resolve_conflicts` applies a
policy; `SyncReport` is what a sync did, and `ReviewAgreement` a review it
scored the judge's earlier verdict with. `_Review` is one human review or
correction as read from LangSmith, before its run is fetched.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from langchain_memalign.reports import AlignReport, UnalignReport

VERDICT_SOURCE_TYPES = frozenset({"model", "auto_eval"})
"""Feedback source types of a judge's verdicts: its own (`model`, as `write_verdicts`
writes them) and an online evaluator's (`auto_eval`, as LangSmith writes them, e.g. the
judge exported with `to_langsmith_evaluator`). Only a human correction of one counts."""

ConflictPolicy = Literal["keep_all", "majority", "latest"]
"""How reviews that disagree on one run are resolved.

- `"keep_all"`: every review is its own episode (with its annotator);
- `"majority"`: only the reviews with the most common label are kept (a tie
  goes to the label of the latest review);
- `"latest"`: only the reviews with the label of the latest review are kept.

Under `"majority"` and `"latest"`, a human correction of model feedback
outranks plain reviews: the latest correction's label wins.
"""


class FeedbackMapping(BaseModel):
    """Which LangSmith fields become which parts of a `Feedback`.

    Every entry is a dotted path into one record: the LangSmith feedback's
    fields (`score`, `value`, `comment`, `correction`, `feedback_source`,
    `extra`...), plus `run` (the run: `inputs`, `outputs`, `name`, `extra`)
    and `example` (the dataset example of an experiment run: `inputs`,
    `outputs`). Where several paths are given, the first one present (and,
    for labels, valid on the judge's scale) wins.
    """

    model_config = ConfigDict(frozen=True)

    label: tuple[str, ...] = Field(default=("value", "score"), description="The reviewer's label.")
    rationale: tuple[str, ...] = Field(
        default=("comment",), description="Why the reviewer gave the label."
    )
    correction_label: tuple[str, ...] = Field(
        default=("correction.value", "correction.score", "correction"),
        description="The corrected label on corrected model feedback.",
    )
    correction_rationale: tuple[str, ...] = Field(
        default=(
            "correction.explanation",
            "correction.rationale",
            "correction.comment",
            "comment",
        ),
        description="Why the model feedback was corrected. A `comment` that is still the "
        "judge's own (unedited) rationale is never used.",
    )
    annotator: tuple[str, ...] = Field(
        default=(
            "feedback_source.metadata.annotator",
            "feedback_source.user_name",
            "feedback_source.user_id",
        ),
        description="Who gave the feedback. LangSmith stamps `feedback_source.user_id` "
        "(and its `user_name`) from the API key that wrote the feedback, so reviews a "
        "labelling tool writes for several people through one key share them: the "
        "annotator the writer names in `source_info={'annotator': ...}` comes first, then "
        "the reviewer's user name, then their user id.",
    )
    inputs: str = Field(default="run.inputs", description="The judged case's inputs.")
    outputs: str = Field(default="run.outputs", description="The judged output.")
    reference_outputs: str | None = Field(
        default="example.outputs", description="Reference outputs (experiments); None: none."
    )


class Vote(BaseModel):
    """One review in a conflict."""

    feedback_id: str = Field(description="The `Feedback` id (`langsmith:<feedback id>`).")
    annotator: str | None = None
    label: Any = None
    kind: Literal["review", "correction", "final"] = Field(
        default="review",
        description='"final": the team\'s final answer, when no review gave it.',
    )
    at: dt.datetime | None = None


class Conflict(BaseModel):
    """Reviews of one run that disagree, and how they were resolved."""

    run_id: str
    votes: list[Vote]
    resolution: Any = Field(
        default=None, description="The winning label; None when all reviews are kept."
    )
    kept: list[str] = Field(default_factory=list, description="Feedback ids kept.")


class ReviewAgreement(BaseModel):
    """A review, and the judge's verdict on the same run written before it learned from it."""

    run_id: str
    feedback_id: str
    judge: Any
    expert: Any
    agrees: bool
    project_id: str | None = Field(
        default=None, description="The run's project (or experiment), where its agreement goes."
    )


def share_agreed(agreement: Sequence[ReviewAgreement]) -> float | None:
    """The share of `agreement` the judge had agreed with; None if no review was scored."""
    if not agreement:
        return None
    return sum(a.agrees for a in agreement) / len(agreement)


class SyncReport(BaseModel):
    """What a sync read from LangSmith and changed in the judge's memory."""

    listed: int = Field(default=0, description="Human reviews and corrections found.")
    aligned: list[str] = Field(
        default_factory=list,
        description="Feedback ids aligned because new or modified (those whose reflection "
        "failed are in `failed` instead).",
    )
    removed: list[str] = Field(
        default_factory=list,
        description="Feedback ids unaligned: deleted in LangSmith, or dropped by the "
        "conflict policy.",
    )
    skipped: dict[str, str] = Field(
        default_factory=dict, description="LangSmith feedback ids not used, with the reason."
    )
    conflicts: list[Conflict] = Field(default_factory=list)
    runs_fetched: int = 0
    align: AlignReport | None = None
    unalign: UnalignReport | None = None
    agreement: list[ReviewAgreement] = Field(
        default_factory=list,
        description="Each review learned for the first time whose run carried the judge's "
        "verdict, beside that verdict (read from LangSmith before learning the review).",
    )
    agreement_feedback_ids: dict[str, str | None] = Field(
        default_factory=dict,
        description="The record of `agreement` written to LangSmith (feedback key "
        "`<judge name>_agreement`), by the id of the project or experiment it is on: the "
        "source's, or for runs (a queue's) each project they are in. None where LangSmith "
        "refused it (a warning is logged; the judge's memory keeps the agreement). Empty "
        "when there was nothing to record or `log_agreement` is off.",
    )
    seconds: float = 0.0

    @property
    def accuracy(self) -> float | None:
        """The share of `agreement` the judge had agreed with, if any review was scored."""
        return share_agreed(self.agreement)

    @property
    def added(self) -> list[str]:
        """Feedback ids stored for the first time."""
        return self.align.added if self.align else []

    @property
    def updated(self) -> list[str]:
        """Feedback ids whose label, rationale or case changed."""
        return self.align.updated if self.align else []

    @property
    def failed(self) -> list[str]:
        """Feedback ids stored but not yet distilled (reflection failed; retried next sync)."""
        return self.align.failed if self.align else []


FINAL_PREFIX = "final:"
"""The id prefix of a team's final answer read as a review (`final:<run id>`)."""


@dataclass(frozen=True)
class _Review:
    langsmith_id: str
    run_id: str
    project_id: str | None
    start_time: dt.datetime | None
    kind: Literal["review", "correction", "final"]
    source_type: str
    label: Any
    rationale: str | None
    annotator: str | None
    created_at: dt.datetime | None
    modified_at: dt.datetime | None
    record: dict[str, Any]

    @property
    def feedback_id(self) -> str:
        return f"langsmith:{self.langsmith_id}"

    @property
    def stamp(self) -> str:
        if self.kind == "final":
            # A final answer has no record, nor modification time: its label is what
            # changes (a lead changing the final), and a change must be learned again.
            return f"{FINAL_PREFIX}{self.label!r}"
        return _stamp(self.modified_at)

    @property
    def at(self) -> dt.datetime:
        # Naive server times are UTC; comparing them with aware ones would raise.
        t = self.modified_at or self.created_at or dt.datetime.min
        return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


UNRESOLVED: Any = object()
"""A run's reviewers disagree and the team has not set the final answer yet."""

_NO_FINAL: Any = object()


def _resolve_conflicts(
    reviews: Sequence[_Review],
    policy: ConflictPolicy,
    finals: Mapping[str, Any] | None = None,
    replaced: dict[str, str] | None = None,
) -> tuple[set[str], list[Conflict]]:
    """The LangSmith feedback ids kept under `policy`, and the conflicts found.

    `finals` holds, by run, the final answer a review team set on a disputed key: only
    the reviews giving it are kept, whatever the policy; when none gave it, the team's
    answer itself (a review of kind "final" among `reviews`) is kept. A run whose dispute is
    `UNRESOLVED` keeps none of its reviews until the team decides. Reviews a later one of
    the same annotator replaced are added to `replaced`, with the reason.
    """
    finals = finals or {}
    by_run: dict[str, list[_Review]] = {}
    team: dict[str, _Review] = {}
    for r in reviews:
        if r.kind == "final":
            team[r.run_id] = r
        else:
            by_run.setdefault(r.run_id, []).append(r)
    for run_id in team:
        by_run.setdefault(run_id, [])
    kept: set[str] = set()
    conflicts: list[Conflict] = []
    for run_id, group in by_run.items():
        # One annotator's later review of a run replaces their earlier one.
        latest: dict[tuple[str, str], _Review] = {}
        current: list[_Review] = []
        for r in sorted(group, key=lambda r: r.at):
            if r.annotator is None:
                current.append(r)
            else:
                earlier = latest.get((r.annotator, r.kind))
                if earlier is not None and replaced is not None:
                    # Said, not silent: reviews posted by a script under one API key all
                    # carry that key's user, and only the latest of them counts.
                    replaced[earlier.langsmith_id] = (
                        f"replaced by a later {r.kind} of {r.annotator!r} on the same run "
                        f"({r.langsmith_id})"
                    )
                latest[(r.annotator, r.kind)] = r
        current += latest.values()
        current.sort(key=lambda r: r.at)
        labels = {_hashable(r.label) for r in current}
        final = finals.get(run_id, _NO_FINAL)
        if final is UNRESOLVED:
            resolution = None
        elif final is not _NO_FINAL:
            resolution = final
            gave = {r.langsmith_id for r in current if _hashable(r.label) == _hashable(final)}
            own = team.get(run_id)
            if not gave and own is not None and _hashable(own.label) == _hashable(final):
                # A lead's own answer, which no reviewer gave (3 between reviews of 2 and
                # 5): the team's answer is learned as such, or the run would teach nothing.
                gave = {own.langsmith_id}
            kept.update(gave)
        elif len(labels) <= 1 or policy == "keep_all":
            kept.update(r.langsmith_id for r in current)
            resolution = None
        else:
            corrections = [r for r in current if r.kind == "correction"]
            if corrections:
                resolution = corrections[-1].label
            elif policy == "latest":
                resolution = current[-1].label
            else:
                counts = Counter(_hashable(r.label) for r in current)
                top = max(counts.values())
                resolution = next(
                    r.label for r in reversed(current) if counts[_hashable(r.label)] == top
                )
            kept.update(
                r.langsmith_id for r in current if _hashable(r.label) == _hashable(resolution)
            )
        if len(labels) > 1:
            conflicts.append(
                Conflict(
                    run_id=run_id,
                    votes=[
                        Vote(
                            feedback_id=r.feedback_id,
                            annotator=r.annotator,
                            label=r.label,
                            kind=r.kind,
                            at=r.modified_at,
                        )
                        for r in current
                    ],
                    resolution=resolution,
                    kept=[r.feedback_id for r in current if r.langsmith_id in kept]
                    + [t.feedback_id for t in [team.get(run_id)] if t and t.langsmith_id in kept],
                )
            )
    return kept, conflicts


def _stamp(at: dt.datetime | None) -> str:
    return at.isoformat() if at else ""


def _hashable(label: Any) -> Any:
    return (type(label).__name__, label) if isinstance(label, bool) else label
