"""Self-critique: the judge as a node that routes drafts on or back for revision."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict
from uuid import UUID

import pytest
from conftest import SWEATER
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from langchain_memalign import MemAlignJudge
from langchain_memalign.critique import (
    CritiqueState,
    SelfCritique,
    case_from_messages,
    default_case,
    default_note,
    default_passed,
    note_as_message,
)
from langchain_memalign.scale import Scale

UPSET = "I was charged twice and I'm really frustrated!"
COLD = "Duplicate charges are refunded within 5-7 business days."
WARM = "I'm so sorry about the double charge! It is refunded within 5-7 business days."


class State(TypedDict, total=False):
    question: str
    draft: str
    drafts: Annotated[list[str], operator.add]
    critique: CritiqueState
    escalated: bool


def make_agent(improves: bool = True) -> Any:
    def agent(state: State) -> dict[str, Any]:
        note = (state.get("critique") or {}).get("note")
        draft = WARM if note and improves else COLD
        return {"draft": draft, "drafts": [draft]}

    return agent


def to_case(state: State) -> dict[str, Any]:
    return {"inputs": state["question"], "outputs": state["draft"]}


def build(critic: SelfCritique, improves: bool = True, escalate: bool = False, **compile: Any):
    builder = StateGraph(State)
    builder.add_node("agent", make_agent(improves))
    builder.add_edge(START, "agent")
    if escalate:
        builder.add_node("escalate", lambda s: {"escalated": True})
        builder.add_edge("escalate", END)
    critic.add_to(builder, agent="agent", exhausted="escalate" if escalate else None)
    return builder.compile(**compile)


@pytest.fixture
def aligned(make_judge: Any) -> MemAlignJudge:
    judge: MemAlignJudge = make_judge()
    judge.align([SWEATER])  # teaches: acknowledge the customer's feelings
    return judge


def test_failing_draft_is_revised_with_the_rationale_then_passes(
    aligned: MemAlignJudge, responder: Any
) -> None:
    critic = SelfCritique(aligned, to_case=to_case)
    out = build(critic).invoke({"question": UPSET})
    assert out["drafts"] == [COLD, WARM] and out["draft"] == WARM
    critique = out["critique"]
    assert critique["passed"] is True and critique["final"] is True and critique["round"] == 2
    assert critique["note"] is None and critique["case"]["outputs"] == WARM
    assert [r["score"] for r in critique["history"]] == [False]
    assert responder.roles.count("judge") == 2


def test_revision_note_carries_the_judges_rationale(aligned: MemAlignJudge) -> None:
    notes: list[str] = []
    critic = SelfCritique(aligned, to_case=to_case)
    builder = StateGraph(State)

    def agent(state: State) -> dict[str, Any]:
        note = (state.get("critique") or {}).get("note")
        if note:
            notes.append(note)
        return {"draft": WARM if note else COLD}

    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    critic.add_to(builder, agent="agent")
    builder.compile().invoke({"question": UPSET})
    assert len(notes) == 1
    assert "does not acknowledge the customer's feelings" in notes[0]
    assert "helpfulness" in notes[0] and "Revise" in notes[0]


def test_at_most_max_rounds_revisions_then_exhausted(
    aligned: MemAlignJudge, responder: Any
) -> None:
    critic = SelfCritique(aligned, to_case=to_case, max_rounds=2)
    out = build(critic, improves=False, escalate=True).invoke({"question": UPSET})
    assert len(out["drafts"]) == 3 and responder.roles.count("judge") == 3
    assert out["critique"]["passed"] is False and out["critique"]["final"] is True
    assert out["critique"]["round"] == 3 and len(out["critique"]["history"]) == 2
    assert out["critique"]["note"]  # kept for the hand-off
    assert out["escalated"] is True


def test_zero_rounds_critiques_without_revising(aligned: MemAlignJudge) -> None:
    critic = SelfCritique(aligned, to_case=to_case, max_rounds=0)
    out = build(critic).invoke({"question": UPSET})
    assert out["drafts"] == [COLD] and out["critique"]["passed"] is False
    assert "escalated" not in out  # exhausted defaults to `then` (END)


def test_passing_draft_continues_at_once(make_judge: Any, responder: Any) -> None:
    critic = SelfCritique(make_judge(), to_case=to_case)  # unaligned: passes everything
    out = build(critic).invoke({"question": UPSET})
    assert out["drafts"] == [COLD] and out["critique"]["round"] == 1
    assert responder.roles.count("judge") == 1


def test_every_answer_gets_fresh_rounds_with_a_checkpointer(aligned: MemAlignJudge) -> None:
    critic = SelfCritique(aligned, to_case=to_case, max_rounds=1)
    app = build(critic, checkpointer=InMemorySaver())
    cfg: Any = {"configurable": {"thread_id": "t1"}}
    first = app.invoke({"question": UPSET}, cfg)
    second = app.invoke({"question": UPSET}, cfg)
    assert first["critique"]["round"] == 2 and second["critique"]["round"] == 2
    assert second["critique"]["passed"] is True and len(second["critique"]["history"]) == 1
    assert second["drafts"] == [COLD, WARM, COLD, WARM]


async def test_async_graph_runs_the_judge_asynchronously(aligned: MemAlignJudge) -> None:
    critic = SelfCritique(aligned, to_case=to_case)
    out = await build(critic).ainvoke({"question": UPSET})
    assert out["drafts"] == [COLD, WARM] and out["critique"]["passed"] is True


class RunLog(BaseCallbackHandler):
    def __init__(self) -> None:
        self.runs: dict[UUID, tuple[str, UUID | None]] = {}

    def on_chain_start(
        self,
        serialized: Any,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self.runs[run_id] = (kwargs.get("name") or "", parent_run_id)

    def ancestors(self, name: str) -> list[str]:
        run = next(r for r, (n, _) in self.runs.items() if n == name)
        names = []
        parent = self.runs[run][1]
        while parent is not None and parent in self.runs:
            names.append(self.runs[parent][0])
            parent = self.runs[parent][1]
        return names


def test_tracing_passes_through_to_the_judge_subgraph(aligned: MemAlignJudge) -> None:
    log = RunLog()
    critic = SelfCritique(aligned, to_case=to_case, max_rounds=0)
    build(critic).invoke({"question": UPSET}, {"callbacks": [log]})
    assert log.ancestors("helpfulness_judge")[:1] == ["critique"]
    assert "critique" in log.ancestors("judge")  # the judge node nests under the critique


def test_store_passes_through_to_the_judge_subgraph(aligned: MemAlignJudge) -> None:
    seen: list[BaseStore] = []

    class JS(TypedDict, total=False):
        inputs: Any
        outputs: Any
        reference_outputs: Any
        result: dict[str, Any]

    def fake_judge(state: JS, *, store: BaseStore) -> dict[str, Any]:
        seen.append(store)
        return {"result": {"key": "k", "score": True, "comment": "ok", "metadata": {}}}

    sub = StateGraph(JS)
    sub.add_node("judge", fake_judge)
    sub.add_edge(START, "judge")
    critic = SelfCritique(aligned, to_case=to_case)
    critic.graph = sub.compile()
    store = InMemoryStore()
    build(critic, store=store).invoke({"question": UPSET})
    assert seen == [store]


def test_default_pass_rules() -> None:
    assert default_passed(Scale.of(bool))({"score": True})
    assert not default_passed(Scale.of(bool))({"score": False})
    numeric = default_passed(Scale.of((1, 5)))
    assert numeric({"score": 3}) and numeric({"score": 5}) and not numeric({"score": 2})
    assert not numeric({"score": None})
    categorical = default_passed(Scale.of(["Excellent", "Acceptable", "Bad"]))
    # a JudgeResult: the label is the value, its position the score
    assert categorical({"score": 0, "value": "Excellent"})
    assert not categorical({"score": 1, "value": "Acceptable"})
    with pytest.raises(ValueError, match="pairwise"):
        default_passed(Scale.of("pairwise"))


def test_custom_pass_rule_and_note(make_judge: Any) -> None:
    critic = SelfCritique(
        make_judge(),
        to_case=to_case,
        passed=lambda r: False,
        note=lambda r: "be warmer",
        max_rounds=1,
    )
    out = build(critic).invoke({"question": UPSET})
    assert out["critique"]["note"] == "be warmer" and len(out["drafts"]) == 2


def test_pairwise_judge_needs_a_pass_rule(make_judge: Any) -> None:
    with pytest.raises(ValueError, match="passed="):
        SelfCritique(make_judge(scale="pairwise"))
    SelfCritique(make_judge(scale="pairwise"), passed=lambda r: r["score"] == "A")


def test_invalid_arguments_and_states(aligned: MemAlignJudge) -> None:
    with pytest.raises(ValueError, match="max_rounds"):
        SelfCritique(aligned, max_rounds=-1)
    critic = SelfCritique(aligned)
    with pytest.raises(ValueError, match="run the node first"):
        critic.route({})
    with pytest.raises(TypeError, match="to_case"):
        default_case({"question": "q"})
    bad = SelfCritique(aligned, to_case=lambda s: {"question": "q"})
    with pytest.raises(TypeError, match="'inputs'"):
        bad.critique({}, {})
    with pytest.raises(ValueError, match="no critique"):
        critic.feedback({}, id="x")


def test_default_case_reads_inputs_and_outputs_keys() -> None:
    state = {"inputs": "q", "outputs": "a", "reference_outputs": "r", "other": 1}
    assert default_case(state) == {"inputs": "q", "outputs": "a", "reference_outputs": "r"}


def test_default_note_mentions_score_and_rationale() -> None:
    note = default_note({"key": "tone", "score": 2, "comment": "Too curt."})
    assert "tone" in note and "2" in note and "Too curt." in note
    labelled = default_note({"key": "tone", "score": 2, "value": "Cold", "comment": "Curt."})
    assert "'Cold'" in labelled  # the label, not its position


class MessagesState(TypedDict, total=False):
    messages: Annotated[list[BaseMessage], operator.add]
    critique: CritiqueState


def test_messages_agent_gets_the_note_as_a_message(aligned: MemAlignJudge) -> None:
    seen: list[list[BaseMessage]] = []

    def agent(state: MessagesState) -> dict[str, Any]:
        seen.append(list(state["messages"]))
        revising = state["messages"][-1].name == "critique"
        return {"messages": [AIMessage(content=WARM if revising else COLD)]}

    critic = SelfCritique(aligned, on_revise=note_as_message)
    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    critic.add_to(builder, agent="agent")
    out = builder.compile().invoke({"messages": [HumanMessage(content=UPSET)]})
    assert [m.type for m in out["messages"]] == ["human", "ai", "human", "ai"]
    assert "acknowledge" in str(seen[1][-1].content)
    # The note is not mistaken for the customer's question.
    assert out["critique"]["case"]["inputs"] == UPSET
    assert out["critique"]["case"]["outputs"] == WARM and out["critique"]["passed"]


def test_case_from_messages_accepts_dicts_and_needs_an_ai_message() -> None:
    state = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
        ]
    }
    assert case_from_messages(state) == {
        "inputs": "hi",
        "outputs": "hello",
        "reference_outputs": None,
    }
    with pytest.raises(ValueError, match="no AI message"):
        case_from_messages({"messages": [{"role": "user", "content": "hi"}]})


def test_reviewer_confirms_the_verdict(aligned: MemAlignJudge) -> None:
    critic = SelfCritique(aligned, to_case=to_case)
    out = build(critic).invoke({"question": UPSET})
    fb = critic.feedback(out, id="ticket-1", annotator="ana")
    assert fb.value is True and fb.rationale is None  # an episode, not a guideline
    assert fb.inputs == UPSET and fb.outputs == WARM and fb.annotator == "ana"
    assert fb.metadata == {"source": "self_critique", "judge_score": True, "confirmed": True}
    report = critic.record(out, id="ticket-1", annotator="ana")
    assert report.added == ["ticket-1"] and "ticket-1" in aligned.feedback_ids
    assert report.guidelines_added == []


def test_reviewer_corrects_the_verdict_and_the_judge_learns(
    aligned: MemAlignJudge, responder: Any
) -> None:
    critic = SelfCritique(aligned, to_case=to_case)
    out = build(critic).invoke({"question": UPSET})
    before = len(aligned.guidelines)
    report = critic.record(
        out["critique"],
        id="ticket-2",
        value="fail",
        rationale="Promises a refund date we cannot guarantee.",
        metadata={"ticket": 2},
    )
    stored = aligned.get_feedback("ticket-2")
    assert stored.value is False and stored.metadata["confirmed"] is False
    assert stored.metadata["ticket"] == 2 and stored.outputs == WARM
    assert report.guidelines_added and len(aligned.guidelines) == before + 1
    assert any("refund date" in g.text for g in aligned.guidelines)
    # The critique was the judge's verdict before it learned the correction.
    assert report.agreement_recorded == ["ticket-2"]
    point = aligned.agreement_history().points[-1]
    assert (point.feedback_id, point.judge, point.expert, point.source) == (
        "ticket-2", True, False, "self_critique",
    )  # fmt: skip


def test_correction_without_rationale_does_not_reuse_the_judges(aligned: MemAlignJudge) -> None:
    critic = SelfCritique(aligned, to_case=to_case)
    out = build(critic).invoke({"question": UPSET})
    fb = critic.feedback(out, id="t", value=False)
    assert fb.rationale is None and fb.metadata["confirmed"] is False
    endorsed = critic.feedback(out, id="t", rationale=out["critique"]["result"]["comment"])
    assert endorsed.rationale == "The reply answers the question."


async def test_arecord(aligned: MemAlignJudge) -> None:
    critic = SelfCritique(aligned, to_case=to_case)
    out = await build(critic).ainvoke({"question": UPSET})
    report = await critic.arecord(out, id="t-async")
    assert report.added == ["t-async"] and report.agreement_recorded == ["t-async"]
