"""The steps around the judge graph in `MemAlignJudge`'s chain.

`PrepareCases` validates the judge's inputs (a case: `inputs`, `outputs`,
`reference_outputs`, nothing of the graph's state) and embeds every case of
a batch in one call (the graph would embed them one by one); `TakeResult` turns the
graph's final state into a `JudgeResult`.
"""

from __future__ import annotations

from typing import Any, cast

from langchain_core.runnables import Runnable, RunnableConfig

from langchain_memalign.errors import InvalidJudgeInputError
from langchain_memalign.graphs.judge import JudgeState
from langchain_memalign.memory.judge_memory import JudgeMemory, MemoryView
from langchain_memalign.result import JudgeResult, to_result
from langchain_memalign.scale import Scale

CASE_KEYS = ("inputs", "outputs", "reference_outputs")


class TakeResult(Runnable[dict[str, Any], JudgeResult]):
    """The judgment from the graph's final state, as a `JudgeResult`.

    A plain step: no trace of its own.
    """

    def __init__(self, scale: Scale) -> None:
        self.scale = scale

    def invoke(
        self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> JudgeResult:
        """The graph's verdict (a label on the scale) as a `JudgeResult`."""
        return to_result(self.scale, input["result"])

    # The defaults would hand this dict lookup to a thread pool.
    async def ainvoke(
        self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> JudgeResult:
        """Async twin of `invoke` (no thread hop)."""
        return self.invoke(input)

    def batch(
        self,
        inputs: list[dict[str, Any]],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """`invoke` over a batch, in this thread."""
        return [self.invoke(i) for i in inputs]

    async def abatch(
        self,
        inputs: list[dict[str, Any]],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """Async twin of `batch`."""
        return [self.invoke(i) for i in inputs]


class PrepareCases(Runnable[dict[str, Any], JudgeState]):
    """Validate judge inputs and embed every case of a batch in one call."""

    name = "prepare_cases"

    def __init__(self, memory: JudgeMemory) -> None:
        self.memory = memory

    @staticmethod
    def _state(input: Any) -> JudgeState:
        if not isinstance(input, dict) or "inputs" not in input:
            raise InvalidJudgeInputError(
                "a judge takes a dict with an 'inputs' key (and optionally 'outputs' and "
                f"'reference_outputs'), got {type(input).__name__}"
            )
        # Only the case: the graph's own state (`query_vector`, `memory_seq`,
        # `guidelines`, `episodes`, `result`) is computed by the judge. A caller's
        # vector or guidelines would steer what the judge retrieves and reads.
        unknown = set(input) - set(CASE_KEYS)
        if unknown:
            shown = sorted(str(k)[:40] for k in unknown)[:5]
            raise InvalidJudgeInputError(
                f"unexpected judge input keys: {shown}; a judge takes "
                "'inputs', 'outputs' and 'reference_outputs' only"
            )
        return cast(JudgeState, {k: input.get(k) for k in CASE_KEYS})

    def _states(self, inputs: list[dict[str, Any]], return_exceptions: bool) -> list[Any]:
        states: list[Any] = []
        for i in inputs:
            try:
                states.append(self._state(i))
            except InvalidJudgeInputError as e:
                if not return_exceptions:
                    raise
                states.append(e)  # the sequence skips failed items in later steps
        return states

    def _texts(self, states: list[Any], view: MemoryView) -> list[int]:
        if not self.memory.needs_query_vector(view):
            return []
        return [
            i for i, s in enumerate(states) if isinstance(s, dict) and s.get("query_vector") is None
        ]

    def _text(self, state: JudgeState) -> str:
        return self.memory.case_text(state.get("inputs"), state.get("outputs"))

    def invoke(
        self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> JudgeState:
        """Validate one case (the graph embeds it)."""
        return self._state(input)

    def batch(
        self,
        inputs: list[dict[str, Any]],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """Validate many cases and embed them in one call."""
        states = self._states(inputs, return_exceptions)
        # The newest version (caught up with other processes' commits) decides
        # whether the cases need embedding; each judgment takes its own view.
        todo = self._texts(states, self.memory.snapshot())
        if todo:
            texts = [self._text(states[i]) for i in todo]
            for i, vec in zip(todo, self.memory.embed(texts), strict=True):
                states[i]["query_vector"] = vec.tolist()
        return list(states)

    async def abatch(
        self,
        inputs: list[dict[str, Any]],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """Async twin of `batch`."""
        states = self._states(inputs, return_exceptions)
        view = await self.memory.asnapshot()
        todo = self._texts(states, view)
        if todo:
            texts = [self._text(states[i]) for i in todo]
            for i, vec in zip(todo, await self.memory.aembed(texts), strict=True):
                states[i]["query_vector"] = vec.tolist()
        return list(states)
