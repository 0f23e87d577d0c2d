"""Scoring new feedback before the judge learns it: `align(score_first=True)`.

Every review is a free test of the judge: its verdict on the case before it
learns the review, against the expert's. Feedback from files carries no verdict
of the judge, so `score_first` asks for one: each new item is judged once with
the memory as it is before the align (the cases embedded in one call), and the
verdict goes into the agreement series beside the expert's (`graphs.merge`).
Expert-verdict reuse is off for this grading: the experts' verdict on an
identical case would be copied, not judged.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig, RunnableLambda

from langchain_memalign.feedback import Feedback
from langchain_memalign.graphs._failures import raise_unless_unusable
from langchain_memalign.graphs.judge import JudgeNodes, JudgeState
from langchain_memalign.memory.judge_memory import JudgeMemory
from langchain_memalign.reports import Usage


def grade_before_learning(
    memory: JudgeMemory, nodes: JudgeNodes, items: list[Feedback], config: RunnableConfig
) -> tuple[dict[str, Any], Usage, list[str]]:
    """One judgment of each item as the memory is now: (verdicts by id, cost, errors).

    A judgment whose answer stays unusable is an error (named by the item's id) and
    no verdict: the item is still learned, without a point in the series. A provider
    error is raised (`graphs._failures`): the align fails, rather than leaving the item
    without a point for good (a stored item is never graded first again).
    """
    usage = Usage()
    if not items:
        return {}, usage, []
    view = memory.snapshot()
    vectors = None
    if memory.needs_query_vector(view):
        vectors = memory.embed([memory.case_text(fb.inputs, fb.outputs) for fb in items], usage)

    def one(i: int) -> tuple[Any, Usage]:
        fb = items[i]
        state: JudgeState = {
            "inputs": fb.inputs,
            "outputs": fb.outputs,
            "reference_outputs": fb.reference_outputs,
            "memory_seq": view.seq,
            "query_vector": None if vectors is None else vectors[i].tolist(),
        }
        state.update(nodes.load_guidelines(state))  # type: ignore[typeddict-item]
        state.update(nodes.retrieve_episodes(state))  # type: ignore[typeddict-item]
        return nodes.judge_afresh(state, config)

    outcomes = RunnableLambda(one).batch(list(range(len(items))), config, return_exceptions=True)
    raise_unless_unusable(outcomes)
    verdicts: dict[str, Any] = {}
    errors: list[str] = []
    for fb, outcome in zip(items, outcomes, strict=True):
        if isinstance(outcome, Exception):
            usage = usage + (getattr(outcome, "usage", None) or Usage(llm_calls=1))
            errors.append(f"scoring {fb.id!r} before learning it failed: {outcome}")
            continue
        verdict, cost = outcome
        verdicts[fb.id] = verdict
        usage = usage + cost
    return verdicts, usage, errors
