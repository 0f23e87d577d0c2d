"""Reading human reviews from LangSmith for a feedback source.

`_SourceReader` is the reading half of `LangSmithFeedbackSource`: it lists
the feedback on a key in the source's scope (a project, an experiment or
runs), finds the runs whose feedback changed since the last sync, turns
each LangSmith record into a `_Review` (or says why it was skipped), and
builds `Feedback` items from reviews and their runs. Iterating a source
yields those items, conflict-resolved.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

from langsmith import schemas as ls_schemas

from langchain_memalign.feedback import Feedback
from langchain_memalign.langsmith._api import LangSmithAPI, RunRecord
from langchain_memalign.langsmith._fields import (
    MISSING,
    comment_digest,
    get_path,
    read_label,
    read_text,
)
from langchain_memalign.langsmith._source_types import (
    FINAL_PREFIX,
    UNRESOLVED,
    VERDICT_SOURCE_TYPES,
    ConflictPolicy,
    FeedbackMapping,
    _resolve_conflicts,
    _Review,
    _stamp,
)
from langchain_memalign.scale import Scale

# How far back an incremental sync looks before its cursors: the SDK stamps feedback
# times with the writer's clock, so records can arrive slightly out of order.
_OVERLAP = dt.timedelta(minutes=10)


def _advance(stamps: dict[str, str], name: str, at: dt.datetime | None) -> None:
    if at is None:
        return
    at = at if at.tzinfo else at.replace(tzinfo=dt.UTC)
    current = stamps.get(name)
    if current is None or at > dt.datetime.fromisoformat(current):
        stamps[name] = at.isoformat()


def _fields(record: Mapping[str, Any], kind: str) -> str:
    if kind == "correction":
        return f"correction={record.get('correction')!r}"
    return f"score={record.get('score')!r}, value={record.get('value')!r}"


class _SourceReader:
    """Listing reviews and building `Feedback` from them (see `LangSmithFeedbackSource`)."""

    # Set by `LangSmithFeedbackSource.__init__`.
    api: LangSmithAPI
    project: str | uuid.UUID | None
    run_ids: list[str] | None
    key: str | None
    scale: Scale | None
    mapping: FeedbackMapping
    conflicts: ConflictPolicy
    source_types: tuple[str, ...]
    corrections: bool
    batch_size: int
    sync_id: str | None
    reconcile_every: int | None
    run_projects: dict[str, str]
    run_finals: dict[str, Any]
    _session: ls_schemas.TracerSession | None

    # -- reading ---------------------------------------------------------------------------

    def _project_session(self) -> ls_schemas.TracerSession | None:
        """The project or experiment read from (read once), or None for runs."""
        if self.project is None:
            return None
        if self._session is None:
            self._session = self.api.project(self.project)
        return self._session

    def _project_ids(self) -> list[str] | None:
        session = self._project_session()
        return None if session is None else [str(session.id)]

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
        verdicts: dict[str, tuple[str, Any]] | None = None,
    ) -> tuple[list[_Review], dict[str, str]]:
        """The reviews on `key` in scope (or on `run_ids`), and why others were skipped.

        `verdicts`, when given, gains the judge's own verdict on each listed run
        (model feedback, read while listing: `(created_at, label)`, the latest per
        run); only listings that include model feedback (`corrections`) see them.
        """
        wanted = set(self.source_types) | (VERDICT_SOURCE_TYPES if self.corrections else set())
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
            if verdicts is not None:
                _keep_verdict(verdicts, fb, scale)
            review = self._review(fb, scale, skipped)
            if review is not None:
                seen = reviews.get(review.langsmith_id)
                if seen is None or review.at >= seen.at:
                    reviews[review.langsmith_id] = review
        return [*reviews.values(), *self._finals(run_ids)], skipped

    def _finals(self, run_ids: Sequence[str] | None) -> list[_Review]:
        """The team's final answers on the runs listed, each as a review of kind "final".

        Conflict resolution keeps one only where no reviewer gave the final answer (a
        lead's own answer); it then teaches the judge as the team's review of the run.
        """
        scope = self._in_scope() if run_ids is None else set(run_ids).__contains__
        return [
            _Review(
                langsmith_id=f"{FINAL_PREFIX}{run_id}",
                run_id=run_id,
                project_id=self.run_projects.get(run_id),
                start_time=None,
                kind="final",
                source_type="final",
                label=label,
                rationale=None,  # the final answer carries none
                annotator=None,
                created_at=None,
                modified_at=None,
                record={},
            )
            for run_id, label in sorted(self.run_finals.items())
            if label is not UNRESOLVED and scope(run_id)
        ]

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
        wanted = set(self.source_types) | (VERDICT_SOURCE_TYPES if self.corrections else set())
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
        if source_type in VERDICT_SOURCE_TYPES or own:  # a verdict: only its correction counts
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
        kept, _ = _resolve_conflicts(reviews, self.conflicts, self.run_finals)
        chosen = [r for r in reviews if r.langsmith_id in kept]
        for i in range(0, len(chosen), self.batch_size):
            yield from self._build(chosen[i : i + self.batch_size], skipped)


def _keep_verdict(
    verdicts: dict[str, tuple[str, Any]], fb: ls_schemas.Feedback, scale: Scale | None
) -> None:
    """Keep `fb` in `verdicts` if it is a judge's verdict on its run, newer than the kept one.

    The verdict as written: a reviewer's correction of it is a review, not the verdict.
    """
    record = fb.model_dump(mode="json")
    source_type = str((record.get("feedback_source") or {}).get("type") or "").lower()
    if source_type not in VERDICT_SOURCE_TYPES or fb.run_id is None:
        return
    label = read_label(scale, record, ("value", "score"))
    run_id, stamp = str(fb.run_id), str(fb.created_at or "")
    if label is not MISSING and (run_id not in verdicts or stamp >= verdicts[run_id][0]):
        verdicts[run_id] = (stamp, label)
