"""One judge memory on PostgreSQL shared by several processes (issue 14).

Three measurements, all with fake models (no network) against a PostgreSQL
server: `--url` (a database URL; the benchmark creates its own judges in it),
or, by default, a throwaway server started from Debian's binaries in a
temporary directory (`tests/pg_server.py`).

1. Judging while aligning: `--judges` processes (default 4) each judge cases in
   a loop with a chat model that sleeps `--latency` (200 ms) per call, while one
   more process aligns `--items` feedback items (1,000) in batches of `--batch`
   (50). Reported: judgments per second (all processes), and for every commit
   of the aligner the time until each judging process started its first
   judgment on that version (or a newer one): from the commit to the moment that
   judgment took its view of the memory (its first step, which catches up).
   Every judging process runs with the default staleness (0: each judgment
   checks the change sequence).
2. Per-judgment overhead against a folder: the same memory (as aligned in 1.)
   judged `--overhead-n` times in one process with a 0 ms model, from the
   database and from a folder copy (`judge.save(folder)`); the difference is
   the cost of the database (one read of the change sequence, episodes read
   over the network).
3. Opening a `--open-n` (100,000) episode memory: rows inserted directly with
   COPY (synthetic cases, 384-d vectors as `_common.TopicEmbeddings`), then
   `MemAlignJudge.load(url)` in a fresh process with embeddings that raise on
   any call: the default `hnsw_threshold` (the process opens with an exact index
   and builds the HNSW graph from the stored vectors in the background; both
   times are reported) and an exact flat index only (`hnsw_threshold` above n).

    .venv/bin/python benchmarks/scale/run.py postgres
    .venv/bin/python benchmarks/scale/run.py postgres --items 200 --open-n 20000  # quicker
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _common import (
    ROOT,
    CaseGenerator,
    LatencyChatModel,
    TopicEmbeddings,
    loadavg,
    make_judge,
    query_cases,
    save_result,
    summarize,
)

sys.path.insert(0, str(ROOT / "tests"))


def no_embeddings() -> TopicEmbeddings:
    """TopicEmbeddings (same fingerprint) that fail on any call: opening must not embed."""
    emb = TopicEmbeddings()

    def fail(texts: list[str]) -> list[list[float]]:
        raise AssertionError("an embedding call while opening")

    emb.embed_documents = fail  # type: ignore[method-assign]
    return emb


def get(q: Any, procs: list[Any], timeout: float) -> Any:
    """The next result of a worker; fails fast if a worker died instead."""
    import queue

    deadline = time.monotonic() + timeout
    while True:
        try:
            return q.get(timeout=1)
        except queue.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"a worker failed: {[p.exitcode for p in procs]}") from None


def feedback_items(n: int, salt: int = 3) -> list[dict[str, Any]]:
    gen = CaseGenerator(seed=1)
    out = []
    for i in range(n):
        c = gen.case(i, salt=salt)
        out.append(
            {
                "id": f"fb-{i:05d}",
                "inputs": c["inputs"],
                "outputs": c["outputs"],
                "value": c["value"],
                "rationale": c["rationale"],
            }
        )
    return out


# -- 1. judging while aligning ---------------------------------------------------------------


def judge_worker(url: str, latency: float, seed: int, ready: Any, go: Any, stop: Any, out: Any):
    from langchain_memalign import MemAlignJudge

    judge = MemAlignJudge.load(
        url, model=LatencyChatModel(latency=latency), embeddings=TopicEmbeddings()
    )
    cases = query_cases(200, salt=100 + seed)
    judge.invoke(cases[0])  # warm up (imports, prepared statements)
    memory = judge.memory
    taken: dict[str, Any] = {}
    snapshot = memory.snapshot

    def timed_snapshot(seq: int | None = None) -> Any:
        # The judgment's first step takes its view (catching up first): record
        # when, and which version, so delays are measured to the read itself.
        view = snapshot(seq)
        if seq is None:
            taken["t"], taken["seq"] = time.time(), view.seq
        return view

    memory.snapshot = timed_snapshot  # type: ignore[method-assign]
    ready.set()
    go.wait()
    records = []
    i = 0
    while not stop.is_set():
        t0 = time.perf_counter()
        judge.invoke(cases[i % len(cases)])
        records.append((taken["t"], taken["seq"], time.perf_counter() - t0))
        i += 1
    judge.close()
    out.put(records)


def align_worker(url: str, items: list[dict[str, Any]], batch: int, latency: float, ready, go, out):
    from langchain_memalign import Feedback, MemAlignJudge

    judge = MemAlignJudge.load(
        url, model=LatencyChatModel(latency=latency), embeddings=TopicEmbeddings()
    )
    store = judge.memory.store
    commits: list[tuple[int, float]] = []
    original = store.transaction

    @contextmanager
    def timed_transaction():  # records (version, wall time) right after each commit
        with original() as conn:
            yield conn
            seq = store._local.seq
        commits.append((seq, time.time()))

    store.transaction = timed_transaction  # type: ignore[method-assign]
    ready.set()
    go.wait()
    aligns = []
    for start in range(0, len(items), batch):
        t0 = time.perf_counter()
        report = judge.align([Feedback(**i) for i in items[start : start + batch]])
        aligns.append(time.perf_counter() - t0)
        assert not report.failed, report.errors
    judge.close()
    out.put({"commits": commits, "align_seconds": aligns})


def judging_while_aligning(url: str, args: argparse.Namespace) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    judge = make_judge(
        LatencyChatModel(), TopicEmbeddings(), url,
        {"validation": {"mode": "off"}, "reflection": {"source_support": None}},
    )  # fmt: skip
    judge.close()
    items = feedback_items(args.items)
    go, stop = ctx.Event(), ctx.Event()
    judge_out, align_out = ctx.Queue(), ctx.Queue()
    readies = []
    procs = []
    for p in range(args.judges):
        ready = ctx.Event()
        procs.append(
            ctx.Process(
                target=judge_worker, args=(url, args.latency, p, ready, go, stop, judge_out)
            )
        )
        readies.append(ready)
    ready = ctx.Event()
    aligner = ctx.Process(
        target=align_worker, args=(url, items, args.batch, args.latency, ready, go, align_out)
    )
    readies.append(ready)
    for p in [*procs, aligner]:
        p.start()
    for r in readies:
        while not r.wait(1):
            if any(p.exitcode not in (None, 0) for p in [*procs, aligner]):
                stop.set()
                raise RuntimeError("a worker failed to start")
    t_start = time.time()
    go.set()
    aligned = get(align_out, [*procs, aligner], 3600)
    t_end = time.time()
    # Keep judging a little after the last commit, so every commit gets judged.
    time.sleep(max(1.0, 3 * args.latency))
    stop.set()
    per_process = [get(judge_out, procs, 300) for _ in procs]
    for p in [*procs, aligner]:
        p.join(60)
    commits = aligned["commits"]
    n_judgments = sum(1 for recs in per_process for t, _, _ in recs if t_start <= t <= t_end)
    delays: list[float] = []
    unseen = 0
    for recs in per_process:
        for seq, committed in commits:
            later = [t for t, s, _ in recs if s >= seq]
            if later:
                delays.append(min(later) - committed)
            else:
                unseen += 1
    durations = [d for recs in per_process for t, _, d in recs if t_start <= t <= t_end]
    return {
        "judging_processes": args.judges,
        "model_latency_s": args.latency,
        "items": args.items,
        "batch": args.batch,
        "aligns": len(aligned["align_seconds"]),
        "commits": len(commits),
        "align_seconds": summarize(aligned["align_seconds"]),
        "aligning_wall_s": round(t_end - t_start, 2),
        "judgments_during_align": n_judgments,
        "judgments_per_s": round(n_judgments / (t_end - t_start), 2),
        "judgment_duration": summarize(durations),
        "commit_to_first_judgment": summarize(delays),
        "commit_process_pairs_never_judged": unseen,
        "loadavg": loadavg(),
    }


# -- 2. overhead against a folder ---------------------------------------------------------------


def per_judgment_overhead(url: str, args: argparse.Namespace) -> dict[str, Any]:
    from langchain_memalign import MemAlignJudge

    cases = query_cases(args.overhead_n, salt=999)
    with tempfile.TemporaryDirectory() as tmp:
        on_db = MemAlignJudge.load(url, model=LatencyChatModel(), embeddings=TopicEmbeddings())
        on_db.save(Path(tmp) / "copy")
        on_folder = MemAlignJudge.load(
            Path(tmp) / "copy", model=LatencyChatModel(), embeddings=TopicEmbeddings()
        )
        times: dict[str, list[float]] = {"postgres": [], "folder": []}
        paired: list[float] = []
        for j in (on_db, on_folder):
            j.invoke(cases[0])  # warm up
        for case in cases:  # interleaved, so load changes hit both alike
            for name, j in (("postgres", on_db), ("folder", on_folder)):
                t0 = time.perf_counter()
                j.invoke(case)
                times[name].append(time.perf_counter() - t0)
            paired.append(times["postgres"][-1] - times["folder"][-1])
        episodes = len(on_db.memory.index)
        guidelines = len(on_db.guidelines)
        on_db.close()
        on_folder.close()
    pg, folder = statistics.median(times["postgres"]), statistics.median(times["folder"])
    return {
        "episodes": episodes,
        "guidelines": guidelines,
        "judgments_each": len(cases),
        "postgres": summarize(times["postgres"]),
        "folder": summarize(times["folder"]),
        "overhead_median_ms": round((pg - folder) * 1000, 3),
        # Each case judged on both back to back: less sensitive to load drifting.
        "overhead_paired_median_ms": round(statistics.median(paired) * 1000, 3),
        "loadavg": loadavg(),
    }


# -- 3. opening a big memory ---------------------------------------------------------------------


def populate_big(url: str, n: int) -> dict[str, Any]:
    """A judge with `n` episodes, written with COPY (no align, no embedding model)."""
    from _common import TopicEmbeddings as Emb

    from langchain_memalign import Feedback
    from langchain_memalign.memory._store_base import _now, encode_feedback

    t0 = time.perf_counter()
    judge = make_judge(LatencyChatModel(), Emb(), url)
    mem = judge.memory
    store = mem.store
    gen = CaseGenerator(seed=0)
    matrix = gen.word_matrix()
    chunk = 10_000
    with store.transaction() as conn:
        seq = store._local.seq
        for start in range(0, n, chunk):
            stop = min(n, start + chunk)
            ids = [gen.case_ids(i) for i in range(start, stop)]
            vectors = gen.embed_inputs([c[1] for c in ids], matrix)
            rows, eps = [], []
            for i, (_topic, a, b, c), vec in zip(range(start, stop), ids, vectors, strict=True):
                inputs = gen.text(a)
                fb = Feedback(
                    id=f"fb-{i:07d}", inputs=inputs, outputs=gen.text(b),
                    value=bool((i * 2654435761) % 3), rationale=gen.text(c),
                )  # fmt: skip
                th = mem.text_hash(mem.case_text(inputs, fb.outputs))
                rows.append(
                    (store.judge, fb.id, encode_feedback(fb), fb.content_hash(), True, _now(), seq)
                )
                eps.append((store.judge, fb.id, th, vec.astype("float32").tobytes(), seq))
            with conn.cursor().copy(
                "COPY memalign_feedback (judge, id, payload, content_hash, reflected, updated_at, "
                "changed_seq) FROM STDIN"
            ) as cp:
                for r in rows:
                    cp.write_row(r)
            with conn.cursor().copy(
                "COPY memalign_episodes (judge, feedback_id, text_hash, vector, added_seq) "
                "FROM STDIN"
            ) as cp:
                for r in eps:
                    cp.write_row(r)
            print(
                f"  inserted {stop:,}/{n:,} episodes ({time.perf_counter() - t0:.0f} s)", flush=True
            )
    judge.close()
    return {"n": n, "populate_s": round(time.perf_counter() - t0, 1)}


def open_child(url: str, overrides: dict[str, Any], out: Any) -> None:
    t_import = time.perf_counter()
    from langchain_memalign import MemAlignJudge
    from langchain_memalign.memory.postgres import PostgresStore

    import_s = time.perf_counter() - t_import
    emb = no_embeddings()
    t0 = time.perf_counter()
    judge = MemAlignJudge.load(url, model=LatencyChatModel(), embeddings=emb, options=overrides)
    load_s = time.perf_counter() - t0
    # Past hnsw_threshold the HNSW graph is built in the background after open
    # (judgments use the exact index meanwhile): time until it is swapped in.
    judge.memory.wait_for_index()
    index_ready_s = time.perf_counter() - t0
    store = judge.memory.store
    assert isinstance(store, PostgresStore)
    t0 = time.perf_counter()
    store.all_vectors()
    fetch_s = time.perf_counter() - t0
    out.put(
        {
            "import_s": round(import_s, 3),
            "load_s": round(load_s, 3),
            "hnsw_ready_s": round(index_ready_s, 3),
            "fetch_vectors_alone_s": round(fetch_s, 3),
            "episodes": len(judge.memory.index),
            "index_kind": judge.memory.index.kind,
            "embedding_calls_during_load": 0,  # no_embeddings() raises on any call
            "loadavg": loadavg(),
        }
    )
    judge.close()


def open_big(url: str, n: int, repeats: int) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    runs: dict[str, Any] = {}
    for label, overrides in (("hnsw", {}), ("flat", {"retrieval": {"hnsw_threshold": n + 1}})):
        rows = []
        for _ in range(repeats):
            q = ctx.Queue()
            p = ctx.Process(target=open_child, args=(url, overrides, q))
            p.start()
            rows.append(get(q, [p], 3600))
            p.join(60)
        runs[label] = {
            "load_s_median": statistics.median(r["load_s"] for r in rows),
            "index_ready_s_median": statistics.median(r["hnsw_ready_s"] for r in rows),
            "rows": rows,
        }
        print(
            f"  open {label}: {[r['load_s'] for r in rows]} s, index complete after "
            f"{[r['hnsw_ready_s'] for r in rows]} s",
            flush=True,
        )
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--url", help="a PostgreSQL database URL (default: start a throwaway server)")
    ap.add_argument("--judges", type=int, default=4)
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--overhead-n", type=int, default=500)
    ap.add_argument("--open-n", type=int, default=100_000)
    ap.add_argument("--open-repeats", type=int, default=3)
    ap.add_argument("--name", default="postgres")
    args = ap.parse_args()

    server = None
    base = args.url
    if base is None:
        from pg_server import TempPostgres, find_bindir

        bindir = find_bindir()
        if bindir is None:
            sys.exit("no PostgreSQL binaries found; pass --url or apt-get install postgresql")
        server = TempPostgres(bindir).start()
        base = server.new_database()
        print(f"started PostgreSQL {bindir} on port {server.port}")
    sep = "&" if "?" in base else "?"
    try:
        url = f"{base}{sep}judge=bench_shared_{int(time.time())}"
        print("1. judging while aligning ...", flush=True)
        shared = judging_while_aligning(url, args)
        print(shared, flush=True)
        print("2. per-judgment overhead against a folder ...", flush=True)
        overhead = per_judgment_overhead(url, args)
        print(overhead, flush=True)
        big_url = f"{base}{sep}judge=bench_open_{args.open_n}_{int(time.time())}"
        print(f"3. opening a {args.open_n:,}-episode memory ...", flush=True)
        populated = populate_big(big_url, args.open_n)
        opened = open_big(big_url, args.open_n, args.open_repeats)
    finally:
        if server is not None:
            server.stop()
    save_result(
        args.name,
        {
            "server": "throwaway local server (fsync off)" if server is not None else "--url",
            "judging_while_aligning": shared,
            "overhead_vs_folder": overhead,
            "open": {"populate": populated, "runs": opened},
        },
    )
