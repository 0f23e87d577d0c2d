"""LangSmith tracing of a judgment, through the real client to a local server."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import SWEATER
from langchain_core.tracers.langchain import LangChainTracer
from langsmith import Client
from langsmith_server import LangSmithTestServer


def test_judgment_is_traced_as_one_tree(make_judge: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGSMITH_DISABLE_RUN_COMPRESSION", "true")
    judge = make_judge()
    judge.align([SWEATER])
    with LangSmithTestServer() as server:
        client = Client(api_url=server.url, api_key="test")
        tracer = LangChainTracer(client=client, project_name="judging")
        result = judge.invoke(
            {"inputs": "I'm upset!", "outputs": "Refunds in 5 days."}, {"callbacks": [tracer]}
        )
        tracer.wait_for_futures()
        client.flush()
        client.close(timeout=5)
        runs = list(server.runs.values())
    by_name = {r["name"]: r for r in runs}
    root = by_name["helpfulness"]
    assert root.get("parent_run_id") is None
    assert root["outputs"]["score"] == result["score"]
    for node in ("embed_case", "load_guidelines", "retrieve_episodes", "judge"):
        assert by_name[node]["trace_id"] == root["trace_id"]
    assert any(r["run_type"] == "llm" and r["trace_id"] == root["trace_id"] for r in runs)
