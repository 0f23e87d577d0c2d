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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langchain_core.tracers.langchain import LangChainTracer
from langsmith import Client
from langsmith import run_helpers as rh
from langsmith import schemas as ls_schemas
from langsmith import utils as ls_utils
from langsmith.evaluation import EvaluationResult, RunEvaluator
from pydantic import BaseModel, Field

from langchain_memalign.judge import MemAlignJudge
from langchain_memalign.langsmith._api import LangSmithAPI, RunRecord, RunRef
from langchain_memalign.langsmith._fields import (
    MISSING,
    comment_digest,
    distance,
    get_path,
    score_fields,
)
from langchain_memalign.langsmith.source import FeedbackMapping
from langchain_memalign.result import JudgeResult, label_of
from langchain_memalign.scale import Scale

logger = logging.getLogger(__name__)

CasePreparer = Callable[[ls_schemas.Run, ls_schemas.Example | None], dict[str, Any]]
_FEEDBACK_NS = uuid.UUID("6f1c1f0e-8a51-4d55-9d4f-6d656d616c67")


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


def _mark(
    judge: MemAlignJudge,
    comment: str | None,
    guideline_ids: Sequence[str] | None,
    episode_ids: Sequence[str] | None,
) -> dict[str, Any]:
    return {
        "memalign_judge": judge.config.name,
        "memalign_comment": comment_digest(comment),
        "guideline_ids": list(guideline_ids or []),
        "episode_ids": list(episode_ids or []),
    }


@contextlib.contextmanager
def _no_upload_when_local() -> Iterator[None]:
    """Keep the judge's LangChain runs off the server when tracing is "local".

    `evaluate(..., upload_results=False)` traces evaluators in "local" mode,
    which LangChain's tracer takes for "on" and would upload; the judge then
    runs untraced instead.
    """
    if rh.get_tracing_context().get("enabled") == "local":
        with rh.tracing_context(enabled=False):
            yield
    else:
        yield


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
        with _no_upload_when_local():
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
        with _no_upload_when_local():
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
        with _no_upload_when_local():
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
        with _no_upload_when_local():
            return await judge.ainvoke(case, config)
    from langsmith import testing

    with testing.trace_feedback(name=judge.config.name):
        result = await judge.ainvoke(case, config)
        _log_verdict(judge, result)
    return result


# -- verdicts on production runs -------------------------------------------------------------


class Verdict(BaseModel):
    """The judge's verdict on one LangSmith run."""

    run_id: str
    key: str
    score: Any = None
    comment: str | None = None
    guideline_ids: list[str] = Field(default_factory=list)
    episode_ids: list[str] = Field(default_factory=list)
    uncertainty: float = Field(
        default=1.0,
        description="How much the most similar past cases disagree with the verdict, "
        "closest first weighted most: 0 (all agree) to 1 (all disagree, or none known).",
    )
    judge_run_id: str | None = Field(default=None, description="The judge's traced run.")
    feedback_id: str | None = Field(
        default=None, description="The model feedback holding the verdict, when written."
    )
    kept_correction: bool = Field(
        default=False,
        description="A reviewer had corrected the earlier verdict: it was left as corrected.",
    )


def uncertainty(judge: MemAlignJudge, result: JudgeResult) -> float:
    """How unsure a verdict is, from the expert labels of the cases it recalled.

    The retrieved episodes come most similar first; each one disagreeing
    with the verdict adds its weight (1, 1/2, 1/3...). A verdict with no
    similar past case is maximally unsure (1.0).
    """
    ids = list((result.get("metadata") or {}).get("episode_ids") or [])
    stored = judge.memory.feedback(ids) if ids else {}
    pairs = [(1.0 / (rank + 1), stored[i].value) for rank, i in enumerate(ids) if i in stored]
    if not pairs:
        return 1.0
    total = sum(w for w, _ in pairs)
    return sum(w * distance(judge.scale, label_of(result), v) for w, v in pairs) / total


def _case(run: RunRecord, mapping: FeedbackMapping) -> dict[str, Any]:
    root = {"run": {"id": run.id, "name": run.name, "inputs": run.inputs,
                    "outputs": run.outputs, "extra": run.extra}}  # fmt: skip

    def pick(path: str | None) -> Any:
        value = MISSING if path is None else get_path(root, path)
        return None if value is MISSING else value

    ref = mapping.reference_outputs
    return {
        "inputs": pick(mapping.inputs),
        "outputs": pick(mapping.outputs),
        "reference_outputs": pick(ref) if ref and ref.startswith("run.") else None,
    }


def _judge_runs(
    judge: MemAlignJudge,
    runs: Sequence[RunRecord],
    *,
    client: Client | None = None,
    trace: bool = False,
    mapping: FeedbackMapping | None = None,
    tracing_project: str = "evaluators",
    max_concurrency: int = 4,
) -> list[Verdict]:
    """Judge LangSmith runs (as the integration reads them), in one batch.

    With `trace`, each judgment is traced to `tracing_project` under a known
    run id (`Verdict.judge_run_id`), so that feedback can link to it.
    """
    if not runs:
        return []
    mapping = mapping or FeedbackMapping()
    cases = [_case(run, mapping) for run in runs]
    judge_run_ids = [uuid.uuid4() for _ in runs]
    tracer = LangChainTracer(client=client, project_name=tracing_project) if trace else None
    configs: list[RunnableConfig] = []
    for rid in judge_run_ids:
        config: RunnableConfig = {"max_concurrency": max_concurrency, "run_name": judge.config.name}
        if tracer is not None:
            config.update({"callbacks": [tracer], "run_id": rid})
        configs.append(config)
    results = judge.batch(cases, configs)
    if tracer is not None:
        tracer.wait_for_futures()
    verdicts = []
    for run, result, rid in zip(runs, results, judge_run_ids, strict=True):
        meta = result.get("metadata") or {}
        verdicts.append(
            Verdict(
                run_id=run.id,
                key=result["key"],
                score=label_of(result),
                comment=result.get("comment"),
                guideline_ids=list(meta.get("guideline_ids") or []),
                episode_ids=list(meta.get("episode_ids") or []),
                uncertainty=uncertainty(judge, result),
                judge_run_id=str(rid) if trace else None,
            )
        )
    return verdicts


def _write_verdict(
    judge: MemAlignJudge, client: Client, run: RunRecord, verdict: Verdict
) -> Verdict:
    """Write a verdict on its run as model feedback (see `write_verdicts`); returns it updated.

    The feedback id is stable per judge and run, so writing again rewrites the
    previous verdict in place (`update_feedback`: its score, value and comment),
    unless a reviewer has corrected it: then it is left as is. Its source info
    (the judge's mark) cannot be updated and stays that of the first verdict.
    """
    fid = verdict_feedback_id(judge, run.id)
    try:
        existing: ls_schemas.Feedback | None = client.read_feedback(fid)
    except ls_utils.LangSmithNotFoundError:
        existing = None
    if existing is not None and existing.correction not in (None, {}, ""):
        return verdict.model_copy(update={"feedback_id": fid, "kept_correction": True})
    if existing is not None:
        # In place, with the API for it: deleting and re-creating the id would leave the
        # run without a verdict in between, and reuse an id the service had deleted.
        fields = score_fields(judge.scale, verdict.score)
        client.update_feedback(
            fid,
            score=fields.get("score"),
            value=fields.get("value"),
            comment=verdict.comment,
        )
        return verdict.model_copy(update={"feedback_id": fid})
    client.create_feedback(
        run.id,
        judge.config.name,
        **score_fields(judge.scale, verdict.score),
        comment=verdict.comment,
        feedback_source_type="model",
        source_run_id=verdict.judge_run_id,
        source_info=_mark(judge, verdict.comment, verdict.guideline_ids, verdict.episode_ids),
        feedback_id=fid,
        session_id=run.project_id,
    )
    return verdict.model_copy(update={"feedback_id": fid})


def verdict_feedback_id(judge: MemAlignJudge, run_id: str) -> str:
    """The id of the model feedback holding a judge's verdict on a run (stable)."""
    return str(uuid.uuid5(_FEEDBACK_NS, f"{judge.config.name}:{run_id}"))


def write_verdicts(
    judge: MemAlignJudge,
    client: Client | None = None,
    runs: Sequence[RunRef] | None = None,
    *,
    project: str | uuid.UUID | None = None,
    limit: int | None = None,
    mapping: FeedbackMapping | None = None,
    tracing_project: str = "evaluators",
    max_concurrency: int = 4,
) -> list[Verdict]:
    """Judge production runs and write each verdict as model feedback.

    Each judgment is traced to `tracing_project`, and its verdict is written
    on the run as `model` feedback on the judge's key, linked to that trace
    (`source_run_id`), with the rationale as comment. A reviewer can correct
    it in the LangSmith UI; `LangSmithFeedbackSource` turns the correction
    into the judge's strongest feedback. Writing again replaces the previous
    verdict unless a reviewer corrected it.

    Args:
        judge: The judge.
        client: A `langsmith.Client` (default: from the environment).
        runs: The runs to judge (ids or `Run` objects)...
        project: ...or a project whose root runs to judge (newest first).
        limit: At most this many runs of the project.
        mapping: Which run fields are the case's inputs and outputs.
        tracing_project: Where the judge's runs are traced.
        max_concurrency: Judgments in parallel.
    """
    client = client or Client()
    records = LangSmithAPI.of(client).records(runs, project, limit)
    verdicts = _judge_runs(
        judge,
        records,
        client=client,
        trace=True,
        mapping=mapping,
        tracing_project=tracing_project,
        max_concurrency=max_concurrency,
    )
    return [_write_verdict(judge, client, r, v) for r, v in zip(records, verdicts, strict=True)]


async def awrite_verdicts(
    judge: MemAlignJudge,
    client: Client | None = None,
    runs: Sequence[RunRef] | None = None,
    **kwargs: Any,
) -> list[Verdict]:
    """Async twin of `write_verdicts` (runs off the event loop)."""
    return await asyncio.to_thread(write_verdicts, judge, client, runs, **kwargs)
