"""Paired comparison of systems judged on the same test cases, across result files.

    python benchmarks/reports.py paired --md out.md --against unaligned \\
        unaligned=results/quality_prometheus_nofloor.json:unaligned@0 \\
        ours=results/quality_prometheus_nofloor.json:ours@10 \\
        mlflow=results/quality_prometheus.json:mlflow@10

Each point is NAME=FILE:ENTRY (or ENTRY/uncalibrated: the same judgments with the judge's
own scores where score calibration replaced them), taken from every seed the file has (seeds
pooled; the quality benchmark's test set is the same for every seed); points given the same
NAME pool their seeds (one seed a file, e.g. a second seed run with another --tag). FILE may
also be a result of `scale_wording.py` or of `judge_options.py`, ENTRY one of its variants
(one seed; the same split, so its cases pair with the quality benchmark's), or of
`verdict_note.py`, ENTRY `base` or `note` (those two experiments are in the git history:
`git log --all -- benchmarks/scale_wording.py`). Per point: accuracy with a Wilson 95% interval,
balanced accuracy, mean absolute error (numeric scales), weighted κ, the verdicts given
and tokens a judgment. Then, per point against `--against`, the paired
difference in accuracy and in absolute error over the cases both judged in the same seed,
with a bootstrap 95% interval (cases resampled): unlike two separate intervals, it
removes the variation between cases that both systems share. The table names its files
and their commits.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.datasets import dataset_spec
from quality import COLLAPSE_SHARE, wilson


def load(spec: str) -> tuple[str, str, dict[str, Any], list[tuple[int, dict[str, Any]]]]:
    name, _, rest = spec.partition("=")
    file, _, key = rest.rpartition(":")
    result = json.loads(Path(file).read_text())
    if "variants" in result:  # scale_wording.py or judge_options.py: a variant of one seed
        variant = result["variants"].get(key)
        if variant is None:
            raise SystemExit(f"{spec}: no variant {key!r} in {file}")
        ordinal = dataset_spec(result["dataset"]).scale.kind == "numeric"
        if "test" in variant:  # judge_options.py: the quality benchmark's metrics
            result = {**result, "ordinal": ordinal}
            return name, file, result, [(int(result.get("seed", 0)), variant)]
        labels = result["labels"]
        entry = {"test": {
            "predictions": [{"id": i, "judge": s, "human": labels[i]}
                            for i, s in variant["scores"].items()],
            "verdict_counts": variant["verdicts"],
        }}  # fmt: skip
        result = {**result, "ordinal": ordinal, "run_info": result.get("run", {})}
        return name, file, result, [(int(result.get("seed", 0)), entry)]
    # ENTRY/uncalibrated: the same judgments with the judge's own scores where score
    # calibration replaced them (quality.py records them; none replaced: the same test).
    key, _, view = key.partition("/")
    if view not in ("", "uncalibrated"):
        raise SystemExit(f"{spec}: unknown view {view!r} (only 'uncalibrated')")
    points = [(int(s), sd["entries"][key]) for s, sd in sorted(result["seeds"].items())
              if "test" in sd["entries"].get(key, {})]  # fmt: skip
    if view:
        points = [(s, {**e, "test": e["test"].get("uncalibrated", e["test"])}) for s, e in points]
    if not points:
        raise SystemExit(f"{spec}: no judged entry {key!r} in {file}")
    return name, file, result, points


def score(p: dict[str, Any], numeric: bool) -> tuple[float, float | None]:
    """(right or not, absolute error) of one prediction; a failure is wrong, without error."""
    right = float(p["judge"] is not None and str(p["judge"]) == str(p["human"]))
    if not numeric or p["judge"] is None:
        return right, None
    return right, abs(float(p["judge"]) - float(p["human"]))


def paired(a: dict[tuple[int, str], tuple[float, float | None]],
           b: dict[tuple[int, str], tuple[float, float | None]], which: int,
           n: int = 5000) -> tuple[float, float, float] | None:  # fmt: skip
    """Mean of a - b over shared cases, with a bootstrap 95% interval."""
    keys = sorted(k for k in a.keys() & b.keys()
                  if a[k][which] is not None and b[k][which] is not None)  # fmt: skip
    if not keys:
        return None
    diffs = [float(a[k][which]) - float(b[k][which]) for k in keys]  # type: ignore[arg-type]
    rng = random.Random(0)
    means = sorted(sum(rng.choice(diffs) for _ in diffs) / len(diffs) for _ in range(n))
    return sum(diffs) / len(diffs), means[int(0.025 * n)], means[int(0.975 * n) - 1]


def shown(diff: tuple[float, float, float] | None) -> str:
    """A paired difference with its interval, or a dash when no case is shared."""
    if diff is None:
        return "–"
    d, lo, hi = diff
    return f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def system_figures(points: list[tuple[int, dict[str, Any]]], numeric: bool, ordinal: bool
                   ) -> dict[str, Any]:  # fmt: skip
    """One system's figures over its pooled seeds: the per-case scores the paired
    differences are drawn from, accuracy with its Wilson interval, MAE, κ, the verdicts given
    and whether one verdict took COLLAPSE_SHARE (90%) or more of the cases, pooled and in
    which seeds."""
    cases = {(seed, p["id"]): score(p, numeric) for seed, e in points
             for p in e["test"]["predictions"]}  # fmt: skip
    right = sum(r for r, _ in cases.values())
    errors = [x for _, x in cases.values() if x is not None]
    tests = [e["test"] for _, e in points]
    verdicts: dict[str, int] = {}
    for t in tests:
        for v, c in t["verdict_counts"].items():
            verdicts[v] = verdicts.get(v, 0) + c

    def avg(k: str) -> float:
        xs = [t[k] for t in tests if t.get(k) is not None]
        return sum(xs) / len(xs) if xs else float("nan")  # nan: a figure the file lacks

    # Per seed as well as pooled: one seed's collapse must not hide behind another's spread
    # (feedbackqa seed 1 at 50 items gave "Bad" to 55 of 60, pooled 55 + 14 of 120). Each
    # result file records its own collapse (quality.py's `collapsed_to`).
    collapsed_seeds = [
        (seed, v, t["verdict_counts"][v], len(t["predictions"]))
        for seed, e in points
        if (v := (t := e["test"]).get("collapsed_to")) is not None
    ]
    top = max(verdicts.values(), default=0)
    return {
        "cases": cases,
        "seeds": [s for s, _ in points],
        "accuracy": right / len(cases),
        "ci": wilson(int(right), len(cases)),
        "balanced": avg("balanced_accuracy"),
        "mae": sum(errors) / len(errors) if numeric and errors else None,
        "kappa": avg("weighted_kappa") if ordinal else avg("kappa"),
        "verdicts": dict(sorted(verdicts.items(), key=lambda x: -x[1])),
        "collapsed": bool(cases) and top / len(cases) >= COLLAPSE_SHARE,
        "collapsed_seeds": collapsed_seeds,
        "tokens": avg("tokens_per_judgment"),
    }


def scale_kind(result: dict[str, Any]) -> tuple[bool, bool]:
    """(numeric, ordinal) of a result file's scale: weighted κ on ordered scales
    (feedbackqa's ratings are ordered too), MAE only on a numeric one, as the package's
    agreement report computes them."""
    ordinal = bool(result.get("ordinal"))
    return ordinal and (result.get("scale") or {}).get("kind", "numeric") == "numeric", ordinal


def load_all(specs: list[str]) -> dict[str, tuple[list[str], list[dict[str, Any]], list[Any]]]:
    """NAME -> (files, results, pooled points), points of the same NAME pooled."""
    loaded: dict[str, tuple[list[str], list[dict[str, Any]], list[Any]]] = {}
    for name, file, result, points in (load(s) for s in specs):
        files, results, pooled = loaded.setdefault(name, ([], [], []))
        files.append(file)
        results.append(result)
        pooled.extend(points)
    return loaded


def commits_of(result: dict[str, Any]) -> list[str]:
    """The commits a result file was measured at (a resumed run may name several)."""
    info = result.get("invocations") or result.get("run_info") or {}
    runs = info if isinstance(info, list) else [info]  # judge_options.py: a list
    return sorted({str(r.get("git_commit", "?"))[:7] for r in runs})


def write_report(lines: list[str], sources: list[str], md: str) -> None:
    """The table lines and the files they came from, written to `md` and printed."""
    text = "\n".join([*lines, "", "From: " + "; ".join(sources) + "."]) + "\n"
    Path(md).write_text(text)
    print(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("points", nargs="+", help="NAME=FILE:ENTRY")
    ap.add_argument("--against", required=True, help="the NAME the others are compared with")
    ap.add_argument("--md", required=True, help="where the Markdown table goes")
    ap.add_argument("--title", default="Paired comparison")
    args = ap.parse_args()
    loaded = load_all(args.points)
    numeric, ordinal = scale_kind(next(iter(loaded.values()))[1][0])
    per_case: dict[str, dict[tuple[int, str], tuple[float, float | None]]] = {}
    lines = [f"## {args.title}", ""]
    head = ["system", "seeds", "cases", "accuracy [95%]", "balanced", "MAE", "weighted κ",
            "verdicts", "tokens a judgment"]  # fmt: skip
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    sources = []
    for name, (files, results, points) in loaded.items():
        f = system_figures(points, numeric, ordinal)
        per_case[name] = f["cases"]

        def fmt(x: float, digits: int = 2) -> str:
            return "–" if x != x else f"{x:.{digits}f}"  # a figure the file does not have

        lo, hi = f["ci"]
        mae = "–" if f["mae"] is None else f"{f['mae']:.2f}"
        top = ", ".join(f"{v}: {c}" for v, c in f["verdicts"].items())
        lines.append(
            f"| {name} | {','.join(str(s) for s in f['seeds'])} | {len(f['cases'])} | "
            f"{f['accuracy']:.2f} [{lo:.2f}, {hi:.2f}] | {fmt(f['balanced'])} | "
            f"{mae} | {fmt(f['kappa'])} | {top} | {fmt(f['tokens'], 0)} |"
        )
        for file, result in zip(files, results, strict=True):
            sources.append(f"{name}: `{Path(file).name}` ({', '.join(commits_of(result))})")
    lines += ["", f"Paired against {args.against} (same cases, same seed; bootstrap 95%):", ""]
    lines += ["| system | cases | accuracy difference | absolute error difference |",
              "|---|---|---|---|"]  # fmt: skip
    base = per_case[args.against]
    for name, cases in per_case.items():
        if name == args.against:
            continue
        acc = shown(paired(cases, base, 0))
        err = shown(paired(cases, base, 1)) if numeric else "–"
        lines.append(f"| {name} | {len(cases.keys() & base.keys())} | {acc} | {err} |")
    write_report(lines, sources, args.md)
