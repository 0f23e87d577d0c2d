"""Target: batch judging.

    With a fake model of 200 ms latency, 1,000 judgments at concurrency 32 finish
    within 8 s; the embeddings of a batch are requested in one call; a rate limiter
    can be passed.

The judge holds a memory of 10,000 episodes and 60 guidelines (populated directly,
see `_common.populate_memory`). The fake model sleeps 200 ms per call
(`time.sleep` in `judge.batch`'s worker threads, `asyncio.sleep` in `abatch`).
The floor is ceil(1000 / 32) x 0.2 s = 6.4 s.

Also measured:
* embedding calls made by the batch (the fake embeddings count them);
* the event loop's responsiveness during `abatch`: a ticker coroutine sleeps 10 ms
  in a loop and records how late it wakes up (a blocked loop shows as lag), and the
  same with no judge (only the 1,000 sleeps), the machine's own baseline;
* a rate limiter: `InMemoryRateLimiter(requests_per_second=R)` passed to the judge,
  `--rl-judgments` judgments at concurrency 32: the achieved rate must not exceed R
  (plus the one-request bucket).

`--what-if` repeats the 1,000-judgment runs with the FAISS thread-setting change
suggested in docs/benchmarks_scale.md (monkeypatched here; the package is not edited).

    .venv/bin/python benchmarks/scale/run.py batch
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time
from typing import Any

from _common import (
    LatencyChatModel,
    TopicEmbeddings,
    clock_of,
    json_schema_chat,
    loadavg,
    populate_memory,
    query_cases,
    release_judges,
    save_result,
    summarize,
    wait_for_quiet,
)
from bench_judge_overhead import apply_variant
from langchain_core.rate_limiters import InMemoryRateLimiter

from langchain_memalign import MemAlignJudge


def make_model(route: str, latency: float) -> Any:
    return LatencyChatModel(latency=latency) if route == "tools" else json_schema_chat(latency)


def run_sync(judge: MemAlignJudge, cases: list[dict[str, Any]], conc: int) -> float:
    t0 = time.perf_counter()
    out = judge.batch(cases, {"max_concurrency": conc})
    dt = time.perf_counter() - t0
    assert len(out) == len(cases) and all(isinstance(r, dict) for r in out)
    return dt


def run_async(
    judge: MemAlignJudge, cases: list[dict[str, Any]], conc: int
) -> tuple[float, dict[str, Any]]:
    async def go() -> tuple[float, dict[str, Any]]:
        lags: list[float] = []
        stop = asyncio.Event()

        async def ticker() -> None:
            while not stop.is_set():
                t0 = time.perf_counter()
                await asyncio.sleep(0.01)
                lags.append(time.perf_counter() - t0 - 0.01)

        tick = asyncio.create_task(ticker())
        t0 = time.perf_counter()
        out = await judge.abatch(cases, {"max_concurrency": conc})
        dt = time.perf_counter() - t0
        stop.set()
        await tick
        assert len(out) == len(cases) and all(isinstance(r, dict) for r in out)
        return dt, summarize(lags)

    return asyncio.run(go())


def baseline_lag(n: int, conc: int, latency: float) -> dict[str, Any]:
    """Event-loop lag while the loop runs only n sleeps of `latency` at concurrency `conc`."""

    async def go() -> dict[str, Any]:
        lags: list[float] = []
        stop = asyncio.Event()
        sem = asyncio.Semaphore(conc)

        async def one() -> None:
            async with sem:
                await asyncio.sleep(latency)

        async def ticker() -> None:
            while not stop.is_set():
                t0 = time.perf_counter()
                await asyncio.sleep(0.01)
                lags.append(time.perf_counter() - t0 - 0.01)

        tick = asyncio.create_task(ticker())
        await asyncio.gather(*(one() for _ in range(n)))
        stop.set()
        await tick
        return summarize(lags)

    return asyncio.run(go())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10_000, help="episodes in memory")
    ap.add_argument("--judgments", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--route", choices=["tools", "json_schema", "both"], default="both")
    ap.add_argument("--rate", type=float, default=50.0, help="rate limiter requests/s")
    ap.add_argument("--rl-judgments", type=int, default=200)
    ap.add_argument("--what-if", action="store_true")
    ap.add_argument("--max-load", type=float, default=None)
    ap.add_argument("--max-wait", type=float, default=1800)
    ap.add_argument("--name", default="batch")
    args = ap.parse_args()

    folder, _ = populate_memory(args.n, guidelines=60)
    cases = query_cases(args.judgments)
    if args.max_load is not None:
        wait_for_quiet(args.max_load, args.max_wait)
    floor = math.ceil(args.judgments / args.concurrency) * args.latency
    routes = ["tools", "json_schema"] if args.route == "both" else [args.route]
    variants = ["shipped", "omp_fix", "all"] if args.what_if else ["shipped"]
    runs: dict[str, Any] = {}
    for route in routes:
        for variant in variants:
            apply_variant(variant)
            for mode in ("sync", "async"):
                model, emb = make_model(route, args.latency), TopicEmbeddings()
                judge = MemAlignJudge.load(folder, model=model, embeddings=emb)
                judge.batch(cases[:8])  # warm up imports and the index
                emb.reset()
                clock_of(model).reset()
                la = loadavg()
                lag: dict[str, Any] = {}
                if mode == "sync":
                    dt = run_sync(judge, cases, args.concurrency)
                else:
                    dt, lag = run_async(judge, cases, args.concurrency)
                key = f"{route}/{variant}/{mode}"
                runs[key] = {
                    "seconds": round(dt, 3),
                    "judgments_per_s": round(args.judgments / dt, 1),
                    "embedding_calls": emb.calls,
                    "embedded_texts": emb.texts,
                    "model_calls": clock_of(model).calls,
                    "event_loop_lag": lag or None,
                    "loadavg": la,
                    "loadavg_after": loadavg(),
                }
                print(
                    f"{key:28s} {args.judgments} judgments at concurrency {args.concurrency}: "
                    f"{dt:.2f} s (floor {floor:.1f} s), embedding calls {emb.calls} "
                    f"({emb.texts} texts)"
                    + (
                        f", loop lag max {lag['max_ms']:.1f} ms p99 {lag['p99_ms']:.1f} ms"
                        if lag
                        else ""
                    )
                    + f"; load {la}",
                    flush=True,
                )
                judge.memory.store.close()
                del judge
                release_judges()
    apply_variant("shipped")

    base = baseline_lag(args.judgments, args.concurrency, args.latency)
    print(
        f"event-loop lag with no judge (only the sleeps): max {base['max_ms']:.1f} ms, "
        f"p99 {base['p99_ms']:.1f} ms; load {loadavg()}"
    )

    # Rate limiter: pacing shared by all concurrent judgments.
    rl: dict[str, Any] = {}
    for mode in ("sync", "async"):
        model, emb = make_model(routes[0], 0.0), TopicEmbeddings()
        limiter = InMemoryRateLimiter(
            requests_per_second=args.rate, check_every_n_seconds=0.005, max_bucket_size=1
        )
        judge = MemAlignJudge.load(folder, model=model, embeddings=emb, rate_limiter=limiter)
        sub = cases[: args.rl_judgments]
        if mode == "sync":
            dt = run_sync(judge, sub, args.concurrency)
        else:
            dt, _ = run_async(judge, sub, args.concurrency)
        rate = len(sub) / dt
        rl[mode] = {"judgments": len(sub), "seconds": round(dt, 2), "achieved_rps": round(rate, 1)}
        print(
            f"rate limiter {args.rate}/s, {mode}: {len(sub)} judgments in {dt:.2f} s = {rate:.1f}/s"
        )
        judge.memory.store.close()

    key = f"{routes[0]}/shipped"
    ok_time = all(runs[f"{key}/{m}"]["seconds"] <= 8.0 for m in ("sync", "async"))
    ok_embed = all(r["embedding_calls"] == 1 for r in runs.values())
    ok_rl = all(r["achieved_rps"] <= args.rate * 1.05 + 1 for r in rl.values())
    print(
        f"target: <= 8 s: {'PASS' if ok_time else 'FAIL'}; one embedding call per batch: "
        f"{'PASS' if ok_embed else 'FAIL'}; rate limiter honoured: {'PASS' if ok_rl else 'FAIL'}"
    )
    save_result(
        args.name,
        {
            "n_episodes": args.n,
            "judgments": args.judgments,
            "concurrency": args.concurrency,
            "latency_s": args.latency,
            "floor_s": floor,
            "runs": runs,
            "event_loop_lag_without_judge": base,
            "rate_limiter": {"requests_per_second": args.rate, **rl},
            "pass": {"within_8s": ok_time, "one_embedding_call": ok_embed, "rate_limiter": ok_rl},
            "loadavg_end": loadavg(),
        },
    )
