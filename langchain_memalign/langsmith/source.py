"""Human feedback and corrections from LangSmith, synced into a judge.

`LangSmithFeedbackSource` reads the feedback on the judge's key from a
tracing project, an experiment, or a list of runs, and turns every human
review (feedback source types "app" and "api") and every human correction of
model feedback into a `Feedback` item with the run's inputs and outputs:

```python
source = LangSmithFeedbackSource(client, project="support-bot")
report = source.sync(judge)        # incremental: only new or modified feedback
judge.align(LangSmithFeedbackSource(client, project="support-bot", key="helpfulness"))
```
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langsmith import Client
from langsmith import schemas as ls_schemas
from pydantic import BaseModel, ConfigDict, Field

from langchain_memalign.feedback import Feedback
from langchain_memalign.judge import MemAlignJudge
from langchain_memalign.langsmith._api import (
    LangSmithAPI,
    RunRecord,
    RunRef,
    as_uuid_str,
    run_id_of,
)
from langchain_memalign.langsmith._fields import (
    MISSING,
    comment_digest,
    get_path,
    read_label,
    read_text,
)
from langchain_memalign.reports import AlignReport, UnalignReport
from langchain_memalign.scale import Scale, ScaleSpec

ConflictPolicy = Literal["keep_all", "majority", "latest"]
"""How reviews that disagree on one run are resolved.

- `"keep_all"`: every review is its own episode (with its annotator);
- `"majority"`: only the reviews with the most common label are kept (a tie
  goes to the label of the latest review);
- `"latest"`: only the reviews with the label of the latest review are kept.

Under `"majority"` and `"latest"`, a human correction of model feedback
outranks plain reviews: the latest correction's label wins.
"""

STATE_PREFIX = "langsmith_sync:"
_HUMAN_SOURCE_TYPES = ("app", "api")
_STATE_VERSION = 1


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
    kind: Literal["review", "correction"] = "review"
    at: dt.datetime | None = None


class Conflict(BaseModel):
    """Reviews of one run that disagree, and how they were resolved."""

    run_id: str
    votes: list[Vote]
    resolution: Any = Field(
        default=None, description="The winning label; None when all reviews are kept."
    )
    kept: list[str] = Field(default_factory=list, description="Feedback ids kept.")


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
    seconds: float = 0.0

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


@dataclass(frozen=True)
class _Review:
    langsmith_id: str
    run_id: str
    project_id: str | None
    start_time: dt.datetime | None
    kind: Literal["review", "correction"]
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
        return _stamp(self.modified_at)

    @property
    def at(self) -> dt.datetime:
        # Naive server times are UTC; comparing them with aware ones would raise.
        t = self.modified_at or self.created_at or dt.datetime.min
        return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


class LangSmithFeedbackSource:
    """Human feedback on a judge's key in LangSmith, as `Feedback` for `align`.

    Iterating the source yields every current human review and correction
    (after conflict resolution), with the run's inputs and outputs resolved;
    `sync(judge)` aligns incrementally and remembers where it stopped.

    Args:
        client: A `langsmith.Client` (default: one configured from the environment).
        project: A tracing project's name or id.
        experiment: An experiment's name or id (reference outputs come from its
            dataset examples).
        runs: Runs (ids or `Run` objects) whose feedback to read.
        key: The feedback key; defaults to the judge's name in `sync`. Needed to
            iterate the source directly.
        scale: The judge's scale, to validate labels when iterating directly
            (`sync` uses the judge's).
        mapping: Which LangSmith fields map to label, rationale, annotator, case.
        conflicts: How disagreeing reviews of one run are resolved.
        source_types: The feedback source types that count as human reviews.
            Model feedback is the judge's own: only its human corrections count.
        corrections: Learn from human corrections of model feedback.
        unalign_deleted: Unalign feedback deleted in LangSmith since the last sync.
        batch_size: Feedback items resolved and aligned per step; a sync that fails
            keeps the steps before and resumes after them.
        sync_id: Where the sync state is kept in the judge's memory (default: from
            the key and the project or runs).
        reconcile_every: Every this many syncs, one lists all the feedback in scope
            instead of what changed, to notice feedback deleted in LangSmith (None:
            only `sync(full=True)` does).
        run_projects: The project of each of `runs` (a queue's items carry it): with
            them, syncs over runs read only what changed, as on a project.
    """

    def __init__(
        self,
        client: Client | None = None,
        *,
        project: str | uuid.UUID | None = None,
        experiment: str | uuid.UUID | None = None,
        runs: Sequence[RunRef] | None = None,
        key: str | None = None,
        scale: ScaleSpec | None = None,
        mapping: FeedbackMapping | None = None,
        conflicts: ConflictPolicy = "keep_all",
        source_types: Sequence[str] = _HUMAN_SOURCE_TYPES,
        corrections: bool = True,
        unalign_deleted: bool = True,
        batch_size: int = 50,
        sync_id: str | None = None,
        reconcile_every: int | None = 10,
        run_projects: Mapping[str, str] | None = None,
    ) -> None:
        if sum(x is not None for x in (project, experiment, runs)) != 1:
            raise ValueError("give exactly one of project, experiment or runs")
        if conflicts not in ("keep_all", "majority", "latest"):
            raise ValueError(f"conflicts must be 'keep_all', 'majority' or 'latest': {conflicts!r}")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.client = client or Client()
        self.api = LangSmithAPI.of(self.client)
        self.project = project if project is not None else experiment
        self.run_ids = None if runs is None else list(dict.fromkeys(run_id_of(r) for r in runs))
        self.key = key
        self.scale = None if scale is None else Scale.of(scale)
        self.mapping = mapping or FeedbackMapping()
        self.conflicts: ConflictPolicy = conflicts
        self.source_types = tuple(s.lower() for s in source_types)
        self.corrections = corrections
        self.unalign_deleted = unalign_deleted
        self.batch_size = batch_size
        self.sync_id = sync_id
        if reconcile_every is not None and reconcile_every < 1:
            raise ValueError("reconcile_every must be at least 1 (or None: never)")
        self.reconcile_every = reconcile_every
        self.run_projects = {
            str(r): str(p) for r, p in (run_projects or {}).items() if as_uuid_str(p)
        }
        self._reconciled = False
        self._project_id: str | None = None

    @classmethod
    def for_judge(
        cls, judge: MemAlignJudge, client: Client | None = None, **kwargs: Any
    ) -> LangSmithFeedbackSource:
        """A source on the judge's key and scale (for iterating it directly)."""
        kwargs.setdefault("key", judge.config.name)
        kwargs.setdefault("scale", judge.scale)
        return cls(client, **kwargs)

    # -- reading ---------------------------------------------------------------------------

    def _project_ids(self) -> list[str] | None:
        if self.project is None:
            return None
        if self._project_id is None:
            self._project_id = str(self.api.project(self.project).id)
        return [self._project_id]

    def _scope_id(self) -> str:
        if self.sync_id:
            return self.sync_id
        project_ids = self._project_ids()
        if project_ids:
            return f"project:{project_ids[0]}"
        digest = hashlib.sha256("\n".join(sorted(self.run_ids or [])).encode()).hexdigest()
        return f"runs:{digest[:16]}"

    def _in_scope(self) -> Callable[[str], bool]:
        if self.run_ids is None:
            return lambda run_id: True
        runs = set(self.run_ids)
        return lambda run_id: run_id in runs

    def _list(
        self,
        key: str,
        scale: Scale | None,
        *,
        run_ids: Sequence[str] | None = None,
        created_since: dt.datetime | None = None,
        stamps: dict[str, str] | None = None,
    ) -> tuple[list[_Review], dict[str, str]]:
        wanted = set(self.source_types) | ({"model"} if self.corrections else set())
        # Offset pages can overlap when feedback is added during the listing: keep one
        # copy of each record (the latest), or it would be aligned and counted twice.
        reviews: dict[str, _Review] = {}
        skipped: dict[str, str] = {}
        for fb in self.api.list_feedback(
            key=key,
            source_types=sorted(wanted),
            project_ids=self._project_ids() if run_ids is None else None,
            run_ids=self.run_ids if run_ids is None else run_ids,
            created_since=created_since,
        ):
            if stamps is not None:  # where the next incremental sync starts from
                _advance(stamps, "created", fb.created_at)
                _advance(stamps, "modified", fb.modified_at)
            review = self._review(fb, scale, skipped)
            if review is not None:
                seen = reviews.get(review.langsmith_id)
                if seen is None or review.at >= seen.at:
                    reviews[review.langsmith_id] = review
        return list(reviews.values()), skipped

    def _changed_runs(
        self, key: str, state: Mapping[str, Any], stamps: dict[str, str]
    ) -> set[str] | None:
        """The runs whose feedback on `key` changed since the last sync, or None.

        None means a full listing is needed: this is a first sync, a reconciling one,
        a sync over runs whose projects are not known, or the deployment cannot bound
        feedback by its modification time (runs read through v1).
        """
        scope: set[str] | None = None
        if self.run_ids is None:
            project_ids = self._project_ids() or []
            fresh: set[str] = set()
        else:
            # Explicit runs (a queue's archived items): their projects bound the queries;
            # runs new to the scope are read whole, whatever their feedback's age.
            if any(r not in self.run_projects for r in self.run_ids):
                return None
            scope = set(self.run_ids)
            project_ids = sorted({self.run_projects[r] for r in scope})
            fresh = scope - set(state.get("runs_seen") or [])
        created_at, modified_at = state.get("cursor_created"), state.get("cursor_modified")
        if not created_at or not modified_at or (not project_ids and not fresh):
            return None
        if state.get("fingerprint") != self._fingerprint():
            return None  # another policy or mapping: every run is resolved again
        if self.reconcile_every and state.get("incremental", 0) >= self.reconcile_every - 1:
            return None
        created = dt.datetime.fromisoformat(created_at) - _OVERLAP
        modified = dt.datetime.fromisoformat(modified_at) - _OVERLAP
        changed: set[str] = set(fresh) | set(state.get("retry_runs") or [])
        for project_id in project_ids:
            edited = self.api.runs_with_feedback_modified(project_id, key, modified)
            if edited is None:
                return None
            changed.update(edited)
        # New records: GET /feedback filters on creation time only.
        wanted = set(self.source_types) | ({"model"} if self.corrections else set())
        for fb in self.api.list_feedback(
            key=key,
            source_types=sorted(wanted),
            project_ids=project_ids,
            created_since=created,
        ):
            _advance(stamps, "created", fb.created_at)
            known = state["items"].get(str(fb.id))
            if known is not None and known.get("m") == _stamp(fb.modified_at):
                continue  # re-listed by the overlap, and unchanged since
            if fb.run_id is not None:
                changed.add(str(fb.run_id))
        return changed if scope is None else changed & scope

    def _fingerprint(self) -> str:
        settings = [
            self.conflicts,
            self.mapping.model_dump_json(),
            sorted(self.source_types),
            self.corrections,
        ]
        return hashlib.sha256(repr(settings).encode()).hexdigest()[:16]

    def _review(
        self, fb: ls_schemas.Feedback, scale: Scale | None, skipped: dict[str, str]
    ) -> _Review | None:
        record = fb.model_dump(mode="json")
        source_type = str((record.get("feedback_source") or {}).get("type") or "api").lower()
        fid = str(fb.id)
        own = get_path(record, "feedback_source.metadata.memalign_judge") is not MISSING
        if source_type == "model" or own:  # a judge's verdict: only its correction counts
            if not self.corrections or fb.correction in (None, {}, ""):
                return None  # the judge's own verdict: nothing to learn from
            kind: Literal["review", "correction"] = "correction"
        elif source_type in self.source_types:
            kind = "review"
        else:
            return None
        if fb.run_id is None:
            skipped[fid] = "feedback is not on a run"
            return None
        m = self.mapping
        label = read_label(scale, record, m.label if kind == "review" else m.correction_label)
        if label is MISSING:
            what = "correction" if kind == "correction" else "feedback"
            on = f" on the {scale.kind} scale" if scale is not None else ""
            skipped[fid] = f"{what} has no label{on} in {_fields(record, kind)}"
            return None
        if kind == "review":
            rationale = read_text(record, m.rationale)
        else:
            paths = m.correction_rationale
            own = get_path(record, "feedback_source.metadata.memalign_comment")
            if own is not MISSING and own == comment_digest(fb.comment):
                paths = tuple(p for p in paths if p != "comment")
            rationale = read_text(record, paths)
        annotator = read_text(record, m.annotator)
        return _Review(
            langsmith_id=fid,
            run_id=str(fb.run_id),
            project_id=str(fb.session_id) if fb.session_id else None,
            start_time=fb.start_time,
            kind=kind,
            source_type=source_type,
            label=label,
            rationale=rationale,
            annotator=annotator,
            created_at=fb.created_at,
            modified_at=fb.modified_at,
            record=record,
        )

    def _build(self, reviews: Sequence[_Review], skipped: dict[str, str]) -> list[Feedback]:
        hints = {r.run_id: (r.project_id, r.start_time) for r in reviews}
        runs = self.api.read_runs(hints, hints, projects=self._project_ids() or ())
        wants_example = (self.mapping.reference_outputs or "").startswith("example.")
        examples: dict[str, Any] = {}
        if wants_example:
            ex_ids = {r.reference_example_id for r in runs.values() if r.reference_example_id}
            if ex_ids:
                examples = self.api.example_outputs(ex_ids)
        items: list[Feedback] = []
        for review in reviews:
            run = runs.get(review.run_id)
            if run is None:
                skipped[review.langsmith_id] = f"run {review.run_id} was not found"
                continue
            example_outputs = examples.get(run.reference_example_id or "")
            root = {
                **review.record,
                "run": {
                    "id": run.id,
                    "name": run.name,
                    "inputs": run.inputs,
                    "outputs": run.outputs,
                    "extra": run.extra,
                },
                "example": {"outputs": example_outputs},
            }
            items.append(self._feedback(review, root, run))
        return items

    def _feedback(self, review: _Review, root: Mapping[str, Any], run: RunRecord) -> Feedback:
        m = self.mapping

        def pick(path: str | None) -> Any:
            value = MISSING if path is None else get_path(root, path)
            return None if value is MISSING else value

        return Feedback(
            id=review.feedback_id,
            inputs=pick(m.inputs),
            outputs=pick(m.outputs),
            reference_outputs=pick(m.reference_outputs),
            value=review.label,
            rationale=review.rationale,
            annotator=review.annotator,
            created_at=review.modified_at if review.kind == "correction" else review.created_at,
            metadata={
                "langsmith": {
                    "feedback_id": review.langsmith_id,
                    "run_id": review.run_id,
                    "project_id": run.project_id,
                    "kind": review.kind,
                    "source_type": review.source_type,
                }
            },
        )

    def __iter__(self) -> Iterator[Feedback]:
        """Every current human review and correction, conflict-resolved, as `Feedback`."""
        if self.key is None:
            raise ValueError(
                "iterating a LangSmithFeedbackSource needs its key: pass key=... "
                "(or use LangSmithFeedbackSource.for_judge, or source.sync(judge))"
            )
        reviews, skipped = self._list(self.key, self.scale)
        kept, _ = _resolve_conflicts(reviews, self.conflicts)
        chosen = [r for r in reviews if r.langsmith_id in kept]
        for i in range(0, len(chosen), self.batch_size):
            yield from self._build(chosen[i : i + self.batch_size], skipped)

    # -- syncing ---------------------------------------------------------------------------

    def state_key(self, judge: MemAlignJudge) -> str:
        """The meta key under which this source's sync state lives in the judge's memory."""
        return f"{STATE_PREFIX}{self.key or judge.config.name}:{self._scope_id()}"

    def sync(self, judge: MemAlignJudge, *, full: bool | None = None) -> SyncReport:
        """Align the judge on new or modified feedback; unalign deleted feedback.

        The state (each LangSmith feedback seen, its modification time and the
        `Feedback` id it became) is stored in the judge's memory, so a second
        sync with nothing new fetches no run and makes no model call. Feedback
        ids are `langsmith:<LangSmith feedback id>`: a modified review replaces
        its episode. Work is done `batch_size` items at a time and the state is
        saved after each step, so a sync that fails (the server keeps failing)
        resumes where it stopped, without duplicates.

        On a project or experiment, syncs after the first are incremental: they
        read only the runs whose feedback changed (feedback created since the last
        sync, and runs whose feedback was modified since, which the v2 run query
        can bound), each with all its reviews. Feedback deleted on other runs is
        only noticed by a full sync: the first sync of a source object (unless
        `full=False`: a process that starts for each sync, e.g. a cron job), every
        `reconcile_every`-th sync, a sync with `full=True`, one whose policy or
        mapping changed, and every sync where runs are read through v1 (no listing
        there bounds modification times).
        """
        started = time.perf_counter()
        key = self.key or judge.config.name
        if self.scale is not None and self.scale != judge.scale:
            raise ValueError(f"source scale {self.scale.kind} differs from the judge's")
        memory = judge.memory
        with judge.memory.integration_state(self.state_key(judge)) as saved:
            state: dict[str, Any] = saved.get() or {}
            if state.get("version") != _STATE_VERSION:
                state = {"version": _STATE_VERSION, "items": {}}
            entries: dict[str, dict[str, Any]] = state["items"]

            cursors: dict[str, str] = {
                k: state[f"cursor_{k}"] for k in ("created", "modified") if state.get(f"cursor_{k}")
            }
            if full is None:  # a new source reconciles once, then follows changes
                full = not self._reconciled
            changed = None if full else self._changed_runs(key, state, cursors)
            if changed is None:  # a full listing: every review in scope
                reviews, skipped = self._list(key, judge.scale, stamps=cursors)
                in_scope = self._in_scope()
            else:  # only the runs whose feedback changed, each with all its reviews
                reviews, skipped = (
                    self._list(key, judge.scale, run_ids=sorted(changed), stamps=cursors)
                    if changed
                    else ([], {})
                )
                in_scope = changed.__contains__
            kept, conflicts = _resolve_conflicts(reviews, self.conflicts)
            present = {r.langsmith_id for r in reviews} | set(skipped)
            candidate_ids = [r.feedback_id for r in reviews] + [
                e["id"] for e in entries.values() if e.get("id")
            ]
            stored = memory.stored_ids(candidate_ids)

            # 1. what is gone from LangSmith, or no longer kept, leaves the memory
            remove: list[str] = []
            for lsid, entry in list(entries.items()):
                if not in_scope(entry.get("run", "")):
                    continue
                gone = lsid not in present
                if gone and not self.unalign_deleted:
                    continue
                # Missing from a listing is not proof of deletion (a short page, offsets
                # shifted by a concurrent delete): only the server's not-found is.
                if gone and self.api.feedback_exists(lsid):
                    continue
                if gone or lsid not in kept:
                    if entry.get("id") in stored:
                        remove.append(entry["id"])
                    if gone:
                        del entries[lsid]
                    else:
                        entry["id"] = None
            unalign_report = judge.unalign(sorted(set(remove))) if remove else None
            saved.set(state)

            # 2. what is new or modified is resolved and aligned, one batch at a time
            todo = [
                r
                for r in reviews
                if r.langsmith_id in kept
                and (
                    entries.get(r.langsmith_id) != _entry(r, r.feedback_id)
                    or r.feedback_id not in stored
                )
            ]
            for r in reviews:  # dropped by the policy: remember them, aligned or not
                if r.langsmith_id not in kept:
                    entries[r.langsmith_id] = _entry(r, None)
            reports: list[AlignReport] = []
            runs_fetched = 0
            for i in range(0, len(todo), self.batch_size):
                batch = todo[i : i + self.batch_size]
                items = self._build(batch, skipped)
                runs_fetched += len({r.run_id for r in batch})
                if items:
                    reports.append(judge.align(items, raise_on_failure=False))
                built = {fb.id for fb in items}
                for r in batch:
                    if r.feedback_id in built:
                        entries[r.langsmith_id] = _entry(r, r.feedback_id)
                stamps = [e["m"] for e in entries.values() if e.get("m")]
                state["cursor"] = max(stamps) if stamps else None
                saved.set(state)
            for k, v in cursors.items():
                state[f"cursor_{k}"] = v
            state["fingerprint"] = self._fingerprint()
            # reviews whose run was not found yet (ingestion lag) are read again next time
            state["retry_runs"] = sorted(
                {r.run_id for r in todo if skipped.get(r.langsmith_id, "").endswith("not found")}
            )
            if self.run_ids is not None:
                state["runs_seen"] = sorted(set(state.get("runs_seen") or []) | set(self.run_ids))
            state["incremental"] = 0 if changed is None else state.get("incremental", 0) + 1
            self._reconciled = self._reconciled or changed is None
            saved.set(state)
            if not reports and memory.pending_ids():
                # An earlier sync stored feedback whose reflection failed: retry it now,
                # even though LangSmith has nothing new.
                reports.append(judge.align([], raise_on_failure=False))

        merged = AlignReport.merge(reports) if reports else None
        failed = set(merged.failed if merged else [])
        return SyncReport(
            listed=len(reviews),
            aligned=[
                fb
                for rep in reports
                for fb in rep.added + rep.updated + rep.unchanged
                if fb not in failed
            ],
            removed=sorted(set(remove)),
            skipped=skipped,
            conflicts=conflicts,
            runs_fetched=runs_fetched,
            align=merged,
            unalign=unalign_report,
            seconds=time.perf_counter() - started,
        )

    async def async_sync(self, judge: MemAlignJudge, *, full: bool | None = None) -> SyncReport:
        """Async twin of `sync` (runs off the event loop)."""
        return await asyncio.to_thread(self.sync, judge, full=full)

    def forget(self, judge: MemAlignJudge) -> None:
        """Drop this source's sync state (the aligned feedback stays in the memory)."""
        with judge.memory.integration_state(self.state_key(judge)) as saved:
            saved.set(None)


def _resolve_conflicts(
    reviews: Sequence[_Review], policy: ConflictPolicy
) -> tuple[set[str], list[Conflict]]:
    """The LangSmith feedback ids kept under `policy`, and the conflicts found."""
    by_run: dict[str, list[_Review]] = {}
    for r in reviews:
        by_run.setdefault(r.run_id, []).append(r)
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
                latest[(r.annotator, r.kind)] = r
        current += latest.values()
        current.sort(key=lambda r: r.at)
        labels = {_hashable(r.label) for r in current}
        if len(labels) <= 1 or policy == "keep_all":
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
                    kept=[r.feedback_id for r in current if r.langsmith_id in kept],
                )
            )
    return kept, conflicts


# How far back an incremental sync looks before its cursors: the SDK stamps feedback
# times with the writer's clock, so records can arrive slightly out of order.
_OVERLAP = dt.timedelta(minutes=10)


def _stamp(at: dt.datetime | None) -> str:
    return at.isoformat() if at else ""


def _advance(stamps: dict[str, str], name: str, at: dt.datetime | None) -> None:
    if at is None:
        return
    at = at if at.tzinfo else at.replace(tzinfo=dt.UTC)
    current = stamps.get(name)
    if current is None or at > dt.datetime.fromisoformat(current):
        stamps[name] = at.isoformat()


def _entry(review: _Review, feedback_id: str | None) -> dict[str, Any]:
    return {"m": review.stamp, "id": feedback_id, "run": review.run_id}


def _hashable(label: Any) -> Any:
    return (type(label).__name__, label) if isinstance(label, bool) else label


def _fields(record: Mapping[str, Any], kind: str) -> str:
    if kind == "correction":
        return f"correction={record.get('correction')!r}"
    return f"score={record.get('score')!r}, value={record.get('value')!r}"
