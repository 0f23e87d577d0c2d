"""Each node of the judgment graph alone, then the graph wired and as a subgraph."""

from __future__ import annotations

import gc
import json
import weakref
from typing import Any, TypedDict

import pytest
from conftest import HOURS, RUDE, SWEATER
from langgraph.graph import END, START, StateGraph

from langchain_memalign import JudgeOptions
from langchain_memalign.graphs.judge import JudgeNodes, build_judge_graph

CASE = {"inputs": "I was charged twice and I'm frustrated!", "outputs": "Refunds take 5-7 days."}


def test_graph_shape(make_judge: Any) -> None:
    graph = make_judge().graph.get_graph()
    edges = {(e.source, e.target) for e in graph.edges}
    assert ("embed_case", "load_guidelines") in edges
    assert ("embed_case", "retrieve_episodes") in edges
    assert ("load_guidelines", "run_checks") in edges
    assert ("retrieve_episodes", "run_checks") in edges
    assert ("run_checks", "judge") in edges and ("judge", "__end__") in edges


def test_the_graph_runs_the_nodes_it_is_given(make_judge: Any) -> None:
    judge = make_judge()
    ran: list[JudgeNodes] = []

    class Recording(JudgeNodes):
        def judge(self, state: Any, config: Any) -> dict[str, Any]:
            ran.append(self)
            return super().judge(state, config)

    nodes = Recording(judge.memory, judge.model)
    out = build_judge_graph(nodes).invoke(dict(CASE))
    assert ran == [nodes] and out["result"]["key"] == "helpfulness"


def test_a_graph_does_not_keep_its_nodes_alive(make_judge: Any) -> None:
    """The caller owns the nodes; nothing on the compiled graph holds them."""
    judge = make_judge()
    nodes = JudgeNodes(judge.memory, judge.model)
    alive = weakref.ref(nodes)
    graph = build_judge_graph(nodes)
    del nodes
    gc.collect()
    assert alive() is None
    with pytest.raises(RuntimeError, match="no longer exists"):
        graph.invoke(dict(CASE))


def test_validation_and_calibration_grade_with_the_judge_graphs_nodes(make_judge: Any) -> None:
    judge = make_judge()
    nodes = judge._align_nodes
    assert nodes.validator.judge_nodes is nodes.calibrator.judge_nodes is judge._judge_nodes


def test_embed_case_skips_empty_memory_and_given_vectors(make_judge: Any, embeddings: Any) -> None:
    judge = make_judge()
    nodes = JudgeNodes(judge.memory, judge.model)
    empty = nodes.embed_case(dict(CASE))
    assert "query_vector" not in empty  # nothing to retrieve: no call
    judge.align([HOURS])
    calls = embeddings.calls
    out = nodes.embed_case(dict(CASE))
    assert len(out["query_vector"]) == embeddings.size and embeddings.calls == calls + 1
    # the judgment reads the version the align committed, not the empty one
    assert out["memory_seq"] > empty["memory_seq"]
    assert "query_vector" not in nodes.embed_case({**CASE, "query_vector": [0.0] * 64})
    assert embeddings.calls == calls + 1


def test_embed_case_embeds_the_same_text_as_stored_episodes(
    make_judge: Any, embeddings: Any
) -> None:
    judge = make_judge()
    judge.align([SWEATER])
    stored_text = embeddings.texts[0]
    JudgeNodes(judge.memory, judge.model).embed_case(
        {"inputs": SWEATER.inputs, "outputs": "something else"}
    )
    assert embeddings.texts[-1] == stored_text == SWEATER.inputs


def test_embed_inputs_outputs_option(make_judge: Any, embeddings: Any) -> None:
    judge = make_judge(options={"retrieval": {"embed": "inputs_outputs"}})
    judge.align([HOURS])
    assert embeddings.texts[0] == f"{HOURS.inputs}\n{HOURS.outputs}"


def test_retrieve_episodes_returns_most_similar_with_verdicts(make_judge: Any) -> None:
    judge = make_judge(k=2)
    judge.align([SWEATER, HOURS, RUDE])
    nodes = JudgeNodes(judge.memory, judge.model)
    vec = nodes.embed_case({"inputs": "What are your opening hours on Saturday?"})["query_vector"]
    episodes = nodes.retrieve_episodes({"query_vector": vec})["episodes"]
    assert len(episodes) == 2
    assert episodes[0].feedback_id == "hours"
    assert episodes[0].value is True and episodes[0].rationale == HOURS.rationale
    assert episodes[0].similarity >= episodes[1].similarity


def test_min_episode_similarity_leaves_out_unrelated_past_cases(make_judge: Any) -> None:
    judge = make_judge(k=3)
    judge.align([SWEATER, HOURS, RUDE])
    query = judge.memory.embed(["What are your opening hours on Saturday?"])[0]
    every = judge.memory.retrieve(query)
    assert len(every) == 3  # the k nearest, however far
    floor = (every[0].similarity + every[1].similarity) / 2
    assert every[0].similarity > floor > every[1].similarity
    judge.close()
    gated = make_judge(
        k=3,
        options={"retrieval": {"min_similarity": floor, "min_similarity_with_rationale": floor}},
    )
    gated.align([SWEATER, HOURS, RUDE])
    assert [ep.feedback_id for ep in gated.memory.retrieve(query)] == [every[0].feedback_id]
    # a case the experts graded retrieves itself (similarity 1) and is always shown
    own = gated.memory.retrieve(gated.memory.embed([RUDE.inputs])[0])
    assert own and own[0].feedback_id == "rude" and own[0].similarity > 0.99
    gated.close()


def test_past_cases_with_a_rationale_have_their_own_floor(make_judge: Any) -> None:
    bare = [fb.model_copy(update={"id": f"bare-{fb.id}", "rationale": None}) for fb in
            (SWEATER, RUDE)]  # fmt: skip
    cases = [SWEATER, HOURS, RUDE, *bare]
    judge = make_judge(k=5, options={"retrieval": {"min_similarity": 0.99}})
    judge.align(cases)
    query = judge.memory.embed(["What are your opening hours on Saturday?"])[0]
    shown = {ep.feedback_id for ep in judge.memory.retrieve(query)}
    # bare verdicts far from the case are left out, reasoned ones are shown (no floor)
    assert shown == {"sweater", "hours", "rude"}
    judge.close()
    strict = make_judge(
        k=5, options={"retrieval": {"min_similarity": None, "min_similarity_with_rationale": 0.99}}
    )
    strict.align(cases)
    assert {ep.feedback_id for ep in strict.memory.retrieve(query)} == {
        "bare-sweater", "bare-rude",
    }  # fmt: skip


def test_the_default_floors_show_near_duplicates_only_on_every_scale(make_judge: Any) -> None:
    # Unset floors ("auto"): 0.9 with or without a rationale, on every scale: a small
    # judge copies the verdicts it is shown, and the rules the rationales teach reach it
    # as guidelines and checks. A case asked again retrieves itself (similarity ~1.0).
    bare = [fb.model_copy(update={"id": f"{fb.id}-bare", "rationale": None})
            for fb in (SWEATER, HOURS, RUDE)]  # fmt: skip
    numbered = [fb.model_copy(update={"value": 2 if fb.value is False else 5})
                for fb in (SWEATER, HOURS, RUDE)]  # fmt: skip
    rated = [fb.model_copy(update={"value": "good" if fb.value else "bad"})
             for fb in (SWEATER, HOURS, RUDE)]  # fmt: skip
    query = "What are your opening hours on Saturday?"
    shown = {}
    for kind, scale, cases in (
        ("numeric", (1, 5), numbered),
        ("bool", bool, [SWEATER, HOURS, RUDE, *bare]),
        ("categorical", ["bad", "good"], rated),
    ):
        auto = {"min_similarity": "auto", "min_similarity_with_rationale": "auto"}
        judge = make_judge(k=6, scale=scale, options={"retrieval": auto})
        judge.align(cases)
        retrieval = judge.config.options.retrieval
        floors = (retrieval.min_similarity, retrieval.min_similarity_with_rationale)
        far = judge.memory.retrieve(judge.memory.embed([query])[0])
        itself = judge.memory.retrieve(judge.memory.embed([HOURS.inputs])[0])
        shown[kind] = (floors, sorted(e.feedback_id for e in far),
                       {e.feedback_id for e in itself} >= {"hours"})  # fmt: skip
        judge.close()
    # the fake embeddings put no other case near 0.9, with a rationale or without
    assert shown == {kind: ((0.9, 0.9), [], True) for kind in ("numeric", "bool", "categorical")}
    # a floor given explicitly is kept
    kept = make_judge(
        scale=(1, 5),
        options={"retrieval": {"min_similarity": 0.5, "min_similarity_with_rationale": "auto"}},
    )
    assert kept.config.options.retrieval.min_similarity == 0.5
    assert kept.config.options.retrieval.min_similarity_with_rationale == 0.9
    kept = make_judge(
        scale=bool,
        options={"retrieval": {"min_similarity": "auto", "min_similarity_with_rationale": 0.9}},
    )
    retrieval = kept.config.options.retrieval
    assert (retrieval.min_similarity, retrieval.min_similarity_with_rationale) == (0.9, 0.9)
    # JudgeOptions itself leaves them "auto": the judge's scale decides
    assert JudgeOptions().retrieval.min_similarity == "auto"
    assert kept.config.floor(with_rationale=True) == 0.9


def test_load_guidelines_within_budget_returns_all(make_judge: Any) -> None:
    judge = make_judge()
    judge.align([SWEATER, HOURS])
    nodes = JudgeNodes(judge.memory, judge.model)
    got = nodes.load_guidelines({})["guidelines"]
    assert [g.id for g in got] == [g.id for g in judge.guidelines]


def test_judge_node_puts_working_memory_in_a_delimited_section(make_judge: Any, model: Any) -> None:
    judge = make_judge(options={"_ablation": {"layout": "plain"}})
    judge.align([SWEATER])
    nodes = JudgeNodes(judge.memory, judge.model)
    episodes = judge.memory.retrieve(judge.memory.embed([SWEATER.inputs])[0])
    out = nodes.judge({**CASE, "guidelines": judge.guidelines, "episodes": episodes}, {})["result"]
    prompt = model.calls[-1][1].content
    memory, case = prompt.split("<case>")
    assert memory.index("<guidelines>") < memory.index("<past_cases>") < memory.index("</memory>")
    assert "acknowledge the customer's disappointment" in memory
    assert "Expert score: false" in memory
    assert "charged twice" in case and "charged twice" not in memory
    assert out == {
        "key": "helpfulness",
        "score": False,
        "comment": "It does not acknowledge the customer's feelings.",
        "metadata": {"guideline_ids": [judge.guidelines[0].id], "episode_ids": ["sweater"]},
    }


def test_turns_prompt_puts_guidelines_in_system_and_past_cases_as_turns(
    make_judge: Any, model: Any
) -> None:
    judge = make_judge()  # judge_prompt="turns" is the default
    judge.align([SWEATER, HOURS])
    nodes = JudgeNodes(judge.memory, judge.model)
    episodes = judge.memory.retrieve(judge.memory.embed([SWEATER.inputs])[0])
    nodes.judge({**CASE, "guidelines": judge.guidelines, "episodes": episodes}, {})
    msgs = model.calls[-1]
    kinds = [type(m).__name__ for m in msgs]
    # system, then (user case, expert verdict) per past case, then the case
    assert kinds == ["SystemMessage", "HumanMessage", "AIMessage", "HumanMessage",
                     "AIMessage", "HumanMessage"]  # fmt: skip
    assert all(g.text in str(msgs[0].content) for g in judge.guidelines)
    verdicts = [json.loads(str(m.content)) for m in msgs if type(m).__name__ == "AIMessage"]
    # the most similar past case (sweater) answers right before the case
    assert verdicts[-1] == {"rationale": SWEATER.rationale, "score": False}
    assert SWEATER.inputs in str(msgs[3].content) and "charged twice" in str(msgs[-1].content)


@pytest.mark.parametrize("order", ["score_first", "rationale_first"])
def test_the_verdict_order_is_the_same_in_the_prompt_the_schema_and_past_answers(
    make_judge: Any, model: Any, order: str
) -> None:
    judge = make_judge(options={"prompt": {"verdict_order": order}})
    judge.align([SWEATER, HOURS])
    result = judge.invoke(CASE)
    msgs = model.calls[-1]
    expected = ["score", "rationale"] if order == "score_first" else ["rationale", "score"]
    # past cases answer in the order the judge is asked to answer in
    answers = [list(json.loads(str(m.content))) for m in msgs if type(m).__name__ == "AIMessage"]
    assert answers and all(keys == expected for keys in answers)
    asked = str(msgs[0].content)
    assert asked.index(f'"{expected[0]}"') < asked.index(f'"{expected[1]}"')
    schema = JudgeNodes(judge.memory, judge.model).verdict.schema.model_json_schema()
    assert list(schema["properties"]) == expected  # the order a grammar makes the model write
    assert isinstance(result["score"], bool) and result["comment"]


CHECKLIST = {"_ablation": {"layout": "checklist"}}  # an ablation (_ablation.py)


@pytest.mark.parametrize(
    ("scale", "options", "score_first"),
    [
        ((1, 5), {}, True),  # "auto": numeric scales give the score first
        (bool, {}, False),
        (["good", "bad"], {}, False),
        ("pairwise", {}, False),
        ((1, 5), CHECKLIST, False),  # reasons first, always
        ((1, 5), {**CHECKLIST, "prompt": {"verdict_order": "score_first"}}, False),
        (bool, {"prompt": {"verdict_order": "score_first"}}, True),
        ((1, 5), {"prompt": {"verdict_order": "rationale_first"}}, False),
    ],
)
def test_which_comes_first_by_scale_and_option(
    make_judge: Any, scale: Any, options: dict[str, Any], score_first: bool
) -> None:
    judge = make_judge(scale=scale, options=options)
    assert judge.memory.config.score_first is score_first
    schema = JudgeNodes(judge.memory, judge.model).verdict.schema.model_json_schema()
    first = "score" if score_first else "rationale"
    assert next(iter(schema["properties"])) == first


@pytest.mark.parametrize("style", ["turns", "plain"])
def test_episode_text_is_truncated_to_budget(make_judge: Any, model: Any, style: str) -> None:
    judge = make_judge(
        options={"retrieval": {"episode_max_chars": 200}, "_ablation": {"layout": style}}
    )
    long = SWEATER.model_copy(update={"id": "long", "outputs": "blah " * 500})
    judge.align([long])
    judge.invoke(CASE)
    msgs = model.calls[-1]
    if style == "turns":  # the past case is the first user turn and its verdict
        memory = f"{msgs[1].content}{msgs[2].content}"
    else:
        memory = str(msgs[1].content).split("<past_cases>")[1].split("</past_cases>")[0]
    assert len(memory) < 450 and "..." in memory


@pytest.mark.parametrize("style", ["turns", "plain"])
def test_a_long_past_case_shows_every_field_and_both_ends(
    make_judge: Any, model: Any, style: str
) -> None:
    # A head-only cut of {"instruction": <long dialogue>, "rubric": ...} showed only the
    # dialogue's first lines: neither the last question nor the rubric the score means.
    # Checks off: a check's question call would be the last call, not the judge prompt.
    judge = make_judge(
        options={
            "retrieval": {"episode_max_chars": 900},
            "_ablation": {"layout": style},
            "checks": {"mode": "off"},
        }
    )
    dialogue = "User: first question. " + "Assistant: a long answer. " * 60 + "User: LAST QUESTION?"
    case = SWEATER.model_copy(
        update={"id": "long", "inputs": {"instruction": dialogue, "rubric": "Score 1: RUBRIC."}}
    )
    judge.align([case])
    judge.invoke(CASE)
    msgs = model.calls[-1]
    memory = "".join(str(m.content) for m in msgs[1:])  # past case(s) and the short case
    assert "User: first question." in memory and "LAST QUESTION?" in memory
    assert "rubric: Score 1: RUBRIC." in memory and " [...] " in memory
    assert len(memory) < 2_500


def test_unaligned_judge_prompt_has_no_memory_section(make_judge: Any, model: Any) -> None:
    make_judge().invoke(CASE)
    assert "<memory>" not in model.calls[-1][1].content


class Outer(TypedDict, total=False):
    inputs: Any
    outputs: Any
    result: dict[str, Any]
    log: list[str]


def test_judge_graph_as_subgraph(make_judge: Any) -> None:
    judge = make_judge()
    judge.align([SWEATER])
    outer = StateGraph(Outer)
    outer.add_node("draft", lambda s: {"outputs": "Refunds take 5-7 days.", "log": ["drafted"]})
    outer.add_node("critique", judge.graph)
    outer.add_edge(START, "draft")
    outer.add_edge("draft", "critique")
    outer.add_edge("critique", END)
    out = outer.compile().invoke({"inputs": "I was charged twice and I'm frustrated!"})
    assert out["result"]["score"] is False and out["log"] == ["drafted"]


def test_mustache_instructions_fill_and_embed_the_inputs(
    make_judge: Any, model: Any, embeddings: Any
) -> None:
    judge = make_judge(instructions="Question: {{ inputs }}\nAnswer: {{outputs}}")
    inputs = {"question": "What are your hours?"}
    judge.align([HOURS.model_copy(update={"inputs": inputs})])
    assert embeddings.texts[0] == "What are your hours?"  # the inputs, not the template
    judge.invoke({"inputs": inputs, "outputs": "9 to 5"})
    assert embeddings.texts[-1] == "What are your hours?"
    case = model.calls[-1][-1].content.split("<case>")[1]
    assert "Question: What are your hours?\nAnswer: 9 to 5" in case and "{{" not in case


def test_unmentioned_case_parts_are_appended(make_judge: Any, model: Any) -> None:
    make_judge(instructions="Is the answer correct?").invoke(
        {"inputs": "2+2?", "outputs": "4", "reference_outputs": "4"}
    )
    case = model.calls[-1][-1].content
    assert "Inputs:\n2+2?" in case and "Outputs:\n4" in case and "Reference outputs:\n4" in case


def test_a_case_the_experts_graded_gets_their_verdict_without_a_model_call(
    make_judge: Any, model: Any
) -> None:
    judge = make_judge()
    judge.align([SWEATER, HOURS])
    calls = len(model.calls)
    result = judge.invoke({"inputs": HOURS.inputs, "outputs": HOURS.outputs})
    assert len(model.calls) == calls
    assert result["score"] is True and result["comment"] == HOURS.rationale
    assert result["metadata"]["expert_feedback_ids"] == ["hours"]
    # the same question with another reply is judged by the model
    other = judge.invoke({"inputs": HOURS.inputs, "outputs": "Check the website."})
    assert len(model.calls) == calls + 1 and "expert_feedback_ids" not in other["metadata"]


def test_conflicting_experts_leave_the_case_to_the_model(make_judge: Any, model: Any) -> None:
    judge = make_judge()
    second = HOURS.model_copy(update={"id": "hours-bob", "value": False, "annotator": "bob"})
    judge.align([HOURS, second])
    calls = len(model.calls)
    result = judge.invoke({"inputs": HOURS.inputs, "outputs": HOURS.outputs})
    assert len(model.calls) == calls + 1
    assert "expert_feedback_ids" not in result["metadata"]
    assert set(result["metadata"]["episode_ids"]) >= {"hours", "hours-bob"}


def test_reusing_expert_verdicts_can_be_turned_off(make_judge: Any, model: Any) -> None:
    judge = make_judge(options={"retrieval": {"reuse_expert_verdicts": False}})
    judge.align([SWEATER])
    calls = len(model.calls)
    result = judge.invoke({"inputs": SWEATER.inputs, "outputs": SWEATER.outputs})
    assert len(model.calls) == calls + 1 and "expert_feedback_ids" not in result["metadata"]


def test_unaligned_feedback_is_not_reused(make_judge: Any, model: Any) -> None:
    judge = make_judge()
    judge.align([SWEATER, HOURS])
    judge.unalign(["hours"])
    calls = len(model.calls)
    result = judge.invoke({"inputs": HOURS.inputs, "outputs": HOURS.outputs})
    assert len(model.calls) == calls + 1 and "hours" not in result["metadata"]["episode_ids"]


def test_show_other_answers_off_leaves_out_another_answer_to_the_same_question(
    make_judge: Any,
) -> None:
    # Two answers to one question share a vector (inputs are embedded): the other answer
    # is retrieved at similarity 1, as the case itself is, and no floor leaves it out.
    good = SWEATER.model_copy(update={"id": "good", "outputs": "Sorry! Here is a refund."})
    bad = SWEATER.model_copy(update={"id": "bad", "outputs": "Read the policy.", "value": False})
    case = {"inputs": SWEATER.inputs, "outputs": "Sorry! Here is a refund."}
    shown = {}
    for option in (True, False):
        judge = make_judge(k=3, options={"_ablation": {"show_other_answers": option}})
        judge.align([good, bad, HOURS])
        nodes = JudgeNodes(judge.memory, judge.model)
        vec = nodes.embed_case(dict(case))["query_vector"]
        shown[option] = [
            ep.feedback_id
            for ep in nodes.retrieve_episodes({**case, "query_vector": vec})["episodes"]
        ]
        judge.close()
    assert {"good", "bad"} <= set(shown[True])
    # off: the case's own past verdict and unrelated cases stay, the other answer goes
    assert "good" in shown[False] and set(shown[False]) == set(shown[True]) - {"bad"}
