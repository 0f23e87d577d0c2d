"""Calibration step of alignment: grade newly aligned cases as unseen and keep the pairs.

After an align has stored its feedback (and validated its guidelines), each new or
changed item on an integer scale is graded with the memory as it now is, its own past
case left out (`seen_cases.grade_unseen`). The judge's score beside the expert's is one
calibration pair (`memory.calibration`). A grading that showed a past case is not kept:
the calibration corrects judgments that have no past case to go by, and is applied to
those only (`graphs.judge`). Cost: one judge call per item, at most
`CalibrationOptions.max_calls` an align; items past that keep no pair. A grading whose
answer stays unusable keeps no pair either; a provider error fails the whole call
(`graphs._failures`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from langchain_core.runnables import RunnableConfig, RunnableLambda

from langchain_memalign.feedback import Feedback
from langchain_memalign.graphs._failures import raise_unless_unusable
from langchain_memalign.graphs.align_state import Calibrated, Classified
from langchain_memalign.graphs.seen_cases import grade_unseen
from langchain_memalign.memory.calibration import CalibrationPair, calibrates
from langchain_memalign.memory.judge_memory import JudgeMemory
from langchain_memalign.reports import CalibrationReport, Usage

if TYPE_CHECKING:
    from langchain_memalign.graphs.judge import JudgeNodes


class ScoreCalibrator:
    """Grades aligned cases as unseen and stores their calibration pairs."""

    def __init__(self, memory: JudgeMemory, judge_nodes: JudgeNodes) -> None:
        self.memory = memory
        self.judge_nodes = judge_nodes

    def run(
        self, cases: Sequence[Feedback], config: RunnableConfig, *, max_calls: int | None = None
    ) -> CalibrationReport | None:
        """Grade `cases` as unseen and commit their pairs; None if there is nothing to do.

        At most `max_calls` cases are graded (by default `options.calibration.max_calls`). Nothing
        is done when the judge does not calibrate or no case is given. A provider error in any
        grading is raised, before anything is written: every case given loses its old pair, so
        committing after an outage would drop the pairs of the cases it failed.
        """
        mem = self.memory
        cfg = mem.config
        opts = cfg.options.calibration
        if not opts.enabled or not calibrates(cfg.scale) or not cases:
            return None
        budget = opts.max_calls if max_calls is None else max_calls
        graded = list(cases)[:budget]
        vectors = mem.store.episode_vectors(fb.id for fb in graded)
        guidelines_of = {fb.id: mem.select_guidelines(vectors.get(fb.id)) for fb in graded}

        def one(fb: Feedback) -> tuple[CalibrationPair | None, Usage]:
            verdict, shown = grade_unseen(
                mem, self.judge_nodes, fb, guidelines_of[fb.id], vectors.get(fb.id), config
            )
            if shown:
                return None, verdict.usage
            expert = cfg.scale.validate_value(fb.value, feedback_id=fb.id)
            return CalibrationPair(fb.id, verdict.score, expert), verdict.usage

        outcomes = RunnableLambda(one).batch(graded, config, return_exceptions=True)
        raise_unless_unusable(outcomes)
        usage = Usage()
        pairs: list[CalibrationPair] = []
        past_case_shown: list[str] = []
        failed: list[str] = []
        for fb, out in zip(graded, outcomes, strict=True):
            if isinstance(out, BaseException):
                usage = usage + (getattr(out, "usage", None) or Usage(llm_calls=1))
                failed.append(fb.id)
                continue
            pair, u = out
            usage = usage + u
            if pair is None:
                past_case_shown.append(fb.id)
            else:
                pairs.append(pair)
        # Every case of this align loses its old pair (it may have changed); those not
        # graded now have none until an align grades them again.
        calibration = mem.stored_calibration().updated(pairs, [fb.id for fb in cases])
        with mem.write() as w:
            w.put_calibration(calibration)
            w.log("calibrate", [p.feedback_id for p in pairs])
        return CalibrationReport(
            graded=[p.feedback_id for p in pairs],
            past_case_shown=past_case_shown,
            over_budget=[fb.id for fb in cases[len(graded) :]],
            pairs=len(calibration.pairs),
            mapping={str(k): v for k, v in sorted(calibration.mapping.items())},
            errors=[f"calibration could not grade seen cases {failed}"] if failed else [],
            usage=usage,
        )


class Calibrate:
    """The `calibrate` node: the cases this align stored, graded by `calibrator` (if any)."""

    def __init__(self, calibrator: ScoreCalibrator | None) -> None:
        self.calibrator = calibrator

    def __call__(self, state: Classified, config: RunnableConfig) -> Calibrated:
        """On integer scales, grade the stored cases as unseen and keep calibration pairs."""
        if self.calibrator is None:
            return {}
        report = self.calibrator.run(state.get("to_store") or [], config)
        if report is None:
            return {}
        return {"calibration": report, "usages": [report.usage], "errors": report.errors}
