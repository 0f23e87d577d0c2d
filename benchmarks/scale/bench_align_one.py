"""Target: adding one feedback item to a memory of 10,000 costs under 50 ms besides the
LLM, and one embedding call (two with a rationale: its case is embedded before the
reflection that pairs it with a contrasting case, its rule after).

The 10,000-item memory is built through `judge.align` itself (batches of 1,000
items without rationale: no reflection call, one embedding call per batch). Then
`--trials` single items, each with a rationale, are aligned one `align` call at a
time: each makes one reflection call (the fake model, 0 s latency), stores the
episode and the distilled guideline, and tests the guidelines' checks on the new case
(the fake model answers check questions with a fixed answer per case and question).
Reported per item: wall seconds of `align`, the time spent inside the model
(subtracted: "besides the LLM"), embedding calls and texts (from `AlignReport.usage`
and the fake embeddings' own counter).

The fake reflection answers with one of 12 rule texts chosen by the item id, so
the guidelines stay under their token budget (no consolidation call) and most
items add provenance to an existing guideline rather than a new one.

Both memories are measured: a folder (`path=...`: SQLite with synchronous=FULL, so
each align commits with an fsync) and in process (`path=None`).

    .venv/bin/python benchmarks/scale/run.py align-one --n 10000
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import re
import shutil
import tempfile
import time
import zlib
from typing import Any

from _common import (
    DATA,
    CaseGenerator,
    LatencyChatModel,
    TopicEmbeddings,
    clock_of,
    default_reply,
    loadavg,
    make_judge,
    save_result,
    summarize,
    wait_for_quiet,
)
from langchain_core.messages import BaseMessage

from langchain_memalign import Feedback

RULES = [
    "Acknowledge the customer's frustration before giving the fix.",
    "Give the concrete next step, not a policy summary.",
    "Do not promise refunds the agent cannot grant.",
    "Apologize once, briefly, when the company is at fault.",
    "Name the timeline in days when one exists.",
    "Answer the question that was asked first.",
    "Avoid blaming the customer's device or setup.",
    "Offer a human escalation when the issue repeats.",
    "Keep the reply under six sentences.",
    "Use the customer's own words for the problem.",
    "Confirm what was already tried before suggesting it again.",
    "End with how the customer can reach support again.",
]


def reflect_reply(messages: list[BaseMessage]) -> Any:
    system = str(messages[0].content)
    if '{"rule"' in system:
        # A contrast pair or a single case (the default reflection): one rule, chosen
        # by what the case shows.
        human = "\n".join(str(m.content) for m in messages[1:])
        return {"rule": RULES[zlib.crc32(human.encode()) % len(RULES)]}
    if system.startswith("You help an LLM judge learn"):
        human = "\n".join(str(m.content) for m in messages[1:])
        # A prompt names feedback by handles (F1, F2, ...): the rule is chosen by what
        # the case shows.
        blocks = re.findall(r'<feedback id="([^"]+)">(.*?)</feedback>', human, re.S)
        return {
            "guidelines": [
                {"text": RULES[zlib.crc32(body.encode()) % len(RULES)], "source_ids": [handle]}
                for handle, body in blocks
            ]
        }
    return default_reply(messages)


def feedback(gen: CaseGenerator, i: int, *, salt: int, rationale: bool) -> Feedback:
    c = gen.case(i, salt=salt)
    return Feedback(
        id=f"fb-{salt}-{i:07d}",
        inputs=c["inputs"],
        outputs=c["outputs"],
        value=c["value"],
        rationale=c["rationale"] if rationale else None,
    )


def build(n: int, path: Any, batch: int) -> tuple[Any, TopicEmbeddings, LatencyChatModel, float]:
    gen = CaseGenerator()
    emb = TopicEmbeddings()
    model = LatencyChatModel(reply=reflect_reply)
    judge = make_judge(model, emb, path)
    t0 = time.perf_counter()
    for start in range(0, n, batch):
        judge.align(
            [feedback(gen, i, salt=0, rationale=False) for i in range(start, min(n, start + batch))]
        )
    return judge, emb, model, time.perf_counter() - t0


def trial(
    judge: Any, emb: TopicEmbeddings, model: LatencyChatModel, fb: Feedback
) -> dict[str, Any]:
    clock = clock_of(model)
    clock.reset()
    emb.reset()
    t0 = time.perf_counter()
    report = judge.align([fb])
    wall = time.perf_counter() - t0
    return {
        "wall_s": wall,
        "model_s": clock.seconds,
        "besides_llm_s": wall - clock.seconds,
        "llm_calls": report.usage.llm_calls,
        "embedding_calls": report.usage.embedding_calls,
        "embedding_calls_seen_by_model": emb.calls,
        "embedded_texts": emb.texts,
        "guidelines_added": len(report.guidelines_added),
    }


def measure(
    judge: Any, emb: TopicEmbeddings, model: LatencyChatModel, trials: int, warmup: int
) -> dict[str, Any]:
    gen = CaseGenerator()
    for i in range(warmup):
        trial(judge, emb, model, feedback(gen, i, salt=1, rationale=True))
    rows = [
        trial(judge, emb, model, feedback(gen, i, salt=2, rationale=True)) for i in range(trials)
    ]
    no_rationale = [
        trial(judge, emb, model, feedback(gen, i, salt=3, rationale=False)) for i in range(trials)
    ]
    return {
        "with_rationale": {
            "besides_llm": summarize([r["besides_llm_s"] for r in rows]),
            "wall": summarize([r["wall_s"] for r in rows]),
            "embedding_calls_per_item": sorted({r["embedding_calls_seen_by_model"] for r in rows}),
            "embedding_calls_reported": sorted({r["embedding_calls"] for r in rows}),
            "embedded_texts_per_item": sorted({r["embedded_texts"] for r in rows}),
            "llm_calls_per_item": sorted({r["llm_calls"] for r in rows}),
            "items_that_added_a_guideline": sum(1 for r in rows if r["guidelines_added"]),
        },
        "without_rationale": {
            "besides_llm": summarize([r["besides_llm_s"] for r in no_rationale]),
            "embedding_calls_per_item": sorted(
                {r["embedding_calls_seen_by_model"] for r in no_rationale}
            ),
            "llm_calls_per_item": sorted({r["llm_calls"] for r in no_rationale}),
        },
    }


def profile(judge: Any, n: int = 20) -> str:
    gen = CaseGenerator()
    pr = cProfile.Profile()
    pr.enable()
    for i in range(n):
        judge.align([feedback(gen, i, salt=4, rationale=True)])
    pr.disable()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("cumulative").print_stats(r"langchain_memalign", 25)
    return out.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--build-batch", type=int, default=1000)
    ap.add_argument("--max-load", type=float, default=None)
    ap.add_argument("--max-wait", type=float, default=1800)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--name", default=None)
    args = ap.parse_args()

    out: dict[str, Any] = {"n_memory": args.n, "trials": args.trials}
    DATA.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="align_one_", dir=DATA)
    try:
        for label, path in (("folder", f"{tmp}/mem"), ("in_process", None)):
            judge, emb, model, build_s = build(args.n, path, args.build_batch)
            if args.max_load is not None:
                wait_for_quiet(args.max_load, args.max_wait)
            la = loadavg()
            res = measure(judge, emb, model, args.trials, args.warmup)
            res.update(
                build_seconds=round(build_s, 2),
                build_embedding_calls=args.n // args.build_batch,
                loadavg=la,
                loadavg_after=loadavg(),
                stats=judge.stats(),
            )
            if args.profile and label == "folder":
                res["profile"] = profile(judge)
                print(res["profile"])
            out[label] = res
            w = res["with_rationale"]
            print(
                f"{label:10s} n={args.n:,}: one item besides the LLM: median "
                f"{w['besides_llm']['median_ms']:.1f} ms (p90 {w['besides_llm']['p90_ms']:.1f}); "
                f"embedding calls per item {w['embedding_calls_per_item']}, texts "
                f"{w['embedded_texts_per_item']}, LLM calls {w['llm_calls_per_item']}; "
                f"built in {build_s:.1f} s; load {la}",
                flush=True,
            )
            judge.memory.store.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    folder = out["folder"]["with_rationale"]
    bare = out["folder"]["without_rationale"]
    ok = (
        folder["embedding_calls_per_item"] == [2]
        and bare["embedding_calls_per_item"] == [1]
        and folder["besides_llm"]["median_ms"] < 50
    )
    out["pass"] = ok
    print(
        "target: < 50 ms besides the LLM, 1 embedding call (2 with a rationale) "
        f"(folder memory): {'PASS' if ok else 'FAIL'}"
    )
    save_result(args.name or f"align_one_{args.n}", out)
