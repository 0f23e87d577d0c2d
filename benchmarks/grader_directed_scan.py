"""How often real graded outputs trip the grader-directed check (issue 13; no model call).

`langchain_memalign.graphs.injection.grader_directed` quotes words in a graded output that
address the grader, and the judge prompt then warns about them. A false alarm changes a
judgment of an honest answer, so this counts the outputs of every shared data set it
flags (and shows the first few).

    python benchmarks/grader_directed_scan.py --data-dir ../shared/data \
        --out benchmarks/results/grader_directed_scan.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.provenance import file_sha256, run_info

from langchain_memalign.graphs.injection import grader_directed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    files = sorted(a.data_dir.glob("*.jsonl"))
    counts = {}
    for path in files:
        rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        flagged = [q for r in rows if (q := grader_directed({"outputs": r.get("outputs")}))]
        counts[path.name] = {"outputs": len(rows), "flagged": len(flagged),
                             "examples": flagged[:5]}  # fmt: skip
        print(path.name, counts[path.name]["outputs"], counts[path.name]["flagged"], flush=True)
    out = {"run_info": run_info(models={}, data={p.name: file_sha256(p) for p in files})
           | {"argv": sys.argv}, "data_sets": counts}  # fmt: skip
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
