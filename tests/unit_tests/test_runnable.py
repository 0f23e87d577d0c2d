"""The judge as a LangChain Runnable and as an openevals-style evaluator."""

from __future__ import annotations

import asyncio
import threading
from typing import Any
from uuid import UUID

import pytest
from conftest import HOURS, SWEATER
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import Runnable, RunnableLambda

CASE = {"inputs": "I was charged twice and I'm frustrated!", "outputs": "Refunds take 5-7 days."}
OK = {"inputs": "What are your hours?", "outputs": "Sorry for the wait, 9 to 5."}


class Recorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.chains: list[str] = []
        self.llm_starts = 0
        self._lock = threading.Lock()

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, **kw: Any) -> None:
        with self._lock:
            self.chains.append(kw.get("name") or "")

    def on_chat_model_start(self, *a: Any, **kw: Any) -> None:
        with self._lock:
            self.llm_starts += 1


@pytest.fixture
def judge(make_judge: Any) -> Any:
    j = make_judge()
    j.align([SWEATER, HOURS])
    return j


def test_invoke_and_openevals_call_share_result_shape(judge: Any) -> None:
    a = judge.invoke(CASE)
    b = judge(inputs=CASE["inputs"], outputs=CASE["outputs"])
    assert a == b
    assert set(a) == {"key", "score", "comment", "metadata"}
    assert a["key"] == "helpfulness" and a["score"] is False


async def test_ainvoke_abatch(judge: Any) -> None:
    assert (await judge.ainvoke(CASE))["score"] is False
    results = await judge.abatch([CASE, OK])
    assert [r["score"] for r in results] == [False, True]


def test_batch_embeds_all_cases_in_one_call(judge: Any, embeddings: Any) -> None:
    before = embeddings.calls
    results = judge.batch([CASE, OK, CASE, OK], {"max_concurrency": 2})
    assert [r["score"] for r in results] == [False, True, False, True]
    assert embeddings.calls == before + 1


async def test_abatch_embeds_all_cases_in_one_call(judge: Any, embeddings: Any) -> None:
    before = embeddings.calls
    await judge.abatch([CASE, OK, CASE])
    assert embeddings.calls == before + 1


def test_batch_respects_max_concurrency(make_judge: Any, model: Any, responder: Any) -> None:
    active, peak = 0, 0
    lock = threading.Lock()

    def slow(messages: Any) -> Any:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        threading.Event().wait(0.02)
        with lock:
            active -= 1
        return responder(messages)

    model.responder = slow
    judge = make_judge()
    judge.batch([CASE] * 8, {"max_concurrency": 2})
    assert peak == 2


def test_batch_return_exceptions(judge: Any) -> None:
    out = judge.batch([CASE, {"nope": 1}], return_exceptions=True)
    assert out[0]["score"] is False and isinstance(out[1], TypeError)


def test_stream_yields_the_result(judge: Any) -> None:
    chunks = list(judge.stream(CASE))
    assert chunks == [judge.invoke(CASE)]


def test_callbacks_see_judge_graph_nodes_and_model(judge: Any) -> None:
    rec = Recorder()
    judge.invoke(CASE, {"callbacks": [rec]})
    assert rec.chains[0] == "helpfulness"
    for node in ("embed_case", "load_guidelines", "retrieve_episodes", "judge"):
        assert node in rec.chains
    assert rec.llm_starts == 1


def test_composes_with_other_runnables(judge: Any) -> None:
    chain = RunnableLambda(lambda q: {"inputs": q, "outputs": "Refunds take 5-7 days."}) | judge
    assert chain.invoke("I was charged twice and I'm frustrated!")["score"] is False


def test_bad_input_is_a_clear_error(judge: Any) -> None:
    with pytest.raises(TypeError, match="'inputs' key"):
        judge.invoke({"outputs": "x"})
    with pytest.raises(TypeError, match="unexpected judge input keys: \\['typo'\\]"):
        judge.invoke({"inputs": "x", "typo": 1})


def test_async_judging_does_not_block_the_loop(judge: Any) -> None:
    async def main() -> int:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        t = asyncio.create_task(ticker())
        await judge.abatch([CASE] * 5)
        t.cancel()
        return ticks

    assert asyncio.run(main()) > 5


def test_a_dropped_judge_frees_its_memory(make_judge: Any) -> None:
    import gc
    import weakref

    judge = make_judge()
    judge.align([SWEATER])
    judge.invoke(CASE)
    memory = weakref.ref(judge.memory)
    del judge
    gc.collect()
    assert memory() is None  # no cache in LangChain/LangGraph pins the nodes


async def test_nodes_are_public_runnables_with_a_sync_and_an_async_side(
    make_judge: Any,
) -> None:
    # The package's own Runnable, not LangGraph's internal node wrapper
    # (langgraph._internal), with both sides.
    judge = make_judge()
    judge.align([SWEATER])
    node = judge.graph.get_graph().nodes["judge"].data
    assert isinstance(node, Runnable) and type(node).__module__.startswith("langchain_memalign")
    assert node.afunc is not None
    case = {"inputs": "I was charged twice!", "outputs": "Refunds take 5-7 days."}
    sync, async_ = judge.invoke(case), await judge.ainvoke(case)
    assert sync == async_ and sync["metadata"]["episode_ids"] == ["sweater"]
