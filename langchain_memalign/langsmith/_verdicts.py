"""The judge's verdicts on production runs, written to LangSmith as model feedback.

`write_verdicts(judge, client, project=...)` judges production runs and
writes each `Verdict` on its run as model feedback on the judge's key,
linked to the judge's own traced run and marked as the judge's (`_mark`), so
that reviewers can correct it in the LangSmith UI and the correction comes
back through `LangSmithFeedbackSource`. `uncertainty` scores how much the
recalled past cases disagree with a verdict. Judging and writing are shared
with `JudgeAnnotationQueue` and `JudgeMonitor`: `_judgments` yields each
verdict (or the error judging its run) once known, `_judge_each` collects
them, writing each as it comes, and `_write_verdict` writes one.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tracers.langchain import LangChainTracer
from langsmith import Client
from langsmith import schemas as ls_schemas
from langsmith import utils as ls_utils
from pydantic import BaseModel, Field

from langchain_memalign.judge import MemAlignJudge
from langchain_memalign.langsmith._api import LangSmithAPI, RunRecord, RunRef
from langchain_memalign.langsmith._api_base import EARLIEST
from langchain_memalign.langsmith._fields import (
    MISSING,
    comment_digest,
    distance,
    feedback_config,
    get_path,
    read_label,
    score_fields,
)
from langchain_memalign.langsmith.source import FeedbackMapping
from langchain_memalign.result import JudgeResult, label_of

logger = logging.getLogger(__name__)

_FEEDBACK_NS = uuid.UUID("6f1c1f0e-8a51-4d55-9d4f-6d656d616c67")
ERRORED_REPORTED = 1000
"""At most this many errored runs of a project are named in a report (see `_candidates`)."""


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


class Verdicts(list[Verdict]):
    """The verdicts `write_verdicts` wrote (a list), and the runs it did not judge.

    Attributes:
        failed: Runs whose judgment failed, with the error (the others were written).
        skipped: Runs not judged, with the reason: still running (no end time yet:
            judged by a later call, once ended), or ended with an error (for a
            project, those among or after its runs judged, up to `ERRORED_REPORTED`).
    """

    def __init__(
        self,
        verdicts: Iterable[Verdict] = (),
        *,
        failed: dict[str, str] | None = None,
        skipped: dict[str, str] | None = None,
    ) -> None:
        super().__init__(verdicts)
        self.failed: dict[str, str] = dict(failed or {})
        self.skipped: dict[str, str] = dict(skipped or {})


def uncertainty(judge: MemAlignJudge, result: JudgeResult) -> float:
    """How unsure a verdict is, from the expert labels of the cases it recalled.

    The retrieved episodes come most similar first; each one disagreeing
    with the verdict adds its weight (1, 1/2, 1/3...). A verdict with no
    similar past case is maximally unsure (1.0).
    """
    ids = list((result.get("metadata") or {}).get("episode_ids") or [])
    return _uncertainty(judge, label_of(result), ids)


def _uncertainty(judge: MemAlignJudge, label: Any, episode_ids: Sequence[str]) -> float:
    """`uncertainty` of the verdict `label`, from the episodes it recalled (most similar first)."""
    ids = list(episode_ids)
    stored = judge.memory.feedback(ids) if ids else {}
    pairs = [(1.0 / (rank + 1), stored[i].value) for rank, i in enumerate(ids) if i in stored]
    if not pairs:
        return 1.0
    total = sum(w for w, _ in pairs)
    return sum(w * distance(judge.scale, label, v) for w, v in pairs) / total


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


def _judge_each(
    judge: MemAlignJudge,
    runs: Sequence[RunRecord],
    *,
    client: Client | None = None,
    trace: bool = False,
    mapping: FeedbackMapping | None = None,
    tracing_project: str = "evaluators",
    max_concurrency: int = 4,
    write: Callable[[RunRecord, Verdict], Verdict] | None = None,
) -> tuple[dict[str, Verdict], dict[str, str]]:
    """Judge LangSmith runs one by one: the verdicts, and the runs whose judgment failed.

    The per-run path of `_judgments`: a judgment that fails fails alone (its run is in
    the second dict with the error, and a warning names it), and `write`, when given,
    writes each verdict as soon as it is known, while the other judgments run. Both
    dicts follow the order of `runs`, whichever judgment ended first.
    """
    verdicts: dict[str, Verdict] = {}
    failed: dict[str, str] = {}
    for run, outcome in _judgments(
        judge,
        runs,
        client=client,
        trace=trace,
        mapping=mapping,
        tracing_project=tracing_project,
        max_concurrency=max_concurrency,
    ):
        if isinstance(outcome, Exception):
            failed[run.id] = f"{type(outcome).__name__}: {outcome}"
            logger.warning("judging run %s failed: %s", run.id, failed[run.id])
            continue
        verdicts[run.id] = outcome if write is None else write(run, outcome)
    order = {r.id: i for i, r in enumerate(runs)}
    return (
        dict(sorted(verdicts.items(), key=lambda kv: order[kv[0]])),
        dict(sorted(failed.items(), key=lambda kv: order[kv[0]])),
    )


def _judgeable(runs: Sequence[RunRecord]) -> tuple[list[RunRecord], dict[str, str]]:
    """The runs that can be judged (ended, without error), and why each other cannot.

    A running run has no outputs yet (a verdict on them would be written for good,
    and never revisited), and an errored one has nothing to judge.
    """
    ready: list[RunRecord] = []
    skipped: dict[str, str] = {}
    for run in runs:
        why = run.unjudgeable()
        if why is None:
            ready.append(run)
        else:
            skipped[run.id] = why
    return ready, skipped


def _candidates(
    api: LangSmithAPI,
    runs: Sequence[RunRef] | None,
    project: str | uuid.UUID | None,
    limit: int | None,
) -> tuple[list[RunRecord], dict[str, str]]:
    """Runs to judge: those given, or a project's `limit` latest root runs without error.

    With a project, its runs that ended with an error take no place among the `limit`
    latest (the query leaves them out), but they are not left out silently: the second
    value names those that started no earlier than the oldest run listed (any, when the
    project has fewer than `limit` runs to judge, or without a limit), with the reason.
    One more query reads them, bounded: past `ERRORED_REPORTED`, a warning says how many
    were named. Given runs come as given, errored ones among them.
    """
    if (runs is None) == (project is None):
        raise ValueError("give exactly one of runs or project")
    if project is None:
        return api.records(runs, None), {}
    if limit is not None and limit < 1:
        return [], {}
    found = api.project(project)
    listed = api.project_runs(found, limit=limit, with_errors=False)
    full = limit is not None and len(listed) >= limit
    since = (listed[-1].start_time if full else None) or EARLIEST
    errored, more = api.errored_runs(found, since, limit=ERRORED_REPORTED)
    if more:
        logger.warning(
            "project %s: more than %d runs ended with an error; %d are named in the report",
            found.name,
            ERRORED_REPORTED,
            len(errored),
        )
    return listed, {r.id: r.unjudgeable() or "ended with an error" for r in errored}


def _judgments(
    judge: MemAlignJudge,
    runs: Sequence[RunRecord],
    *,
    client: Client | None = None,
    trace: bool = False,
    mapping: FeedbackMapping | None = None,
    tracing_project: str = "evaluators",
    max_concurrency: int = 4,
) -> Iterator[tuple[RunRecord, Verdict | Exception]]:
    """Judge LangSmith runs, yielding each verdict, or the error judging it, once known.

    A verdict comes as soon as its judgment ends (the caller can write it while the
    others run), and a judgment that fails is yielded as its error instead of failing
    the others. Each case is embedded on its own. With `trace`, each judgment is
    traced to `tracing_project` under a known run id (`Verdict.judge_run_id`), so that
    feedback can link to it.
    """
    if not runs:
        return
    cases, configs, tracer = _prepare(
        judge, runs, client, trace, mapping, tracing_project, max_concurrency
    )
    for i, result in judge.batch_as_completed(cases, configs, return_exceptions=True):
        if isinstance(result, Exception):
            yield runs[i], result
        else:
            yield runs[i], _verdict(judge, runs[i], result, configs[i])
    if tracer is not None:
        tracer.wait_for_futures()


def _prepare(
    judge: MemAlignJudge,
    runs: Sequence[RunRecord],
    client: Client | None,
    trace: bool,
    mapping: FeedbackMapping | None,
    tracing_project: str,
    max_concurrency: int,
) -> tuple[list[dict[str, Any]], list[RunnableConfig], LangChainTracer | None]:
    """The judge's case and config for each run, and the tracer the configs use, if any."""
    mapping = mapping or FeedbackMapping()
    tracer = LangChainTracer(client=client, project_name=tracing_project) if trace else None
    configs: list[RunnableConfig] = []
    for _ in runs:
        config: RunnableConfig = {"max_concurrency": max_concurrency, "run_name": judge.config.name}
        if tracer is not None:
            config.update({"callbacks": [tracer], "run_id": uuid.uuid4()})
        configs.append(config)
    return [_case(run, mapping) for run in runs], configs, tracer


def _verdict(
    judge: MemAlignJudge, run: RunRecord, result: JudgeResult, config: RunnableConfig
) -> Verdict:
    meta = result.get("metadata") or {}
    judge_run_id = config.get("run_id")
    return Verdict(
        run_id=run.id,
        key=result["key"],
        score=label_of(result),
        comment=result.get("comment"),
        guideline_ids=list(meta.get("guideline_ids") or []),
        episode_ids=list(meta.get("episode_ids") or []),
        uncertainty=uncertainty(judge, result),
        judge_run_id=None if judge_run_id is None else str(judge_run_id),
    )


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


def _written_verdict(judge: MemAlignJudge, fb: ls_schemas.Feedback) -> Verdict | None:
    """The verdict `_write_verdict` wrote in `fb`, read back; None if `fb` holds none.

    Only the judge's own record on its run (`verdict_feedback_id`) counts. Its
    `uncertainty` is worked out again from the episodes the judgment recalled (kept in
    the judge's mark), on what the memory holds now; `kept_correction` says a reviewer
    has corrected it since.
    """
    if fb.run_id is None or str(fb.id) != verdict_feedback_id(judge, str(fb.run_id)):
        return None
    record = fb.model_dump(mode="json")
    score = read_label(judge.scale, record, ("value", "score"))
    if score is MISSING:
        return None
    mark = get_path(record, "feedback_source.metadata")
    mark = mark if isinstance(mark, dict) else {}
    episode_ids = [str(i) for i in mark.get("episode_ids") or []]
    judge_run = get_path(mark, "__run.run_id")  # where the SDK keeps `source_run_id`
    return Verdict(
        run_id=str(fb.run_id),
        key=fb.key,
        score=score,
        comment=fb.comment,
        guideline_ids=[str(i) for i in mark.get("guideline_ids") or []],
        episode_ids=episode_ids,
        uncertainty=_uncertainty(judge, score, episode_ids),
        judge_run_id=None if judge_run is MISSING else str(judge_run),
        feedback_id=str(fb.id),
        kept_correction=fb.correction not in (None, {}, ""),
    )


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
) -> Verdicts:
    """Judge production runs and write each verdict as model feedback.

    Only runs that have ended without error are judged: the others are in the
    result's `skipped`, with the reason. Each judgment is traced to
    `tracing_project`, and its verdict is written on the run as soon as it is
    known, as `model` feedback on the judge's key, linked to that trace
    (`source_run_id`), with the rationale as comment. A judgment that fails
    fails alone: its run is in the result's `failed` with the error (and a
    warning names it), the other verdicts are written. A reviewer can correct
    it in the LangSmith UI; `LangSmithFeedbackSource` turns the correction
    into the judge's strongest feedback. Writing again replaces the previous
    verdict unless a reviewer corrected it. The judge's key gets a workspace
    feedback config matching its scale first, as a review queue's does.

    Args:
        judge: The judge.
        client: A `langsmith.Client` (default: from the environment).
        runs: The runs to judge (ids or `Run` objects)...
        project: ...or a project whose root runs to judge (newest first by start
            time; those that ended with an error are named in `skipped`).
        limit: At most this many runs of the project: its latest (errored runs not
            counted: those started no earlier than the oldest judged are named in
            `skipped`, read by one more query).
        mapping: Which run fields are the case's inputs and outputs.
        tracing_project: Where the judge's runs are traced.
        max_concurrency: Judgments in parallel.

    Returns:
        The verdicts written, in the runs' order (a list), with `failed` and
        `skipped` (see `Verdicts`).

    Raises:
        FeedbackConfigMismatchError: The workspace reads the key on another scale;
            nothing is written.
    """
    client = client or Client()
    api = LangSmithAPI.of(client)
    # The key's workspace config is the judge's scale before the first verdict lands (a
    # verdict on a key read on another scale would be misread in the UI).
    api.ensure_feedback_config(judge.config.name, feedback_config(judge.scale))
    # A project's errored runs take no place among its `limit` latest (the query leaves
    # them out), but are named; given runs are checked one by one.
    listed, errored = _candidates(api, runs, project, limit)
    records, skipped = _judgeable(listed)
    skipped |= errored
    verdicts, failed = _judge_each(
        judge,
        records,
        client=client,
        trace=True,
        mapping=mapping,
        tracing_project=tracing_project,
        max_concurrency=max_concurrency,
        # Each verdict is written as soon as it is known: a call that dies midway keeps
        # what it wrote.
        write=lambda run, verdict: _write_verdict(judge, client, run, verdict),
    )
    return Verdicts(verdicts.values(), failed=failed, skipped=skipped)


async def awrite_verdicts(
    judge: MemAlignJudge,
    client: Client | None = None,
    runs: Sequence[RunRef] | None = None,
    **kwargs: Any,
) -> Verdicts:
    """Async twin of `write_verdicts` (runs off the event loop)."""
    return await asyncio.to_thread(write_verdicts, judge, client, runs, **kwargs)
