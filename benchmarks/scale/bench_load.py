"""Target: opening a saved judge with 100,000 episodes makes zero embedding calls and
takes ≤ 2 s. Also: the memory footprint per 100k episodes.

Each measurement runs in a fresh Python process (`--child`), after the imports,
so that nothing is cached in the process: `MemAlignJudge.load(folder, ...)` with
embeddings that raise on any call (proving zero embedding calls), then resident
memory (RSS) before and after, then 20 judgments (embeddings allowed again) and
RSS after them (SQLite's page cache grows as episodes are read).

Page cache: "warm" runs read files the OS has cached; "cold" runs first evict the
memory folder's files from the OS page cache with
`posix_fadvise(POSIX_FADV_DONTNEED)` (only those files; nothing else on the
machine is touched), so the load reads them from disk.

Variants (memories populated directly, see `_common.populate_memory`):
* `hnsw` 100k: the default `hnsw_threshold=50_000`, so the saved index is HNSW;
* `flat` 100k: `hnsw_threshold` above 100k, an exact flat index;
* `rebuild`: the HNSW memory with its `episodes.faiss` cache deleted, so the load
  rebuilds the index from the stored vectors (what happens after a crash or a
  write without `save`);
* `--footprint-n 1000000` adds the 1M HNSW memory to the footprint table.

    .venv/bin/python benchmarks/scale/run.py load --n 100000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import DATA, HERE, ROOT, loadavg, populate_memory, save_result, wait_for_quiet


def evict(folder: Path) -> None:
    """Drop the folder's files from the OS page cache (cold read)."""
    for f in folder.iterdir():
        if f.is_file():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def child(folder: str, judgments: int, preimport: bool) -> dict[str, Any]:
    t0 = time.perf_counter()
    from _common import LatencyChatModel, TopicEmbeddings, query_cases, rss_mb

    from langchain_memalign import MemAlignJudge

    t_import = time.perf_counter() - t0
    t_openai = None
    if preimport:
        # The first judge built in a process imports langchain_openai (structured.py's
        # `_supports_json_schema`), about 1-3 s here; a program that uses an OpenAI
        # model has imported it already. Import it first to time the memory alone.
        t0 = time.perf_counter()
        import langchain_openai.chat_models.base  # noqa: F401

        t_openai = time.perf_counter() - t0
    emb = TopicEmbeddings()
    emb.fail = True  # any embedding call during load raises
    model = LatencyChatModel()
    cases = query_cases(judgments)
    rss0 = rss_mb()
    t0 = time.perf_counter()
    judge = MemAlignJudge.load(folder, model=model, embeddings=emb)
    t_load = time.perf_counter() - t0
    rss1 = rss_mb()
    calls = emb.calls
    emb.fail = False
    idx = judge.memory.index
    ts = []
    for c in cases:
        t1 = time.perf_counter()
        judge.invoke(c)
        ts.append(time.perf_counter() - t1)
    return {
        "import_s": round(t_import, 3),
        "preimported_langchain_openai_s": None if t_openai is None else round(t_openai, 3),
        "load_s": round(t_load, 4),
        "embedding_calls_during_load": calls,
        "episodes": len(idx),
        "index_kind": idx.kind,
        "rss_mb_before_load": round(rss0, 1),
        "rss_mb_after_load": round(rss1, 1),
        "rss_mb_after_judgments": round(rss_mb(), 1),
        "first_judgment_ms": round(ts[0] * 1000, 2) if ts else None,
        "judgment_median_ms": round(statistics.median(ts) * 1000, 2) if ts else None,
    }


def spawn(folder: Path, judgments: int, cold: bool, preimport: bool = True) -> dict[str, Any]:
    if cold:
        evict(folder)
    la = loadavg()
    out = subprocess.run(
        [
            sys.executable,
            str(HERE / "run.py"),
            "load",
            "--child",
            str(folder),
            "--judgments",
            str(judgments),
        ]
        + (["--preimport"] if preimport else []),
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    res: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    res["loadavg"] = la
    res["cache"] = "cold" if cold else "warm"
    return res


def sizes(folder: Path) -> dict[str, float]:
    return {
        f.name: round(f.stat().st_size / 2**20, 1)
        for f in folder.iterdir()
        if f.is_file() and f.name in ("memory.sqlite", "episodes.faiss")
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--preimport", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--judgments", type=int, default=20)
    ap.add_argument("--footprint-n", type=int, nargs="*", default=[10_000])
    ap.add_argument("--max-load", type=float, default=None)
    ap.add_argument("--max-wait", type=float, default=1800)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.judgments, args.preimport)))
        return

    hnsw, _ = populate_memory(args.n, guidelines=60, hnsw_threshold=50_000)
    flat, _ = populate_memory(args.n, guidelines=60, hnsw_threshold=10_000_000)
    rebuild = DATA / f"rebuild_n{args.n}"
    if rebuild.exists():
        shutil.rmtree(rebuild)
    rebuild.mkdir(parents=True)
    shutil.copy2(hnsw / "memory.sqlite", rebuild / "memory.sqlite")
    extra = {n: populate_memory(n, guidelines=60)[0] for n in args.footprint_n}
    if args.max_load is not None:
        wait_for_quiet(args.max_load, args.max_wait)

    runs: dict[str, Any] = {}
    plan = [
        ("hnsw", hnsw, True),
        ("flat", flat, True),
        ("hnsw_first_judge_in_process", hnsw, False),
    ]
    for label, folder, preimport in plan:
        for cold in (False, True):
            rows = [spawn(folder, args.judgments, cold, preimport) for _ in range(args.repeats)]
            key = f"{label}/{'cold' if cold else 'warm'}"
            runs[key] = {
                "load_s_median": round(statistics.median(r["load_s"] for r in rows), 4),
                "load_s_max": max(r["load_s"] for r in rows),
                "embedding_calls": sorted({r["embedding_calls_during_load"] for r in rows}),
                "rows": rows,
            }
            print(
                f"load {args.n:,} episodes ({label}, {key.split('/')[1]} page cache): median "
                f"{runs[key]['load_s_median']:.3f} s, max {runs[key]['load_s_max']:.3f} s, "
                f"embedding calls {runs[key]['embedding_calls']}; load avg {rows[0]['loadavg']}",
                flush=True,
            )
    rows = [spawn(rebuild, args.judgments, False)]
    runs["hnsw_rebuild_without_index_cache"] = {
        "load_s": rows[0]["load_s"],
        "embedding_calls": rows[0]["embedding_calls_during_load"],
        "rows": rows,
    }
    print(
        f"load {args.n:,} episodes without the index cache (HNSW rebuilt from stored vectors): "
        f"{rows[0]['load_s']:.2f} s, embedding calls {rows[0]['embedding_calls_during_load']}"
    )
    shutil.rmtree(rebuild, ignore_errors=True)

    footprint: dict[str, Any] = {}
    for label, folder in [(f"{args.n}/hnsw", hnsw), (f"{args.n}/flat", flat)] + [
        (f"{n}/{'hnsw' if n > 50_000 else 'flat'}", f) for n, f in extra.items()
    ]:
        r = spawn(folder, args.judgments, False)
        n = r["episodes"]
        per = 100_000 / n
        footprint[label] = {
            "episodes": n,
            "load_s": r["load_s"],
            "judgment_median_ms": r["judgment_median_ms"],
            "rss_mb_load_delta": round(r["rss_mb_after_load"] - r["rss_mb_before_load"], 1),
            "rss_mb_after_judgments_delta": round(
                r["rss_mb_after_judgments"] - r["rss_mb_before_load"], 1
            ),
            "rss_mb_per_100k": round((r["rss_mb_after_load"] - r["rss_mb_before_load"]) * per, 1),
            "disk_mb": sizes(Path(folder)),
            "disk_mb_per_100k": round(sum(sizes(Path(folder)).values()) * per, 1),
            "loadavg": r["loadavg"],
        }
        f = footprint[label]
        print(
            f"footprint {label}: RSS +{f['rss_mb_load_delta']} MB after load "
            f"(+{f['rss_mb_after_judgments_delta']} MB after {args.judgments} judgments) = "
            f"{f['rss_mb_per_100k']} MB per 100k episodes; disk {f['disk_mb']}"
        )
    key = "hnsw/cold"
    ok = runs[key]["embedding_calls"] == [0] and runs[key]["load_s_max"] <= 2.0
    first = runs["hnsw_first_judge_in_process/cold"]
    ok_first = first["embedding_calls"] == [0] and first["load_s_max"] <= 2.0
    print(
        f"target: 0 embedding calls and <= 2 s for {args.n:,} episodes (HNSW, cold cache, worst "
        f"of {args.repeats}): memory {'PASS' if ok else 'FAIL'}; first judge of a fresh process "
        f"(with the lazy langchain_openai import) {'PASS' if ok_first else 'FAIL'}"
    )
    save_result(
        f"load_{args.n}",
        {
            "n_episodes": args.n,
            "runs": runs,
            "footprint": footprint,
            "pass": ok,
            "pass_first_judge_in_process": ok_first,
            "loadavg_end": loadavg(),
        },
    )
