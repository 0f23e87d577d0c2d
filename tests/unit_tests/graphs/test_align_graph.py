"""Each node of the alignment graph alone, and the graph's shape."""

from __future__ import annotations

from typing import Any

from conftest import HOURS, RUDE, SWEATER
from langgraph.types import Send

from langchain_memalign.graphs.align import AlignNodes
from langchain_memalign.graphs.align_state import ReflectionResult
from langchain_memalign.memory.semantic import Proposal
from langchain_memalign.prompting.schemas import reflection_schema


def nodes_of(judge: Any) -> AlignNodes:
    return AlignNodes(judge.memory, judge.reflection_model)


def test_graph_shape(make_judge: Any) -> None:
    graph = make_judge().align_graph.get_graph()
    edges = {(e.source, e.target) for e in graph.edges}
    assert {("__start__", "reflect"), ("__start__", "merge"), ("reflect", "merge")} <= edges
    assert {("merge", "validate"), ("validate", "calibrate")} <= edges
    assert {("calibrate", "consolidate"), ("calibrate", "__end__")} <= edges


def test_route_batches_fans_out_one_send_per_batch(make_judge: Any) -> None:
    nodes = nodes_of(make_judge())
    sends = nodes.route_batches({"batches": [[SWEATER], [HOURS, RUDE]]})
    assert isinstance(sends, list) and all(isinstance(s, Send) for s in sends)
    assert [[f.id for f in s.arg["batch"]] for s in sends] == [["sweater"], ["hours", "rude"]]
    assert nodes.route_batches({"batches": []}) == "merge"


def test_reflect_alone(make_judge: Any, model: Any) -> None:
    out = nodes_of(make_judge()).reflect({"batch": [SWEATER, HOURS]}, {})
    (result,) = out["reflections"]
    assert result.batch_ids == ["sweater", "hours"] and result.error is None
    assert [p.source_ids for p in result.proposals] == [["sweater"], ["hours"]]
    assert out["usages"][0].llm_calls == 1
    prompt = model.calls[-1][1].content
    assert prompt.index("Expert rationale") < prompt.index("Inputs:")  # rationale first


def test_reflect_failure_is_recorded_not_raised(make_judge: Any, responder: Any) -> None:
    responder.fail_reflect = True
    out = nodes_of(make_judge(max_retries=0)).reflect({"batch": [SWEATER]}, {})
    assert out["failed"] == ["sweater"] and out["reflections"][0].error
    assert "reflection on feedback ['sweater'] failed" in out["errors"][0]


def test_reflection_schema_limits_source_ids_to_the_batch() -> None:
    schema = reflection_schema(["a", "b"]).model_json_schema()
    item = schema["$defs"]["ProposedGuideline"]["properties"]["source_ids"]["items"]
    assert item["enum"] == ["a", "b"]


def test_merge_alone_stores_episodes_and_guidelines_in_one_embedding_call(
    make_judge: Any, embeddings: Any
) -> None:
    judge = make_judge()
    nodes = nodes_of(judge)
    before = embeddings.calls
    reflections = [ReflectionResult(["sweater"], [Proposal("Be kind.", ["sweater"])])]
    nodes.merge({"to_store": [SWEATER, HOURS], "reflections": reflections})
    assert embeddings.calls == before + 1
    assert judge.feedback_ids == ["sweater", "hours"] and len(judge.memory.index) == 2
    assert [(g.text, g.source_ids) for g in judge.guidelines] == [("Be kind.", ("sweater",))]
    assert nodes.merge({}) == {}  # nothing to do, nothing written


def test_consolidate_alone(make_judge: Any) -> None:
    judge = make_judge(guideline_token_budget=50)
    nodes = nodes_of(judge)
    reflections = [
        ReflectionResult([f.id], [Proposal(f"Rule about {f.id} " + "x " * 40, [f.id])])
        for f in (SWEATER, HOURS)
    ]
    nodes.merge({"to_store": [SWEATER, HOURS], "reflections": reflections})
    assert nodes.route_consolidation({}) == "consolidate"
    nodes.consolidate({}, {})
    assert [(g.text, set(g.source_ids)) for g in judge.guidelines] == [
        ("Consolidated rule.", {"sweater", "hours"})
    ]
    assert nodes.route_consolidation({}) == "__end__"
