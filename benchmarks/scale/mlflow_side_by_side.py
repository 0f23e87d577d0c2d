"""MLflow 3.18 MemAlign, measured on the same operations as the scale benchmarks.

Run with the MLflow venv (benchmarks/mlflow_baseline/setup.sh), not .venv:

    .venv-mlflow/bin/python benchmarks/scale/run.py mlflow-side-by-side \
        --sizes 1000 10000 --load-n 100000

What it measures, with a zero-cost in-process embedder (`dspy.Embedder(callable)`,
deterministic 384-d vectors; its calls, texts and seconds are counted and the
seconds subtracted) and no LLM (guideline distillation is replaced by a no-op, so
every figure is "besides the LLM"):

* align_one: what `MemAlignOptimizer.align(judge, [one new trace])` does to a judge
  that holds N examples (optimizer.py:730-803): a new `MemoryAugmentedJudge` copied
  from the old one (deep copy of the examples, optimizer.py:220-224), then
  `_add_examples_to_memory([example])` (optimizer.py:613-625), which rebuilds the
  whole episodic index (`_build_episodic_memory`, optimizer.py:583-611: every
  example is embedded again). Trace conversion (`trace_to_dspy_example`) is left
  out: examples are built directly.
* retrieval: `retrieve_relevant_examples` for one query (utils.py:540-575) through
  `dspy.retrievers.Embeddings`, whose `Unbatchify` waits up to 100 ms for a batch
  to fill (dspy/utils/unbatchify.py, max_wait_time=0.1), plus
  `_build_augmented_instructions` (optimizer.py:292-320): the part of MLflow's
  judgment beyond the model and embedding calls.
* load: `Scorer.model_validate(judge.model_dump())` (no call), then the first
  judgment's `_lazy_init` (optimizer.py:442-464) with `_reconstruct_episodic_memory`
  replaced by returning the examples (the real one calls `mlflow.get_trace` once
  per trace id against the tracking store; not measured here): the embedding
  calls and seconds of rebuilding the episodic memory.

dspy's request cache is off by default here (`--dspy-cache off`), so every text reaches
the embedder, as with a cold cache (a new machine, or after `unalign` shifts the
batches of 200); `--dspy-cache memory` shows dspy's default, where unchanged batches
are served from its cache.

Results: benchmarks/scale/results/mlflow_side_by_side[_cache_memory].json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("MLFLOW_TRACKING_URI", "sqlite:////tmp/memalign_scale_mlflow.db")
import dspy
import mlflow
from mlflow.genai.judges import make_judge
from mlflow.genai.judges.optimizers.memalign import optimizer as opt
from mlflow.genai.judges.optimizers.memalign import utils as mutils
from mlflow.genai.scorers.base import Scorer

RESULTS = Path(__file__).resolve().parent / "results"
DIM = 384


class CountingEmbedder:
    """Deterministic 384-d vectors; counts calls, texts and seconds."""

    def __init__(self) -> None:
        self.calls = 0
        self.texts = 0
        self.seconds = 0.0

    def reset(self) -> None:
        self.calls, self.texts, self.seconds = 0, 0, 0.0

    def __call__(self, texts: list[str]) -> np.ndarray:
        t0 = time.perf_counter()
        out = np.stack(
            [np.random.default_rng(zlib.crc32(t.encode())).standard_normal(DIM) for t in texts]
        ).astype(np.float32)
        self.calls += 1
        self.texts += len(texts)
        self.seconds += time.perf_counter() - t0
        return out


try:
    import faiss  # noqa: F401

    FAISS = True
except ImportError:
    FAISS = False
if not FAISS:
    # dspy's retriever switches to a FAISS IVFPQ index at 20,000 examples and raises
    # ImportError without faiss-cpu, which MLflow does not depend on (dspy/retrievers/
    # embeddings.py:28,77). Without it, keep dspy's exact brute-force search instead.
    import dspy.retrievers.embeddings as _dre

    _orig_init = _dre.Embeddings.__init__

    def _brute_force_init(self: Any, *a: Any, **kw: Any) -> None:
        kw["brute_force_threshold"] = 10**12
        _orig_init(self, *a, **kw)

    _dre.Embeddings.__init__ = _brute_force_init  # type: ignore[method-assign]

EMB = CountingEmbedder()
opt._build_embedder = lambda model, dim: dspy.Embedder(
    EMB, batch_size=opt._get_embedding_batch_size(model)
)  # type: ignore[assignment]
opt.distill_guidelines = lambda **kw: []  # no LLM: figures are "besides the LLM"


def words(rng: np.random.Generator, n: int) -> str:
    syl = ["ka", "lo", "mi", "re", "tu", "sa", "no", "vi", "de", "ra", "po", "li", "ne"]
    return " ".join("".join(rng.choice(syl, size=3)) for _ in range(n))


def example(i: int, salt: int = 0) -> Any:
    rng = np.random.default_rng((salt, i))
    ex = dspy.Example(
        result="true" if i % 3 else "false",
        rationale=words(rng, 15),
        inputs=str({"question": words(rng, 35)}),
        outputs=str({"response": words(rng, 45)}),
    ).with_inputs("inputs", "outputs")
    ex._trace_id = f"tr-{salt}-{i}"
    ex._assessment_id = f"a-{salt}-{i}"
    ex._last_update_time_ms = 0
    return ex


def base_judge() -> Any:
    return make_judge(
        name="helpfulness",
        instructions="Is the support reply in {{ outputs }} helpful for {{ inputs }}?",
        model="openai:/local",
        feedback_value_type=bool,
    )


def judge_with(n: int) -> Any:
    j = opt.MemoryAugmentedJudge(
        base_judge(),
        reflection_lm="openai:/local",
        retrieval_k=5,
        embedding_model="openai:/minilm",
        embedding_dim=DIM,
    )
    j._add_examples_to_memory([example(i) for i in range(n)])
    return j


def ms(xs: list[float]) -> dict[str, float]:
    xs = sorted(x * 1000 for x in xs)
    return {
        "n": len(xs),
        "median_ms": round(statistics.median(xs), 3),
        "p90_ms": round(xs[int(0.9 * (len(xs) - 1))], 3),
        "max_ms": round(xs[-1], 3),
    }


def align_one(j: Any, i: int) -> dict[str, Any]:
    EMB.reset()
    t0 = time.perf_counter()
    new = opt.MemoryAugmentedJudge(
        base_judge=j,
        reflection_lm=j._reflection_lm,
        retrieval_k=j._retrieval_k,
        embedding_model=j._embedding_model,
        embedding_dim=j._embedding_dim,
    )
    new._add_examples_to_memory([example(i, salt=9)])
    wall = time.perf_counter() - t0
    return {
        "wall_s": wall,
        "embedding_s": EMB.seconds,
        "besides_embedding_s": wall - EMB.seconds,
        "embedding_calls": EMB.calls,
        "embedded_texts": EMB.texts,
        "new": new,
    }


def retrieval(j: Any, queries: int) -> dict[str, Any]:
    sig = j._base_signature
    rows = []
    for q in range(queries):
        rng = np.random.default_rng((77, q))
        kwargs = {
            "inputs": {"question": words(rng, 35)},
            "outputs": {"response": words(rng, 45)},
            "expectations": None,
            "trace": None,
        }
        EMB.reset()
        t0 = time.perf_counter()
        found = mutils.retrieve_relevant_examples(j._retriever, j._episodic_memory, kwargs, sig)
        j._build_augmented_instructions(
            [g.guideline_text for g in j._semantic_memory], [e for e, _ in found]
        )
        wall = time.perf_counter() - t0
        rows.append((wall, EMB.seconds, wall - EMB.seconds))
    return {
        "total": ms([r[0] for r in rows]),
        "embedding": ms([r[1] for r in rows]),
        "overhead_besides_embedding": ms([r[2] for r in rows]),
    }


def load(j: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    dump = j.model_dump()
    t_dump = time.perf_counter() - t0
    size = len(json.dumps(dump, default=str))
    EMB.reset()
    t0 = time.perf_counter()
    loaded = Scorer.model_validate(dump)
    t_validate = time.perf_counter() - t0
    calls_validate = EMB.calls
    examples = list(j._episodic_memory)
    loaded._reconstruct_episodic_memory = lambda: examples  # instead of get_trace per id
    EMB.reset()
    t0 = time.perf_counter()
    loaded._lazy_init()
    t_lazy = time.perf_counter() - t0
    return {
        "model_dump_s": round(t_dump, 3),
        "dump_bytes": size,
        "model_validate_s": round(t_validate, 4),
        "model_validate_embedding_calls": calls_validate,
        "first_use_lazy_init_s": round(t_lazy, 3),
        "first_use_embedding_s": round(EMB.seconds, 3),
        "first_use_besides_embedding_s": round(t_lazy - EMB.seconds, 3),
        "first_use_embedding_calls": EMB.calls,
        "first_use_embedded_texts": EMB.texts,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--load-n", type=int, default=100_000)
    ap.add_argument(
        "--dspy-cache",
        choices=["off", "memory"],
        default="off",
        help="dspy's request cache (on by default in dspy: unchanged batches of 200 "
        "texts are then served from the cache instead of the embedding model)",
    )
    args = ap.parse_args()
    os.environ["DSPY_CACHEDIR"] = "/tmp/memalign_scale_dspy_cache"
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=args.dspy_cache == "memory")
    out: dict[str, Any] = {
        "benchmark": "mlflow_side_by_side",
        "command": " ".join([".venv-mlflow/bin/python", *sys.argv]),
        "env": {
            "mlflow": mlflow.__version__,
            "dspy": dspy.__version__,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
        "dspy_cache": args.dspy_cache,
        "faiss_installed": FAISS,
        "note": None
        if FAISS
        else "faiss-cpu is not installed in .venv-mlflow: MLflow as "
        "shipped raises ImportError at >= 20,000 examples; measured with dspy's brute-force "
        "search forced instead",
        "sizes": {},
    }
    for n in args.sizes:
        la = [round(x, 2) for x in os.getloadavg()]
        t0 = time.perf_counter()
        j = judge_with(n)
        build = time.perf_counter() - t0
        trials = [align_one(j, i) for i in range(args.trials)]
        res = {
            "loadavg": la,
            "build_s": round(build, 2),
            "align_one": {
                "wall": ms([t["wall_s"] for t in trials]),
                "besides_embedding": ms([t["besides_embedding_s"] for t in trials]),
                "embedding_calls": sorted({t["embedding_calls"] for t in trials}),
                "embedded_texts": sorted({t["embedded_texts"] for t in trials}),
            },
            "retrieval": retrieval(trials[-1]["new"], args.queries),
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        }
        out["sizes"][str(n)] = res
        a = res["align_one"]
        print(
            f"MLflow n={n:,}: align one item: {a['wall']['median_ms']:.0f} ms wall, "
            f"{a['besides_embedding']['median_ms']:.0f} ms besides embedding, embedding calls "
            f"{a['embedding_calls']} with {a['embedded_texts']} texts; retrieval+prompt besides "
            f"embedding {res['retrieval']['overhead_besides_embedding']['median_ms']:.1f} ms "
            f"median; load {la}",
            flush=True,
        )
    if args.load_n:
        la = [round(x, 2) for x in os.getloadavg()]
        j = judge_with(args.load_n)
        res = load(j)
        res["loadavg"] = la
        out["load"] = {str(args.load_n): res}
        print(
            f"MLflow load n={args.load_n:,}: model_validate {res['model_validate_s']} s (0 calls); "
            f"first judgment rebuilds memory: {res['first_use_lazy_init_s']} s, "
            f"{res['first_use_embedding_calls']} embedding calls with "
            f"{res['first_use_embedded_texts']} texts",
            flush=True,
        )
    RESULTS.mkdir(exist_ok=True)
    suffix = "" if args.dspy_cache == "off" else f"_cache_{args.dspy_cache}"
    path = RESULTS / f"mlflow_side_by_side{suffix}.json"
    path.write_text(json.dumps(out, indent=2, default=str) + "\n")
    print(f"saved {path}")
