r"""The judgment graph: embed the case, load guidelines and retrieve episodes in parallel, judge.

```
START -> embed_case -> load_guidelines   -> judge -> END
                    \\-> retrieve_episodes -/
```
Every node is a method of `JudgeNodes` that can be called (and tested) alone;
`build_judge_graph` wires them into a compiled `StateGraph` that can also be
added to another graph as a subgraph.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.rate_limiters import BaseRateLimiter
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from langchain_memalign._text import render, tidy_rationale
from langchain_memalign._weak import weak_runnable
from langchain_memalign.graphs.injection import grader_directed
from langchain_memalign.graphs.prompts import format_value, judge_messages
from langchain_memalign.graphs.structured import StructuredCaller
from langchain_memalign.memory.episodic import Episode
from langchain_memalign.memory.judge_memory import JudgeMemory
from langchain_memalign.memory.semantic import Guideline
from langchain_memalign.reports import Usage
from langchain_memalign.scale import _RATIONALE_MAX_CHARS as RATIONALE_MAX_CHARS

_SWAPPED = {"A": "B", "B": "A", "tie": "tie"}


@dataclass
class Verdict:
    """The model's grade of one case: the score, the rationale, what it cost."""

    score: Any
    rationale: str
    usage: Usage = field(default_factory=Usage)
    metadata: dict[str, Any] = field(default_factory=dict)


def swap_outputs(outputs: Any) -> Any | None:
    """The two compared outputs in the other order, or None when they cannot be told apart.

    Two outputs arrive as a dict of exactly two keys (`{"response_1": ..., "response_2":
    ...}`: the values trade places under the same keys) or a list/tuple of two.
    """
    if isinstance(outputs, dict) and len(outputs) == 2:
        (k1, v1), (k2, v2) = outputs.items()
        return {k1: v2, k2: v1}
    if isinstance(outputs, list) and len(outputs) == 2:
        return outputs[::-1]
    if isinstance(outputs, tuple) and len(outputs) == 2:
        return (outputs[1], outputs[0])
    return None


class JudgeState(TypedDict, total=False):
    """State of one judgment."""

    inputs: Any
    outputs: Any
    reference_outputs: Any
    query_vector: list[float] | None
    # The memory version this judgment reads: guidelines and episodes of one commit,
    # even while an align or unalign runs (see JudgeMemory.snapshot).
    memory_seq: int
    guidelines: list[Guideline]
    episodes: list[Episode]
    result: dict[str, Any]


class JudgeNodes:
    """The nodes of the judgment graph, bound to one judge's memory and model."""

    def __init__(
        self,
        memory: JudgeMemory,
        model: BaseChatModel,
        rate_limiter: BaseRateLimiter | None = None,
    ) -> None:
        self.memory = memory
        cfg = memory.config
        self.verdict = StructuredCaller(
            model,
            cfg.scale.verdict_schema(),
            what=f"judge {cfg.name!r}",
            retries=cfg.max_retries,
            rate_limiter=rate_limiter,
            budgeted=False,
        )

    # embed_case: nothing to embed when the memory has nothing to retrieve, so an
    # unaligned judge makes no embedding call at all.
    def embed_case(self, state: JudgeState) -> dict[str, Any]:
        """Pin the memory version to read; embed the case unless given or not needed."""
        view = self.memory.snapshot()
        out: dict[str, Any] = {"memory_seq": view.seq}
        if state.get("query_vector") is None and self.memory.needs_query_vector(view):
            text = self.memory.case_text(state.get("inputs"), state.get("outputs"))
            out["query_vector"] = self.memory.embed([text])[0].tolist()
        return out

    async def aembed_case(self, state: JudgeState) -> dict[str, Any]:
        """Async twin of `embed_case`."""
        # On a shared database, taking a view may read the database (and catch up
        # with other processes' commits): off the event loop.
        view = (
            await asyncio.to_thread(self.memory.snapshot)
            if self.memory.shared
            else self.memory.snapshot()
        )
        out: dict[str, Any] = {"memory_seq": view.seq}
        if state.get("query_vector") is None and self.memory.needs_query_vector(view):
            text = self.memory.case_text(state.get("inputs"), state.get("outputs"))
            out["query_vector"] = (await self.memory.aembed([text]))[0].tolist()
        return out

    def load_guidelines(self, state: JudgeState) -> dict[str, Any]:
        """All guidelines, or the most relevant ones when they exceed the token budget."""
        view = self.memory.snapshot(state.get("memory_seq"))
        return {"guidelines": self.memory.select_guidelines(state.get("query_vector"), view=view)}

    def retrieve_episodes(self, state: JudgeState) -> dict[str, Any]:
        """The k most similar past cases with the experts' verdicts."""
        view = self.memory.snapshot(state.get("memory_seq"))
        return {"episodes": self.memory.retrieve(state.get("query_vector"), view=view)}

    async def aretrieve_episodes(self, state: JudgeState) -> dict[str, Any]:
        """Async twin of `retrieve_episodes`: FAISS and SQLite run off the event loop."""
        return await asyncio.to_thread(self.retrieve_episodes, state)

    def _messages(
        self, case: dict[str, Any], guidelines: list[Guideline], episodes: list[Episode]
    ) -> Any:
        cfg = self.memory.config
        return judge_messages(
            cfg.instructions, cfg.scale, case, guidelines, episodes, cfg.episode_max_chars,
            cfg.judge_prompt,
        )  # fmt: skip

    def _orders(self, case: dict[str, Any]) -> list[dict[str, Any]]:
        """The case, and for a pairwise judge the case with its outputs swapped."""
        cfg = self.memory.config
        if cfg.scale.kind != "pairwise" or not cfg.pairwise_both_orders:
            return [case]
        swapped = swap_outputs(case.get("outputs"))
        return [case] if swapped is None else [case, {**case, "outputs": swapped}]

    def _reconcile(self, outs: list[tuple[Any, Usage]]) -> Verdict:
        scale = self.memory.config.scale
        first, usage = outs[0]
        score = scale.validate_value(first.score)
        rationale = tidy_rationale(first.rationale, RATIONALE_MAX_CHARS)
        if len(outs) == 1:
            return Verdict(score, rationale, usage)
        second, usage2 = outs[1]
        back = _SWAPPED[scale.validate_value(second.score)]
        # Position bias: a verdict that flips with the order of the outputs is no
        # preference at all, so disagreement between the two orders is a tie.
        consistent = back == score
        meta = {"pairwise_orders": [score, back], "position_consistent": consistent}
        if not consistent:
            rationale = (
                f"{rationale} (With the outputs swapped the verdict was {back!r}; "
                "the two orders disagree, so this is a tie.)"
            )
            score = "tie"
        return Verdict(score, rationale, usage + usage2, meta)

    def grade(
        self,
        case: dict[str, Any],
        guidelines: list[Guideline],
        episodes: list[Episode],
        config: RunnableConfig,
    ) -> Verdict:
        """Grade a case with the model and this working memory (never reuses a verdict)."""
        outs = [
            self.verdict.invoke(self._messages(c, guidelines, episodes), config)
            for c in self._orders(case)
        ]
        return self._reconcile(outs)

    async def agrade(
        self,
        case: dict[str, Any],
        guidelines: list[Guideline],
        episodes: list[Episode],
        config: RunnableConfig,
    ) -> Verdict:
        """Async twin of `grade`: both orders of a pairwise case run concurrently."""
        outs = await asyncio.gather(
            *(
                self.verdict.ainvoke(self._messages(c, guidelines, episodes), config)
                for c in self._orders(case)
            )
        )
        return self._reconcile(list(outs))

    def _result(self, state: JudgeState, verdict: Verdict) -> dict[str, Any]:
        metadata = {
            "guideline_ids": [g.id for g in state.get("guidelines") or []],
            "episode_ids": [e.feedback_id for e in state.get("episodes") or []],
            **verdict.metadata,
        }
        # Reported whether or not the model resisted: a graded output that talks to
        # its grader is worth a human look either way.
        addressed = grader_directed(self._case(state))
        if addressed:
            metadata["graded_text_addresses_grader"] = addressed
        return {
            "result": {
                "key": self.memory.config.name,
                "score": verdict.score,
                "comment": verdict.rationale,
                "metadata": metadata,
            }
        }

    @staticmethod
    def _case(state: JudgeState) -> dict[str, Any]:
        return {k: state.get(k) for k in ("inputs", "outputs", "reference_outputs")}

    # An expert already graded this very case: asking the model again can only
    # contradict them (small models do, even with the case in their prompt), and
    # costs a call. Conflicting experts are left to the model.
    def expert_verdict(self, state: JudgeState) -> dict[str, Any] | None:
        """The experts' verdict when the case is one they graded and they agree, else None."""
        if not self.memory.config.reuse_expert_verdicts:
            return None
        case = tuple(render(state.get(k)) for k in ("inputs", "outputs", "reference_outputs"))
        same = [
            ep
            for ep in state.get("episodes") or []
            if (render(ep.inputs), render(ep.outputs), render(ep.reference_outputs)) == case
        ]
        if not same or len({format_value(ep.value) for ep in same}) != 1:
            return None
        reasons = list(dict.fromkeys(ep.rationale for ep in same if ep.rationale))
        ids = [ep.feedback_id for ep in same]
        return {
            "result": {
                "key": self.memory.config.name,
                "score": same[0].value,
                "comment": " ".join(reasons)
                or f"Graded {format_value(same[0].value)} by an expert ({', '.join(ids)}).",
                "metadata": {
                    "guideline_ids": [],
                    "episode_ids": ids,
                    "expert_feedback_ids": ids,
                },
            }
        }

    def judge(self, state: JudgeState, config: RunnableConfig) -> dict[str, Any]:
        """Grade the case with the working memory in the prompt."""
        known = self.expert_verdict(state)
        if known is not None:
            return known
        verdict = self.grade(
            self._case(state), state.get("guidelines") or [], state.get("episodes") or [], config
        )
        return self._result(state, verdict)

    async def ajudge(self, state: JudgeState, config: RunnableConfig) -> dict[str, Any]:
        """Async twin of `judge`."""
        known = self.expert_verdict(state)
        if known is not None:
            return known
        verdict = await self.agrade(
            self._case(state), state.get("guidelines") or [], state.get("episodes") or [], config
        )
        return self._result(state, verdict)


def build_judge_graph(
    memory: JudgeMemory,
    model: BaseChatModel,
    *,
    name: str | None = None,
    rate_limiter: BaseRateLimiter | None = None,
) -> CompiledStateGraph[JudgeState, None, JudgeState, JudgeState]:
    """Compile the judgment graph for a memory and a chat model."""
    nodes = JudgeNodes(memory, model, rate_limiter)
    w = weak_runnable
    graph = StateGraph(JudgeState)
    graph.add_node("embed_case", w(nodes.embed_case, nodes.aembed_case))
    graph.add_node("load_guidelines", w(nodes.load_guidelines))
    graph.add_node("retrieve_episodes", w(nodes.retrieve_episodes, nodes.aretrieve_episodes))
    graph.add_node("judge", w(nodes.judge, nodes.ajudge))
    graph.add_edge(START, "embed_case")
    graph.add_edge("embed_case", "load_guidelines")
    graph.add_edge("embed_case", "retrieve_episodes")
    graph.add_edge(["load_guidelines", "retrieve_episodes"], "judge")
    graph.add_edge("judge", END)
    compiled = graph.compile(name=name or f"{memory.config.name}_judge")
    compiled.memalign_nodes = nodes  # type: ignore[attr-defined]  # see _weak.py
    return compiled
