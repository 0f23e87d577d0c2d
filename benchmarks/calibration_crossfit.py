"""Would score calibration help on this scale? Fit on one seed's judgments, apply to another's.

No model call: it reads the test predictions that `quality.py` recorded for one system on
two seeds (different test cases, the same judge), fits the package's calibration rule
(`ScoreCalibration.fit`: remap a judge score to the experts' most frequent one where at
least 3 cases say so by a margin of 2) on each seed's (judge, expert) pairs and applies it
to the other seed's judgments. The package fits on seen cases graded as unseen instead;
this is the cheapest test of whether the rule carries from one set of cases to another,
and what chose the scales it is on for (docs/benchmarks.md, fifteenth session).

    python benchmarks/calibration_crossfit.py --out results/calibration_crossfit.json \\
        --md results/calibration_crossfit.md \\
        prometheus=results/quality_prometheus_s10.json:unaligned@0,results/quality_prometheus_s11seed1.json:unaligned@0

Each point is NAME=FILE:ENTRY,FILE:ENTRY (one seed each, the first file's first seed and
the second file's last seed). Labels of bool, categorical and pairwise scales are mapped to
their positions so the same rule applies.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from paired import commits_of
from provenance import run_info

from langchain_memalign.memory.calibration import CalibrationPair, ScoreCalibration


def load(spec: str, *, last: bool) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
    file, _, key = spec.rpartition(":")
    result = json.loads(Path(file).read_text())
    seeds = sorted(s for s, sd in result["seeds"].items() if "test" in sd["entries"].get(key, {}))
    if not seeds:
        raise SystemExit(f"{spec}: no judged entry {key!r}")
    seed = seeds[-1] if last else seeds[0]
    return seed, result["seeds"][seed]["entries"][key]["test"]["predictions"], result


def positions(*prediction_sets: list[dict[str, Any]]) -> dict[str, int]:
    """Every label seen, as a number (numbers stay themselves; others by first appearance)."""
    labels = [json.dumps(v) for ps in prediction_sets for p in ps for v in (p["human"], p["judge"])
              if v is not None]  # fmt: skip
    if all(isinstance(json.loads(v), int) and not isinstance(json.loads(v), bool)
           for v in labels):  # fmt: skip
        return {v: json.loads(v) for v in labels}
    return {v: i for i, v in enumerate(dict.fromkeys(labels))}


def crossfit(fit_on: list[dict[str, Any]], apply_to: list[dict[str, Any]],
             pos: dict[str, int]) -> dict[str, Any]:  # fmt: skip
    cal = ScoreCalibration.fit(
        CalibrationPair(p["id"], pos[json.dumps(p["judge"])], pos[json.dumps(p["human"])])
        for p in fit_on if p["judge"] is not None
    )  # fmt: skip
    before = after = 0
    for p in apply_to:
        if p["judge"] is None:
            continue
        human, judged = pos[json.dumps(p["human"])], pos[json.dumps(p["judge"])]
        before += judged == human
        after += cal.apply(judged)[0] == human
    name = {v: k for k, v in pos.items()}
    return {
        "n": len(apply_to),
        "correct_before": before,
        "correct_after": after,
        "mapping": {name[a]: name[b] for a, b in sorted(cal.mapping.items())},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("points", nargs="+", help="NAME=FILE:ENTRY,FILE:ENTRY")
    ap.add_argument("--out", required=True)
    ap.add_argument("--md", required=True)
    args = ap.parse_args()
    rows, sources = [], []
    for spec in args.points:
        name, _, rest = spec.partition("=")
        first, _, second = rest.partition(",")
        sa, pa, ra = load(first, last=False)
        sb, pb, rb = load(second, last=True)
        pos = positions(pa, pb)
        for fit_seed, fit_on, app_seed, apply_to in [(sa, pa, sb, pb), (sb, pb, sa, pa)]:
            rows.append({"set": name, "fit_on_seed": fit_seed, "applied_to_seed": app_seed,
                         **crossfit(fit_on, apply_to, pos)})  # fmt: skip
        sources.append(f"{name}: `{Path(first).name}` ({', '.join(commits_of(ra))}), "
                       f"`{Path(second).name}` ({', '.join(commits_of(rb))})")  # fmt: skip
    lines = [
        "# Score calibration fitted on one seed's judgments, applied to another's",
        "",
        "| set | fitted on seed | applied to seed | correct before | after | change | remapping |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        change = r["correct_after"] - r["correct_before"]
        mapping = ", ".join(f"{a} -> {b}" for a, b in r["mapping"].items()) or "none"
        lines.append(
            f"| {r['set']} | {r['fit_on_seed']} | {r['applied_to_seed']} | "
            f"{r['correct_before']} of {r['n']} | {r['correct_after']} | {change:+d} | {mapping} |"
        )
    lines += ["", "From: " + "; ".join(sources) + "."]
    Path(args.md).write_text("\n".join(lines) + "\n")
    Path(args.out).write_text(json.dumps(
        {"rows": rows, "sources": args.points, "run": run_info(models={}, data={})}, indent=2
    ) + "\n")  # fmt: skip
    print("\n".join(lines))


if __name__ == "__main__":
    main()
