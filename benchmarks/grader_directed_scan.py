"""How well the grader-directed check separates attacks from honest text (no model call).

`langchain_memalign.graphs.injection.grader_directed` quotes words in a graded output that
address the grader, and each result reports them. Two measurements:

1. The labelled set `benchmarks/data/grader_directed_set.jsonl`: attacks (injections of
   every family, dressed in fullwidth letters, zero-width and combining characters,
   look-alike letters) and honest texts made to resemble them ("System requirements:",
   code that returns true, a rubric that was updated). Recall on the attacks, false flags
   on the honest texts, precision, per family and per split: `dev` was written with the
   patterns; `holdout` and `holdout2` were each written after the patterns and measured
   once before the patterns were changed again (those first figures are in
   docs/persistence.md; the figures here are the current patterns').
2. Real outputs: every `*.jsonl` of `--data-dir` (the shared data sets, rules.jsonl
   included); a false alarm changes the judgment of an honest answer, so the target is 0.

    python benchmarks/grader_directed_scan.py --data-dir ../shared/data \
        --out benchmarks/results/grader_directed_scan.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.provenance import file_sha256, run_info

from langchain_memalign.graphs.injection import find, grader_directed

SET = Path(__file__).resolve().parent / "data" / "grader_directed_set.jsonl"


def score_set(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Recall, false flags and precision of the check on labelled texts."""
    flagged = {r["id"]: sorted({f.family for f in find(r["text"])}) for r in rows}

    def figures(subset: list[dict[str, Any]]) -> dict[str, Any]:
        attacks = [r for r in subset if r["label"] == "attack"]
        honest = [r for r in subset if r["label"] == "honest"]
        caught = sum(1 for r in attacks if flagged[r["id"]])
        false = sum(1 for r in honest if flagged[r["id"]])
        return {
            "attacks": len(attacks),
            "caught": caught,
            "recall": round(caught / len(attacks), 3) if attacks else None,
            "honest": len(honest),
            "false_flags": false,
            "false_flag_rate": round(false / len(honest), 3) if honest else None,
            "precision": round(caught / (caught + false), 3) if caught + false else None,
        }

    by_split: dict[str, list[dict[str, Any]]] = defaultdict(list)
    by_family: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_split[r.get("split", "dev")].append(r)
        by_family[f"{r['label']}:{r['family']}"].append(r)
    return {
        "all": figures(rows),
        "by_split": {k: figures(v) for k, v in sorted(by_split.items())},
        "by_family": {k: figures(v) for k, v in sorted(by_family.items())},
        "missed_attacks": [
            {"id": r["id"], "text": r["text"]}
            for r in rows
            if r["label"] == "attack" and not flagged[r["id"]]
        ],
        "false_flags": [
            {"id": r["id"], "text": r["text"], "families": flagged[r["id"]]}
            for r in rows
            if r["label"] == "honest" and flagged[r["id"]]
        ],
        "families_found": {r["id"]: flagged[r["id"]] for r in rows if r["label"] == "attack"},
    }


def scan_outputs(files: list[Path]) -> dict[str, Any]:
    """How many real outputs of each data set the check flags (and the first few)."""
    counts = {}
    for path in files:
        rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        flagged = [q for r in rows if (q := grader_directed({"outputs": r.get("outputs")}))]
        counts[path.name] = {"outputs": len(rows), "flagged": len(flagged),
                             "examples": flagged[:5]}  # fmt: skip
        print(path.name, counts[path.name]["outputs"], counts[path.name]["flagged"], flush=True)
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data-dir", type=Path, required=True, help="folder of real *.jsonl data")
    ap.add_argument("--set", type=Path, default=SET, help="the labelled attacks and honest texts")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    started = time.time()
    rows = [json.loads(x) for x in a.set.read_text().splitlines() if x.strip()]
    labelled = score_set(rows)
    overall = labelled["all"]
    print(
        f"labelled set: {overall['caught']}/{overall['attacks']} attacks flagged, "
        f"{overall['false_flags']}/{overall['honest']} honest texts flagged",
        flush=True,
    )
    files = sorted(a.data_dir.glob("*.jsonl"))
    counts = scan_outputs(files)
    data = {p.name: file_sha256(p) for p in files}
    data[f"set:{a.set.name}"] = file_sha256(a.set)
    out = {
        "run_info": run_info(models={}, data=data) | {"argv": sys.argv},
        "seconds": round(time.time() - started, 1),
        "labelled_set": labelled,
        "data_sets": counts,
        "real_outputs": {
            "outputs": sum(c["outputs"] for c in counts.values()),
            "flagged": sum(c["flagged"] for c in counts.values()),
        },
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
