"""Do the nearest past cases carry the expert's verdict? (issue 10; no chat model call)

Episodic memory helps an unseen case only if the cases most similar to it tend to have
the same expert verdict. For each data set this takes --n cases, embeds what the judge
embeds (--embed: the inputs by default, as the judge does; cut to --max-chars), and
for every case finds its nearest other case (leave-one-out, cosine). It reports how
often the two verdicts agree, by quartile of similarity, beside the agreement two random
cases would have by chance.

    python benchmarks/neighbour_labels.py --data-dir ../shared/data \
        --out benchmarks/results/quality/neighbour_labels.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _data import FILES, load_jsonl
from provenance import file_sha256, run_info
from side_by_side import build_embeddings

from langchain_memalign._text import render, truncate


def _share(agree: Any, mask: Any) -> float | None:
    """How often the verdicts agree among the cases `mask` keeps (None: it keeps none)."""
    return round(float(agree[mask].mean()), 3) if mask.any() else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared" / "data")
    )
    ap.add_argument("--datasets", default="halubench,feedbackqa,pandalm,prometheus")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-chars", type=int, default=400, help="MiniLM reads 256 tokens")
    ap.add_argument("--embed", choices=["inputs", "inputs_outputs"], default="inputs",
                    help="what is embedded (JudgeConfig.embed)")  # fmt: skip
    ap.add_argument("--emb-url", default="http://127.0.0.1:8012/v1")
    ap.add_argument("--embedding-model", default="minilm")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    emb = build_embeddings(a.emb_url, a.embedding_model)

    results, sums = {}, {}
    for name in [x for x in a.datasets.split(",") if x]:
        path = Path(a.data_dir) / FILES[name]
        sums[path.name] = file_sha256(path)
        rows = load_jsonl(path)
        random.Random(a.seed).shuffle(rows)
        rows = rows[: a.n]

        def text(r: Any) -> str:
            if a.embed == "inputs":
                return render(r.inputs)
            # half the room each, so the outputs are not cut away by long inputs
            half = a.max_chars // 2
            return f"{truncate(render(r.inputs), half)}\n{truncate(render(r.outputs), half)}"

        vectors = np.array(
            emb.embed_documents([truncate(text(r), a.max_chars) for r in rows]),
            dtype=np.float32,
        )
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        sim = vectors @ vectors.T
        np.fill_diagonal(sim, -2.0)
        labels = [json.dumps(r.value) for r in rows]
        nearest, best = sim.argmax(1), sim.max(1)
        agree = np.array([labels[i] == labels[j] for i, j in enumerate(nearest)])
        shares = [c / len(labels) for c in Counter(labels).values()]
        edges = np.quantile(best, [0, 0.25, 0.5, 0.75, 1])
        quartiles = []
        for q, (lo, hi) in enumerate(itertools.pairwise(edges)):
            mask = (best >= lo) & ((best < hi) if q < 3 else (best <= hi))
            quartiles.append({"similarity": [round(float(lo), 3), round(float(hi), 3)],
                              "n": int(mask.sum()),
                              "agreement": round(float(agree[mask].mean()), 3)})  # fmt: skip
        # What a similarity floor (JudgeConfig.min_episode_similarity) would keep: the share
        # of cases whose nearest case clears it, and how often that case's verdict agrees.
        floors = []
        for floor in (0.7, 0.8, 0.9, 0.95):
            mask = best >= floor
            floors.append({"floor": floor, "kept": round(float(mask.mean()), 3),
                           "agreement": _share(agree, mask),
                           "agreement_below": _share(agree, ~mask)})  # fmt: skip
        results[name] = {
            "n": len(rows),
            "chance_agreement": round(sum(s * s for s in shares), 3),
            "agreement": round(float(agree.mean()), 3),
            "by_similarity_quartile": quartiles,
            "by_floor": floors,
        }
        print(name, json.dumps(results[name]), flush=True)
    models = {"embeddings": f"{a.embedding_model} @ {a.emb_url}"}
    out = {"run_info": run_info(models=models, data=sums) | {"argv": sys.argv},
           "protocol": {"n": a.n, "seed": a.seed, "max_chars": a.max_chars, "embed": a.embed},
           "datasets": results}  # fmt: skip
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
