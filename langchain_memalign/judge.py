"""`MemAlignJudge`: an LLM judge that aligns itself with human feedback."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.rate_limiters import BaseRateLimiter
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import ensure_config
from langgraph.graph.state import CompiledStateGraph
from pydantic import ValidationError

from langchain_memalign import limits
from langchain_memalign._tracing import no_upload_when_local
from langchain_memalign.alignment import AlignmentRun
from langchain_memalign.chain_steps import PrepareCases, TakeResult
from langchain_memalign.config import JudgeConfig, JudgeOptions
from langchain_memalign.errors import (
    InvalidFeedbackError,
    InvalidFeedbackIdError,
    MemoryReadOnlyError,
    UnknownFeedbackError,
)
from langchain_memalign.feedback import Feedback, check_nul, id_problem
from langchain_memalign.graphs.align import AlignNodes, build_align_graph, build_unalign_graph
from langchain_memalign.graphs.align_state import AlignState, UnalignState
from langchain_memalign.graphs.calibrate import ScoreCalibrator
from langchain_memalign.graphs.judge import JudgeNodes, JudgeState, build_judge_graph
from langchain_memalign.graphs.learn_checks import CheckLearner
from langchain_memalign.graphs.validate import GuidelineValidator
from langchain_memalign.memory.judge_memory import JudgeMemory
from langchain_memalign.memory.postgres import is_postgres_url
from langchain_memalign.memory.semantic import Guideline
from langchain_memalign.models import resolve_chat_model, resolve_embeddings
from langchain_memalign.prequential import AgreementHistory, history_of
from langchain_memalign.reports import AlignReport, CalibrationReport, UnalignReport
from langchain_memalign.result import JudgeResult, label_of
from langchain_memalign.rules import Rulebook
from langchain_memalign.scale import Scale, ScaleSpec

if TYPE_CHECKING:  # the judge does not depend on the evaluation toolkit to load
    import uuid

    from langsmith import Client

    from langchain_memalign.evaluation.agreement import AgreementReport
    from langchain_memalign.langsmith.export import EvaluatorExport


class MemAlignJudge(Runnable[dict[str, Any], JudgeResult]):
    r"""An LLM judge with a semantic and an episodic memory of expert feedback.

    The judge is a LangChain `Runnable`: `invoke`, `ainvoke`, `batch`,
    `abatch` and `stream` take `{"inputs", "outputs", "reference_outputs"}`
    and return a `JudgeResult` `{"key", "score", "comment", "metadata"}`
    (plus the label in `"value"` on categorical and pairwise scales, where
    `score` is the label's position; see `langchain_memalign.result`). It is
    also callable like an openevals evaluator, `judge(inputs=..., outputs=...)`,
    and usable as is in `langsmith.evaluate(evaluators=[judge])`.

    Example:
        ```python
        judge = MemAlignJudge(
            name="helpfulness",
            instructions="Is the reply helpful?\\nUser: {inputs}\\nReply: {outputs}",
            model="openai:gpt-4.1-mini",
            embeddings="openai:text-embedding-3-small",
            scale=bool,
            options={"validation": {"mode": "all"}},  # optional, see `JudgeOptions`
        )
        judge.align([Feedback(id="t1", inputs="...", outputs="...", value=False,
                              rationale="Too cold for a frustrated customer.")])
        judge.invoke({"inputs": "...", "outputs": "..."})
        ```

    Args:
        name: The feedback key the judge scores.
        instructions: The judge prompt, with `{inputs}`, `{outputs}` and
            `{reference_outputs}` placeholders (`{{ inputs }}` works too).
        model: A chat model or a `"provider:model"` string.
        embeddings: An embedding model or a `"provider:model"` string.
        scale: `bool`, a `(low, high)` range, a list of category names, or `"pairwise"`.
        k: Past cases retrieved per judgment.
        path: A memory folder (created if missing, reopened if present),
            or a `postgresql://host/db?judge=<name>` URL to keep the memory in a
            shared PostgreSQL database (see docs/postgres.md; needs the
            `postgres` extra); `None` keeps the memory in process.
        reflection_model: The model that distills guidelines; defaults to `model`.
        rate_limiter: Paces the judge's model calls (e.g. LangChain's
            `InMemoryRateLimiter`), shared by all concurrent judgments.
        options: Every other option, nested by concern: a `JudgeOptions`, or a
            mapping of the same shape, e.g. `{"validation": {"mode": "all"}}`
            (`retrieval`, `reflection`, `validation`, `calibration`, `prompt`,
            `checks`, `max_retries`). Unset options keep their defaults; an invalid
            one raises pydantic's `ValidationError` (a `ValueError`) naming it, and
            an option outside its group (`{"validate_guidelines": "all"}`, a flat
            name of earlier versions) one naming its place (`validation.mode`).

    Everything after `embeddings` is keyword-only. A judge is a context manager:
    `with MemAlignJudge(...) as judge:` closes its memory on exit.
    """

    def __init__(
        self,
        name: str,
        instructions: str,
        model: str | BaseChatModel,
        embeddings: str | Embeddings,
        *,
        scale: ScaleSpec = bool,
        k: int = 5,
        path: str | os.PathLike[str] | None = None,
        reflection_model: str | BaseChatModel | None = None,
        rate_limiter: BaseRateLimiter | None = None,
        options: JudgeOptions | Mapping[str, Any] | None = None,
    ) -> None:
        config = JudgeConfig(
            name=name,
            instructions=instructions,
            scale=Scale.of(scale),
            k=k,
            # a copy: the judge's options do not change with the caller's object
            options=(
                options.model_copy(deep=True)
                if isinstance(options, JudgeOptions)
                else dict(options or {})
            ),
        )
        emb = resolve_embeddings(embeddings)
        chat = resolve_chat_model(model)
        reflection = None if reflection_model is None else resolve_chat_model(reflection_model)
        # The judge is set up while its memory opens: a constructor that raises leaves
        # the memory as it was (no new folder or judge, no changed configuration).
        JudgeMemory.create(
            path, emb, config, lambda memory: self._setup(memory, chat, reflection, rate_limiter)
        )

    def _setup(
        self,
        memory: JudgeMemory,
        model: BaseChatModel,
        reflection_model: BaseChatModel | None,
        rate_limiter: BaseRateLimiter | None,
    ) -> None:
        self.memory = memory
        self.model = model
        self.reflection_model = reflection_model or model
        self.name = memory.config.name
        # The graphs hold their nodes weakly (graphs/_weak.py): the judge owns them.
        self._judge_nodes = JudgeNodes(memory, model, rate_limiter)
        # Validation and calibration grade seen cases with the judge's own model and prompt.
        self._calibrator = ScoreCalibrator(memory, self._judge_nodes)
        self._align_nodes = AlignNodes(
            memory,
            self.reflection_model,
            GuidelineValidator(memory, self._judge_nodes, self.reflection_model),
            self._calibrator,
            # Checks are written by the reflection model and tested with the judge's own,
            # asked as the judge will ask them.
            CheckLearner(memory, self.reflection_model, self._judge_nodes.asker),
        )
        self.graph: CompiledStateGraph[JudgeState, None, JudgeState, JudgeState] = (
            build_judge_graph(self._judge_nodes)
        )
        self.align_graph: CompiledStateGraph[AlignState, None, AlignState, AlignState] = (
            build_align_graph(self._align_nodes)
        )
        self.unalign_graph: CompiledStateGraph[UnalignState, None, UnalignState, UnalignState] = (
            build_unalign_graph(self._align_nodes)
        )
        self._run = AlignmentRun(
            memory, self.align_graph, self.unalign_graph, judge_nodes=self._judge_nodes
        )
        self._chain = (
            PrepareCases(memory) | self.graph | TakeResult(memory.config.scale)
        ).with_config(run_name=self.name)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        model: str | BaseChatModel,
        embeddings: str | Embeddings,
        *,
        reflection_model: str | BaseChatModel | None = None,
        rate_limiter: BaseRateLimiter | None = None,
        **overrides: Any,
    ) -> MemAlignJudge:
        """Open a saved judge. Makes no embedding call.

        The name, instructions, scale and options come from the memory folder;
        `overrides` may change `k` and `options` (a `JudgeOptions` or a mapping, as
        the constructor takes): the options given replace the stored ones field by
        field, the others are kept; an option outside its group is an error naming
        its place, as in the constructor. Opening with a different embedding model
        than the memory was built with raises `EmbeddingMismatchError`. A memory
        whose configuration an earlier version stored flat opens with it nested.
        """
        memory = JudgeMemory.load(path, resolve_embeddings(embeddings), **overrides)
        judge = cls.__new__(cls)
        judge._setup(
            memory,
            resolve_chat_model(model),
            None if reflection_model is None else resolve_chat_model(reflection_model),
            rate_limiter,
        )
        return judge

    # -- configuration and memory views ---------------------------------------------------

    @property
    def config(self) -> JudgeConfig:
        """The judge's configuration."""
        return self.memory.config

    @property
    def scale(self) -> Scale:
        """The judge's scale."""
        return self.memory.config.scale

    @property
    def guidelines(self) -> list[Guideline]:
        """The learned guidelines, each with the feedback ids it came from.

        As of the newest commit, another process's included (on a folder or a
        database, as a judgment reads them).
        """
        return list(self.memory.snapshot().guidelines)

    @property
    def rules(self) -> Rulebook:
        """The rulebook: list, add, edit, pin, unpin and reject guidelines as an expert.

        ```python
        rule = judge.rules.add("Queries must read the certified views.", author="dana")
        judge.rules.pin(rule.id, author="dana")
        judge.rules.reject("g-1a2b3c4d5e6f", reason="too broad", author="dana")
        ```
        """
        return Rulebook(self.memory)

    @property
    def feedback_ids(self) -> list[str]:
        """Ids of all aligned feedback, oldest first."""
        return self.memory.store.feedback_ids()

    def get_feedback(self, feedback_id: str) -> Feedback:
        """A stored feedback item, or `UnknownFeedbackError`.

        An id no feedback can have (not a string, a lone surrogate, ...) raises
        `InvalidFeedbackIdError`, an `UnknownFeedbackError` too.
        """
        self._check_ids([feedback_id])
        found = self.memory.store.get_feedback([feedback_id])
        if feedback_id not in found:
            raise UnknownFeedbackError([feedback_id])
        return found[feedback_id]

    def _check_ids(self, ids: Sequence[Any]) -> None:
        """Refuse ids no feedback can have before the memory is read (`feedback.id_problem`)."""
        nul_ok = self.memory.store.stores_nul
        problems = [(i, why) for i in ids if (why := id_problem(i, nul_ok=nul_ok))]
        if problems:
            raise InvalidFeedbackIdError(problems)

    def history(self) -> list[dict[str, Any]]:
        """Every change to the memory, with the feedback ids that caused it."""
        return self.memory.store.history()

    def stats(self) -> dict[str, int]:
        """Counts of feedback, episodes, guidelines and history entries."""
        return {
            t: self.memory.store.count(t) for t in ("feedback", "episodes", "guidelines", "history")
        }

    # -- judging ----------------------------------------------------------------------------

    def invoke(
        self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> JudgeResult:
        """Judge one case: `{"inputs", "outputs", "reference_outputs"}` -> `JudgeResult`."""
        with no_upload_when_local():
            return self._chain.invoke(input, config, **kwargs)

    async def ainvoke(
        self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> JudgeResult:
        """Async twin of `invoke`."""
        with no_upload_when_local():
            return await self._chain.ainvoke(input, config, **kwargs)

    def batch(
        self,
        inputs: list[dict[str, Any]],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """Judge many cases; their embeddings are requested in one call."""
        with no_upload_when_local():
            return self._chain.batch(inputs, config, return_exceptions=return_exceptions, **kwargs)

    async def abatch(
        self,
        inputs: list[dict[str, Any]],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """Async twin of `batch`."""
        with no_upload_when_local():
            return await self._chain.abatch(
                inputs, config, return_exceptions=return_exceptions, **kwargs
            )

    def __call__(
        self,
        *,
        inputs: Any,
        outputs: Any = None,
        reference_outputs: Any = None,
        **kwargs: Any,
    ) -> JudgeResult:
        """Judge a case openevals-style: `judge(inputs=..., outputs=...)`.

        The result is a valid LangSmith evaluation result, so the judge itself
        can be passed to `langsmith.evaluate(evaluators=[judge])`.
        """
        config = cast(RunnableConfig | None, kwargs.pop("config", None))
        return self.invoke(
            {"inputs": inputs, "outputs": outputs, "reference_outputs": reference_outputs},
            config,
        )

    # -- measuring agreement ----------------------------------------------------------------

    def agreement(
        self,
        feedback: Iterable[Feedback | dict[str, Any]],
        config: RunnableConfig | None = None,
        *,
        ordinal: bool | None = None,
        max_concurrency: int | None = None,
    ) -> AgreementReport:
        """Judge labelled cases and report agreement with the human labels.

        Nothing is aligned: the feedback is only graded and compared. The
        report holds accuracy, Cohen's kappa (weighted for ordinal scales), CCC
        and MAE for numeric scales, a confusion matrix, every disagreement
        with both rationales, and agreement among human annotators where a case
        carries several labels (`metadata["annotator_labels"]`).

        Args:
            feedback: Labelled cases (`Feedback` or dicts of its fields).
            config: Runnable config for the judgments (callbacks, tags).
            ordinal: Whether the scale's values are ordered (for weighted kappa);
                defaults to True for numeric scales only.
            max_concurrency: Parallel judgments.
        """
        from langchain_memalign.evaluation.agreement import evaluate_agreement

        return evaluate_agreement(
            self, feedback, config, ordinal=ordinal, max_concurrency=max_concurrency
        )

    def agreement_history(self, window: int = 20) -> AgreementHistory:
        """Is the judge getting better? Its agreement with each review before learning it.

        Every review recorded in the memory's agreement series (see
        `langchain_memalign.prequential`) is the judge's verdict on a case from
        before it learned the expert's, beside the expert's: LangSmith reviews of
        runs the judge had judged (its verdict there), items aligned with
        `score_first=True`, and verdicts given to `align(prior_verdicts=...)`.
        Reads the memory only: no model call.

        Args:
            window: Reviews per window, in arrival order; the last window may hold
                fewer. Counted in reviews rather than time, so that every window
                weighs alike however unevenly the reviews arrived.

        Returns:
            Per window: the count, accuracy (label scales and integer scores),
            Cohen's kappa (quadratic-weighted on integer scores) and MAE (numeric
            scales); where each align happened (`aligns`); every review (`points`)
            and the whole series as one window (`overall`).
        """
        rows = self.memory.store.prequential()
        return history_of(rows, self.scale, judge=self.config.name, window=window)

    async def aagreement(
        self,
        feedback: Iterable[Feedback | dict[str, Any]],
        config: RunnableConfig | None = None,
        *,
        ordinal: bool | None = None,
        max_concurrency: int | None = None,
    ) -> AgreementReport:
        """Async twin of `agreement`."""
        from langchain_memalign.evaluation.agreement import aevaluate_agreement

        return await aevaluate_agreement(
            self, feedback, config, ordinal=ordinal, max_concurrency=max_concurrency
        )

    # -- aligning ---------------------------------------------------------------------------

    def _validate(self, feedback: Iterable[Feedback | dict[str, Any]]) -> list[Feedback]:
        items: list[Feedback] = []
        seen: set[str] = set()
        for n, raw in enumerate(feedback):
            try:
                fb = raw if isinstance(raw, Feedback) else Feedback.model_validate(raw)
            except ValidationError as e:
                fid = raw.get("id") if isinstance(raw, dict) else None
                where = f"feedback {fid!r}" if fid else f"feedback item #{n}"
                raise InvalidFeedbackError(f"{where} is malformed: {e}", feedback_id=fid) from e
            if fb.id in seen:
                raise InvalidFeedbackError(
                    f"feedback {fb.id!r} appears twice in one align call", feedback_id=fb.id
                )
            seen.add(fb.id)
            limits.check_feedback(fb)
            check_nul(fb)
            value = self.scale.validate_value(fb.value, feedback_id=fb.id)
            items.append(fb if value == fb.value and type(value) is type(fb.value)
                         else fb.model_copy(update={"value": value}))  # fmt: skip
        return items

    def _prior_verdicts(
        self, items: list[Feedback], given: Mapping[str, Any] | None, source: str
    ) -> dict[str, tuple[Any, str]]:
        """`align`'s `prior_verdicts` on the judge's scale, checked before any model call."""
        if not given:
            return {}
        ids = {fb.id for fb in items}
        unknown = sorted(str(i) for i in given if i not in ids)
        if unknown:
            raise InvalidFeedbackError(
                f"prior_verdicts names feedback not in this align call: {unknown}"
            )
        out: dict[str, tuple[Any, str]] = {}
        for fid, verdict in given.items():
            value = label_of(verdict) if isinstance(verdict, Mapping) else verdict
            out[fid] = (self.scale.validate_value(value, feedback_id=fid), source)
        return out

    def align(
        self,
        feedback: Iterable[Feedback | dict[str, Any]],
        config: RunnableConfig | None = None,
        *,
        raise_on_failure: bool = True,
        score_first: bool = False,
        prior_verdicts: Mapping[str, Any] | None = None,
        prior_source: str = "given",
    ) -> AlignReport:
        """Learn from feedback: store episodes, distill and merge guidelines.

        Feedback already stored unchanged costs nothing; an id with a new
        value, rationale or case replaces the old version, and guidelines
        derived from the old version are re-derived; an id with only new
        metadata is stored with it, without a model call, and reported as
        updated. All feedback is validated (storable, within the size limits
        of `langchain_memalign.limits`) before any model call, and the whole
        call is one transaction: it commits completely or not at all.

        Every align is marked in the memory's agreement series, after the reviews
        recorded for it (see `agreement_history`). A new item gets a point in the
        series when the judge's verdict on its case from before this align is
        known:

        Args:
            feedback: The feedback (`Feedback` or dicts of its fields).
            config: Runnable config for the model calls (callbacks, tags).
            raise_on_failure: Raise `ReflectionError` when reflection failed for
                some feedback (else it is in the report's `failed`).
            score_first: Grade each new item (an id not stored yet, without a
                verdict in `prior_verdicts`) with the judge as it is before this
                align, one judgment each, and record the verdict beside the
                expert's: a prequential test of the judge (`report.graded_first`;
                the calls are in `report.usage`). The grading never reuses an
                expert's verdict on an identical case. Not to be confused with
                `options.prompt.verdict_order="score_first"`, which asks the model
                for the score before the rationale.
            prior_verdicts: The judge's verdicts on some of these cases from before
                it learned them, by feedback id (a `JudgeResult` the caller kept,
                or its label), recorded beside the experts' at no cost. Ids must
                be in `feedback`; only items new to the memory get a point.
            prior_source: Where `prior_verdicts` came from, a label kept with each
                of their points (`ReviewPoint.source`): "given" by default. An
                integration that reads the verdicts names itself; the package's own
                pass "langsmith" (verdicts read from LangSmith runs) and
                "self_critique" (the critique a `SelfCritique.record` closes).

        Raises:
            InvalidFeedbackError: malformed feedback or a value outside the scale, or
                a prior verdict off the scale or for an id not in `feedback`.
            TypeError: `prior_source` is not a non-empty string.
            LimitExceededError: feedback over a size limit (an `InvalidFeedbackError`).
            AlignFailedError: the call failed part-way (a provider error, most
                often) and was rolled back: the memory is unchanged.
            ReflectionError: some reflection batches failed (with
                `raise_on_failure`); their feedback is stored and retried by the
                next `align`, and the error carries the report.
        """
        if not isinstance(prior_source, str) or not prior_source:
            raise TypeError(f"prior_source must be a non-empty string, not {prior_source!r}")
        items = self._validate(feedback)
        prior = self._prior_verdicts(items, prior_verdicts, prior_source)
        return self._run.align(
            items,
            ensure_config(config),
            raise_on_failure=raise_on_failure,
            prior_verdicts=prior,
            score_first=score_first,
        )

    async def aalign(
        self,
        feedback: Iterable[Feedback | dict[str, Any]],
        config: RunnableConfig | None = None,
        *,
        raise_on_failure: bool = True,
        score_first: bool = False,
        prior_verdicts: Mapping[str, Any] | None = None,
        prior_source: str = "given",
    ) -> AlignReport:
        """Async twin of `align` (runs off the event loop)."""
        items = list(feedback)
        return await asyncio.to_thread(
            self.align,
            items,
            config,
            raise_on_failure=raise_on_failure,
            score_first=score_first,
            prior_verdicts=prior_verdicts,
            prior_source=prior_source,
        )

    def unalign(self, ids: Sequence[str], config: RunnableConfig | None = None) -> UnalignReport:
        """Remove feedback and everything derived from it.

        Episodes are deleted; a guideline whose sources were all removed
        disappears, one with remaining sources stays when their rationales
        support it and is re-distilled from them otherwise. No text of the
        removed feedback's cases or rationales is left in the memory. An empty
        list changes nothing.

        The call is one transaction: it commits completely or not at all.

        Raises:
            UnknownFeedbackError: some ids are not in the memory (nothing is removed).
            InvalidFeedbackIdError: some ids are ids no feedback can have (not
                strings, lone surrogates, ...; an `UnknownFeedbackError` too).
            AlignFailedError: the call failed part-way (a provider error, most
                often) and was rolled back: the memory is unchanged.
            TypeError: `ids` is a single string (`unalign("f1")` would otherwise
                mean the ids `"f"` and `"1"`): pass `["f1"]`; or not a list at all.
        """
        if isinstance(ids, str):
            raise TypeError(f"unalign takes a list of feedback ids, not a string: [{ids!r}]")
        if isinstance(ids, bytes) or not isinstance(ids, Iterable):
            raise TypeError(f"unalign takes a list of feedback ids, not a {type(ids).__name__}")
        ids = list(ids)
        self._check_ids(ids)
        return self._run.unalign(ids, ensure_config(config))

    async def aunalign(
        self, ids: Sequence[str], config: RunnableConfig | None = None
    ) -> UnalignReport:
        """Async twin of `unalign` (runs off the event loop)."""
        return await asyncio.to_thread(self.unalign, list(ids), config)

    def to_langsmith_evaluator(
        self,
        *,
        project: str | uuid.UUID,
        client: Client | None = None,
        name: str | None = None,
        sampling_rate: float = 1.0,
        filter: str | None = None,
        num_few_shot_examples: int = 5,
        model_config_id: str | None = None,
    ) -> EvaluatorExport:
        """Export the judge as a LangSmith online evaluator on a project (idempotent).

        Its prompt carries the instructions, the rules and the checks' questions, its
        corrections dataset every episode, and a run rule attaches it to `project`
        with `filter` and `sampling_rate`. Exporting again changes only what the
        memory changed. See `langchain_memalign.langsmith.export_evaluator`.

        ```python
        export = judge.to_langsmith_evaluator(project="support-bot", sampling_rate=0.2)
        print(export.summary())
        ```
        """
        from langchain_memalign.langsmith.export import export_evaluator

        return export_evaluator(
            self,
            project=project,
            client=client,
            name=name,
            sampling_rate=sampling_rate,
            filter=filter,
            num_few_shot_examples=num_few_shot_examples,
            model_config_id=model_config_id,
        )

    def calibrate(
        self, feedback_ids: Sequence[str] | None = None, config: RunnableConfig | None = None
    ) -> CalibrationReport:
        """Grade seen cases again, as unseen, for score calibration (integer scales).

        `align` grades the cases it stores; their pairs (the judge's score, the
        expert's) were graded with the memory as it was then. This grades every
        stored case (or `feedback_ids`) with the memory as it is now, one judge call
        each (`options.calibration.max_calls` does not apply), and replaces their
        pairs. Use it after the memory has changed much, or on a memory aligned
        before calibration.
        The call is one transaction.

        Raises:
            ValueError: the judge's scale is not calibrated (not an integer scale of up
                to 11 values), or `options.calibration.enabled` is off.
            UnknownFeedbackError: some ids are not in the memory (nothing is graded).
            InvalidFeedbackIdError: some ids are ids no feedback can have.
            AlignFailedError: the call failed part-way (a provider error in any grading,
                most often) and was rolled back: the memory and its calibration are
                unchanged. A grading whose answer stays unusable is no failure: that case
                keeps no pair, and the report's `errors` names it.
        """
        if isinstance(feedback_ids, str):
            raise TypeError(
                f"calibrate takes a list of feedback ids, not a string: [{feedback_ids!r}]"
            )
        ids = None if feedback_ids is None else list(feedback_ids)
        if ids is not None:
            self._check_ids(ids)
            ids = list(dict.fromkeys(ids))
        return self._run.calibrate(self._calibrator, ids, ensure_config(config))

    # -- persistence --------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path | str:
        """Write the memory to a folder, atomically; returns the folder.

        `path` may be a `postgresql://` URL (returned as given): the judge named
        there becomes a copy of this memory, in one transaction. Copies work in
        both directions between folders and databases.

        A folder (or a URL's judge) that already holds the memory of a judge of
        another name or scale raises `MemoryFormatError` and is left as it is,
        unless `overwrite=True`: then it is replaced by this judge's memory.
        Saving over an older copy of this same judge needs no flag. A folder
        that cannot be written raises `MemoryReadOnlyError`, a full disk
        `MemoryFullError` (both `OSError`s); the previous folder is left whole.
        """
        self.memory.save(path, overwrite=overwrite)
        return str(path) if is_postgres_url(path) else Path(path)

    def close(self) -> None:
        """Close the memory's database (writing the index cache for a folder memory).

        A database memory closes its connection pool; its index is never written.
        A folder that cannot be written (a judge shipped on a read-only volume)
        keeps the cache it has: the cache only saves rebuilding the index on the
        next open. The database is closed even if writing the cache fails (a
        full disk raises `MemoryFullError` once it is closed).
        """
        try:
            if self.memory.store.folder is not None:
                with contextlib.suppress(MemoryReadOnlyError):
                    self.memory.save(self.memory.store.folder)
        finally:
            self.memory.store.close()

    def __enter__(self) -> MemAlignJudge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
