"""The judge's verdicts out to LangSmith: evaluator, pytest feedback, model feedback.

- `JudgeRunEvaluator(judge)`: a `RunEvaluator` for `langsmith.evaluate(...)`
  and `aevaluate(...)`; `judge_evaluator(judge)`: the same as a plain function
  `(inputs, outputs, reference_outputs) -> dict`. Both return the rationale as
  comment and the guideline and episode ids in the metadata.
- Inside a `@pytest.mark.langsmith` test, `invoke_and_log` (and the plain
  evaluator) trace the judgment as the test's feedback run and log the verdict
  as feedback, as openevals judges do.
- `write_verdicts(judge, client, project=...)`: judge production runs and
  write each verdict as model feedback linked to the judge's own traced run,
  so that reviewers can correct it in the LangSmith UI; the corrections come
  back through `LangSmithFeedbackSource`.

This module holds the evaluators and the pytest logging; `write_verdicts`
and `Verdict` live in `_verdicts` and are importable from here.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langsmith import run_helpers as rh
from langsmith import schemas as ls_schemas
from langsmith.evaluation import EvaluationResult, RunEvaluator

from langchain_memalign.judge import MemAlignJudge
from langchain_memalign.langsmith._fields import score_fields
from langchain_memalign.langsmith._verdicts import (
    Verdict,
    Verdicts,
    _mark,
    awrite_verdicts,
    uncertainty,
    verdict_feedback_id,
    write_verdicts,
)
from langchain_memalign.result import JudgeResult, label_of
from langchain_memalign.scale import Scale

__all__ = [
    "CasePreparer",
    "JudgeRunEvaluator",
    "Verdict",
    "Verdicts",
    "ainvoke_and_log",
    "ajudge_evaluator",
    "awrite_verdicts",
    "evaluation_result",
    "invoke_and_log",
    "judge_evaluator",
    "uncertainty",
    "verdict_feedback_id",
    "write_verdicts",
]

logger = logging.getLogger(__name__)

CasePreparer = Callable[[ls_schemas.Run, ls_schemas.Example | None], dict[str, Any]]


# -- evaluation results ------------------------------------------------------------------


def _verdict_fields(scale: Scale, score: Any) -> dict[str, Any]:
    if scale.kind == "bool":
        return {"score": bool(score)}
    return score_fields(scale, score)


def evaluation_result(
    judge: MemAlignJudge, result: JudgeResult, *, source_run_id: uuid.UUID | None = None
) -> EvaluationResult:
    """A judge result as a LangSmith `EvaluationResult`.

    Bool and numeric verdicts are the `score`; a category is the `value`
    (and its index the `score`). The rationale is the comment; the guideline
    and episode ids the judgment used are in the metadata.
    """
    metadata = dict(result.get("metadata") or {})
    return EvaluationResult(
        key=result["key"],
        **_verdict_fields(judge.scale, label_of(result)),
        comment=result.get("comment"),
        metadata={"judge": judge.config.name, **metadata},
        evaluator_info=_source_info(judge, result),
        source_run_id=source_run_id,
    )


def _source_info(judge: MemAlignJudge, result: JudgeResult) -> dict[str, Any]:
    """The feedback's source info: the judge's mark and the memory ids it used.

    LangSmith drops an evaluation result's `metadata` but keeps this. The mark
    (with a digest of the comment) lets a sync tell a reviewer's correction
    from the judge's own comment.
    """
    meta = result.get("metadata") or {}
    return _mark(judge, result.get("comment"), meta.get("guideline_ids"), meta.get("episode_ids"))


def _default_case(run: ls_schemas.Run, example: ls_schemas.Example | None) -> dict[str, Any]:
    return {
        "inputs": run.inputs if run.inputs else (example.inputs if example else None),
        "outputs": run.outputs,
        "reference_outputs": example.outputs if example else None,
    }


class JudgeRunEvaluator(RunEvaluator):
    """A `MemAlignJudge` as a LangSmith `RunEvaluator`.

    ```python
    langsmith.evaluate(target, data="my-dataset", evaluators=[JudgeRunEvaluator(judge)])
    ```

    Args:
        judge: The judge.
        prepare: Builds the judge's case `{"inputs", "outputs", "reference_outputs"}`
            from the run and its example; by default the run's inputs and outputs
            and the example's outputs as reference.
    """

    def __init__(self, judge: MemAlignJudge, *, prepare: CasePreparer | None = None) -> None:
        self.judge = judge
        self.prepare = prepare or _default_case

    @property
    def feedback_keys(self) -> list[str]:
        """The one key this evaluator writes: the judge's name."""
        return [self.judge.config.name]

    def _config(self, evaluator_run_id: uuid.UUID | None) -> tuple[RunnableConfig, Any]:
        if evaluator_run_id is None or rh.get_tracing_context().get("enabled") is not True:
            return {"run_name": self.judge.config.name}, None
        # Traced evaluators: the judge's run is the evaluator run the feedback links to.
        return {"run_name": self.judge.config.name, "run_id": evaluator_run_id}, evaluator_run_id

    def evaluate_run(
        self,
        run: ls_schemas.Run,
        example: ls_schemas.Example | None = None,
        evaluator_run_id: uuid.UUID | None = None,
    ) -> EvaluationResult:
        """Judge one run of an experiment."""
        config, source = self._config(evaluator_run_id)
        result = self.judge.invoke(self.prepare(run, example), config)
        return evaluation_result(self.judge, result, source_run_id=source)

    async def aevaluate_run(
        self,
        run: ls_schemas.Run,
        example: ls_schemas.Example | None = None,
        evaluator_run_id: uuid.UUID | None = None,
    ) -> EvaluationResult:
        """Async twin of `evaluate_run`."""
        config, source = self._config(evaluator_run_id)
        result = await self.judge.ainvoke(self.prepare(run, example), config)
        return evaluation_result(self.judge, result, source_run_id=source)

    def __repr__(self) -> str:
        return f"JudgeRunEvaluator({self.judge.config.name!r})"


def judge_evaluator(judge: MemAlignJudge) -> Callable[..., JudgeResult]:
    """The judge as a plain evaluator function for `langsmith.evaluate`.

    The function takes `(inputs, outputs, reference_outputs=None)` and returns
    a `JudgeResult` (with `evaluator_info`). Inside a
    `@pytest.mark.langsmith` test it also logs its verdict as feedback.
    """

    def evaluate(
        inputs: dict[str, Any], outputs: dict[str, Any], reference_outputs: Any = None
    ) -> JudgeResult:
        case = {"inputs": inputs, "outputs": outputs, "reference_outputs": reference_outputs}
        return _result_dict(judge, invoke_and_log(judge, case))

    evaluate.__name__ = evaluate.__qualname__ = judge.config.name
    return evaluate


def ajudge_evaluator(judge: MemAlignJudge) -> Callable[..., Awaitable[JudgeResult]]:
    """Async twin of `judge_evaluator`, for `langsmith.aevaluate`."""

    async def aevaluate(
        inputs: dict[str, Any], outputs: dict[str, Any], reference_outputs: Any = None
    ) -> JudgeResult:
        case = {"inputs": inputs, "outputs": outputs, "reference_outputs": reference_outputs}
        return _result_dict(judge, await ainvoke_and_log(judge, case))

    aevaluate.__name__ = aevaluate.__qualname__ = judge.config.name
    return aevaluate


def _result_dict(judge: MemAlignJudge, result: JudgeResult) -> JudgeResult:
    out = evaluation_result(judge, result).model_dump(
        include={"key", "score", "value", "comment", "metadata", "evaluator_info"}
    )
    return cast(JudgeResult, {k: v for k, v in out.items() if v is not None})


# -- pytest (@pytest.mark.langsmith) ---------------------------------------------------------


def _in_langsmith_test() -> bool:
    """Whether we run inside a `@pytest.mark.langsmith` test (its run is being traced).

    The plugin's test-case context variable outlives its test (an unmarked test
    after a marked one still sees it), so the current trace must be the test's.
    """
    # Private on purpose: langsmith has no public way to ask whether a
    # @pytest.mark.langsmith test is running; openevals reads the same variable.
    try:
        from langsmith.testing._internal import _TEST_CASE
    except ImportError:  # pragma: no cover - another langsmith layout
        return False
    test_case = _TEST_CASE.get()
    run_tree = rh.get_current_run_tree()
    if test_case is None or run_tree is None:
        return False
    return str(run_tree.trace_id) == str(test_case.run_id)


def _log_verdict(judge: MemAlignJudge, result: JudgeResult) -> None:
    from langsmith import testing

    testing.log_feedback(
        key=result["key"],
        **_verdict_fields(judge.scale, label_of(result)),
        comment=result.get("comment"),
        source_info=_source_info(judge, result),
    )


def invoke_and_log(
    judge: MemAlignJudge, case: dict[str, Any], config: RunnableConfig | None = None
) -> JudgeResult:
    """Judge a case; inside a `@pytest.mark.langsmith` test, also log the verdict.

    In a LangSmith pytest test the judgment is traced as the test's feedback
    run (`langsmith.testing.trace_feedback`) and the verdict is logged with
    `langsmith.testing.log_feedback`, as openevals evaluators do. Elsewhere it
    is `judge.invoke(case, config)`.
    """
    if not _in_langsmith_test():
        return judge.invoke(case, config)
    from langsmith import testing

    with testing.trace_feedback(name=judge.config.name):
        result = judge.invoke(case, config)
        _log_verdict(judge, result)
    return result


async def ainvoke_and_log(
    judge: MemAlignJudge, case: dict[str, Any], config: RunnableConfig | None = None
) -> JudgeResult:
    """Async twin of `invoke_and_log`."""
    if not _in_langsmith_test():
        return await judge.ainvoke(case, config)
    from langsmith import testing

    with testing.trace_feedback(name=judge.config.name):
        result = await judge.ainvoke(case, config)
        _log_verdict(judge, result)
    return result
