"""Where we stand: every data set's systems in one table, each paired with ours.

    python benchmarks/reports.py standing --md results/standing.md \\
        --set halubench unaligned=R/quality_halubench.json:unaligned@0 \\
                        ours=R/quality_halubench_k5.json:ours@10 \\
                        mlflow=R/quality_halubench.json:mlflow@10 \\
        --set prometheus ...

Each `--set TITLE NAME=FILE:ENTRY ...` is one data set, its points read as `paired.py` reads
them (points of one NAME pool their seeds). Per system: cases, accuracy with its Wilson 95%
interval, MAE on numeric scales, whether one verdict took 90% or more of the cases (the
issue's collapse line), and its paired difference from `--against` (default `ours`) on the
cases both judged, with a bootstrap 95% interval. A difference is marked `beyond noise`
when its interval excludes zero. It reads result files only: no model call.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from paired import (
    commits_of,
    load_all,
    paired,
    scale_kind,
    shown,
    system_figures,
    write_report,
)


def beyond(diff: tuple[float, float, float] | None) -> str:
    """' (beyond noise)' when the interval excludes zero, else nothing."""
    return " **(beyond noise)**" if diff and (diff[1] > 0 or diff[2] < 0) else ""


def load_set(title: str, specs: list[str], against: str
             ) -> tuple[dict[str, Any], dict[str, dict[str, Any]], bool]:  # fmt: skip
    """One `--set`: its loaded points, each point's figures, and whether the scale is
    numeric; the point named `against` must be among them (the others pair with it)."""
    loaded = load_all(specs)
    if against not in loaded:
        raise SystemExit(f"{title}: no point named {against!r}")
    numeric, ordinal = scale_kind(next(iter(loaded.values()))[1][0])
    figures = {n: system_figures(pts, numeric, ordinal) for n, (_, _, pts) in loaded.items()}
    return loaded, figures, numeric


def collapse_flag(f: dict[str, Any]) -> str:
    """'no', or the verdict that took 90% or more of the cases (pooled, or in one seed)."""
    parts = []
    if f["collapsed"]:
        top = next(iter(f["verdicts"]))
        parts.append(f"{top} {f['verdicts'][top]} of {len(f['cases'])}")
    if 0 < len(f["collapsed_seeds"]) < len(f["seeds"]):  # some seeds only: say which
        parts += [f"seed {s}: {v} {c} of {n}" for s, v, c, n in f["collapsed_seeds"]]
    return "**yes**: " + "; ".join(parts) if parts else "no"


def set_sources(title: str, loaded: dict[str, Any]) -> list[str]:
    """'title/name: `file` (commits)' for every file a set's points came from."""
    return [
        f"{title}/{name}: `{Path(file).name}` ({', '.join(commits_of(result))})"
        for name, (files, results, _) in loaded.items()
        for file, result in zip(files, results, strict=True)
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--set", nargs="+", action="append", required=True, dest="sets",
                    metavar="TITLE NAME=FILE:ENTRY", help="a data set and its points")  # fmt: skip
    ap.add_argument("--against", default="ours", help="the NAME each set's others are paired with")
    ap.add_argument("--md", required=True, help="where the Markdown table goes")
    ap.add_argument("--title", default="Where we stand")
    args = ap.parse_args()
    head = ["data set", "system", "seeds", "cases", "accuracy [95%]", "MAE",
            "one verdict ≥ 90%", f"accuracy − {args.against} [95%]",
            f"error − {args.against} [95%]"]  # fmt: skip
    lines = [f"## {args.title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    sources: list[str] = []
    for title, *specs in args.sets:
        loaded, figures, numeric = load_set(title, specs, args.against)
        base = figures[args.against]["cases"]
        for name, f in figures.items():
            lo, hi = f["ci"]
            mae = "–" if f["mae"] is None else f"{f['mae']:.2f}"
            if name == args.against:
                acc = err = "(itself)"
            else:
                a, e = paired(f["cases"], base, 0), paired(f["cases"], base, 1)
                acc = shown(a) + beyond(a)
                err = shown(e) + beyond(e) if numeric else "–"
            seeds = ",".join(str(s) for s in f["seeds"])
            lines.append(
                f"| {title} | {name} | {seeds} | {len(f['cases'])} | "
                f"{f['accuracy']:.2f} [{lo:.2f}, {hi:.2f}] | {mae} | {collapse_flag(f)} | "
                f"{acc} | {err} |"
            )
        sources += set_sources(title, loaded)
    write_report(lines, sources, args.md)
