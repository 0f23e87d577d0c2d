"""Each node of the align graph alone, the graphs' shapes, and align and unalign run in them."""

from __future__ import annotations

import gc
import weakref
from typing import Any
from uuid import UUID

import pytest
from conftest import HOURS, RUDE, SWEATER
from langchain_core.callbacks import BaseCallbackHandler
from langgraph.types import Send

from langchain_memalign.graphs.align import AlignNodes, build_align_graph
from langchain_memalign.graphs.align_state import ReflectionResult
from langchain_memalign.graphs.classify import Classify
from langchain_memalign.graphs.reflect import route_batches
from langchain_memalign.memory.semantic import Proposal
from langchain_memalign.prompting.schemas import reflection_schema


def nodes_of(judge: Any) -> AlignNodes:
    return AlignNodes(judge.memory, judge.reflection_model)


def test_graph_shape(make_judge: Any) -> None:
    graph = make_judge().align_graph.get_graph()
    edges = {(e.source, e.target) for e in graph.edges}
    assert {("__start__", "classify"), ("classify", "forget"), ("classify", "batch")} <= edges
    assert {("forget", "batch"), ("batch", "reflect"), ("batch", "merge")} <= edges
    assert {("reflect", "merge"), ("merge", "validate"), ("validate", "calibrate")} <= edges
    assert {("calibrate", "consolidate"), ("calibrate", "checks")} <= edges
    assert {("consolidate", "checks"), ("checks", "__end__")} <= edges


def test_unalign_graph_shape(make_judge: Any) -> None:
    graph = make_judge().unalign_graph.get_graph()
    edges = {(e.source, e.target) for e in graph.edges}
    assert edges == {("__start__", "forget"), ("forget", "checks"), ("checks", "__end__")}


class NodeRuns(BaseCallbackHandler):
    """The names of the graph and node runs a call made."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, **kw: Any) -> None:
        self.names.append(kw.get("name") or "")


def test_align_and_unalign_run_all_their_steps_in_their_graphs(make_judge: Any) -> None:
    judge = make_judge()
    judge.align([SWEATER, HOURS])
    runs = NodeRuns()
    changed = SWEATER.model_copy(update={"rationale": "Cold: say sorry first."})
    judge.align([changed, RUDE], {"callbacks": [runs]})
    # Sorting the feedback and forgetting what the changed item taught are graph steps.
    assert runs.names[0] == "helpfulness_align"
    assert {"classify", "forget", "batch", "reflect", "merge"} <= set(runs.names)
    runs.names.clear()
    report = judge.unalign(["hours"], {"callbacks": [runs]})
    assert report.removed == ["hours"] and runs.names[:2] == ["helpfulness_unalign", "forget"]
    assert "hours" not in judge.feedback_ids


def test_the_align_graph_runs_the_nodes_it_is_given(make_judge: Any) -> None:
    judge = make_judge()
    ran: list[Classify] = []

    class Recording(Classify):
        def __call__(self, state: Any) -> Any:
            ran.append(self)
            return super().__call__(state)

    nodes = nodes_of(judge)
    nodes.classify = Recording(judge.memory)
    out = build_align_graph(nodes).invoke({"feedback": [SWEATER]})
    assert ran == [nodes.classify] and out["added"] == ["sweater"]
    assert judge.feedback_ids == ["sweater"]


def test_the_align_graph_does_not_keep_its_steps_alive(make_judge: Any) -> None:
    """The steps are objects the caller owns; the graph reaches them weakly."""
    judge = make_judge()
    nodes = nodes_of(judge)
    alive = weakref.ref(nodes.classify)
    graph = build_align_graph(nodes)
    del nodes
    gc.collect()
    assert alive() is None
    with pytest.raises(RuntimeError, match="node 'classify' belongs to a judge"):
        graph.invoke({"feedback": [SWEATER]})


def test_classify_alone_sorts_the_feedback_and_stores_a_retag(make_judge: Any) -> None:
    judge = make_judge()
    judge.align([SWEATER, HOURS])
    nodes = nodes_of(judge)
    changed = HOURS.model_copy(update={"value": False})
    tagged = SWEATER.model_copy(update={"metadata": {"ticket": "T-1"}})
    out = nodes.classify({"feedback": [RUDE, changed, tagged]})
    assert (out["added"], out["updated"], out["retagged"]) == (["rude"], ["hours"], ["sweater"])
    assert out["unchanged"] == [] and [fb.id for fb in out["to_store"]] == ["rude", "hours"]
    assert judge.get_feedback("sweater").metadata == {"ticket": "T-1"}  # stored at once
    assert judge.get_feedback("hours").value is True  # the change is merge's to store
    assert nodes.classify({"feedback": [HOURS]})["unchanged"] == ["hours"]


def test_batch_alone_reflects_on_new_and_pending_items_with_a_rationale(
    make_judge: Any, responder: Any
) -> None:
    responder.fail_reflect = True
    judge = make_judge(options={"max_retries": 0})
    judge.align([SWEATER], raise_on_failure=False)
    assert judge.memory.pending_ids() == ["sweater"]
    quiet = HOURS.model_copy(update={"rationale": None})
    out = nodes_of(judge).batch({"to_store": [RUDE, quiet]})
    assert [fb.id for fb in out["to_reflect"]] == ["rude", "sweater"]
    assert [[fb.id for fb in b] for b in out["batches"]] == [["rude", "sweater"]]


def test_route_batches_fans_out_one_send_per_batch() -> None:
    sends = route_batches({"batches": [[SWEATER], [HOURS, RUDE]]})
    assert isinstance(sends, list) and all(isinstance(s, Send) for s in sends)
    assert [[f.id for f in s.arg["batch"]] for s in sends] == [["sweater"], ["hours", "rude"]]
    assert route_batches({"batches": []}) == "merge"


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
    out = nodes_of(make_judge(options={"max_retries": 0})).reflect({"batch": [SWEATER]}, {})
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
    judge = make_judge(options={"reflection": {"guideline_token_budget": 50}})
    nodes = nodes_of(judge)
    reflections = [
        ReflectionResult([f.id], [Proposal(f"Rule about {f.id} " + "x " * 40, [f.id])])
        for f in (SWEATER, HOURS)
    ]
    nodes.merge({"to_store": [SWEATER, HOURS], "reflections": reflections})
    assert nodes.consolidate.route({}) == "consolidate"
    nodes.consolidate({}, {})
    assert [(g.text, set(g.source_ids)) for g in judge.guidelines] == [
        ("Consolidated rule.", {"sweater", "hours"})
    ]
    assert nodes.consolidate.route({}) == "checks"
