"""The scale and speed benchmarks (docs/benchmarks_scale.md), behind one command.

    python benchmarks/scale/run.py BENCHMARK [its options]   # one benchmark
    python benchmarks/scale/run.py BENCHMARK --help          # its options
    python benchmarks/scale/run.py all [--max-load 2.5]      # every figure of the page

Each benchmark prints its figures and saves `benchmarks/scale/results/<name>.json` with
the load average of every figure:

    align-one            adding one feedback item to a big memory      (bench_align_one.py)
    judge-overhead       the judge's own overhead                       (bench_judge_overhead.py)
    graph-floor          LangGraph running no-op nodes in the judge's shape
                                                                        (bench_graph_floor.py)
    load                 opening a saved judge; memory footprint        (bench_load.py)
    memory-tokens        memory tokens per judgment as feedback grows   (bench_memory_tokens.py)
    batch                judgments at concurrency 32; rate limiter      (bench_batch.py)
    embed-real-texts     real MiniLM embeddings for hnsw-recall, cached (embed_real_texts.py)
    hnsw-recall          HNSW recall against the exact index            (bench_hnsw_recall.py)
    postgres             one memory on PostgreSQL                       (bench_postgres.py)
    mlflow-side-by-side  the same for MLflow's MemAlign (run with .venv-mlflow's python)
                                                                        (mlflow_side_by_side.py)

`all` runs every figure of docs/benchmarks_scale.md but PostgreSQL, each benchmark in a
fresh process (about 40-60 min on 2 busy cores). `--max-load X` makes each timing
benchmark wait (up to `--max-wait` s, default 1800) for the 1-minute load average to fall
below X. The HNSW recall needs the local MiniLM server (http://127.0.0.1:8012/v1) or
embeddings cached by `embed-real-texts`; the MLflow side by side needs `.venv-mlflow`
(benchmarks/mlflow_baseline/setup.sh): each is skipped, saying so, without them. Big
synthetic memories (10k, 100k, 1M episodes; ~3.5 GB) are built once under
$MEMALIGN_SCALE_DATA (default /tmp/memalign_scale) and reused.
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

# subcommand -> the module (in this folder) whose `main()` parses the rest of the line
BENCHMARKS = {
    "align-one": "bench_align_one",
    "judge-overhead": "bench_judge_overhead",
    "graph-floor": "bench_graph_floor",
    "load": "bench_load",
    "memory-tokens": "bench_memory_tokens",
    "batch": "bench_batch",
    "embed-real-texts": "embed_real_texts",
    "hnsw-recall": "bench_hnsw_recall",
    "postgres": "bench_postgres",
    "mlflow-side-by-side": "mlflow_side_by_side",
}

# What `all` runs: (subcommand, options, whether it takes --max-load). The figures of
# docs/benchmarks_scale.md, as run_all.sh ran them.
ALL: list[tuple[str, list[str], bool]] = [
    ("align-one", ["--n", "10000", "--profile"], True),
    ("judge-overhead", ["--n", "10000", "--what-if"], True),
    ("judge-overhead", ["--n", "1000000", "--what-if"], True),
    ("graph-floor", [], False),
    ("load", ["--n", "100000", "--footprint-n", "10000", "1000000"], True),
    ("memory-tokens", ["--items", "5000"], False),
    ("memory-tokens", ["--items", "5000", "--consolidation", "fail"], False),
    ("batch", ["--what-if"], True),
]
MLFLOW_RUNS = [
    ["--sizes", "1000", "10000", "--load-n", "100000"],
    ["--sizes", "10000", "--load-n", "0", "--dspy-cache", "memory"],
]


def run_one(name: str, argv: list[str]) -> int:
    """Run one benchmark in this process: its module's `main()` reads `argv`."""
    module = importlib.import_module(BENCHMARKS[name])
    # argparse's prog, and the command line a result file records
    sys.argv = [f"benchmarks/scale/run.py {name}", *argv]
    result = module.main()
    return result if isinstance(result, int) else 0


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _minilm_up() -> bool:
    try:
        with urllib.request.urlopen("http://127.0.0.1:8012/v1/models", timeout=5):
            return True
    except OSError:
        return False


def run_all(max_load: float | None, max_wait: float, real_texts: int) -> int:
    """Every figure of docs/benchmarks_scale.md but PostgreSQL, each in a fresh process."""
    wait = [] if max_load is None else ["--max-load", str(max_load), "--max-wait", str(max_wait)]
    runs = [(sys.executable, name, opts + (wait if waits else [])) for name, opts, waits in ALL]
    if (HERE / "results" / "real_minilm.npz").exists() or _minilm_up():
        runs.append((sys.executable, "embed-real-texts", ["--n", str(real_texts)]))
        runs.append((sys.executable, "hnsw-recall", ["--queries", "1000", "--big-n", "1000000"]))
    else:
        print("MiniLM server down and no cached embeddings: skipping the HNSW recall benchmark")
    mlflow_python = ROOT / ".venv-mlflow" / "bin" / "python"
    if mlflow_python.exists():
        runs += [(str(mlflow_python), "mlflow-side-by-side", opts) for opts in MLFLOW_RUNS]
    else:
        print(".venv-mlflow missing: skipping the MLflow side-by-side (mlflow_baseline/setup.sh)")
    print(f"load average at start: {_loadavg()}", flush=True)
    for python, name, opts in runs:
        # A fresh process each: a 1M-episode index is ~2 GB, and one benchmark's threads
        # and caches would otherwise be the next one's.
        cmd = [python, str(HERE / "run.py"), name, *opts]
        print("$ " + " ".join(cmd[1:]), flush=True)
        rc = subprocess.run(cmd, cwd=ROOT, check=False).returncode
        if rc != 0:
            print(f"{name} failed (exit {rc})")
            return rc
    print(f"load average at end: {_loadavg()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name == "all":
        ap = argparse.ArgumentParser(prog="run.py all", description=run_all.__doc__)
        ap.add_argument("--max-load", type=float, default=None)
        ap.add_argument("--max-wait", type=float, default=1800)
        ap.add_argument("--real-texts", type=int, default=6000, help="embed-real-texts --n")
        args = ap.parse_args(rest)
        return run_all(args.max_load, args.max_wait, args.real_texts)
    if name not in BENCHMARKS:
        print(f"unknown benchmark {name!r}; one of: all, {', '.join(BENCHMARKS)}", file=sys.stderr)
        return 2
    return run_one(name, rest)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))  # the benchmarks import `_common` from this folder
    raise SystemExit(main())
