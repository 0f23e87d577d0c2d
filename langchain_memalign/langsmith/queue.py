"""A LangSmith annotation queue that feeds a judge: send runs, pull reviews, align.

```python
queue = JudgeAnnotationQueue(judge, client)       # created, or reused by name
report = queue.cycle(project="support-bot", select="uncertain", limit=10)
report.pulled.added      # reviews completed since the last cycle, now aligned
report.sent.run_ids      # the runs the judge is least sure about, now in the queue
```

The queue's rubric item is the judge's key, with a feedback config matching
the judge's scale (categories for pass/fail, categorical and pairwise scales;
a bounded continuous score for numeric ones).
"""

from __future__ import annotations

import asyncio
import random
import threading
import uuid
from collections.abc import Sequence
from typing import Any, Literal, cast

from langsmith import Client
from langsmith import schemas as ls_schemas
from pydantic import BaseModel, Field

from langchain_memalign.errors import FeedbackConfigMismatchError
from langchain_memalign.judge import MemAlignJudge
from langchain_memalign.langsmith._api import (
    CompletedItems,
    LangSmithAPI,
    RunRecord,
    RunRef,
    run_id_of,
)
from langchain_memalign.langsmith._fields import (
    MISSING,
    describe_config,
    distance,
    feedback_config,
    read_label,
    same_config,
    score_fields,
)
from langchain_memalign.langsmith._source_types import UNRESOLVED
from langchain_memalign.langsmith._verdicts import (
    Verdict,
    _candidates,
    _judge_each,
    _judgeable,
    _write_verdict,
)
from langchain_memalign.langsmith.source import (
    ConflictPolicy,
    FeedbackMapping,
    LangSmithFeedbackSource,
    SyncReport,
)
from langchain_memalign.scale import Scale

Selection = Literal["all", "sample", "uncertain", "disagreement"]
"""Which runs `send` puts in the queue.

- `"all"`: every candidate (up to `limit`), in the order given, or a project's
  newest first;
- `"sample"`: a random sample of `limit` candidates;
- `"uncertain"`: the candidates the judge is least sure about (its verdict
  disagrees most with the expert labels of the most similar past cases);
- `"disagreement"`: the candidates where the judge's verdict disagrees with
  other feedback on the run (the `signal_keys`, e.g. user thumbs or another
  evaluator), most disagreeing first.
"""


class SendReport(BaseModel):
    """What `send` put in the queue, and why."""

    queue_id: str
    run_ids: list[str] = Field(default_factory=list, description="Runs added to the queue.")
    considered: int = Field(default=0, description="Candidates not queued nor reviewed yet.")
    skipped: int = Field(default=0, description="Candidates already queued or reviewed.")
    priority: dict[str, float] = Field(
        default_factory=dict,
        description="Each considered run's uncertainty or disagreement (judging selections).",
    )
    verdicts: list[Verdict] = Field(
        default_factory=list,
        description="The judge's verdicts on the considered runs (when the selection "
        "judged them), or on the sent runs (when verdicts were written).",
    )
    not_judged: dict[str, str] = Field(
        default_factory=dict,
        description="Candidates a judging send left out, with the reason: still running "
        "(a later send judges them), or ended with an error (for a project, its errored "
        "runs among or after the `scan` latest it judged, which take no place among them).",
    )
    failed: dict[str, str] = Field(
        default_factory=dict,
        description="Candidates whose judgment failed, with the error: not sent (a later "
        "send judges them again); the others' verdicts are written.",
    )


class CycleReport(BaseModel):
    """One review cycle: reviews pulled and aligned, then new runs sent."""

    pulled: SyncReport
    sent: SendReport


class JudgeAnnotationQueue:
    """An annotation queue whose rubric is a judge's key and scale.

    Args:
        judge: The judge the reviews teach.
        client: A `langsmith.Client` (default: from the environment).
        name: The queue's name (default `"<judge name> review"`); a queue with this
            name is reused.
        queue_id: Use this existing queue instead of one found by name.
        description: The queue's description.
        instructions: Rubric instructions for reviewers (default: the judge's scale).
        mapping: How feedback and runs map to `Feedback` (see `FeedbackMapping`).
        conflicts: How disagreeing reviews of one run resolve.
        log_agreement: Write each pull's agreement with the reviews it learned as
            feedback on the project of the reviewed runs, one record per project
            (`SyncReport.agreement_feedback_ids`); on by default.
    """

    def __init__(
        self,
        judge: MemAlignJudge,
        client: Client | None = None,
        *,
        name: str | None = None,
        queue_id: str | uuid.UUID | None = None,
        description: str | None = None,
        instructions: str | None = None,
        mapping: FeedbackMapping | None = None,
        conflicts: ConflictPolicy = "keep_all",
        log_agreement: bool = True,
    ) -> None:
        self.judge = judge
        self.client = client or Client()
        self.api = LangSmithAPI.of(self.client)
        self.name = name or f"{judge.config.name} review"
        self.description = description or (
            f"Reviews for the MemAlign judge {judge.config.name!r}: completed ones teach it."
        )
        self.instructions = instructions
        self.mapping = mapping or FeedbackMapping()
        self.conflicts: ConflictPolicy = conflicts
        self.log_agreement = log_agreement
        self._queue_id = None if queue_id is None else str(queue_id)
        self._ensure_lock = threading.Lock()  # two first cycles must not create two queues
        self._source: LangSmithFeedbackSource | None = None

    # -- the queue -------------------------------------------------------------------------

    def _rubric_item(self, config_id: str | None) -> ls_schemas.AnnotationQueueRubricItem:
        scale = self.judge.scale
        item: ls_schemas.AnnotationQueueRubricItem = {
            "feedback_key": self.judge.config.name,
            "description": scale.describe(),
            "is_required": True,
        }
        if config_id is not None:
            # Pin the config: a key can have several, and reviewers must grade on ours.
            item["feedback_config_id"] = uuid.UUID(config_id)
        if scale.kind in ("categorical", "pairwise"):
            item["value_descriptions"] = {c: c for c in scale.choices}
        return item

    def ensure(self) -> str:
        """Create the queue (or find it by name) with the judge's rubric; its id.

        Raises `FeedbackConfigMismatchError` (and creates nothing) when the workspace
        reads the judge's key on another scale, or when the queue's rubric item for the
        key uses another config: reviews given there could not be read on the judge's
        scale.
        """
        if self._queue_id is not None:
            return self._queue_id
        with self._ensure_lock:
            if self._queue_id is None:
                self._queue_id = self._find_or_create()
        return self._queue_id

    def _find_or_create(self) -> str:
        key, wanted = self.judge.config.name, feedback_config(self.judge.scale)
        config_id = self.api.ensure_feedback_config(key, wanted)
        queue = self.api.find_queue(self.name)
        if queue is None:
            queue = self.client.create_annotation_queue(
                name=self.name,
                description=self.description,
                rubric_instructions=self.instructions
                or f"Grade {key!r}. {self.judge.scale.describe()} "
                "Explain your grade in the comment: the judge learns from it.",
                rubric_items=[self._rubric_item(config_id)],
            )
            return str(queue.id)
        details = self.client.read_annotation_queue(queue.id)
        rubric = list(details.rubric_items or [])
        mine = [i for i in rubric if i.get("feedback_key") == key]
        if mine:
            used = mine[0].get("feedback_config")
            used_config = getattr(used, "feedback_config", None)
            if used_config is None and config_id is not None:
                # its config was deleted (or never set): pin the judge's
                pinned = [
                    cast(
                        ls_schemas.AnnotationQueueRubricItem,
                        {k: v for k, v in i.items() if k != "feedback_config"}
                        | ({"feedback_config_id": uuid.UUID(config_id)} if i is mine[0] else {}),
                    )
                    for i in rubric
                ]
                self.client.update_annotation_queue(queue.id, rubric_items=pinned)
            elif used_config is not None and not same_config(used_config, wanted):
                raise FeedbackConfigMismatchError(
                    f"annotation queue {self.name!r} grades {key!r} on "
                    f"{describe_config(used_config)}, not on the judge's scale "
                    f"({describe_config(wanted)}): give the queue's rubric item the judge's "
                    "config, or use another queue name.",
                    key=key,
                    existing=used_config,
                    wanted=wanted,
                )
        else:
            kept = [  # feedback_config is read-only: send the items as written
                cast(
                    ls_schemas.AnnotationQueueRubricItem,
                    {k: v for k, v in i.items() if k != "feedback_config"},
                )
                for i in rubric
            ]
            items = [*kept, self._rubric_item(config_id)]
            self.client.update_annotation_queue(queue.id, rubric_items=items)
        return str(queue.id)

    @property
    def queue_id(self) -> str:
        """The queue's id (the queue is created on first use)."""
        return self.ensure()

    # -- send ------------------------------------------------------------------------------

    def send(
        self,
        runs: Sequence[RunRef] | None = None,
        *,
        project: str | uuid.UUID | None = None,
        select: Selection = "all",
        limit: int | None = None,
        scan: int | None = 100,
        signal_keys: Sequence[str] = (),
        skip_reviewed: bool = True,
        write_verdicts: bool = False,
        seed: int | None = None,
    ) -> SendReport:
        """Put runs in the queue for review.

        Args:
            runs: Candidate runs (ids or `Run` objects)...
            project: ...or a project whose latest root runs are the candidates,
                newest first.
            select: Which candidates to send (see `Selection`).
            limit: At most this many runs are sent (required for "sample").
            scan: At most this many of the project's latest runs (by start time) are
                considered; None: all of them.
            signal_keys: Feedback keys the judge's verdict is compared with for
                `select="disagreement"`.
            skip_reviewed: Leave out runs that already have human feedback on the
                judge's key (and runs already in the queue, always).
            write_verdicts: Also write the judge's verdicts on the sent runs as
                model feedback, so reviewers see them and can correct them.

        A send that judges (`"uncertain"`, `"disagreement"`, or `write_verdicts`)
        considers only runs that ended without error (the others are in the report's
        `not_judged`: for a project, its errored runs take no place among the `scan`
        latest, and those started no earlier than the oldest of them are named, read by
        one more query), judges each run on its own, and leaves out the runs whose
        judgment failed (`failed`, with the error); with `"all"` and `"sample"` only
        the chosen runs are judged, each verdict written as soon as it is known.
            seed: Random seed of `select="sample"`.
        """
        if select not in ("all", "sample", "uncertain", "disagreement"):
            raise ValueError(f"unknown selection {select!r}")
        if select == "sample" and limit is None:
            raise ValueError("select='sample' needs a limit")
        if select == "disagreement" and not signal_keys:
            raise ValueError("select='disagreement' needs signal_keys to compare with")
        queue_id = self.ensure()
        judging = select in ("uncertain", "disagreement") or write_verdicts
        errored: dict[str, str] = {}
        if judging:
            # A project's errored runs take no place among the `scan` latest, but are named.
            candidates, errored = _candidates(
                self.api, runs, project, scan if project is not None else None
            )
        else:
            candidates = self.api.records(runs, project, scan if project is not None else None)
        queued = set(self.api.queue_run_ids(queue_id, None))
        if skip_reviewed and candidates:
            queued |= {
                str(fb.run_id)
                for fb in self.api.list_feedback(
                    key=self.judge.config.name,
                    source_types=["app", "api"],
                    run_ids=[r.id for r in candidates],
                )
            }
        fresh = [r for r in candidates if r.id not in queued]
        report = SendReport(
            queue_id=queue_id, considered=len(fresh), skipped=len(candidates) - len(fresh)
        )
        if judging:
            # Only runs that ended without error have something to judge; a running one
            # stays out of the queue until a later send can judge it.
            fresh, report.not_judged = _judgeable(fresh)
            report.not_judged |= errored
        judge_options: dict[str, Any] = {
            "client": self.client, "trace": write_verdicts, "mapping": self.mapping
        }  # fmt: skip

        def write(run: RunRecord, verdict: Verdict) -> Verdict:
            return _write_verdict(self.judge, self.client, run, verdict)

        verdicts: dict[str, Verdict] = {}
        order = fresh
        if select == "sample":
            assert limit is not None
            order = random.Random(seed).sample(fresh, min(limit, len(fresh)))
        if select in ("all", "sample"):
            chosen = order[:limit]
            if write_verdicts:
                # The chosen runs only, each verdict written as soon as it is known.
                verdicts, report.failed = _judge_each(
                    self.judge, chosen, write=write, **judge_options
                )
        else:
            # The selection needs every candidate's verdict: written once chosen.
            verdicts, report.failed = _judge_each(self.judge, fresh, **judge_options)
            judged = [r for r in fresh if r.id in verdicts]
            if select == "uncertain":
                report.priority = {rid: v.uncertainty for rid, v in verdicts.items()}
                order = sorted(judged, key=lambda r: -verdicts[r.id].uncertainty)
            else:
                report.priority = self._disagreement(judged, verdicts, signal_keys)
                order = sorted(
                    (r for r in judged if report.priority.get(r.id, 0.0) > 0),
                    key=lambda r: -report.priority[r.id],
                )
            chosen = order[:limit]
            if write_verdicts:
                for run in chosen:
                    verdicts[run.id] = write(run, verdicts[run.id])
        # A run whose judgment failed is not sent without its verdict: the next send
        # judges it again (it is not in the queue).
        chosen = [r for r in chosen if r.id not in report.failed]
        self.api.add_to_queue(queue_id, chosen)
        report.run_ids = [r.id for r in chosen]
        report.verdicts = [verdicts[r.id] for r in fresh if r.id in verdicts]
        return report

    def _disagreement(
        self, runs: Sequence[RunRecord], verdicts: dict[str, Verdict], keys: Sequence[str]
    ) -> dict[str, float]:
        scale = self.judge.scale
        signals: dict[str, list[Any]] = {}
        for key in keys:
            for fb in self.api.list_feedback(
                key=key,
                source_types=["app", "api", "model"],
                run_ids=[r.id for r in runs],
            ):
                label = read_label(scale, fb.model_dump(mode="json"), self.mapping.label)
                if label is not MISSING and fb.run_id is not None:
                    signals.setdefault(str(fb.run_id), []).append(label)
        out: dict[str, float] = {}
        for run in runs:
            labels = signals.get(run.id)
            if labels:
                score = verdicts[run.id].score
                out[run.id] = sum(distance(scale, score, v) for v in labels) / len(labels)
        return out

    async def asend(self, runs: Sequence[RunRef] | None = None, **kwargs: Any) -> SendReport:
        """Async twin of `send` (runs off the event loop)."""
        return await asyncio.to_thread(self.send, runs, **kwargs)

    # -- pull ------------------------------------------------------------------------------

    def source(self) -> LangSmithFeedbackSource:
        """The feedback source over the queue's archived runs.

        The items carry their runs' projects, so a pull reads the feedback of newly
        archived runs and of runs whose feedback changed, not of every run ever
        archived (the source's `reconcile_every` still lists them all now and then).
        """
        queue_id = self.ensure()
        archived = self.api.queue_items(queue_id, "completed")
        projects = {
            run_id: str(getattr(item, "project_id", None) or "") for run_id, item in archived
        }
        finals = {
            run_id: final
            for run_id, item in archived
            if (final := self._final_answer(item)) is not MISSING
        }
        if self._source is None:
            self._source = LangSmithFeedbackSource(
                self.client,
                runs=list(projects),
                key=self.judge.config.name,
                mapping=self.mapping,
                conflicts=self.conflicts,
                sync_id=f"queue:{queue_id}",
                run_projects=projects,
                log_agreement=self.log_agreement,
            )
        else:  # the same source across pulls: only its first sync lists everything
            self._source.run_ids = list(projects)
            self._source.run_projects = {r: p for r, p in projects.items() if p}
        self._source.run_finals = finals
        return self._source

    def _final_answer(self, item: Any) -> Any:
        """What the team settled on for the judge's key (the final answer), if anything.

        `MISSING` when no final is set and the reviewers did not disagree (or the server
        does not say); the final's label when one is set, whatever the agreement state (a
        final can be set, or kept, after the reviewers came to agree); `UNRESOLVED` while
        a dispute has none, or when the final is not one label on the judge's scale.
        """
        agreements = getattr(item, "key_agreements", None) or {}
        found = agreements.get(self.judge.config.name)
        if found is None:
            return MISSING
        answer = getattr(found, "answer", None)
        if getattr(found, "has_final", False) and answer is not None:
            label = _final_label(self.judge.scale, answer.model_dump())
            return UNRESOLVED if label is MISSING else label
        return UNRESOLVED if getattr(found, "state", None) == "disagreed" else MISSING

    def pull(self, *, log_agreement: bool | None = None) -> SyncReport:
        """Align the judge on the reviews of archived queue items (incrementally).

        An item is archived once the queue's review requirements are met; reviews of
        items still waiting for other reviewers are read once their item is archived.
        `log_agreement` overrides the queue's for this pull (a `JudgeMonitor` writes
        its cycle's agreement itself, on the project it watches).
        """
        before = self._source.run_finals if self._source is not None else {}
        source = self.source()
        source.log_agreement = self.log_agreement if log_agreement is None else log_agreement
        if not source.run_ids:
            return SyncReport()
        # A final answer set (or a dispute opened) changes no feedback record, so an
        # incremental sync would not look at the run again: this pull reads all.
        return source.sync(self.judge, full=True if source.run_finals != before else None)

    async def apull(self, *, log_agreement: bool | None = None) -> SyncReport:
        """Async twin of `pull`."""
        return await asyncio.to_thread(self.pull, log_agreement=log_agreement)

    def complete(self, runs: Sequence[RunRef]) -> CompletedItems:
        """Record this caller's "Done" on queued runs, as a reviewer does in the UI.

        Useful when the reviews were given elsewhere (or in tests and demos). The
        service archives a run only once the queue's review requirements are met (how
        many reviewers per item, or every assigned reviewer), and `pull` reads only
        archived runs: the result says which runs are archived now and which still
        wait for other reviewers (`waiting`), and which were not in the queue.
        """
        return self.api.complete_queue_runs(self.ensure(), [run_id_of(r) for r in runs])

    def set_final(self, run: RunRef, label: Any) -> None:
        """Settle a dispute: the team's final answer on the judge's key for a queued run.

        As a lead does in the LangSmith UI when the run's reviewers disagreed. The next
        `pull` learns only the reviews that gave this answer (while a dispute has no
        final answer, none of its reviews is learned).

        Raises:
            InvalidFeedbackError: `label` is not on the judge's scale.
            ValueError: The run is not in the queue, or the server has no final answers.
        """
        value = self.judge.scale.validate_value(label)
        fields = score_fields(self.judge.scale, value)
        # One field: the category's label where the scale has labels, else the score.
        answer = {"value": fields["value"]} if "value" in fields else {"score": fields["score"]}
        run_id = run_id_of(run)
        if not self.api.set_final(self.ensure(), run_id, self.judge.config.name, answer):
            raise ValueError(f"run {run_id} is not in the queue {self.name!r}")

    # -- cycle -----------------------------------------------------------------------------

    def cycle(
        self,
        runs: Sequence[RunRef] | None = None,
        *,
        project: str | uuid.UUID | None = None,
        select: Selection = "uncertain",
        limit: int | None = 10,
        **send_options: Any,
    ) -> CycleReport:
        """One full review cycle: pull and align completed reviews, then send new runs.

        Sending after aligning means the selection (e.g. "uncertain") already
        reflects what the reviews just taught the judge.
        """
        pulled = self.pull()
        sent = self.send(runs, project=project, select=select, limit=limit, **send_options)
        return CycleReport(pulled=pulled, sent=sent)

    async def acycle(self, runs: Sequence[RunRef] | None = None, **kwargs: Any) -> CycleReport:
        """Async twin of `cycle` (runs off the event loop)."""
        return await asyncio.to_thread(self.cycle, runs, **kwargs)


def _final_label(scale: Scale, answer: dict[str, Any]) -> Any:
    """The label of a final answer on `scale`, or `MISSING`.

    A final comes as `value` or `score`, or, set on a multi-select key, as `values` or
    `scores` (lists): a list that names one label is that label; one that names several
    is no single label on the judge's scale.
    """
    label = read_label(scale, answer, ("value", "score"))
    if label is not MISSING:
        return label
    for many, one in (("values", "value"), ("scores", "score")):
        items = answer.get(many)
        if isinstance(items, list) and items:
            labels = [read_label(scale, {one: item}, (one,)) for item in items]
            if any(x is MISSING for x in labels):
                continue
            if len({repr(x) for x in labels}) == 1:
                return labels[0]
    return MISSING
