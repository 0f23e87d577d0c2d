r"""Self-critique for LangGraph agents: a judge as a node that sends weak drafts back.

`SelfCritique` turns a `MemAlignJudge` into a node for any LangGraph agent.
The node maps the agent's state to the judge's input, runs the judge graph as a
subgraph (callbacks, tracing, checkpointer and store pass through the node's
config), and a router sends the agent on: a passing draft continues, a failing
one goes back to the agent with the judge's rationale as a revision note, at
most `max_rounds` times.

```
START -> agent -> critique --pass------> then
           ^          |--exhausted---> exhausted (defaults to then)
           \\-revise--/
```

Example:
    ```python
    class State(TypedDict, total=False):
        question: str
        draft: str
        critique: CritiqueState

    critic = SelfCritique(
        judge,
        to_case=lambda s: {"inputs": s["question"], "outputs": s["draft"]},
        max_rounds=2,
    )
    builder = StateGraph(State)
    builder.add_node("agent", write_draft)  # reads state["critique"]["note"] when revising
    builder.add_edge(START, "agent")
    critic.add_to(builder, agent="agent")  # agent -> critique -> END or back to agent
    app = builder.compile()
    out = app.invoke({"question": "I was charged twice!"})
    # Later, a reviewer confirms or corrects the verdict; the judge learns from it:
    critic.record(out, id="ticket-42", value=False, rationale="Promised a refund date.")
    ```
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, cast

from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langgraph.graph import END, StateGraph

# The state type and the default mappings and hooks live in `_critique_state`;
# they are importable from here.
from langchain_memalign._critique_state import (
    _CASE_KEYS,
    NOTE_MESSAGE_NAME,
    CritiqueState,
    _get,
    case_from_messages,
    default_case,
    default_note,
    default_passed,
    note_as_message,
)
from langchain_memalign.feedback import Feedback
from langchain_memalign.judge import MemAlignJudge
from langchain_memalign.reports import AlignReport
from langchain_memalign.result import label_of

__all__ = [
    "NOTE_MESSAGE_NAME",
    "CritiqueState",
    "Route",
    "SelfCritique",
    "case_from_messages",
    "default_case",
    "default_note",
    "default_passed",
    "note_as_message",
]

Route = Literal["pass", "revise", "exhausted"]
"""Where the router sends the agent after a critique."""


class SelfCritique:
    """A judge as a self-critique node for a LangGraph agent.

    Args:
        judge: The (aligned) judge that critiques the agent's drafts.
        to_case: Maps the agent's state to the judge's input
            `{"inputs", "outputs", "reference_outputs"}`; by default the state's
            keys of those names, or its `messages` (see `case_from_messages`).
        passed: Decides from the judge's result whether a draft passes; by
            default `default_passed(judge.scale)` (bool: `True`; numeric: at
            least the midpoint; categorical: the first category).
        max_rounds: How many times a failing draft is sent back for revision;
            the judge runs at most `max_rounds + 1` times per answer. `0`
            critiques without revising.
        key: The state key the critique is written to (a `CritiqueState`).
        note: Builds the revision note from the judge's result; by default
            `default_note`.
        on_revise: Extra state update when a draft is sent back, from the
            agent's state and the new critique, e.g. `note_as_message` for a
            messages-based agent.
        name: The node's name.
    """

    def __init__(
        self,
        judge: MemAlignJudge,
        *,
        to_case: Callable[[Any], Mapping[str, Any]] | None = None,
        passed: Callable[[dict[str, Any]], bool] | None = None,
        max_rounds: int = 2,
        key: str = "critique",
        note: Callable[[dict[str, Any]], str] | None = None,
        on_revise: Callable[[Any, CritiqueState], dict[str, Any]] | None = None,
        name: str = "critique",
    ) -> None:
        if max_rounds < 0:
            raise ValueError(f"max_rounds must be >= 0, got {max_rounds}")
        self.judge = judge
        self.graph: Runnable[Any, Any] = judge.graph
        """The judge graph run as a subgraph (`judge.graph`)."""
        self.to_case = to_case or default_case
        self.passed = passed or default_passed(judge.scale)
        self.max_rounds = max_rounds
        self.key = key
        self.note = note or default_note
        self.on_revise = on_revise
        self.name = name

    # -- the node ----------------------------------------------------------------------------

    @property
    def node(self) -> RunnableLambda[Any, dict[str, Any]]:
        """The critique node (sync and async), for `builder.add_node(name, critic.node)`."""
        return RunnableLambda(self.critique, afunc=self.acritique, name=self.name)

    def _case(self, state: Any) -> dict[str, Any]:
        case = dict(self.to_case(state))
        unknown = set(case) - set(_CASE_KEYS)
        if unknown or "inputs" not in case:
            raise TypeError(
                "to_case must return a dict with 'inputs' (and optionally 'outputs', "
                f"'reference_outputs'), got keys {sorted(case)}"
            )
        return {k: case.get(k) for k in _CASE_KEYS}

    def _update(self, state: Any, case: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        prev = cast(CritiqueState | None, _get(state, self.key)) or {}
        fresh = not prev or prev.get("final", True)
        round_ = 1 if fresh else int(prev.get("round", 0)) + 1
        history = [] if fresh else [*prev.get("history", []), prev.get("result") or {}]
        ok = bool(self.passed(result))
        critique: CritiqueState = {
            "case": case,
            "result": result,
            "passed": ok,
            "round": round_,
            "final": ok or round_ > self.max_rounds,
            "note": None if ok else self.note(result),
            "history": history,
        }
        update: dict[str, Any] = {self.key: critique}
        if not critique["final"] and self.on_revise is not None:
            update.update(self.on_revise(state, critique))
        return update

    def critique(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        """Judge the agent's draft and write a `CritiqueState` to the state."""
        case = self._case(state)
        out = self.graph.invoke(case, config)
        return self._update(state, case, dict(out["result"]))

    async def acritique(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        """Async twin of `critique`."""
        case = self._case(state)
        out = await self.graph.ainvoke(case, config)
        return self._update(state, case, dict(out["result"]))

    # -- routing -------------------------------------------------------------------------------

    def route(self, state: Any) -> Route:
        """`"pass"`, `"revise"` (back to the agent) or `"exhausted"` (failed, no round left)."""
        critique = cast(CritiqueState | None, _get(state, self.key))
        if not critique:
            raise ValueError(f"self-critique: no {self.key!r} in the state; run the node first")
        if critique.get("passed"):
            return "pass"
        return "exhausted" if critique.get("final") else "revise"

    def add_to(
        self,
        builder: StateGraph[Any, Any, Any, Any],
        *,
        agent: str,
        then: str = END,
        exhausted: str | None = None,
    ) -> StateGraph[Any, Any, Any, Any]:
        """Wire the critique into a graph: `agent -> critique -> then | agent | exhausted`.

        Args:
            builder: The agent's `StateGraph`; its state needs this critique's key.
            agent: The node that writes drafts (and revises them).
            then: Where a passing draft goes (default `END`).
            exhausted: Where a draft goes that still fails after `max_rounds`
                revisions (e.g. a human hand-off); defaults to `then`.
        """
        builder.add_node(self.name, self.node)
        builder.add_edge(agent, self.name)
        builder.add_conditional_edges(
            self.name,
            self.route,
            {"pass": then, "revise": agent, "exhausted": exhausted or then},
        )
        return builder

    # -- closing the loop ----------------------------------------------------------------------

    def _critique_of(self, state: Any) -> CritiqueState:
        if isinstance(state, Mapping) and "result" in state and "case" in state:
            return cast(CritiqueState, state)
        critique = cast(CritiqueState | None, _get(state, self.key))
        if not critique or "result" not in critique:
            raise ValueError(f"self-critique: no critique under {self.key!r} to record")
        return critique

    def feedback(
        self,
        state: Any,
        *,
        id: str,
        value: Any = None,
        rationale: str | None = None,
        annotator: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Feedback:
        """Feedback on the last critiqued draft: a reviewer confirms or corrects the verdict.

        Args:
            state: The agent's final state (or its `CritiqueState`).
            id: A stable feedback id (e.g. the ticket id).
            value: The reviewer's score; `None` confirms the judge's score.
            rationale: Why. Without one the feedback is remembered as an episode
                (the case with its verdict) but teaches no guideline; the judge's
                own rationale is not reused, so the judge does not distill rules
                from its own reasoning. To endorse it, pass
                `rationale=state["critique"]["result"]["comment"]`.
            annotator: Who reviewed.
            metadata: Anything else to keep; the judge's score and whether the
                reviewer confirmed it are added.
        """
        critique = self._critique_of(state)
        result, case = critique["result"], critique["case"]
        judged = label_of(result)
        value = judged if value is None else self.judge.scale.validate_value(value, feedback_id=id)
        confirmed = value == judged
        return Feedback(
            id=id,
            inputs=case.get("inputs"),
            outputs=case.get("outputs"),
            reference_outputs=case.get("reference_outputs"),
            value=value,
            rationale=rationale,
            annotator=annotator,
            metadata={
                "source": "self_critique",
                "judge_score": judged,
                "confirmed": confirmed,
                **(metadata or {}),
            },
        )

    def record(
        self,
        state: Any,
        *,
        id: str,
        value: Any = None,
        rationale: str | None = None,
        annotator: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        config: RunnableConfig | None = None,
    ) -> AlignReport:
        """Align the judge with a reviewer's verdict on the last draft (see `feedback`).

        The critique's verdict, given before the judge learned this review, goes into
        the judge's agreement series beside the reviewer's (`agreement_history`).
        """
        fb = self.feedback(
            state, id=id, value=value, rationale=rationale, annotator=annotator, metadata=metadata
        )
        return self.judge.align([fb], config, **self._earlier(state, fb))

    async def arecord(
        self,
        state: Any,
        *,
        id: str,
        value: Any = None,
        rationale: str | None = None,
        annotator: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        config: RunnableConfig | None = None,
    ) -> AlignReport:
        """Async twin of `record`."""
        fb = self.feedback(
            state, id=id, value=value, rationale=rationale, annotator=annotator, metadata=metadata
        )
        earlier = self._earlier(state, fb)
        return await self.judge.aalign([fb], config, **earlier)

    def _earlier(self, state: Any, fb: Feedback) -> dict[str, Any]:
        """`align`'s arguments recording the critique's verdict as the judge's earlier one."""
        judged = label_of(self._critique_of(state)["result"])
        return {"prior_verdicts": {fb.id: judged}, "prior_source": "self_critique"}
