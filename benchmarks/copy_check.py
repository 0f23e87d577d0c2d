"""Which stored guidelines the package's copy check rejects today (issue 10; no model call).

Every quality result file keeps the guidelines each memory held (ours and MLflow's). This
runs the package's `restates_case` on each distinct one, as alignment does on a
proposal, with every rationale of its data set as what reflection was shown (a superset
of what one alignment shows; no source is given, so the checks on copied words of a
case's inputs and outputs do not run). It shows what a change to the check catches
among guidelines the judges really held, and that it lets the rules through (the
support-apology rule must stay).

    python benchmarks/copy_check.py --data-dir ../shared/data \
        --scenario-dir ../shared/scenarios --results benchmarks/results/quality \
        --out benchmarks/results/quality/copy_check.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _data import DERIVED, FILES, dataset_spec, load_jsonl, load_scenario
from provenance import file_sha256, run_info

from langchain_memalign import Feedback
from langchain_memalign.graphs.provenance import restates_case


def guideline_texts(entry: dict[str, Any]) -> list[str]:
    """The guideline texts a result entry records (strings, or dicts with a text)."""
    out = []
    for g in entry.get("guidelines") or []:
        text = g if isinstance(g, str) else g.get("text") if isinstance(g, dict) else None
        if text:
            out.append(text)
    return out


def load_set(name: str, data_dir: Path, scenario_dir: Path
             ) -> tuple[list[Feedback], tuple[str, ...], Path] | None:  # fmt: skip
    """(feedback with rationales, the scale's verdicts, file) of a result's data set."""
    source = DERIVED[name][0] if name in DERIVED else name
    if source in FILES:
        path = data_dir / FILES[source]
        choices = (DERIVED[name][1] if name in DERIVED else dataset_spec(source)).scale.choices
        rows = load_jsonl(path)
    elif (scenario_dir / name).is_dir():
        spec, rows, _ = load_scenario(scenario_dir / name)
        path, choices = scenario_dir / name / "train.jsonl", spec.scale.choices
    else:
        return None
    return [r for r in rows if r.rationale], tuple(str(c) for c in choices), path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--scenario-dir", type=Path, required=True)
    ap.add_argument("--results", type=Path, required=True, help="folder of quality_*.json")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)

    sets: dict[str, Any] = {}
    seen: dict[tuple[str, str, str], dict[str, Any]] = {}
    for f in sorted(a.results.glob("quality_*.json")) + sorted(a.results.glob("judge_*.json")):
        try:
            result = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        name = result.get("dataset")
        if not isinstance(name, str) or not isinstance(result.get("seeds"), dict):
            continue
        if name not in sets:
            sets[name] = load_set(name, a.data_dir, a.scenario_dir)
        if sets[name] is None:
            continue
        for entry in (e for s in result["seeds"].values() for e in s["entries"].values()):
            system = "mlflow" if "mlflow" in str(entry.get("system", "")) else "ours"
            for text in guideline_texts(entry):
                row = seen.setdefault(
                    (name, system, text),
                    {"dataset": name, "system": system, "text": text, "files": []},
                )
                if f.name not in row["files"]:
                    row["files"].append(f.name)

    rows = list(seen.values())
    for row in rows:
        shown, verdicts, _ = sets[row["dataset"]]
        row["rejected"] = restates_case(row["text"], [], verdicts, shown)
    rejected = [r for r in rows if r["rejected"]]
    by_system = {
        s: {"guidelines": sum(r["system"] == s for r in rows),
            "rejected": sum(r["system"] == s and r["rejected"] for r in rows)}
        for s in ("ours", "mlflow")
    }  # fmt: skip
    data = {str(v[2].name): file_sha256(v[2]) for v in sets.values() if v}
    out = {
        "about": __doc__.split("\n\n")[0],
        "run_info": run_info(models={}, data=data),  # no model: the check is deterministic
        "by_system": by_system,
        "guidelines": rows,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"distinct guidelines stored in {a.results}: {len(rows)}; rejected now: {len(rejected)}")
    for s, c in by_system.items():
        print(f"  {s}: {c['rejected']} of {c['guidelines']}")
    for r in rejected:
        print(f"  rejected ({r['dataset']}, {r['system']}): {r['text'][:150]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
