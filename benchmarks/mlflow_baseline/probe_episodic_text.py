"""What text MLflow 3.18's MemAlign embeds for its episodic memory, and what that does to retrieval.

Embeddings only (no chat model). Run in .venv-mlflow with proxy.py up:

    .venv-mlflow/bin/python benchmarks/mlflow_baseline/probe_episodic_text.py \
        --data /work/shared/data/halubench.jsonl --n-memory 50 --n-query 20 --out probe.json

`MemoryAugmentedJudge._build_episodic_memory` takes the corpus text of each example as
`getattr(example, query_field)`, with query_field "inputs" for any judge whose template
has {{ inputs }}. A `dspy.Example` has an `inputs()` *method*, so getattr returns the
bound method and the corpus text is `str(<bound method Example.inputs of Example({...})>)`:
the repr of the whole example, starting with its label ('result': 'pass'), rationale,
inputs and outputs. The query side (`retrieve_relevant_examples`) embeds `str(inputs)`.

This script builds the examples as `trace_to_dspy_example` does (result = lowercased label,
rationale, inputs/outputs rendered with MLflow's parse_inputs_to_str/parse_outputs_to_str),
embeds the corpus both ways with MLflow's own embedder (`_build_embedder`, dspy cache off),
and compares the top-k retrieved for each query: as shipped vs `example["inputs"]`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import urllib.request

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/work/shared/data/halubench.jsonl")
    ap.add_argument("--n-memory", type=int, default=50)
    ap.add_argument("--n-query", type=int, default=20)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0, help="rows are shuffled with random.Random(seed)")
    ap.add_argument("--proxy", default="http://127.0.0.1:8014")
    ap.add_argument("--embedding-model", default="openai:/minilm")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()

    base = a.proxy.rstrip("/") + "/v1"
    os.environ.update(OPENAI_API_BASE=base, OPENAI_BASE_URL=base, LITELLM_LOCAL_MODEL_COST_MAP="True",
                      MLFLOW_DISABLE_TELEMETRY="true")
    os.environ.setdefault("OPENAI_API_KEY", "local")

    import dspy
    from mlflow.genai.judges.optimizers.memalign.optimizer import _build_embedder
    from mlflow.genai.judges.optimizers.memalign.utils import value_to_embedding_text
    from mlflow.genai.utils.trace_utils import parse_inputs_to_str, parse_outputs_to_str

    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    rows = [json.loads(x) for x in open(a.data) if x.strip()]
    random.Random(a.seed).shuffle(rows)  # the shared files are sorted by label
    memory, queries = rows[: a.n_memory], rows[a.n_memory : a.n_memory + a.n_query]
    examples = []
    for r in memory:
        ex = dspy.Example(
            result=str(r["label"]).lower(),
            rationale=r.get("feedback") or "",
            inputs=parse_inputs_to_str(r["inputs"]),
            outputs=parse_outputs_to_str(r["outputs"]),
        ).with_inputs("inputs", "outputs")
        examples.append(ex)

    shipped = [value_to_embedding_text(getattr(ex, "inputs")) for ex in examples]  # as in 3.18
    fixed = [value_to_embedding_text(ex["inputs"]) for ex in examples]
    qtexts = [value_to_embedding_text(r["inputs"]) for r in queries]  # judge(inputs=dict)

    def stats() -> dict:
        with urllib.request.urlopen(a.proxy.rstrip("/") + "/stats") as f:
            return json.loads(f.read())

    emb = _build_embedder(a.embedding_model, 384)
    s0 = stats()
    E_shipped = emb(shipped)
    s1 = stats()
    E_fixed = emb(fixed)
    Q = emb(qtexts)

    def norm(m):
        m = np.asarray(m, dtype=float)
        return m / np.linalg.norm(m, axis=1, keepdims=True)

    E_shipped, E_fixed, Q = norm(E_shipped), norm(E_fixed), norm(Q)
    overlaps, label_agree_s, label_agree_f = [], [], []
    for qi, q in enumerate(Q):
        top_s = np.argsort(-(E_shipped @ q))[: a.k]
        top_f = np.argsort(-(E_fixed @ q))[: a.k]
        overlaps.append(len(set(top_s) & set(top_f)) / a.k)
        lab = queries[qi]["label"]
        label_agree_s.append(np.mean([memory[i]["label"] == lab for i in top_s]))
        label_agree_f.append(np.mean([memory[i]["label"] == lab for i in top_f]))
    sims_s = (E_shipped @ Q.T).max(axis=0)
    sims_f = (E_fixed @ Q.T).max(axis=0)
    out = {
        "data": a.data,
        "seed": a.seed,
        "memory_labels": {str(k): sum(1 for r in memory if r["label"] == k) for k in {r["label"] for r in memory}},
        "n_memory": len(memory),
        "n_query": len(queries),
        "k": a.k,
        "shipped_corpus_text_head": shipped[0][:160],
        "fixed_corpus_text_head": fixed[0][:160],
        "corpus_embedding_http_calls": s1["embedding_calls"] - s0["embedding_calls"],
        "corpus_embedding_inputs": s1["embedding_inputs"] - s0["embedding_inputs"],
        "corpus_truncated_inputs_shipped": s1["embedding_truncated_inputs"] - s0["embedding_truncated_inputs"],
        "mean_topk_overlap_shipped_vs_fixed": round(float(np.mean(overlaps)), 3),
        "mean_top1_cosine_shipped": round(float(sims_s.mean()), 3),
        "mean_top1_cosine_fixed": round(float(sims_f.mean()), 3),
        "mean_label_match_in_topk_shipped": round(float(np.mean(label_agree_s)), 3),
        "mean_label_match_in_topk_fixed": round(float(np.mean(label_agree_f)), 3),
    }
    print(json.dumps(out, indent=1, ensure_ascii=False))
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(out, fh, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()
