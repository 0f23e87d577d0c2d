"""One `align` or `unalign` run over a judge's memory: what the judge's methods do.

`MemAlignJudge.align` validates the feedback and hands it here: sort it into added,
changed and unchanged items, forget what changed items fed, batch what needs reflecting,
run the alignment graph under the memory's write lock, and report. `unalign` removes
feedback through the graph's forget step.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

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
from langchain_memalign.graphs.align import AlignNodes
from langchain_memalign.graphs.align_state import AlignState
from langchain_memalign.graphs.calibrate import ScoreCalibrator
from langchain_memalign.graphs.pairs import contrast_groups
from langchain_memalign.memory.calibration import MAX_LEVELS, calibrates
from langchain_memalign.memory.judge_memory import JudgeMemory
from langchain_memalign.reports import AlignReport, CalibrationReport, UnalignReport, Usage
from langchain_memalign.scale import Scale


def mixed_batches(items: list[Feedback], size: int) -> list[list[Feedback]]:
    """Reflection batches that each hold every score present, as evenly as possible.

    A rule's condition is learned from contrast: a batch of only failing cases invites
    a rule that also catches the passing ones.
    """
    if len(items) <= size:
        return [items] if items else []
    by_value: dict[str, list[Feedback]] = {}
    for fb in items:
        by_value.setdefault(repr(fb.value), []).append(fb)
    n = -(-len(items) // size)
    batches: list[list[Feedback]] = [[] for _ in range(n)]
    i = 0
    for group in by_value.values():
        for fb in group:
            batches[i % n].append(fb)
            i += 1
    return batches


class AlignmentRun:
    """Runs `align` and `unalign` for one judge (see the module doc)."""

    def __init__(
        self,
        memory: JudgeMemory,
        graph: CompiledStateGraph[AlignState, None, AlignState, AlignState],
        nodes: AlignNodes,
    ) -> None:
        self.memory = memory
        self.graph = graph
        self.nodes = nodes

    def align(
        self, items: list[Feedback], config: RunnableConfig, *, raise_on_failure: bool
    ) -> AlignReport:
        """Learn from validated feedback (see `MemAlignJudge.align`).

        One transaction: forgetting what changed items fed, storing, merging,
        validating and consolidating commit together or not at all.
        """
        started = time.perf_counter()
        mem = self.memory
        # `atomic` holds the write lock; outside it, so that a database memory that
        # cannot take its writer lock fails the call like any later step does.
        with _rolled_back_as_documented("align", mem.store.supports_atomic), mem.atomic():
            before = {g.id: (g.text, g.source_ids) for g in mem.guidelines}
            known = mem.store.feedback_state(fb.id for fb in items)
            added = [fb for fb in items if fb.id not in known]
            updated = [
                fb for fb in items if fb.id in known and known[fb.id][0] != fb.content_hash()
            ]
            same = [fb for fb in items if fb.id in known and known[fb.id][0] == fb.content_hash()]
            # Same case, verdict and rationale but new metadata (or date): nothing to
            # learn again, but the stored item takes the new fields.
            stored = {
                i: f.model_dump(mode="json")
                for i, f in mem.store.get_feedback(fb.id for fb in same).items()
            }
            retagged = [fb for fb in same if stored.get(fb.id) != fb.model_dump(mode="json")]
            unchanged = [fb for fb in same if fb not in retagged]
            if retagged:
                with mem.write() as w:
                    for fb in retagged:
                        w.put_feedback(fb, reflected=known[fb.id][1])
                    w.log("retag", [fb.id for fb in retagged], [])
            usage = Usage()
            errors: list[str] = []
            if updated:
                forgot = self.nodes.forget([fb.id for fb in updated], delete=False, config=config)
                usage, errors = usage + forgot.usage, errors + forgot.errors
            fresh = {fb.id for fb in added + updated}
            pending = [i for i in mem.store.pending_reflection() if i not in fresh]
            to_reflect = [fb for fb in added + updated if fb.rationale]
            to_reflect += [fb for fb in mem.store.get_feedback(pending).values() if fb.rationale]
            state: AlignState = {"to_store": added + updated, "to_reflect": to_reflect}
            if mem.config.options.reflection.mode == "pairs" and to_reflect:
                # Each item beside the most similar case graded otherwise; the vectors
                # are the ones `merge` stores, embedded once.
                texts = [mem.case_text(fb.inputs, fb.outputs) for fb in to_reflect]
                vectors = mem.embed(texts, usage)
                state["batches"] = contrast_groups(mem, to_reflect, vectors)
                state["case_vectors"] = {
                    fb.id: (mem.text_hash(t), v)
                    for fb, t, v in zip(to_reflect, texts, vectors, strict=True)
                }
            else:
                state["batches"] = mixed_batches(
                    to_reflect, mem.config.options.reflection.batch_size
                )
            out = self.graph.invoke(state, config)
            after = {g.id: (g.text, g.source_ids) for g in mem.guidelines}
        report = AlignReport(
            added=[fb.id for fb in added],
            updated=[fb.id for fb in updated + retagged],
            unchanged=[fb.id for fb in unchanged],
            guidelines_added=sorted(after.keys() - before.keys()),
            guidelines_removed=sorted(before.keys() - after.keys()),
            guidelines_updated=sorted(
                g for g in after.keys() & before.keys() if after[g] != before[g]
            ),
            failed=sorted(set(out.get("failed") or [])),
            guidelines_rejected=list(out.get("rejected") or []),
            validation=list(out.get("validation") or []),
            calibration=out.get("calibration"),
            errors=errors + list(out.get("errors") or []),
            usage=usage + Usage.sum(out.get("usages") or []),
            seconds=time.perf_counter() - started,
        )
        if report.failed and raise_on_failure:
            raise ReflectionError(
                f"reflection failed for feedback {report.failed}; it is stored and will be "
                f"retried by the next align. Errors: {'; '.join(report.errors)}",
                report=report,
            )
        return report

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
            known = mem.store.feedback_state(ids)
            missing = [i for i in ids if i not in known]
            if missing:
                raise UnknownFeedbackError(missing)
            result = self.nodes.forget(ids, delete=True, config=config)
        return UnalignReport(
            removed=ids,
            guidelines_removed=result.removed,
            guidelines_rederived=result.rederived,
            errors=result.errors,
            usage=result.usage,
            seconds=time.perf_counter() - started,
        )


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
    # `whole`: the store ran the call as one transaction (a folder). A database
    # store commits step by step, so only the failed step was rolled back.
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
