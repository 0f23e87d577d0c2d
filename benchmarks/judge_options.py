"""Judge-time options side by side on one aligned memory (issue 10).

Opens a memory that `quality.py` aligned and saved (`--out-dir/work/<dataset>/seed<S>/
<system>/stage<N>`), and judges the same test set and seen cases again under each variant
of the options that act at judgment time only (`k`, `retrieval.min_similarity`,
`prompt.layout`, named by their dotted place), with expert-verdict reuse off. Every
variant sees the same guidelines and episodes, so differences come from the option alone;
the `base` variant (no override) repeats the original judgment and measures run-to-run
noise against it.

    python benchmarks/judge_options.py benchmarks/results/quality/quality_feedbackqa.json \
        --system ours --stage 10 --variants "base:;k0:k=0;sim60:retrieval.min_similarity=0.6" \
        --out benchmarks/results/quality/judge_options_feedbackqa.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.datasets import FILES, load_as_run, load_scenario
from harness.options import judge_kwargs
from harness.provenance import file_sha256, run_info
from quality import metrics, seen_sample
from side_by_side import add_model_args, build_models

from langchain_memalign import MemAlignJudge
from langchain_memalign.evaluation.agreement import evaluate_agreement


def parse_variants(text: str) -> list[tuple[str, dict[str, Any]]]:
    """`name:key=value,key=value;name2:...` -> [(name, overrides)] (values read as JSON)."""
    out = []
    for part in [p for p in text.split(";") if p.strip()]:
        name, _, body = part.partition(":")
        overrides: dict[str, Any] = {}
        for kv in [x for x in body.split(",") if x.strip()]:
            key, _, raw = kv.partition("=")
            try:
                overrides[key.strip()] = json.loads(raw)
            except json.JSONDecodeError:
                overrides[key.strip()] = raw.strip()
        out.append((name.strip(), overrides))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("result", type=Path, help="a quality_<dataset>.json written by quality.py")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--system", default="ours")
    ap.add_argument("--stage", type=int, required=True)
    ap.add_argument("--variants", default="base:")
    shared = Path(__file__).resolve().parents[2] / "shared"
    ap.add_argument("--data-dir", default=str(shared / "data"))
    ap.add_argument("--scenario-dir", default=str(shared / "scenarios"))
    ap.add_argument("--max-concurrency", type=int, default=2)
    ap.add_argument("--max-seen", type=int, default=None,
                    help="at most this many seen cases, as quality.py --max-seen")  # fmt: skip
    add_model_args(ap)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)

    source = json.loads(a.result.read_text())
    name, protocol = source["dataset"], source["protocol"]
    entry = source["seeds"][str(a.seed)]["entries"][f"{a.system}@{a.stage}"]
    split = source["seeds"][str(a.seed)]["split"]
    # quality.py saves a tagged run's memories under work/<dataset>_<tag>, the result file's
    # own name without "quality_"
    folder = a.result.stem.removeprefix("quality_")
    memory = a.result.parent / "work" / folder / f"seed{a.seed}" / a.system / f"stage{a.stage}"
    if not memory.is_dir():
        raise SystemExit(f"no saved memory at {memory}")

    # The same cases, cut the same way as the run that aligned the memory.
    if name in FILES:
        path, spec, by_id = load_as_run(source, a.data_dir)
        sums = {path.name: file_sha256(path)}
    else:
        folder = Path(a.scenario_dir) / name
        spec, train, test_rows = load_scenario(folder)
        by_id = {fb.id: fb for fb in [*train, *test_rows]}
        sums = {f"{name}/{f.name}": file_sha256(f) for f in sorted(folder.glob("*.jsonl"))}
    test = [by_id[i] for i in split["test_ids"]]
    # The seen cases quality.py judged (--max-seen: the same spread sample).
    seen = seen_sample([by_id[i] for i in split["train_ids"][: a.stage]], a.max_seen)

    models = {"chat": f"{a.chat_model} @ {a.chat_url}",
              "embeddings": f"{a.embedding_model} @ {a.emb_url}"}  # fmt: skip
    judge_llm, _, emb = build_models(a)
    out: dict[str, Any] = json.loads(a.out.read_text()) if a.out.exists() else {}
    out.update(
        dataset=name, seed=a.seed, system=a.system, stage=a.stage, memory=str(memory),
        source_result=str(a.result), protocol=protocol,
        original={"test": {k: entry["test"][k] for k in ("accuracy", "balanced_accuracy",
                                                         "weighted_kappa", "verdict_counts")},
                  "seen": entry.get("seen") and entry["seen"]["accuracy"]},
    )  # fmt: skip
    out.setdefault("run_info", []).append(run_info(models=models, data=sums) | {"argv": sys.argv})
    variants = out.setdefault("variants", {})
    for vname, overrides in parse_variants(a.variants):
        if vname in variants:
            print(f"{vname}: done before, skipped", file=sys.stderr)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            scratch = Path(tmp) / "memory"
            shutil.copytree(memory, scratch)
            judge = MemAlignJudge.load(
                scratch, judge_llm, emb,
                **judge_kwargs({"retrieval.reuse_expert_verdicts": False}, overrides),
            )  # fmt: skip
            started = time.perf_counter()
            kw = {"scale": spec.scale, "ordinal": spec.ordinal,
                  "max_concurrency": a.max_concurrency}  # fmt: skip
            m_test = metrics(evaluate_agreement(judge, test, **kw))
            m_seen = metrics(evaluate_agreement(judge, seen, **kw)) if seen else None
            judge.close()
        variants[vname] = {"overrides": overrides, "test": m_test, "seen": m_seen,
                           "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(out, indent=1))
        print(f"{vname} {overrides}: acc {m_test['accuracy']} bal {m_test['balanced_accuracy']} "
              f"wk {m_test.get('weighted_kappa')} seen {m_seen and m_seen['accuracy']} "
              f"verdicts {m_test['verdict_counts']}", file=sys.stderr, flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
