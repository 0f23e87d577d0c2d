"""Watch a LangSmith project: judge new runs, queue some for review, learn from the reviews.

```python
monitor = JudgeMonitor(judge, client, project="support-bot", sampling_rate=0.2)
cycle = monitor.run_once()        # one cycle (from cron), or monitor.watch(interval=300)
print(cycle.summary())
```

A cycle pulls the reviews completed in the judge's annotation queue (recording, for each,
whether the judge's earlier verdict on that run agreed, before aligning on it), then judges
the project's new root runs that have ended without error, writes each verdict as model
feedback as soon as it is known and sends the runs most worth a human look to the queue.
It is resumable: a run that already carries the judge's verdict is never judged again, and
sampling is decided by the run's id, so a run left out stays left out after a restart. A
judgment that fails is retried by the next cycles, `MAX_ATTEMPTS` times in all (counted in
the judge's memory, so restarts count too), unless every judgment of its cycle failed on
the model provider (an outage: not counted against the runs); the judge's own calls are
not traced unless asked for (`trace`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import random
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from langsmith import Client
from langsmith import run_helpers as rh
from langsmith import utils as ls_utils
from pydantic import BaseModel, Field

from langchain_memalign.judge import MemAlignJudge
from langchain_memalign.langsmith import _api_base
from langchain_memalign.langsmith._api import LangSmithAPI, RunRecord
from langchain_memalign.langsmith._fields import distance
from langchain_memalign.langsmith._source_types import SyncReport
from langchain_memalign.langsmith._verdicts import Verdict, _judgments, _write_verdict
from langchain_memalign.langsmith.queue import JudgeAnnotationQueue
from langchain_memalign.langsmith.source import FeedbackMapping

__all__ = ["JudgeMonitor", "MonitorCycle", "ReviewAgreement"]

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
"""Judgments of a run that may fail (one a cycle) before the run is given up."""
STATE_PREFIX = "langsmith_watch:"


class ReviewAgreement(BaseModel):
    """A review, and the judge's verdict on the same run written before it learned from it."""

    run_id: str
    feedback_id: str
    judge: Any
    expert: Any
    agrees: bool


class MonitorCycle(BaseModel):
    """What one monitoring cycle did."""

    pulled: SyncReport = Field(default_factory=SyncReport)
    agreement: list[ReviewAgreement] = Field(
        default_factory=list,
        description="Each newly learned review beside the judge's earlier verdict on its run.",
    )
    considered: int = Field(
        default=0, description="The project's latest root runs without error read."
    )
    already_judged: int = Field(default=0, description="Runs that carry the judge's verdict.")
    pending: int = Field(
        default=0, description="Runs still running (no end time): a later cycle judges them."
    )
    given_up: list[str] = Field(
        default_factory=list,
        description=f"Runs no longer judged: their judgment failed {MAX_ATTEMPTS} times.",
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
        if not self.agreement:
            return None
        return sum(a.agrees for a in self.agreement) / len(self.agreement)

    def summary(self) -> str:
        """One line: reviews learned (with prior agreement), runs judged, runs sent."""
        acc = self.accuracy
        agreed = "" if acc is None else f" (judge agreed with {acc:.0%} before learning)"
        counts = ((len(self.failed), "failed"), (len(self.given_up), "given up"))
        trouble = "".join(f"{n} {what}; " for n, what in counts if n)
        cut = ", rate limited: cut short" if self.rate_limited else ""
        if self.outage:
            trouble += "model outage (not counted against the runs); "
        return (
            f"{len(self.pulled.added) + len(self.pulled.updated)} reviews learned{agreed}; "
            f"{len(self.verdicts)} of {self.considered} runs judged "
            f"({self.already_judged} already, {self.pending} running, "
            f"{self.sampled_out} sampled out, {self.filtered_out} filtered); "
            f"{trouble}{len(self.sent)} sent for review; {self.seconds:.1f}s{cut}"
        )


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
        scan: At most this many of the project's latest root runs are read a cycle.
        review_limit: At most this many runs a cycle go to the queue: the judge's
            least sure verdicts first.
        review_sample: Also send this share of the other judged runs, at random, so
            reviewers see verdicts the judge is sure of too.
        mapping: Which run fields are the case's inputs and outputs.
        seed: Seeds the review sample; also salts the sampling decision.
        trace: Trace the judge's own calls (about 20 runs a judgment) to the
            "evaluators" project, each verdict linked to its trace. Off by default:
            the judgments then run untraced, whatever the environment's tracing says.
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
    ) -> None:
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
        self._random = random.Random(seed)
        self._salt = f"{judge.config.name}:{seed}"

    def run_once(self) -> MonitorCycle:
        """One cycle: learn from completed reviews, judge new runs, send some for review."""
        started = time.perf_counter()
        cycle = MonitorCycle()
        try:
            cycle.pulled = self.queue.pull()
            cycle.agreement = self._agreement(cycle.pulled)
            self._judge_new(cycle)
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

    def _agreement(self, pulled: SyncReport) -> list[ReviewAgreement]:
        """Each newly learned review beside the verdict the judge had written on its run.

        The pull recorded them in the judge's agreement series before learning the
        reviews (`LangSmithFeedbackSource`): read back from the memory, no call.
        """
        learned = [*pulled.added, *pulled.updated]
        if not learned:
            return []
        points = self.judge.memory.store.prequential(learned)
        stored = self.judge.memory.feedback([p["feedback_id"] for p in points if p["feedback_id"]])
        scale = self.judge.scale
        out: list[ReviewAgreement] = []
        for p in points:
            item = stored.get(p["feedback_id"] or "")
            if item is None or p["source"] != "langsmith":
                continue
            run_id = ((item.metadata or {}).get("langsmith") or {}).get("run_id")
            if run_id:
                out.append(
                    ReviewAgreement(
                        run_id=str(run_id),
                        feedback_id=item.id,
                        judge=p["judge"],
                        expert=p["expert"],
                        agrees=distance(scale, p["judge"], p["expert"]) == 0,
                    )
                )
        return out

    def _judge_new(self, cycle: MonitorCycle) -> None:
        self.queue.ensure()  # the key's feedback config on the judge's scale, or an error
        project = self.api.project(self.project)
        # An errored run has nothing to judge: the service leaves them out of the scan.
        runs = self.api.project_runs(project, limit=self.scan, with_errors=False)
        cycle.considered = len(runs)
        judged = {
            str(fb.run_id)
            for fb in self.api.list_feedback(
                key=self.judge.config.name,
                source_types=["model"],
                run_ids=[r.id for r in runs],
            )
        }
        fresh = [r for r in runs if r.id not in judged]
        cycle.already_judged = len(runs) - len(fresh)
        # A run still streaming has no outputs yet: a later cycle judges it once it ended.
        ended = [r for r in fresh if r.end_time is not None]
        cycle.pending = len(fresh) - len(ended)
        state_key = f"{STATE_PREFIX}{self.judge.config.name}:{project.id}"
        failures = self._failures(state_key, {r.id for r in fresh})
        cycle.given_up = [r.id for r in ended if failures.get(r.id, 0) >= MAX_ATTEMPTS]
        to_try = [r for r in ended if r.id not in cycle.given_up]
        sampled = [r for r in to_try if _sampled(r.id, self.sampling_rate, self._salt)]
        cycle.sampled_out = len(to_try) - len(sampled)
        chosen = [r for r in sampled if self.where is None or self.where(r)]
        cycle.filtered_out = len(sampled) - len(chosen)
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
                if failures.pop(run.id, None) is not None:
                    self._save_failures(state_key, failures)
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
        else:
            for run_id in errors:
                failures[run_id] = failures.get(run_id, 0) + 1
                logger.warning(
                    "judging run %s failed (%d of %d tries%s): %s",
                    run_id,
                    failures[run_id],
                    MAX_ATTEMPTS,
                    "" if failures[run_id] < MAX_ATTEMPTS else ", not tried again",
                    cycle.failed[run_id],
                )
            if errors:
                self._save_failures(state_key, failures)
        # In the runs' order (they were judged concurrently): the report, and which runs go
        # to review among equally sure verdicts, do not depend on which judgment ended first.
        order = {r.id: i for i, r in enumerate(chosen)}
        cycle.verdicts.sort(key=lambda v: order[v.run_id])
        cycle.failed = dict(sorted(cycle.failed.items(), key=lambda kv: order[kv[0]]))
        to_review = self._pick_for_review(chosen, cycle.verdicts)
        if to_review:
            cycle.sent = self.queue.send(to_review, select="all").run_ids

    def _failures(self, state_key: str, unjudged: set[str]) -> dict[str, int]:
        """How many judgments of each run failed, for the runs still without a verdict.

        Kept in the judge's memory, so that a restart (or cron's `--once`) counts them
        too; runs judged since, or no longer among those read, are forgotten.
        """
        with self.judge.memory.integration_state(state_key) as saved:
            stored: dict[str, int] = (saved.get() or {}).get("failed") or {}
            kept = {r: n for r, n in stored.items() if r in unjudged}
            if kept != stored:
                saved.set({"failed": kept} if kept else None)
        return kept

    def _save_failures(self, state_key: str, failures: dict[str, int]) -> None:
        with self.judge.memory.integration_state(state_key) as saved:
            saved.set({"failed": failures} if failures else None)

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
