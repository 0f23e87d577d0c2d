"""One `align`, `unalign` or `calibrate` call on a judge's memory: one transaction, one report.

The work is the graphs' (`graphs.align`): this runs the align or unalign graph inside
one `JudgeMemory.atomic` unit, which holds the memory's write lock and makes the call
one transaction (all or nothing, on a folder or a database); turns a failure into the
documented `AlignFailedError`; and builds the report from the graph's final state
and the guidelines before and after.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from langchain_memalign.errors import (
    AlignFailedError,
    MemAlignError,
    MemoryUnavailableError,
    ReflectionError,
    UnknownFeedbackError,
)
from langchain_memalign.feedback import Feedback
from langchain_memalign.graphs.align_state import AlignState, UnalignState
from langchain_memalign.graphs.calibrate import ScoreCalibrator
from langchain_memalign.graphs.judge import JudgeNodes
from langchain_memalign.graphs.score_first import grade_before_learning
from langchain_memalign.memory.calibration import MAX_LEVELS, calibrates
from langchain_memalign.memory.judge_memory import JudgeMemory
from langchain_memalign.reports import AlignReport, CalibrationReport, UnalignReport, Usage
from langchain_memalign.scale import Scale


class AlignmentRun:
    """Runs `align`, `unalign` and `calibrate` for one judge (see the module doc)."""

    def __init__(
        self,
        memory: JudgeMemory,
        align_graph: CompiledStateGraph[AlignState, None, AlignState, AlignState],
        unalign_graph: CompiledStateGraph[UnalignState, None, UnalignState, UnalignState],
        judge_nodes: JudgeNodes | None = None,
    ) -> None:
        self.memory = memory
        self.align_graph = align_graph
        self.unalign_graph = unalign_graph
        self.judge_nodes = judge_nodes

    def align(
        self,
        items: list[Feedback],
        config: RunnableConfig,
        *,
        raise_on_failure: bool,
        prior_verdicts: dict[str, tuple[Any, str]] | None = None,
        score_first: bool = False,
    ) -> AlignReport:
        """Learn from validated feedback (see `MemAlignJudge.align`).

        One transaction: forgetting what changed items fed, storing, merging,
        validating and consolidating commit together or not at all. With
        `score_first`, the new items without a verdict in `prior_verdicts` are
        graded first, inside the transaction: no other align changes the memory
        between their grading and their learning.
        """
        started = time.perf_counter()
        mem = self.memory
        prior = dict(prior_verdicts or {})
        graded: dict[str, Any] = {}
        first_usage, first_errors = Usage(), list[str]()
        # `atomic` holds the write lock; outside it, so that a database memory that
        # cannot take its writer lock fails the call like any later step does.
        with _rolled_back_as_documented("align", mem.store.supports_atomic), mem.atomic():
            if score_first and self.judge_nodes is not None:
                known = mem.store.feedback_state(fb.id for fb in items)
                new = [fb for fb in items if fb.id not in known and fb.id not in prior]
                graded, first_usage, first_errors = grade_before_learning(
                    mem, self.judge_nodes, new, config
                )
                prior.update({fid: (v, "score_first") for fid, v in graded.items()})
            before = {g.id: (g.text, g.source_ids) for g in mem.guidelines}
            out = self.align_graph.invoke({"feedback": items, "prior_verdicts": prior}, config)
            after = {g.id: (g.text, g.source_ids) for g in mem.guidelines}
        report = AlignReport(
            added=list(out.get("added") or []),
            updated=list(out.get("updated") or []) + list(out.get("retagged") or []),
            unchanged=list(out.get("unchanged") or []),
            guidelines_added=sorted(after.keys() - before.keys()),
            guidelines_removed=sorted(before.keys() - after.keys()),
            guidelines_updated=sorted(
                g for g in after.keys() & before.keys() if after[g] != before[g]
            ),
            failed=sorted(set(out.get("failed") or [])),
            guidelines_rejected=list(out.get("rejected") or []),
            validation=list(out.get("validation") or []),
            checks=list(out.get("check_reports") or []),
            calibration=out.get("calibration"),
            graded_first=list(graded),
            agreement_recorded=list(out.get("recorded") or []),
            errors=first_errors + list(out.get("errors") or []),
            usage=first_usage + Usage.sum(out.get("usages") or []),
            seconds=time.perf_counter() - started,
        )
        if report.failed and raise_on_failure:
            raise ReflectionError(
                f"reflection failed for feedback {report.failed}; it is stored and will be "
                f"retried by the next align. Errors: {'; '.join(report.errors)}",
                report=report,
            )
        return report

    def unalign(self, ids: list[str], config: RunnableConfig) -> UnalignReport:
        """Remove feedback and everything derived from it (see `MemAlignJudge.unalign`)."""
        started = time.perf_counter()
        ids = list(dict.fromkeys(ids))
        if not ids:
            return UnalignReport(seconds=time.perf_counter() - started)
        mem = self.memory
        # `atomic` holds the write lock; outside it, so that a database memory that
        # cannot take its writer lock fails the call like any later step does.
        with _rolled_back_as_documented("unalign", mem.store.supports_atomic), mem.atomic():
            out = self.unalign_graph.invoke({"ids": ids}, config)
        return UnalignReport(
            removed=ids,
            guidelines_removed=list(out.get("removed") or []),
            guidelines_rederived=list(out.get("rederived") or []),
            checks=list(out.get("check_reports") or []),
            errors=list(out.get("errors") or []),
            usage=out.get("usage") or Usage(),
            seconds=time.perf_counter() - started,
        )

    def calibrate(
        self, calibrator: ScoreCalibrator, ids: list[str] | None, config: RunnableConfig
    ) -> CalibrationReport:
        """Grade seen cases again for score calibration (see `MemAlignJudge.calibrate`)."""
        mem = self.memory
        cfg = mem.config
        if not calibrates(cfg.scale):
            raise ValueError(
                f"judge {cfg.name!r}: score calibration is for integer scales of up to "
                f"{MAX_LEVELS} values, not {_scale_name(cfg.scale)}"
            )
        if not cfg.options.calibration.enabled:
            raise ValueError(f"judge {cfg.name!r}: score calibration is off (options.calibration)")
        with _rolled_back_as_documented("calibrate", mem.store.supports_atomic), mem.atomic():
            wanted = mem.store.feedback_ids() if ids is None else ids
            found = mem.store.get_feedback(wanted)
            missing = [i for i in wanted if i not in found]
            if missing:
                raise UnknownFeedbackError(missing)
            cases = [found[i] for i in wanted]
            report = calibrator.run(cases, config, max_calls=len(cases))
        return report or CalibrationReport(pairs=len(mem.calibration.pairs))


@contextmanager
def _rolled_back_as_documented(operation: str, whole: bool = True) -> Iterator[None]:
    """Turn a raw error that ended a (rolled-back) run into `AlignFailedError`.

    The package's own errors pass unchanged, except `MemoryUnavailableError`;
    anything else (a provider's connection error, a timeout, a bug) is named in
    the message and kept as `__cause__`.
    """
    try:
        yield
    except MemAlignError as e:
        # A database memory that lost its server is, for this call, like a provider
        # failing: report it as the failed align/unalign, with what was kept.
        if not isinstance(e, MemoryUnavailableError):
            raise
        _raise_align_failed(operation, whole, e)
    except Exception as e:
        _raise_align_failed(operation, whole, e)


def _raise_align_failed(operation: str, whole: bool, e: BaseException) -> NoReturn:
    """Raise `AlignFailedError` for `e`, saying what the failed run left in memory."""
    kind = f"{type(e).__module__}.{type(e).__qualname__}".removeprefix("builtins.")
    # `whole`: the store ran the call as one transaction (both backends do). A store
    # without `supports_atomic` commits step by step: only the failed step was rolled back.
    outcome = (
        "was rolled back; the memory is unchanged"
        if whole
        else "stopped; its failed step was rolled back, steps committed before it are kept"
    )
    raise AlignFailedError(
        f"{operation} failed and {outcome}. Cause: {kind}: {e}",
        operation=operation,
    ) from e


def _scale_name(scale: Scale) -> str:
    if scale.kind == "numeric":
        whole = "integer" if scale.integer else "continuous"
        return f"a {whole} {scale.describe_range()} scale"
    return {"bool": "a pass/fail scale", "pairwise": "a pairwise scale"}.get(
        scale.kind, "a categorical scale"
    )
