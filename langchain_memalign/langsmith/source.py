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

Each sync also scores the judge on the new reviews (its verdict on each run, written
before it learned the review) and, unless `log_agreement=False`, writes that agreement
back to LangSmith as feedback on the project (`_agreement_log`).

This module holds `LangSmithFeedbackSource` and its sync; the types it
reports and is configured with live in `_source_types` and the reading of
reviews in `_source_reading`, and are importable from here.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from langsmith import Client
from langsmith import schemas as ls_schemas
from langsmith import utils as ls_utils

from langchain_memalign.feedback import Feedback
from langchain_memalign.judge import MemAlignJudge
from langchain_memalign.langsmith import _api_base
from langchain_memalign.langsmith._agreement_log import review_agreements, write_agreement
from langchain_memalign.langsmith._api import LangSmithAPI, RunRef, as_uuid_str, run_id_of
from langchain_memalign.langsmith._source_reading import _keep_verdict, _SourceReader
from langchain_memalign.langsmith._source_types import (
    FINAL_PREFIX,
    Conflict,
    ConflictPolicy,
    FeedbackMapping,
    ReviewAgreement,
    SyncReport,
    Vote,
    _resolve_conflicts,
    _Review,
)
from langchain_memalign.reports import AlignReport
from langchain_memalign.scale import Scale, ScaleSpec

__all__ = [
    "Conflict",
    "ConflictPolicy",
    "FeedbackMapping",
    "LangSmithFeedbackSource",
    "SyncReport",
    "Vote",
]

STATE_PREFIX = "langsmith_sync:"
_HUMAN_SOURCE_TYPES = ("app", "api")
_STATE_VERSION = 1


class LangSmithFeedbackSource(_SourceReader):
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
        log_agreement: Write each sync's agreement with the reviews it scored (the
            judge's verdict on each run beside its new review, before learning it) as
            project-level feedback, key `<judge name>_agreement`: on the project or
            experiment, or for `runs` on each project they are in
            (`SyncReport.agreement_feedback_ids`); on by default.
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
        log_agreement: bool = True,
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
        self.log_agreement = log_agreement
        # The final answers a review team set on disputed runs (a queue fills this in).
        self.run_finals: dict[str, Any] = {}
        self._reconciled = False
        self._session: ls_schemas.TracerSession | None = None

    @classmethod
    def for_judge(
        cls, judge: MemAlignJudge, client: Client | None = None, **kwargs: Any
    ) -> LangSmithFeedbackSource:
        """A source on the judge's key and scale (for iterating it directly)."""
        kwargs.setdefault("key", judge.config.name)
        kwargs.setdefault("scale", judge.scale)
        return cls(client, **kwargs)

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
        resumes where it stopped, without duplicates. A rate limit that outlasts the
        client's own retries pauses for the service's window and resumes, twice at most.

        On a project or experiment, syncs after the first are incremental: they
        read only the runs whose feedback changed (feedback created since the last
        sync, and runs whose feedback was modified since, which the v2 run query
        can bound), each with all its reviews. Feedback deleted on other runs is
        only noticed by a full sync: the first sync of a source object (unless
        `full=False`: a process that starts for each sync, e.g. a cron job), every
        `reconcile_every`-th sync, a sync with `full=True`, one whose policy or
        mapping changed, and every sync where runs are read through v1 (no listing
        there bounds modification times).

        Each new review on a run that carries the judge's verdict scores the judge: the
        verdict goes into the judge's agreement series beside the review before it is
        learned (`MemAlignJudge.agreement_history`), and into the report's `agreement`.
        With `log_agreement` (the default) the sync then writes them to LangSmith as one
        feedback record per project (`agreement_feedback_ids`), best effort: a record
        LangSmith refuses is logged and reported as missing, and the align stands.
        """
        for attempt in range(_api_base.RATE_LIMIT_RETRIES + 1):
            try:
                return self._sync_once(judge, full=full)
            except ls_utils.LangSmithRateLimitError:
                if attempt == _api_base.RATE_LIMIT_RETRIES:
                    raise
                time.sleep(_api_base.RATE_LIMIT_PAUSE)
        raise AssertionError("unreachable")

    def _sync_once(self, judge: MemAlignJudge, *, full: bool | None) -> SyncReport:
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
            # The judge's verdicts on the listed runs, for the agreement series.
            verdicts: dict[str, tuple[str, Any]] = {}
            if changed is None:  # a full listing: every review in scope
                reviews, skipped = self._list(key, judge.scale, stamps=cursors, verdicts=verdicts)
                in_scope = self._in_scope()
            else:  # only the runs whose feedback changed, each with all its reviews
                reviews, skipped = (
                    self._list(
                        key,
                        judge.scale,
                        run_ids=sorted(changed),
                        stamps=cursors,
                        verdicts=verdicts,
                    )
                    if changed
                    else ([], {})
                )
                in_scope = changed.__contains__
            kept, conflicts = _resolve_conflicts(
                reviews, self.conflicts, self.run_finals, replaced=skipped
            )
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
                if (
                    gone
                    and not lsid.startswith(FINAL_PREFIX)  # a final answer has no record
                    and self.api.feedback_exists(lsid)
                ):
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
                    earlier = self._earlier_verdicts(judge, key, items, verdicts)
                    # The verdicts are recorded as read from LangSmith (`prior_source`).
                    reports.append(
                        judge.align(
                            items,
                            raise_on_failure=False,
                            prior_verdicts=earlier,
                            prior_source="langsmith",
                        )
                    )
                built = {fb.id for fb in items}
                for r in batch:
                    if r.feedback_id in built:
                        entries[r.langsmith_id] = _entry(r, r.feedback_id)
                stamps = [
                    e["m"]
                    for e in entries.values()
                    if e.get("m") and not e["m"].startswith(FINAL_PREFIX)
                ]
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
        # Outside the state's transaction, after it is saved: the record never holds back,
        # nor undoes, the align.
        agreement = review_agreements(judge, merged.agreement_recorded) if merged else []
        report = SyncReport(
            listed=sum(r.kind != "final" for r in reviews),
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
            agreement=agreement,
        )
        if self.log_agreement:
            report.agreement_feedback_ids = self._write_agreement(judge, agreement)
        report.seconds = time.perf_counter() - started
        return report

    def _write_agreement(
        self, judge: MemAlignJudge, agreement: list[ReviewAgreement]
    ) -> dict[str, str | None]:
        """The sync's agreement record on its project, or one on each project of its runs.

        A source over runs (a queue's) has no project of its own, and LangSmith has no
        feedback on a queue: each project gets the agreement on its own runs, beside
        the judge's verdicts on them, where that project's team looks.
        """
        if not agreement:
            return {}
        session = self._project_session()
        if session is not None:
            return {str(session.id): write_agreement(self.api, judge, session, agreement)}
        groups: dict[str, list[ReviewAgreement]] = {}
        for a in agreement:
            if a.project_id is not None:  # else a run read without its project: no place
                groups.setdefault(a.project_id, []).append(a)
        return {p: write_agreement(self.api, judge, p, group) for p, group in groups.items()}

    def _earlier_verdicts(
        self,
        judge: MemAlignJudge,
        key: str,
        items: list[Feedback],
        listed: dict[str, tuple[str, Any]],
    ) -> dict[str, Any]:
        """The verdicts the judge wrote on the runs of new items, by feedback id.

        Each review new to the memory is a test of the judge: its verdict on the run
        (model feedback on its key, written when it judged the run, before it
        learned this review) goes into the agreement series beside the review
        (`MemAlignJudge.agreement_history`). No judge call: the listing read them
        (`listed`) when it reads model feedback (`corrections`, the default), else
        one listing per batch does. The latest verdict of a run counts.
        """
        stored = judge.memory.stored_ids(fb.id for fb in items)
        runs: dict[str, str] = {}
        for fb in items:
            run_id = ((fb.metadata or {}).get("langsmith") or {}).get("run_id")
            if fb.id not in stored and run_id:
                runs[fb.id] = str(run_id)
        if not runs:
            return {}
        verdicts = listed
        if not self.corrections:  # the listing left model feedback out
            verdicts = {}
            for record in self.api.list_feedback(
                key=key, source_types=["model"], run_ids=sorted(set(runs.values()))
            ):
                _keep_verdict(verdicts, record, judge.scale)
        return {fid: verdicts[run][1] for fid, run in runs.items() if run in verdicts}

    async def async_sync(self, judge: MemAlignJudge, *, full: bool | None = None) -> SyncReport:
        """Async twin of `sync` (runs off the event loop)."""
        return await asyncio.to_thread(self.sync, judge, full=full)

    def forget(self, judge: MemAlignJudge) -> None:
        """Drop this source's sync state (the aligned feedback stays in the memory)."""
        with judge.memory.integration_state(self.state_key(judge)) as saved:
            saved.set(None)


def _entry(review: _Review, feedback_id: str | None) -> dict[str, Any]:
    return {"m": review.stamp, "id": feedback_id, "run": review.run_id}
