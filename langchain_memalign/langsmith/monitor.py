"""Watch a LangSmith project: judge new runs, queue some for review, learn from the reviews.

```python
monitor = JudgeMonitor(judge, client, project="support-bot", sampling_rate=0.2)
cycle = monitor.run_once()        # one cycle (from cron), or monitor.watch(interval=300)
print(cycle.summary())
```

A cycle pulls the reviews completed in the judge's annotation queue (recording, for each,
whether the judge's earlier verdict on that run agreed, before aligning on it), then judges
the project's new root runs that have ended without error (naming those that ended with
one), writes each verdict as model feedback as soon as it is known and sends the runs most
worth a human look to the queue.

New runs are read through a cursor kept in the judge's memory, as LangSmith's online
evaluators keep theirs: each cycle reads on, oldest first, from the last run the previous
cycle read, at most `scan` runs, so every run is read once however busy the project is
(and the report says how many are left for the next cycles). A run still running, or
whose judgment failed, is kept aside by id and read again by the next cycles until it can
be judged; it does not hold the cursor back. The cursor stays `SETTLE` behind the time of
reading, because a run can become readable a while after it started; the runs read within
that margin are remembered, not read again.

It is resumable: a run that already carries the judge's verdict is never judged again, and
sampling is decided by the run's id, so a run left out stays left out after a restart. The
runs picked for review are stored with the cursor and kept until the queue has them, so a
send the queue refuses (its rate limit) or a kill before it leaves them to the next cycle,
which sends them first (leaving out what the queue already holds: each is queued once); and
the runs a cycle sets out to judge are stored before it judges them, so the verdicts a
cycle cut short had written are read back by the next and take part in its pick. A
judgment that fails is retried by the next cycles, `MAX_ATTEMPTS` times in all (counted in
the judge's memory, so restarts count too), unless every judgment of its cycle failed on
the model provider (an outage: not counted against the runs); the judge's own calls are
not traced unless asked for (`trace`).

Alignment is visible in LangSmith: a cycle that learned reviews writes how often the judge
had agreed with them before learning, and the reviews it had got wrong, as project-level
feedback on the watched project (key `<judge name>_agreement`, `agreement_key`), one
record a cycle, so the project's feedback shows the judge's agreement over time beside the
verdicts it wrote on the runs. The record is the one every sync writes (`_agreement_log`);
the cycle's pull writes none of its own.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import logging
import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langsmith import Client
from langsmith import run_helpers as rh
from langsmith import schemas as ls_schemas
from langsmith import utils as ls_utils
from pydantic import BaseModel, Field

from langchain_memalign.judge import MemAlignJudge
from langchain_memalign.langsmith import _api_base
from langchain_memalign.langsmith._agreement_log import agreement_key, write_agreement
from langchain_memalign.langsmith._api import LangSmithAPI, RunRecord
from langchain_memalign.langsmith._api_base import _time
from langchain_memalign.langsmith._api_runs import RunPosition
from langchain_memalign.langsmith._source_types import ReviewAgreement, SyncReport, share_agreed
from langchain_memalign.langsmith._verdicts import (
    Verdict,
    _judgments,
    _write_verdict,
    _written_verdict,
)
from langchain_memalign.langsmith.queue import JudgeAnnotationQueue
from langchain_memalign.langsmith.source import FeedbackMapping

__all__ = ["JudgeMonitor", "MonitorCycle", "ReviewAgreement", "agreement_key"]

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
"""Judgments of a run that may fail (one a cycle) before the run is given up."""
STATE_PREFIX = "langsmith_watch:"
SINCE = dt.timedelta(days=1)
"""Where a watch with no cursor yet starts reading: runs started this long before its first
cycle (the v2 run query's own default window), unless `since` says otherwise."""
SETTLE = dt.timedelta(minutes=10)
"""How far the cursor stays behind the time runs are read. A run can become readable a
while after it started (tracers upload in batches, the query service indexes with a
delay): a cursor that passed its start time would never read it. Runs read within this
margin are remembered by id, so they are not read again."""
PENDING_LIMIT = dt.timedelta(days=1)
"""A run still running this long after it started is given up (its tracer most likely
died before ending it): it is no longer read every cycle."""
LEFT_COUNT = 1000
"""How many runs past those a cycle reads are counted for its report (`left`)."""


class MonitorCycle(BaseModel):
    """What one monitoring cycle did."""

    pulled: SyncReport = Field(default_factory=SyncReport)
    agreement: list[ReviewAgreement] = Field(
        default_factory=list,
        description="Each newly learned review beside the judge's earlier verdict on its run.",
    )
    considered: int = Field(
        default=0,
        description="Root runs without error read: the new ones after the cursor (at most "
        "`scan`), and earlier ones read again (still running, to retry, or set out to be "
        "judged by a cycle cut short).",
    )
    left: int = Field(
        default=0,
        description="New runs after those read, left for the next cycles (counted up to "
        f"{LEFT_COUNT}: see `left_capped`).",
    )
    left_capped: bool = Field(
        default=False, description="More runs than `left` are left: counting stopped."
    )
    already_judged: int = Field(default=0, description="Runs that carry the judge's verdict.")
    pending: int = Field(
        default=0, description="Runs still running (no end time): a later cycle judges them."
    )
    given_up: list[str] = Field(
        default_factory=list,
        description=f"Runs no longer judged: their judgment failed {MAX_ATTEMPTS} times, "
        "or they were still running a day after they started (`PENDING_LIMIT`).",
    )
    errored: list[str] = Field(
        default_factory=list,
        description="Runs read that had ended with an error, skipped: not judged, and not "
        "read again. Reported once, whether they had failed when first listed, failed "
        "while kept aside as still running, or between the listing and the reading.",
    )
    sampled_out: int = Field(default=0, description="Runs left out by the sampling rate.")
    filtered_out: int = Field(default=0, description="Runs `where` refused.")
    verdicts: list[Verdict] = Field(default_factory=list, description="Verdicts written.")
    failed: dict[str, str] = Field(
        default_factory=dict,
        description="Runs whose judgment failed in this cycle, with the error: a later "
        "cycle judges them again.",
    )
    outage: str | None = Field(
        default=None,
        description="Every judgment of the cycle failed with a provider error (a connection, "
        "timeout, rate-limit or 5xx-type error), the first one given here: the model, not "
        "the runs, failed, so the failures do not count towards giving the runs up.",
    )
    sent: list[str] = Field(default_factory=list, description="Runs sent to the review queue.")
    agreement_feedback_id: str | None = Field(
        default=None,
        description="The project-level feedback in LangSmith holding this cycle's "
        "`accuracy` (`JudgeMonitor(log_agreement=...)`); None when no review was learned, "
        "or the record could not be written (a warning is logged).",
    )
    rate_limited: bool = Field(
        default=False, description="The service refused for its rate limit: cut short."
    )
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        """Whether the cycle did all its work.

        No judgment or reflection failed, and no rate limit cut it short (runs given up
        in earlier cycles do not count).
        """
        return not (self.failed or self.pulled.failed or self.rate_limited)

    @property
    def accuracy(self) -> float | None:
        """The share of new reviews the judge had agreed with, if any arrived."""
        return share_agreed(self.agreement)

    def summary(self) -> str:
        """One line: reviews learned (with prior agreement), runs judged, runs sent."""
        acc = self.accuracy
        agreed = "" if acc is None else f" (judge agreed with {acc:.0%} before learning)"
        counts = (
            (len(self.failed), "failed"),
            (len(self.given_up), "given up"),
            (len(self.errored), "errored (skipped)"),
        )
        trouble = "".join(f"{n} {what}; " for n, what in counts if n)
        cut = ", rate limited: cut short" if self.rate_limited else ""
        if self.outage:
            trouble += "model outage (not counted against the runs); "
        left = ""
        if self.left_capped:
            left = f", over {self.left} left for the next cycle"
        elif self.left:
            left = f", {self.left} left for the next cycle"
        return (
            f"{len(self.pulled.added) + len(self.pulled.updated)} reviews learned{agreed}; "
            f"{len(self.verdicts)} of {self.considered} runs judged "
            f"({self.already_judged} already, {self.pending} running, "
            f"{self.sampled_out} sampled out, {self.filtered_out} filtered){left}; "
            f"{trouble}{len(self.sent)} sent for review; {self.seconds:.1f}s{cut}"
        )


@dataclass
class _WatchState:
    """What a watch keeps in the judge's memory about a project, between cycles.

    `cursor`: every run at or before this position was read. `recent`: runs after it
    already read (within `SETTLE` of a cycle's reading time), by id with their start
    time. `held`: runs to read again (still running, or whose judgment failed), with
    their start time and failed judgments. `judging`: the runs a cycle set out to judge,
    by id with their start time, stored before its judgments start and cleared once it
    has picked the runs for review: a cycle cut short meanwhile leaves verdicts that no
    pick has seen, which the next cycle reads back. `unsent`: runs picked for review that
    may not be in the queue yet, by id with their project and start time (the queue's
    lookup key). `since`: the `since` the cursor started from.
    """

    cursor: RunPosition
    since: str | None = None
    recent: dict[str, str] = field(default_factory=dict)
    held: dict[str, dict[str, Any]] = field(default_factory=dict)
    judging: dict[str, str | None] = field(default_factory=dict)
    unsent: dict[str, dict[str, str | None]] = field(default_factory=dict)

    @classmethod
    def load(
        cls,
        saved: dict[str, Any] | None,
        since: dt.datetime | dt.timedelta | None,
        now: dt.datetime,
    ) -> _WatchState:
        saved = saved or {}
        key = _since_key(since)
        held = {
            rid: {"start_time": h.get("start_time"), "failed": int(h.get("failed") or 0)}
            for rid, h in (saved.get("held") or {}).items()
        }
        # A watch from before the cursor kept only its failures (`{"failed": {id: n}}`).
        for rid, n in (saved.get("failed") or {}).items():
            held.setdefault(rid, {"start_time": None, "failed": int(n)})
        unsent = {
            rid: {"project_id": u.get("project_id"), "start_time": u.get("start_time")}
            for rid, u in (saved.get("unsent") or {}).items()
        }
        # Read by id whatever the cursor: kept when a new `since` restarts it.
        kept = {"held": held, "judging": dict(saved.get("judging") or {}), "unsent": unsent}
        stored = saved.get("cursor")
        at = _time((stored or {}).get("start_time"))
        if stored and at is not None and (since is None or saved.get("since") == key):
            return cls(
                cursor=(at, str(stored.get("id") or "")),
                since=saved.get("since"),
                recent=dict(saved.get("recent") or {}),
                **kept,
            )
        if isinstance(since, dt.datetime):
            start = since
        else:
            start = now - (SINCE if since is None else since)
        # Before every run of that time: the id sorts first.
        return cls(cursor=(start, ""), since=key, **kept)

    def hold(self, run: RunRecord, *, failed: int | None = None) -> None:
        """Keep `run` aside, to be read again by the next cycles."""
        entry = self.held.setdefault(run.id, {"failed": 0})
        entry["start_time"] = run.start_time.isoformat() if run.start_time else None
        if failed is not None:
            entry["failed"] = failed

    def to_send(self, runs: Sequence[RunRecord]) -> None:
        """Note `runs` as picked for review: they stay here until the queue has them."""
        for run in runs:
            self.unsent[run.id] = {
                "project_id": run.project_id,
                "start_time": run.start_time.isoformat() if run.start_time else None,
            }

    def unsent_runs(self) -> list[RunRecord]:
        """The runs picked for review not known to be in the queue, as the queue adds them."""
        return [
            RunRecord(id=rid, project_id=u["project_id"], start_time=_time(u["start_time"]))
            for rid, u in self.unsent.items()
        ]

    def advance(self, read: Sequence[RunPosition], now: dt.datetime) -> None:
        """Move the cursor past the runs `read`, but not within `SETTLE` of `now`."""
        frontier = read[-1] if read else self.cursor
        self.cursor = max(self.cursor, min(frontier, (now - SETTLE, "")))
        positions = [(_time(t), rid) for rid, t in self.recent.items()]
        positions += list(read)
        self.recent = {
            rid: t.isoformat() for t, rid in positions if t is not None and (t, rid) > self.cursor
        }

    def dump(self) -> dict[str, Any]:
        at, rid = self.cursor
        return {
            "cursor": {"start_time": at.isoformat(), "id": rid},
            "since": self.since,
            "recent": self.recent,
            "held": self.held,
            "judging": self.judging,
            "unsent": self.unsent,
        }


def _since_key(since: dt.datetime | dt.timedelta | None) -> str | None:
    if since is None:
        return None
    if isinstance(since, dt.timedelta):
        return f"{since.total_seconds():g}s before the first cycle"
    return since.isoformat()


def _sampled(run_id: str, rate: float, salt: str) -> bool:
    # Decided by the run's id (as LangSmith's online evaluators sample), not by a random
    # draw: the same run gets the same answer in every cycle and after a restart.
    digest = hashlib.sha256(f"{salt}:{run_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < rate


class JudgeMonitor:
    """A judge watching a LangSmith project (see the module doc).

    Args:
        judge: The judge.
        client: A `langsmith.Client` (default: from the environment).
        project: The tracing project whose root runs are judged.
        queue: The review queue (default: the judge's, `JudgeAnnotationQueue(judge)`).
        sampling_rate: The share of new runs judged, from 0 to 1.
        where: Judge only the runs for which this returns True.
        scan: At most this many new root runs are read a cycle, oldest first from where
            the previous cycle stopped (the runs read again, still running or to retry,
            come on top).
        since: Where the cursor starts: a time, or a time span before the first cycle
            (default: `SINCE`, a day). Used when the judge's memory holds no cursor for
            the project yet, or holds one started from another `since` (a backfill from
            an earlier date, or a skip ahead); left out, a stored cursor is kept.
        review_limit: At most this many runs a cycle go to the queue: the judge's
            least sure verdicts first.
        review_sample: Also send this share of the other judged runs, at random, so
            reviewers see verdicts the judge is sure of too.
        mapping: Which run fields are the case's inputs and outputs.
        seed: Seeds the review sample; also salts the sampling decision.
        trace: Trace the judge's own calls (about 20 runs a judgment) to the
            "evaluators" project, each verdict linked to its trace. Off by default:
            the judgments then run untraced, whatever the environment's tracing says.
        log_agreement: Write each cycle's agreement with the reviews it learned as
            project-level feedback on `project` (`agreement_key`), so it can be
            followed in LangSmith; on by default.
    """

    def __init__(
        self,
        judge: MemAlignJudge,
        client: Client | None = None,
        *,
        project: str | uuid.UUID,
        queue: JudgeAnnotationQueue | None = None,
        sampling_rate: float = 1.0,
        where: Callable[[RunRecord], bool] | None = None,
        scan: int = 100,
        review_limit: int = 5,
        review_sample: float = 0.0,
        mapping: FeedbackMapping | None = None,
        seed: int | None = None,
        trace: bool = False,
        since: dt.datetime | dt.timedelta | None = None,
        log_agreement: bool = True,
    ) -> None:
        if isinstance(since, dt.timedelta) and since < dt.timedelta(0):
            raise ValueError(f"since must be a time or a time span back, got {since}")
        if isinstance(since, dt.datetime) and since.tzinfo is None:
            since = since.replace(tzinfo=dt.UTC)  # a naive time is UTC, as the SDK reads it
        if not 0.0 <= sampling_rate <= 1.0:
            raise ValueError(f"sampling_rate must be within 0 and 1, got {sampling_rate}")
        if not 0.0 <= review_sample <= 1.0:
            raise ValueError(f"review_sample must be within 0 and 1, got {review_sample}")
        if scan < 1 or review_limit < 0:
            raise ValueError("scan must be at least 1 and review_limit at least 0")
        self.judge = judge
        self.client = client or Client()
        self.api = LangSmithAPI.of(self.client)
        self.project = project
        self.mapping = mapping or FeedbackMapping()
        self.queue = queue or JudgeAnnotationQueue(judge, self.client, mapping=self.mapping)
        self.sampling_rate = sampling_rate
        self.where = where
        self.scan = scan
        self.review_limit = review_limit
        self.review_sample = review_sample
        self.trace = trace
        self.since = since
        self.log_agreement = log_agreement
        self._random = random.Random(seed)
        self._salt = f"{judge.config.name}:{seed}"

    def run_once(self) -> MonitorCycle:
        """One cycle: learn from completed reviews, judge new runs, send some for review."""
        started = time.perf_counter()
        cycle = MonitorCycle()
        try:
            # The cycle's record goes on the watched project (written here, by the code
            # every sync writes its record with): the pull writes none of its own, which
            # for a queue holding other projects' runs would go on those projects.
            cycle.pulled = self.queue.pull(log_agreement=False)
            cycle.agreement = cycle.pulled.agreement
            project = self.api.project(self.project)
            if cycle.agreement and self.log_agreement:
                cycle.agreement_feedback_id = write_agreement(
                    self.api, self.judge, project, cycle.agreement
                )
            self._judge_new(cycle, project)
        except ls_utils.LangSmithRateLimitError:
            cycle.rate_limited = True
        cycle.seconds = time.perf_counter() - started
        return cycle

    def watch(
        self,
        interval: float = 300.0,
        *,
        cycles: int | None = None,
        on_cycle: Callable[[MonitorCycle], None] | None = None,
    ) -> None:
        """Run cycles every `interval` seconds (`cycles` times, or until interrupted).

        A cycle cut short by the service's rate limit is followed by a pause of at
        least the service's rate-limit window.
        """
        done = 0
        while cycles is None or done < cycles:
            cycle = self.run_once()
            done += 1
            if on_cycle is not None:
                on_cycle(cycle)
            if cycles is not None and done >= cycles:
                return
            pause = max(interval, _api_base.RATE_LIMIT_PAUSE) if cycle.rate_limited else interval
            time.sleep(max(0.0, pause - (0.0 if cycle.rate_limited else cycle.seconds)))

    # -- steps -----------------------------------------------------------------------------

    def _judge_new(self, cycle: MonitorCycle, project: ls_schemas.TracerSession) -> None:
        self.queue.ensure()  # the key's feedback config on the judge's scale, or an error
        state_key = f"{STATE_PREFIX}{self.judge.config.name}:{project.id}"
        now = dt.datetime.now(dt.UTC)
        with self.judge.memory.integration_state(state_key) as saved:
            state = _WatchState.load(saved.get(), self.since, now)
        if state.unsent:
            # Picked for review by an earlier cycle that the queue refused (its rate
            # limit), or that was killed before they reached it: sent first.
            self._send(cycle, state, state_key)
        # The next runs after the cursor, oldest first, the ones read within the settle
        # margin left out. Errored runs are listed too: not judged, but reported.
        page = self.api.runs_after(
            project, state.cursor, limit=self.scan, skip=state.recent.keys(), count=LEFT_COUNT
        )
        cycle.left, cycle.left_capped = page.left, page.capped
        new_ids = [rid for _, rid in page.positions]
        # Read again by id: the runs kept aside, and those a cycle cut short had set out
        # to judge (whatever the cursor says now: a restart may read from elsewhere).
        aside = {rid: h.get("start_time") for rid, h in state.held.items()} | state.judging
        again = [rid for rid in aside if rid not in set(new_ids)]
        pid = str(project.id)
        hints: dict[str, tuple[str | None, dt.datetime | None]] = {
            rid: (pid, start) for start, rid in page.positions
        }
        hints |= {rid: (pid, _time(aside[rid])) for rid in again}
        found = self.api.read_runs([*new_ids, *again], hints) if hints else {}
        for rid in again:
            if rid not in found or found[rid].error:
                # Deleted, past retention, or ended with an error while kept aside.
                state.held.pop(rid, None)
        # Nothing to judge in an errored run, but the report names it (it would otherwise
        # vanish from the watch's accounts), once: no longer kept aside, and the cursor
        # moves past the new ones.
        cycle.errored = [r for r in [*new_ids, *again] if r in found and found[r].error]
        runs = [found[r] for r in [*new_ids, *again] if r in found and not found[r].error]
        cycle.considered = len(runs)
        verdicts = list(
            self.api.list_feedback(
                key=self.judge.config.name,
                source_types=["model"],
                run_ids=[r.id for r in runs],
            )
        )
        judged = {str(fb.run_id) for fb in verdicts}
        # Verdicts a cycle cut short wrote before it could pick the runs for review (the
        # cursor did not move, or they are read by id): read back, they are picked among
        # this cycle's, in the runs' order. A verdict a reviewer corrected was reviewed.
        written = {
            v.run_id: v
            for fb in verdicts
            if str(fb.run_id) in state.judging
            and (v := _written_verdict(self.judge, fb)) is not None
            and not v.kept_correction
        }
        unpicked = [(r, written[r.id]) for r in runs if r.id in written]
        fresh = [r for r in runs if r.id not in judged]
        cycle.already_judged = len(runs) - len(fresh)
        for rid in judged:
            state.held.pop(rid, None)
        # A run still streaming has no outputs yet: kept aside, it is judged by a later
        # cycle once it has ended (unless it never does).
        ended = [r for r in fresh if r.end_time is not None]
        running = [r for r in fresh if r.end_time is None]
        stale = [r.id for r in running if r.start_time and r.start_time < now - PENDING_LIMIT]
        for r in running:
            if r.id not in stale:
                state.hold(r)
        cycle.pending = len(running) - len(stale)
        tries = {rid: int(h.get("failed") or 0) for rid, h in state.held.items()}
        cycle.given_up = [r.id for r in ended if tries.get(r.id, 0) >= MAX_ATTEMPTS] + stale
        for rid in cycle.given_up:
            state.held.pop(rid, None)
        for rid in stale:
            logger.warning("run %s still running %s after it started: given up", rid, PENDING_LIMIT)
        to_try = [r for r in ended if r.id not in cycle.given_up]
        sampled = [r for r in to_try if _sampled(r.id, self.sampling_rate, self._salt)]
        cycle.sampled_out = len(to_try) - len(sampled)
        chosen = [r for r in sampled if self.where is None or self.where(r)]
        cycle.filtered_out = len(sampled) - len(chosen)
        for r in to_try:  # decided for good unless its judgment fails below
            state.held.pop(r.id, None)
        if chosen:
            # Stored alone, before the judgments: a kill or a rate limit while they run
            # stops the cycle before its pick, and the next cycle reads these runs back.
            state.judging = {
                r.id: r.start_time.isoformat() if r.start_time else None
                for r in [*(r for r, _ in unpicked), *chosen]
            }
            with self.judge.memory.integration_state(state_key) as saved:
                saved.set({**(saved.get() or {}), "judging": state.judging})
        # Off, the judge's own calls stay off LangSmith whatever the environment says (as
        # under `evaluate(upload_runs=False)`, `no_upload_when_local`).
        tracing = contextlib.nullcontext() if self.trace else rh.tracing_context(enabled=False)
        errors: dict[str, Exception] = {}
        with tracing:
            for run, outcome in _judgments(
                self.judge, chosen, client=self.client, trace=self.trace, mapping=self.mapping
            ):
                if isinstance(outcome, Exception):
                    errors[run.id] = outcome
                    cycle.failed[run.id] = f"{type(outcome).__name__}: {outcome}"
                    continue
                # Each verdict is written as soon as it is known: a cycle cut short (or a
                # process killed) keeps what it wrote, and the next cycle skips those runs.
                cycle.verdicts.append(_write_verdict(self.judge, self.client, run, outcome))
        by_id = {r.id: r for r in chosen}
        # When every judgment failed on the provider (down, refusing for its rate limit),
        # the runs did nothing wrong: counting it would give them all up after a 3-cycle
        # outage. A run whose own judgment fails while others succeed counts.
        if errors and not cycle.verdicts and all(_is_outage(e) for e in errors.values()):
            cycle.outage = next(iter(cycle.failed.values()))
            logger.warning(
                "every judgment of the cycle failed on the model provider (%d runs, not "
                "counted against them): %s",
                len(errors),
                cycle.outage,
            )
            for run_id in errors:
                state.hold(by_id[run_id], failed=tries.get(run_id, 0))
        else:
            for run_id in errors:
                failed = tries.get(run_id, 0) + 1
                state.hold(by_id[run_id], failed=failed)
                logger.warning(
                    "judging run %s failed (%d of %d tries%s): %s",
                    run_id,
                    failed,
                    MAX_ATTEMPTS,
                    "" if failed < MAX_ATTEMPTS else ", not tried again",
                    cycle.failed[run_id],
                )
        # In the runs' order (they were judged concurrently): the report, and which runs go
        # to review among equally sure verdicts, do not depend on which judgment ended first.
        order = {r.id: i for i, r in enumerate(chosen)}
        cycle.verdicts.sort(key=lambda v: order[v.run_id])
        cycle.failed = dict(sorted(cycle.failed.items(), key=lambda kv: order[kv[0]]))
        # The runs picked for review are stored with the cursor, in the same write: once
        # the cursor has passed them, no cycle would pick them again, so a send the queue
        # refuses, or a kill before it, leaves them to the next cycle instead of losing them.
        state.to_send(
            self._pick_for_review(
                [*chosen, *(r for r, _ in unpicked)], [*cycle.verdicts, *(v for _, v in unpicked)]
            )
        )
        state.judging = {}
        # Every run read is judged, decided, or kept aside: the cursor moves past them.
        state.advance(page.positions, now)
        with self.judge.memory.integration_state(state_key) as saved:
            saved.set(state.dump())
        if state.unsent:
            self._send(cycle, state, state_key)

    def _send(self, cycle: MonitorCycle, state: _WatchState, state_key: str) -> None:
        """Send the runs picked for review (`state.unsent`) to the queue, then forget them.

        `send` leaves out the runs the queue already holds (and those already reviewed),
        so a run a killed cycle had sent, but not yet forgotten, is not queued twice. Only
        the stored `unsent` is changed: the rest of the stored state stays as it is.
        """
        report = self.queue.send(state.unsent_runs(), select="all")
        cycle.sent += report.run_ids
        state.unsent = {}
        with self.judge.memory.integration_state(state_key) as saved:
            saved.set({**(saved.get() or {}), "unsent": {}})

    def _pick_for_review(
        self, runs: Sequence[RunRecord], verdicts: Sequence[Verdict]
    ) -> list[RunRecord]:
        by_id = {r.id: r for r in runs}
        order = sorted(verdicts, key=lambda v: -v.uncertainty)
        picked = [by_id[v.run_id] for v in order[: self.review_limit]]
        rest = [by_id[v.run_id] for v in order[self.review_limit :]]
        picked += [r for r in rest if self._random.random() < self.review_sample]
        return picked


# Errors of the provider rather than of a run: connection and timeout errors (the builtin
# ones, httpx's, requests', and the model SDKs' own, recognised by the end of their class
# name (`openai.APIConnectionError`, `LangSmithRateLimitError`) so that no SDK is
# imported), rate limits, and 5xx answers.
_OUTAGE_NAMES = (
    "ConnectError",
    "ConnectionError",
    "APIConnectionError",
    "APITimeoutError",
    "Timeout",
    "TimeoutError",
    "TimeoutException",
    "RateLimitError",
    "InternalServerError",
    "ServiceUnavailableError",
    "OverloadedError",
    "TransportError",
)


def _is_outage(error: BaseException) -> bool:
    """Whether `error` says the model provider failed (is down, overloaded, rate limited).

    Follows the chain of causes: the judge may wrap the provider's error in its own.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionError | TimeoutError):
            return True
        if any(cls.__name__.endswith(_OUTAGE_NAMES) for cls in type(current).__mro__):
            return True
        status = getattr(current, "status_code", None)
        if status is None:
            status = getattr(getattr(current, "response", None), "status_code", None)
        if isinstance(status, int) and (status in (408, 429) or 500 <= status < 600):
            return True
        current = current.__cause__ or current.__context__
    return False
