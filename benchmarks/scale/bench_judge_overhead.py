"""Target: judge overhead beyond the model and embedding calls.

    ≤ 2 ms median with 10,000 episodes, ≤ 20 ms with 1,000,000.

Overhead of one judgment = wall time of `judge.invoke(case)` − wall time of the
bare model call on the same prompt (`model.invoke(messages)`, the messages the
judge sent, captured by the fake model) − wall time of embedding the case text
(`embeddings.embed_documents([text])`). Each is measured per case, and the median
over the cases is reported, with the CPU time per judgment (`time.process_time`,
all threads of the process), which waiting for a busy core does not inflate.

The component times are measured alone on the same cases: the check for other
processes' commits that starts every judgment (`memory.snapshot()`), FAISS search,
retrieval (search + SQLite fetch + episode objects), guideline selection,
prompt assembly, the structured-output call minus the bare model call; "graph and
runnable machinery" is what remains.

The fake model answers in 0 s (a fixed latency would only add sleep jitter to
what is subtracted). `--route` picks how the judge calls it: `tools` (a generic
LangChain chat model: `with_structured_output(include_raw=True)`) or
`json_schema` (a `ChatOpenAI` whose network call is replaced: the route for OpenAI
and local OpenAI-compatible servers).

`--what-if` also measures, clearly labelled, the judge with changes this
benchmark suggests for the package, applied by monkeypatching in this process
only (the package is not edited):
  omp_fix     `EpisodicIndex.search` sets FAISS's OpenMP thread count in the calling
              thread (OpenMP keeps it per thread; see docs/benchmarks_scale.md);
  sequential  the same plus `load_guidelines -> retrieve_episodes` run one after the
              other instead of in parallel (no thread pool per judgment);
  all         (tools route) the same plus `StructuredCaller` binding the tool directly
              instead of `with_structured_output(include_raw=True)`;
  direct      the floor: the four node functions called in a row, no graph at all.

The memory is populated directly (see `_common.populate_memory`): N episodes with
384-d TopicEmbeddings vectors and 60 guidelines (about 1,300 tokens, over the
800-token budget, so guidelines are selected by relevance on every judgment).

    .venv/bin/python benchmarks/scale/run.py judge-overhead --n 10000
    .venv/bin/python benchmarks/scale/run.py judge-overhead --n 1000000 --judgments 300
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import faiss
from _common import (
    LatencyChatModel,
    TopicEmbeddings,
    clock_of,
    json_schema_chat,
    loadavg,
    populate_memory,
    query_cases,
    release_judges,
    rss_mb,
    save_result,
    summarize,
    wait_for_quiet,
)
from langchain_core.runnables import RunnableLambda
from langgraph.graph import END, START, StateGraph

import langchain_memalign.graphs.judge as jg
import langchain_memalign.judge as judge_module
import langchain_memalign.memory.episodic as episodic
import langchain_memalign.prompting.structured as structured
from langchain_memalign import MemAlignJudge
from langchain_memalign.prompting.prompts import judge_messages

_ORIGINAL_SEARCH = episodic.EpisodicIndex.search
_ORIGINAL_BUILD = judge_module.build_judge_graph


def _search_with_thread_setting(self: Any, vector: Any, k: int) -> Any:
    faiss.omp_set_num_threads(episodic._search_threads)
    return _ORIGINAL_SEARCH(self, vector, k)


def _sequential_graph(nodes: jg.JudgeNodes, *, name: Any = None) -> Any:
    g = StateGraph(jg.JudgeState)
    g.add_node("embed_case", RunnableLambda(nodes.embed_case, afunc=nodes.aembed_case))
    g.add_node("load_guidelines", nodes.load_guidelines)
    g.add_node(
        "retrieve_episodes",
        RunnableLambda(nodes.retrieve_episodes, afunc=nodes.aretrieve_episodes),
    )
    g.add_node("judge", RunnableLambda(nodes.judge, afunc=nodes.ajudge))
    g.add_edge(START, "embed_case")
    g.add_edge("embed_case", "load_guidelines")
    g.add_edge("load_guidelines", "retrieve_episodes")
    g.add_edge("retrieve_episodes", "judge")
    g.add_edge("judge", END)
    return g.compile(name=name or "judge_sequential")


_ORIGINAL_CALLER_INIT = structured.StructuredCaller.__init__


def _caller_init_bind_tools(self: Any, model: Any, schema: Any, **kw: Any) -> None:
    """StructuredCaller with the tool bound directly instead of with_structured_output.

    `with_structured_output(include_raw=True)` wraps the model in two RunnableParallel
    maps, each running its branch in a thread pool; binding the tool and reading the
    tool call from the reply (as the json_schema route reads the JSON) avoids them.
    """
    _ORIGINAL_CALLER_INIT(self, model, schema, **kw)
    if self._mode == "structured":
        self._mode = "json_schema"  # `_parse` then reads the raw reply's tool call
        self._runnable = model.bind_tools([schema], tool_choice=schema.__name__)
        self._steps = None  # the bound model is called whole, not as include_raw's steps


def apply_variant(variant: str) -> None:
    """Monkeypatch this process's package to a what-if variant ("shipped" restores it)."""
    episodic.EpisodicIndex.search = (  # type: ignore[method-assign]
        _ORIGINAL_SEARCH if variant == "shipped" else _search_with_thread_setting
    )
    judge_module.build_judge_graph = (
        _sequential_graph if variant in ("sequential", "all") else _ORIGINAL_BUILD
    )
    structured.StructuredCaller.__init__ = (  # type: ignore[method-assign]
        _caller_init_bind_tools if variant == "all" else _ORIGINAL_CALLER_INIT
    )


def make_model(route: str) -> Any:
    return LatencyChatModel() if route == "tools" else json_schema_chat()


def per_case(
    judge: MemAlignJudge,
    model: Any,
    emb: TopicEmbeddings,
    cases: list[dict[str, Any]],
    invoke: Callable[[dict[str, Any]], Any],
) -> dict[str, Any]:
    """Invoke time, bare model time and embedding time, case by case."""
    mem = judge.memory
    clock = clock_of(model)
    total, bare, embed, overhead = [], [], [], []
    cpu0 = time.process_time()
    wall0 = time.perf_counter()
    for c in cases:
        t0 = time.perf_counter()
        invoke(c)
        t_inv = time.perf_counter() - t0
        msgs = clock.last_messages
        t0 = time.perf_counter()
        model.invoke(msgs)
        t_model = time.perf_counter() - t0
        text = mem.case_text(c["inputs"], c.get("outputs"))
        t0 = time.perf_counter()
        emb.embed_documents([text])
        t_emb = time.perf_counter() - t0
        total.append(t_inv)
        bare.append(t_model)
        embed.append(t_emb)
        overhead.append(t_inv - t_model - t_emb)
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    # CPU of the extra model and embedding calls is in `cpu` too; subtract their wall
    # time (they are single-threaded CPU work here) to get the judge's own CPU.
    cpu_judge = (cpu - sum(bare) - sum(embed)) / len(cases)
    return {
        "invoke": summarize(total),
        "model_call_alone": summarize(bare),
        "embedding": summarize(embed),
        "overhead": summarize(overhead),
        "cpu_ms_per_judgment": round(cpu_judge * 1000, 3),
        "wall_s": round(wall, 2),
    }


def per_case_async(
    judge: MemAlignJudge, model: Any, emb: TopicEmbeddings, cases: list[dict[str, Any]]
) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        mem = judge.memory
        clock = clock_of(model)
        total, overhead = [], []
        cpu0 = time.process_time()
        extra = 0.0
        for c in cases:
            t0 = time.perf_counter()
            await judge.ainvoke(c)
            t_inv = time.perf_counter() - t0
            msgs = clock.last_messages
            t0 = time.perf_counter()
            await model.ainvoke(msgs)
            t_model = time.perf_counter() - t0
            t0 = time.perf_counter()
            await emb.aembed_documents([mem.case_text(c["inputs"], c.get("outputs"))])
            t_emb = time.perf_counter() - t0
            extra += t_model + t_emb
            total.append(t_inv)
            overhead.append(t_inv - t_model - t_emb)
        cpu = (time.process_time() - cpu0 - extra) / len(cases)
        return {
            "ainvoke": summarize(total),
            "overhead": summarize(overhead),
            "cpu_ms_per_judgment": round(cpu * 1000, 3),
        }

    return asyncio.run(run())


def components(judge: MemAlignJudge, model: Any, cases: list[dict[str, Any]]) -> dict[str, Any]:
    mem = judge.memory
    cfg = mem.config
    max_chars = cfg.options.retrieval.episode_max_chars
    nodes = jg.JudgeNodes(mem, model)
    vecs = [mem.embed([mem.case_text(c["inputs"], c.get("outputs"))])[0] for c in cases]
    guides = [mem.select_guidelines(v) for v in vecs]
    eps = [mem.retrieve(v) for v in vecs]
    msgs = [
        judge_messages(cfg.instructions, cfg.scale, c, g, e, max_chars)
        for c, g, e in zip(cases, guides, eps, strict=True)
    ]

    def each(fn: Callable[[int], Any]) -> dict[str, float]:
        ts = []
        for i in range(len(cases)):
            t0 = time.perf_counter()
            fn(i)
            ts.append(time.perf_counter() - t0)
        return summarize(ts)

    out = {
        # The check a judgment makes first: on a folder, whether another process
        # committed (`PRAGMA data_version`); nothing moved here, so no catch-up.
        "check_for_other_commits": each(lambda i: mem.snapshot()),
        "faiss_search": each(lambda i: mem.index.search(vecs[i], cfg.k)),
        "retrieval_search_sqlite_episodes": each(lambda i: mem.retrieve(vecs[i])),
        "guideline_selection": each(lambda i: mem.select_guidelines(vecs[i])),
        "prompt_assembly": each(
            lambda i: judge_messages(
                cfg.instructions, cfg.scale, cases[i], guides[i], eps[i], max_chars
            )
        ),
        "model_call_alone": each(lambda i: model.invoke(msgs[i])),
        "structured_call": each(lambda i: nodes.verdict.invoke(msgs[i])),
    }

    def in_new_thread(i: int) -> None:
        # LangGraph runs the parallel branch in a fresh thread pool per judgment
        t = threading.Thread(target=mem.retrieve, args=(vecs[i],))
        t.start()
        t.join()

    out["retrieval_in_a_new_thread"] = each(in_new_thread)

    def direct(i: int) -> None:
        state: dict[str, Any] = dict(cases[i])
        state.update(nodes.embed_case(state))  # type: ignore[arg-type]
        state.update(nodes.load_guidelines(state))  # type: ignore[arg-type]
        state.update(nodes.retrieve_episodes(state))  # type: ignore[arg-type]
        state.update(nodes.judge(state, {}))  # type: ignore[arg-type]

    out["nodes_called_directly"] = each(direct)
    out["structured_output_wrapper"] = round(
        out["structured_call"]["median_ms"] - out["model_call_alone"]["median_ms"], 4
    )
    out["guideline_tokens_selected_median"] = sorted(sum(g.tokens for g in gs) for gs in guides)[
        len(guides) // 2
    ]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10_000, help="episodes in memory")
    ap.add_argument("--guidelines", type=int, default=60)
    ap.add_argument("--judgments", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--route", choices=["tools", "json_schema", "both"], default="both")
    ap.add_argument("--what-if", action="store_true", help="also measure suggested changes")
    ap.add_argument("--no-async", action="store_true")
    ap.add_argument("--hnsw-threshold", type=int, default=50_000)
    ap.add_argument(
        "--max-load",
        type=float,
        default=None,
        help="wait (up to --max-wait s) for the 1-min load average to fall below",
    )
    ap.add_argument("--max-wait", type=float, default=1800)
    ap.add_argument("--name", default=None)
    args = ap.parse_args()

    folder, populated = populate_memory(
        args.n, guidelines=args.guidelines, hnsw_threshold=args.hnsw_threshold
    )
    if args.max_load is not None:
        quiet = wait_for_quiet(args.max_load, args.max_wait)
        print(f"waited for load average <= {args.max_load}: {quiet}")
    cases = query_cases(args.warmup + args.judgments)
    warm, cases = cases[: args.warmup], cases[args.warmup :]
    routes = ["tools", "json_schema"] if args.route == "both" else [args.route]
    variants = ["shipped", "omp_fix", "sequential", "all"] if args.what_if else ["shipped"]
    rss0 = rss_mb()
    runs: dict[str, Any] = {}
    comps: dict[str, Any] = {}
    load_s = None
    for route in routes:
        for variant in variants:
            if variant == "all" and route != "tools":
                continue  # "all" differs from "sequential" only on the tools route
            apply_variant(variant)
            model, emb = make_model(route), TopicEmbeddings()
            t0 = time.perf_counter()
            judge = MemAlignJudge.load(folder, model=model, embeddings=emb)
            if load_s is None:
                load_s = time.perf_counter() - t0
            for c in warm:
                judge.invoke(c)
            key = f"{route}/{variant}"
            la = loadavg()
            runs[key] = {
                "loadavg_before": la,
                "sync": per_case(judge, model, emb, cases, judge.invoke),
            }
            if not args.no_async:
                runs[key]["async"] = per_case_async(judge, model, emb, cases)
            runs[key]["loadavg_after"] = loadavg()
            s = runs[key]["sync"]
            line = (
                f"{key:26s} invoke {s['invoke']['median_ms']:7.2f} ms  overhead median "
                f"{s['overhead']['median_ms']:7.2f} ms (p90 {s['overhead']['p90_ms']:.2f})  "
                f"cpu/judgment {s['cpu_ms_per_judgment']:.2f} ms"
            )
            if "async" in runs[key]:
                a = runs[key]["async"]
                line += (
                    f" | async overhead {a['overhead']['median_ms']:.2f} ms"
                    f" cpu {a['cpu_ms_per_judgment']:.2f}"
                )
            print(line + f"  load {la}", flush=True)
            if variant == "shipped" or (variant == "omp_fix" and route not in comps):
                comps[route] = components(judge, model, cases[:200])
            index_kind = judge.memory.index.kind
            judge.memory.store.close()
            del judge, model, emb
            release_judges()  # a 1M-episode index is ~2 GB: free it before the next variant
    apply_variant("shipped")
    for route, comp in comps.items():
        inv = runs[f"{route}/shipped"]["sync"]
        parts = [
            "retrieval_search_sqlite_episodes",
            "guideline_selection",
            "prompt_assembly",
            "structured_call",
        ]
        comp["graph_and_runnables_remainder_ms"] = round(
            inv["invoke"]["median_ms"]
            - inv["embedding"]["median_ms"]
            - sum(comp[p]["median_ms"] for p in parts),
            3,
        )
        print(
            f"components ({route}): "
            + ", ".join(
                f"{k} {v['median_ms']:.3f} ms" if isinstance(v, dict) else f"{k} {v}"
                for k, v in comp.items()
            )
        )
    target = 2.0 if args.n <= 10_000 else 20.0
    shipped = runs[f"{routes[0]}/shipped"]["sync"]["overhead"]["median_ms"]
    print(
        f"target: overhead <= {target} ms median at n={args.n:,}: shipped ({routes[0]}) "
        f"{shipped:.2f} ms -> {'PASS' if shipped <= target else 'FAIL'}"
    )
    save_result(
        args.name or f"judge_overhead_{args.n}",
        {
            "target_ms": target,
            "n_episodes": args.n,
            "guidelines": args.guidelines,
            "index_kind": index_kind,
            "judgments": args.judgments,
            "populated": populated,
            "load_seconds": round(load_s or 0, 3),
            "rss_mb_after_load": round(rss_mb(), 1),
            "rss_mb_before": round(rss0, 1),
            "runs": runs,
            "components": comps,
            "pass": shipped <= target,
            "loadavg_end": loadavg(),
        },
    )
