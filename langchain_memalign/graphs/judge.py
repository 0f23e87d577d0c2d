r"""The judgment graph: embed the case, load guidelines and retrieve episodes, run checks, judge.

```
START -> embed_case -> load_guidelines   -> run_checks -> judge -> END
                    \\-> retrieve_episodes -/
```
`run_checks` asks the checks of the guidelines shown (`graphs.checks`); when one fires,
`judge` gives its consequence without grading the case whole.
Every node is a method of `JudgeNodes` that can be called (and tested) alone;
`build_judge_graph` wires a `JudgeNodes` into a compiled `StateGraph` that can
also be added to another graph as a subgraph. The graph holds its nodes weakly
(`_weak`): the caller keeps the `JudgeNodes` (the judge does).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.rate_limiters import BaseRateLimiter
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from langchain_memalign import _ablation
from langchain_memalign._text import render, tidy_rationale
from langchain_memalign.graphs._weak import weak_runnable
from langchain_memalign.graphs.checks import CheckAsker, CheckOutcome, check_comment
from langchain_memalign.graphs.injection import grader_directed
from langchain_memalign.graphs.query_vector import check_query_vector
from langchain_memalign.memory.episodic import Episode
from langchain_memalign.memory.judge_memory import JudgeMemory, MemoryView
from langchain_memalign.memory.rulebook import Check
from langchain_memalign.memory.semantic import Guideline
from langchain_memalign.prompting.prompts import (
    SEPARATE_SCALE,
    format_value,
    judge_messages,
    separate_messages,
)
from langchain_memalign.prompting.structured import StructuredCaller
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


def split_outputs(outputs: Any) -> list[Any] | None:
    """The two compared outputs, first then second, or None when they cannot be told apart.

    The same shapes as `swap_outputs`: a dict of exactly two keys, or a list/tuple of two.
    """
    if isinstance(outputs, dict) and len(outputs) == 2:
        return list(outputs.values())
    if isinstance(outputs, list | tuple) and len(outputs) == 2:
        return list(outputs)
    return None


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
    # What `run_checks` asked: per check, its rule id, whether it fired and the answers
    # (on a pairwise case, each a pair: first output, second output).
    check_outcomes: list[dict[str, Any]]
    # The rules those checks settled (`checks.settle`): left out of the holistic prompt.
    settled: list[str]
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
            cfg.scale.verdict_schema(score_first=cfg.score_first),
            what=f"judge {cfg.name!r}",
            retries=cfg.options.max_retries,
            rate_limiter=rate_limiter,
            budgeted=False,
        )
        # Pairwise judges in `pairwise_mode="separate"` rate each output alone, 1-10. Only
        # pairwise judges build it: a memory's scale never changes (_config_checks).
        self.rating = (
            StructuredCaller(
                model,
                SEPARATE_SCALE.verdict_schema(score_first=cfg.score_first),
                what=f"judge {cfg.name!r} (one output of a pair)",
                retries=cfg.options.max_retries,
                rate_limiter=rate_limiter,
                budgeted=False,
            )
            if cfg.scale.kind == "pairwise"
            else None
        )
        self.asker = CheckAsker(
            model, cfg.options.checks, retries=cfg.options.max_retries, rate_limiter=rate_limiter
        )

    # embed_case: nothing to embed when the memory has nothing to retrieve, so an
    # unaligned judge makes no embedding call at all.
    def embed_case(self, state: JudgeState) -> dict[str, Any]:
        """Pin the memory version to read; embed the case unless given or not needed.

        A given `query_vector` (a parent graph's) is checked first (`check_query_vector`).
        """
        view = self.memory.snapshot()
        out: dict[str, Any] = {"memory_seq": view.seq}
        self._check_given_vector(state, view)
        if state.get("query_vector") is None and self.memory.needs_query_vector(view):
            text = self.memory.case_text(state.get("inputs"), state.get("outputs"))
            out["query_vector"] = self.memory.embed([text])[0].tolist()
        return out

    async def aembed_case(self, state: JudgeState) -> dict[str, Any]:
        """Async twin of `embed_case`."""
        view = await self.memory.asnapshot()
        out: dict[str, Any] = {"memory_seq": view.seq}
        self._check_given_vector(state, view)
        if state.get("query_vector") is None and self.memory.needs_query_vector(view):
            text = self.memory.case_text(state.get("inputs"), state.get("outputs"))
            out["query_vector"] = (await self.memory.aembed([text]))[0].tolist()
        return out

    def _check_given_vector(self, state: JudgeState, view: MemoryView) -> None:
        vector = state.get("query_vector")
        if vector is not None:
            check_query_vector(vector, self.memory.dimension(view))

    def load_guidelines(self, state: JudgeState) -> dict[str, Any]:
        """All guidelines, or the most relevant ones when they exceed the token budget."""
        view = self.memory.snapshot(state.get("memory_seq"))
        return {"guidelines": self.memory.select_guidelines(state.get("query_vector"), view=view)}

    def retrieve_episodes(self, state: JudgeState) -> dict[str, Any]:
        """The k most similar past cases with the experts' verdicts."""
        view = self.memory.snapshot(state.get("memory_seq"))
        case = (state.get("inputs"), state.get("outputs"))
        return {"episodes": self.memory.retrieve(state.get("query_vector"), view=view, case=case)}

    async def aretrieve_episodes(self, state: JudgeState) -> dict[str, Any]:
        """Async twin of `retrieve_episodes`: FAISS and SQLite run off the event loop."""
        return await asyncio.to_thread(self.retrieve_episodes, state)

    def _messages(
        self, case: dict[str, Any], guidelines: list[Guideline], episodes: list[Episode]
    ) -> Any:
        cfg = self.memory.config
        return judge_messages(
            cfg.instructions, cfg.scale, case, guidelines, episodes,
            cfg.options.retrieval.episode_max_chars, _ablation.of(cfg).layout,
            score_first=cfg.score_first,
        )  # fmt: skip

    def _calls(
        self, case: dict[str, Any], guidelines: list[Guideline], episodes: list[Episode]
    ) -> tuple[str, list[tuple[StructuredCaller[Any], Any]]]:
        """The model calls that grade a case: how they combine, and (caller, messages) each.

        One call, except for a pairwise case whose two outputs can be told apart: then
        the case as given and swapped (`"both_orders"`), or each output alone
        (`"separate"`, the default; the others are ablations, `langchain_memalign._ablation`).
        """
        cfg = self.memory.config
        mode = _ablation.of(cfg).pairwise_mode if cfg.scale.kind == "pairwise" else "one_order"
        if mode == "separate" and self.rating is not None:
            pair = split_outputs(case.get("outputs"))
            if pair is not None:
                alone = [{**case, "outputs": output} for output in pair]
                return mode, [
                    (self.rating, separate_messages(
                        cfg.instructions, c, guidelines, episodes,
                        cfg.options.retrieval.episode_max_chars,
                        score_first=cfg.score_first,
                    ))
                    for c in alone
                ]  # fmt: skip
        if mode == "both_orders":
            swapped = swap_outputs(case.get("outputs"))
            if swapped is not None:
                return mode, [
                    (self.verdict, self._messages(c, guidelines, episodes))
                    for c in (case, {**case, "outputs": swapped})
                ]
        return "one_order", [(self.verdict, self._messages(case, guidelines, episodes))]

    def _reconcile(self, mode: str, outs: list[tuple[Any, Usage]]) -> Verdict:
        if mode == "separate":
            return self._compare_ratings(outs)
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

    @staticmethod
    def _compare_ratings(outs: list[tuple[Any, Usage]]) -> Verdict:
        """Each output rated alone: the higher rating wins, equal ratings are a tie."""
        (first, usage), (second, usage2) = outs
        ratings = [SEPARATE_SCALE.validate_value(v.score) for v in (first, second)]
        score = "A" if ratings[0] > ratings[1] else "B" if ratings[1] > ratings[0] else "tie"
        half = RATIONALE_MAX_CHARS // 2 - 30
        rationale = " ".join(
            f"{which} output, {rating}/10: {tidy_rationale(v.rationale, half)}"
            for which, rating, v in zip(("First", "Second"), ratings, (first, second), strict=True)
        )
        return Verdict(score, rationale, usage + usage2, {"pairwise_ratings": ratings})

    def grade(
        self,
        case: dict[str, Any],
        guidelines: list[Guideline],
        episodes: list[Episode],
        config: RunnableConfig,
    ) -> Verdict:
        """Grade a case with the model and this working memory (never reuses a verdict)."""
        mode, calls = self._calls(case, guidelines, episodes)
        return self._reconcile(mode, [caller.invoke(msgs, config) for caller, msgs in calls])

    async def agrade(
        self,
        case: dict[str, Any],
        guidelines: list[Guideline],
        episodes: list[Episode],
        config: RunnableConfig,
    ) -> Verdict:
        """Async twin of `grade`: the calls of a pairwise case run concurrently."""
        mode, calls = self._calls(case, guidelines, episodes)
        outs = await asyncio.gather(*(caller.ainvoke(msgs, config) for caller, msgs in calls))
        return self._reconcile(mode, list(outs))

    def _result(self, state: JudgeState, verdict: Verdict) -> dict[str, Any]:
        metadata = {
            "guideline_ids": [g.id for g in state.get("guidelines") or []],
            "episode_ids": [e.feedback_id for e in state.get("episodes") or []],
            **verdict.metadata,
        }
        score, comment = verdict.score, verdict.rationale
        # Calibrated only without a past case in the prompt: the pairs were graded so,
        # and a near duplicate's score (often the case's own) is not the judge's habit.
        if self.memory.config.options.calibration.enabled and not state.get("episodes"):
            view = self.memory.snapshot(state.get("memory_seq"))
            score, evidence = view.calibration.apply(score)
            if evidence is not None:
                metadata["calibration"] = evidence
                # The rationale argues for the model's score: say why the score differs.
                n = evidence["expert_scores"].get(str(score), 0)
                comment = (
                    f"{comment} (Calibrated from {verdict.score}: the experts gave {score} to "
                    f"{n} of the {evidence['seen_cases']} seen cases this judge scored "
                    f"{verdict.score}.)"
                ).strip()
        if state.get("check_outcomes"):
            metadata["checks"] = state["check_outcomes"]
        if state.get("settled"):
            metadata["settled"] = state["settled"]
        # Reported whether or not the model resisted: a graded output that talks to
        # its grader is worth a human look either way.
        addressed = grader_directed(self._case(state))
        if addressed:
            metadata["graded_text_addresses_grader"] = addressed
        return {
            "result": {
                "key": self.memory.config.name,
                "score": score,
                "comment": comment,
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
        if not self.memory.config.options.retrieval.reuse_expert_verdicts:
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

    # -- checks ------------------------------------------------------------------------

    def _checks_to_ask(self, state: JudgeState) -> list[tuple[str, Check]]:
        """The checks of the guidelines this judgment shows, best tested first."""
        opts = self.memory.config.options.checks
        if opts.mode == "off" or opts.max_per_judgment == 0:
            return []
        if self.expert_verdict(state) is not None:
            return []
        view = self.memory.snapshot(state.get("memory_seq"))
        if not view.checks:
            return []
        shown = [g.id for g in state.get("guidelines") or []]
        asked = set(shown)
        checks = [
            (gid, view.checks[gid])
            for gid in shown
            if gid in view.checks and view.checks[gid].covered_by not in asked
        ]
        checks.sort(key=lambda rc: -rc[1].agreement)
        return checks[: opts.max_per_judgment]

    def _check_cases(self, state: JudgeState) -> list[dict[str, Any]]:
        """The case, or each output of a pairwise case alone."""
        case = self._case(state)
        if self.memory.config.scale.kind == "pairwise":
            pair = split_outputs(case.get("outputs"))
            if pair is not None:
                return [{**case, "outputs": output} for output in pair]
        return [case]

    def run_checks(self, state: JudgeState, config: RunnableConfig) -> dict[str, Any]:
        """Ask the checks of the guidelines shown about the case."""
        return self._ask_checks(state, config)[0]

    def _ask_checks(
        self, state: JudgeState, config: RunnableConfig
    ) -> tuple[dict[str, Any], Usage]:
        """`run_checks`' state update, and what asking cost."""
        checks = self._checks_to_ask(state)
        if not checks:
            return {}, Usage()
        asked = [self.asker.ask(checks, c, config) for c in self._check_cases(state)]
        usage = Usage.sum(cost for _, cost in asked)
        return self._checked(state, _outcomes_json([runs for runs, _ in asked])), usage

    async def arun_checks(self, state: JudgeState, config: RunnableConfig) -> dict[str, Any]:
        """Async twin of `run_checks`."""
        checks = self._checks_to_ask(state)
        if not checks:
            return {}
        runs = await asyncio.gather(
            *(self.asker.aask(checks, c, config) for c in self._check_cases(state))
        )
        return self._checked(state, _outcomes_json([r for r, _ in runs]))

    def decided_by_checks(self, state: JudgeState) -> dict[str, Any] | None:
        """The result when a check fired: its consequence (pairwise: the other output wins)."""
        outcomes = state.get("check_outcomes") or []
        if not outcomes:
            return None
        view = self.memory.snapshot(state.get("memory_seq"))
        texts = {g.id: g.text for g in state.get("guidelines") or []}
        scale = self.memory.config.scale
        decision: tuple[Any, str, str] | None = None
        if scale.kind == "pairwise" and isinstance(outcomes[0]["fired"], list):
            decision = _pairwise_decision(outcomes, view.checks, texts)
        else:
            fired = [
                (o, view.checks[o["rule_id"]])
                for o in outcomes
                if o["fired"]
                and o["rule_id"] in view.checks
                and view.checks[o["rule_id"]].consequence is not None
            ]
            if fired:
                o, check = max(fired, key=lambda oc: oc[1].agreement)
                comment = check_comment(
                    texts.get(o["rule_id"], check.rule_text), check, o["answers"]
                )
                decision = (check.consequence, comment, o["rule_id"])
        if decision is None:
            return None
        score, comment, rule_id = decision
        return {
            "result": {
                "key": self.memory.config.name,
                "score": scale.validate_value(score),
                "comment": comment,
                "metadata": {
                    "guideline_ids": list(texts),
                    "episode_ids": [e.feedback_id for e in state.get("episodes") or []],
                    "checks": outcomes,
                    "check_fired": rule_id,
                },
            }
        }

    def _checked(self, state: JudgeState, outcomes: list[dict[str, Any]]) -> dict[str, Any]:
        """The state update of `run_checks`: the outcomes, and the rules they settled.

        A rule is settled when its check stayed silent on every output; a covered rule
        with the check that covers it. An answer that failed settles nothing.
        """
        update: dict[str, Any] = {"check_outcomes": outcomes}
        if not self.memory.config.options.checks.settle:
            return update
        silent = {
            o["rule_id"] for o in outcomes if not o.get("error") and not any(_as_list(o["fired"]))
        }
        if silent:
            view = self.memory.snapshot(state.get("memory_seq"))
            covered = {gid for gid, c in view.checks.items() if c.covered_by in silent}
            update["settled"] = sorted(silent | covered)
        return update

    def _working_memory(self, state: JudgeState) -> tuple[list[Guideline], list[Episode]]:
        """The guidelines and past cases the holistic prompt shows (`checks.settle`).

        A rule its check settled is not argued again: its text and the past cases its
        check caught are left out.
        """
        guidelines = state.get("guidelines") or []
        episodes = state.get("episodes") or []
        settled = set(state.get("settled") or [])
        if not settled:
            return guidelines, episodes
        checks = self.memory.snapshot(state.get("memory_seq")).checks
        caught = {
            fid
            for gid in settled
            if (test := checks[gid].test) is not None
            for fid, f in test.fired.items()
            if any(_as_list(f))
        }
        return (
            [g for g in guidelines if g.id not in settled],
            [e for e in episodes if e.feedback_id not in caught],
        )

    def judge(self, state: JudgeState, config: RunnableConfig) -> dict[str, Any]:
        """Grade the case with the working memory in the prompt, unless a check fired."""
        known = self.expert_verdict(state)
        if known is not None:
            return known
        decided = self.decided_by_checks(state)
        if decided is not None:
            return decided
        verdict = self.grade(self._case(state), *self._working_memory(state), config)
        return self._result(state, verdict)

    def judge_afresh(self, state: JudgeState, config: RunnableConfig) -> tuple[Any, Usage]:
        """The verdict `judge` gives, with the model even on a case experts graded; its cost.

        For scoring a case before the judge learns it (`align(score_first=True)`): an
        expert verdict reused would measure the memory, not the judge. Its checks are
        asked as `run_checks` asks them.
        """
        checked, usage = self._ask_checks(state, config)
        state = cast(JudgeState, {**state, **checked})
        decided = self.decided_by_checks(state)
        if decided is not None:
            return decided["result"]["score"], usage
        verdict = self.grade(self._case(state), *self._working_memory(state), config)
        return self._result(state, verdict)["result"]["score"], usage + verdict.usage

    async def ajudge(self, state: JudgeState, config: RunnableConfig) -> dict[str, Any]:
        """Async twin of `judge`."""
        known = self.expert_verdict(state)
        if known is not None:
            return known
        decided = self.decided_by_checks(state)
        if decided is not None:
            return decided
        verdict = await self.agrade(self._case(state), *self._working_memory(state), config)
        return self._result(state, verdict)


def _as_list(fired: bool | list[bool]) -> list[bool]:
    """A check outcome's `fired`: one flag, or one per output of a pair."""
    return fired if isinstance(fired, list) else [fired]


def _outcomes_json(runs: list[list[CheckOutcome]]) -> list[dict[str, Any]]:
    """Outcomes for the state and the result's metadata; a pair's as [first, second]."""
    if len(runs) == 1:
        return [o.to_json() for o in runs[0]]
    return [
        {
            "rule_id": a.rule_id,
            "fired": [a.fired, b.fired],
            "answers": [a.answers, b.answers],
        }
        for a, b in zip(*runs, strict=True)
    ]


def _pairwise_decision(
    outcomes: list[dict[str, Any]], checks: Mapping[str, Check], texts: dict[str, str]
) -> tuple[Any, str, str] | None:
    """The output that breaks a rule the other keeps loses; both or neither: no decision."""
    broke: list[list[str]] = [[], []]
    for o in outcomes:
        for i, fired in enumerate(o["fired"]):
            if fired and o["rule_id"] in checks:
                broke[i].append(o["rule_id"])
    if bool(broke[0]) == bool(broke[1]):
        return None
    loser = 0 if broke[0] else 1
    rule_id = broke[loser][0]
    check = checks[rule_id]
    o = next(x for x in outcomes if x["rule_id"] == rule_id)
    who = f"The {('first', 'second')[loser]} output breaks a rule the other keeps. "
    answers = o["answers"][loser]
    comment = check_comment(texts.get(rule_id, check.rule_text), check, answers, who=who)
    return ("B" if loser == 0 else "A"), comment, rule_id


def build_judge_graph(
    nodes: JudgeNodes, *, name: str | None = None
) -> CompiledStateGraph[JudgeState, None, JudgeState, JudgeState]:
    """Compile the judgment graph on `nodes`, which the caller keeps (see the module doc)."""
    w = weak_runnable
    graph = StateGraph(JudgeState)
    graph.add_node("embed_case", w(nodes.embed_case, nodes.aembed_case))
    graph.add_node("load_guidelines", w(nodes.load_guidelines))
    graph.add_node("retrieve_episodes", w(nodes.retrieve_episodes, nodes.aretrieve_episodes))
    graph.add_node("run_checks", w(nodes.run_checks, nodes.arun_checks))
    graph.add_node("judge", w(nodes.judge, nodes.ajudge))
    graph.add_edge(START, "embed_case")
    graph.add_edge("embed_case", "load_guidelines")
    graph.add_edge("embed_case", "retrieve_episodes")
    graph.add_edge(["load_guidelines", "retrieve_episodes"], "run_checks")
    graph.add_edge("run_checks", "judge")
    graph.add_edge("judge", END)
    return graph.compile(name=name or f"{nodes.memory.config.name}_judge")
