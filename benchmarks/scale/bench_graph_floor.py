"""The floor under the judge overhead: LangGraph and LangChain running no-op nodes.

The judge's overhead target (≤ 2 ms median) includes "graph execution". This measures
what that execution costs on its own, with no FAISS, no SQLite, no prompt and no model:

- `plain`: the four node functions called in a row (Python's own floor);
- `graph_linear`: a compiled `StateGraph` of four no-op nodes in a row;
- `graph_fanout`: the judge graph's shape, `embed_case -> (load_guidelines ∥
  retrieve_episodes) -> judge`, with no-op nodes (a superstep of two tasks runs on a
  thread pool that LangGraph's sync runner creates for each invocation);
- `chain_fanout`: the judge's own wrapping, a `Runnable` step before and after the
  fan-out graph (`prepare | graph | take_result`);
- `*_async`: the same through `ainvoke` on one event loop.

Each figure is the median wall time and the CPU time (all threads) per invocation over
`--n` invocations after `--warmup`.

    .venv/bin/python benchmarks/scale/run.py graph-floor
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any, TypedDict

from _common import loadavg, save_result, summarize
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.graph import END, START, StateGraph


class State(TypedDict, total=False):
    inputs: Any
    query_vector: Any
    guidelines: Any
    episodes: Any
    result: Any


def embed_case(state: State) -> dict[str, Any]:
    return {"query_vector": [0.0]}


def load_guidelines(state: State) -> dict[str, Any]:
    return {"guidelines": []}


def retrieve_episodes(state: State) -> dict[str, Any]:
    return {"episodes": []}


def judge(state: State) -> dict[str, Any]:
    return {"result": {"score": True}}


def build(fanout: bool) -> Any:
    g = StateGraph(State)
    for fn in (embed_case, load_guidelines, retrieve_episodes, judge):
        g.add_node(fn.__name__, fn)
    g.add_edge(START, "embed_case")
    if fanout:
        g.add_edge("embed_case", "load_guidelines")
        g.add_edge("embed_case", "retrieve_episodes")
        g.add_edge(["load_guidelines", "retrieve_episodes"], "judge")
    else:
        g.add_edge("embed_case", "load_guidelines")
        g.add_edge("load_guidelines", "retrieve_episodes")
        g.add_edge("retrieve_episodes", "judge")
    g.add_edge("judge", END)
    return g.compile()


class Step(Runnable[Any, Any]):
    def __init__(self, key: str | None = None) -> None:
        self.key = key

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return input[self.key] if self.key else dict(input)


def plain(case: dict[str, Any]) -> Any:
    state: dict[str, Any] = dict(case)
    for fn in (embed_case, load_guidelines, retrieve_episodes, judge):
        state.update(fn(state))  # type: ignore[arg-type]
    return state["result"]


def measure(fn: Any, n: int, warmup: int) -> dict[str, Any]:
    case = {"inputs": "q"}
    for _ in range(warmup):
        fn(case)
    walls = []
    cpu0 = time.process_time()
    for _ in range(n):
        t = time.perf_counter()
        fn(case)
        walls.append(time.perf_counter() - t)
    cpu = (time.process_time() - cpu0) / n * 1000
    return {**summarize(walls), "cpu_ms_per_call": round(cpu, 4)}


def measure_async(fn: Any, n: int, warmup: int) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        case = {"inputs": "q"}
        for _ in range(warmup):
            await fn(case)
        walls = []
        cpu0 = time.process_time()
        for _ in range(n):
            t = time.perf_counter()
            await fn(case)
            walls.append(time.perf_counter() - t)
        cpu = (time.process_time() - cpu0) / n * 1000
        return {**summarize(walls), "cpu_ms_per_call": round(cpu, 4)}

    return asyncio.run(run())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--name", default="graph_floor")
    args = ap.parse_args(argv)
    linear, fanout = build(False), build(True)
    chain = Step() | fanout | Step("result")
    runs = {"loadavg_before": loadavg()}
    cases: dict[str, Any] = {
        "plain": plain,
        "graph_linear": linear.invoke,
        "graph_fanout": fanout.invoke,
        "chain_fanout": chain.invoke,
    }
    for name, fn in cases.items():
        runs[name] = measure(fn, args.n, args.warmup)
    for name, fn in (("graph_fanout_async", fanout.ainvoke), ("chain_fanout_async", chain.ainvoke)):
        runs[name] = measure_async(fn, args.n, args.warmup)
    runs["loadavg_after"] = loadavg()
    for name, r in runs.items():
        if isinstance(r, dict):
            print(f"{name:20} median {r['median_ms']:7.3f} ms   cpu {r['cpu_ms_per_call']:7.3f} ms")
    save_result(args.name, {"n": args.n, "runs": runs})
    return 0
