"""Experiment: does telling a bool judge its own measured lean move it toward the experts?

On bare-verdict sets (halubench) the unaligned judge leans one way (it calls most
hallucinated answers faithful). No rationale says why, so reflection has no rule to
write; what the seen cases do show is the judge's error pattern. This script grades the
training pool as the unaligned judge (the seen cases, as alignment would), counts its
errors each way, writes one note from the counts, and judges the test set with the note
added to the instructions. The unaligned judge's test cases are judged again here
(`base`) so the two are paired on the same server load. The note is written whenever the
two error counts differ (an experiment, no threshold). Measured on halubench, two seeds:
no effect beyond noise, so the package has no such step (docs/benchmarks.md, sixteenth
session).

    python benchmarks/verdict_note.py benchmarks/results/quality/quality_halubench.json \
        --seeds 0,1 --out benchmarks/results/quality/verdict_note_halubench.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _data import load_as_run
from provenance import file_sha256, run_info
from quality import metrics
from side_by_side import add_model_args, build_models

from langchain_memalign import MemAlignJudge
from langchain_memalign.evaluation.agreement import evaluate_agreement


def note_from(counts: Counter[tuple[Any, Any]], n: int) -> str | None:
    """One sentence naming the verdict the judge over-gives, from (judge, expert) counts."""
    said_true_was_false = counts[(True, False)]
    said_false_was_true = counts[(False, True)]
    if said_true_was_false == said_false_was_true:
        return None
    over, under = (True, False) if said_true_was_false > said_false_was_true else (False, True)
    many, few = (
        max(said_true_was_false, said_false_was_true),
        min(said_true_was_false, said_false_was_true),
    )
    o, u = str(over).lower(), str(under).lower()
    return (
        f"Calibration from the experts' verdicts on {n} past cases: this judge answered "
        f"{o} where the experts answered {u} {many} times, and {u} where they answered "
        f"{o} only {few} times. The experts answer {u} more often than this judge does: "
        f"answer {o} only when the case clearly meets the criterion; if anything in it "
        f"fails the criterion, answer {u}."
    )


def run_seed(
    a: argparse.Namespace, split: dict[str, Any], spec: Any, by_id: dict[str, Any],
    res: dict[str, Any], save: Callable[[], None], judge_llm: Any, emb: Any,
) -> None:  # fmt: skip
    """Grade the seed's training pool, write the note, judge its test set with and without."""
    seen = [by_id[i] for i in split["train_ids"][: a.n_seen]]
    test = [by_id[i] for i in split["test_ids"]]
    entries = res.setdefault("entries", {})

    def judge_with(instructions: str) -> MemAlignJudge:
        return MemAlignJudge(name=spec.name, instructions=instructions, model=judge_llm,
                             embeddings=emb, scale=spec.scale,
                             reuse_expert_verdicts=False)  # fmt: skip

    kw = {"scale": spec.scale, "ordinal": spec.ordinal, "max_concurrency": a.max_concurrency}
    if "seen" not in res:
        started = time.perf_counter()
        rep = evaluate_agreement(judge_with(spec.instructions), seen, **kw)
        pairs = Counter(f"{c.judge}->{c.human}" for c in rep.cases if c.judge is not None)
        res["seen"] = {"n": len(seen), "accuracy": rep.accuracy, "confusion": dict(pairs),
                       "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
        save()
    # (judge, expert) counts, read back from the stored form so a resumed run agrees.
    counts: Counter[tuple[Any, Any]] = Counter()
    for key, c in res["seen"]["confusion"].items():
        p, e = key.split("->")
        counts[(p == "True", e == "True")] = c
    note = note_from(counts, res["seen"]["n"])
    res["note_text"] = note
    print(f"seen {res['seen']}\nnote: {note}", file=sys.stderr, flush=True)
    with_note = f"{spec.instructions}\n\n{note}" if note else None
    for variant, instructions in (("base", spec.instructions), ("note", with_note)):
        if variant in entries or instructions is None:
            continue
        started = time.perf_counter()
        m = metrics(evaluate_agreement(judge_with(instructions), test, **kw))
        entries[variant] = {"test": m, "seconds": round(time.perf_counter() - started, 1)}
        save()
        print(f"{variant}: acc {m['accuracy']} bal {m['balanced_accuracy']} "
              f"per label {m['accuracy_per_label']}", file=sys.stderr, flush=True)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("result", type=Path, help="a quality_<dataset>.json (for its split)")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds of the result's splits")
    ap.add_argument("--n-seen", type=int, default=50)
    shared = Path(__file__).resolve().parents[2] / "shared"
    ap.add_argument("--data-dir", default=str(shared / "data"))
    ap.add_argument("--max-concurrency", type=int, default=2)
    add_model_args(ap)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)

    source = json.loads(a.result.read_text())
    path, spec, by_id = load_as_run(source, a.data_dir)
    judge_llm, _, emb = build_models(a)
    models = {"chat": f"{a.chat_model} @ {a.chat_url}",
              "embeddings": f"{a.embedding_model} @ {a.emb_url}"}  # fmt: skip
    out: dict[str, Any] = json.loads(a.out.read_text()) if a.out.exists() else {}
    out.setdefault("run_info", []).append(
        run_info(models=models, data={path.name: file_sha256(path)}) | {"argv": sys.argv}
    )
    # Laid out as quality.py's result files, so that paired.py and standing.py read
    # `FILE:base` and `FILE:note` as systems.
    out.update(dataset=spec.name, scale={"kind": spec.scale.kind}, ordinal=spec.ordinal)

    def save() -> None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(out, indent=1))

    for seed in [x.strip() for x in a.seeds.split(",") if x.strip()]:
        res = out.setdefault("seeds", {}).setdefault(seed, {})
        print(f"seed {seed}", file=sys.stderr, flush=True)
        run_seed(a, source["seeds"][seed]["split"], spec, by_id, res, save, judge_llm, emb)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
