"""benchmarks/scale/run.py: every scale benchmark runs end to end at a tiny size.

A benchmark nobody runs breaks unnoticed (`align-one` once failed on main for a change in
the reflection prompt), so each runs here through the one command, in its own process as
`run.py all` runs it, on a memory of a few dozen episodes, and writes a result file with
the fields of the published one in `benchmarks/scale/results/`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCALE = ROOT / "benchmarks" / "scale"
sys.path.insert(0, str(ROOT / "tests"))
from pg_server import find_bindir  # noqa: E402

# benchmark -> (tiny options, its result file, the published result whose fields it has)
TINY: dict[str, tuple[list[str], str, str | None]] = {
    "align-one": (
        ["--n", "40", "--trials", "2", "--warmup", "1", "--build-batch", "20", "--profile"],
        "align_one_40.json",
        "align_one_10000.json",
    ),
    "judge-overhead": (
        ["--n", "40", "--guidelines", "6", "--judgments", "3", "--warmup", "1", "--what-if"],
        "judge_overhead_40.json",
        "judge_overhead_10000.json",
    ),
    "graph-floor": (["--n", "3", "--warmup", "1"], "graph_floor.json", "graph_floor_idle2.json"),
    "load": (
        ["--n", "40", "--repeats", "1", "--judgments", "1", "--footprint-n", "40"],
        "load_40.json",
        "load_100000.json",
    ),
    "memory-tokens": (
        ["--items", "30", "--step", "10", "--checkpoints", "10", "30"],
        "memory_tokens_30.json",
        "memory_tokens_5000.json",
    ),
    "batch": (
        [
            "--n",
            "40",
            "--judgments",
            "6",
            "--concurrency",
            "3",
            "--latency",
            "0.001",
            "--rl-judgments",
            "3",
            "--rate",
            "1000",
            "--what-if",
        ],
        "batch.json",
        "batch.json",
    ),
    "hnsw-recall": (
        ["--queries", "20", "--big-n", "0"],
        "hnsw_recall.json",
        "hnsw_recall.json",
    ),
    "postgres": (
        [
            "--judges",
            "1",
            "--latency",
            "0.001",
            "--items",
            "4",
            "--batch",
            "2",
            "--overhead-n",
            "3",
            "--open-n",
            "40",
            "--open-repeats",
            "1",
        ],
        "postgres.json",
        "postgres.json",
    ),
}


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "MEMALIGN_SCALE_DATA": str(tmp_path / "data"),
        "MEMALIGN_SCALE_RESULTS": str(tmp_path / "results"),
    }
    return subprocess.run(
        [sys.executable, str(SCALE / "run.py"), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("name", list(TINY))
def test_scale_benchmark_runs_at_a_tiny_size(name: str, tmp_path: Path) -> None:
    options, result, published = TINY[name]
    if name == "postgres" and find_bindir() is None:
        pytest.skip("no PostgreSQL server binaries (apt-get install postgresql)")
    if name == "hnsw-recall":
        # Stands in for the MiniLM embeddings `embed-real-texts` caches (no server here).
        (tmp_path / "results").mkdir()
        rng = np.random.default_rng(0)
        vecs = rng.normal(size=(120, 384)).astype("float32")
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        texts = np.array([f"text {i}" for i in range(120)])
        np.savez(tmp_path / "results" / "real_minilm.npz", texts=texts, vectors=vecs)
    proc = _run([name, *options], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads((tmp_path / "results" / result).read_text())
    assert out["benchmark"] == result.removesuffix(".json")
    assert out["command"].startswith(f".venv/bin/python benchmarks/scale/run.py {name}")
    if published is not None and (SCALE / "results" / published).exists():
        before = json.loads((SCALE / "results" / published).read_text())
        # The published figure's fields are all still written (new ones may be added);
        # hnsw-recall's part 2 needs a saved HNSW memory, far above a tiny size.
        skipped = {"synthetic_big"} if name == "hnsw-recall" else set()
        assert set(before) - skipped <= set(out), set(before) - set(out)


def test_the_runner_names_every_benchmark_and_rejects_others(tmp_path: Path) -> None:
    listing = _run(["--help"], tmp_path)
    assert listing.returncode == 0
    sys.path.insert(0, str(SCALE))
    import run

    for name in run.BENCHMARKS:
        assert name in listing.stdout
    assert set(TINY) | {"embed-real-texts", "mlflow-side-by-side"} == set(run.BENCHMARKS)
    assert {name for name, _, _ in run.ALL} <= set(run.BENCHMARKS)
    bad = _run(["no-such-benchmark"], tmp_path)
    assert bad.returncode == 2 and "one of: all, align-one" in bad.stderr
