"""Learning curves: every data set's systems at 0, 10 and 50 feedback items, with intervals.

    python benchmarks/reports.py curves --md results/curves.md \\
        --img ../docs/img/quality_curves.png \\
        --set halubench ours@0=R/quality_halubench.json:unaligned@0 \\
                        ours@10=R/quality_halubench.json:ours@10 \\
                        ours@50=R/quality_halubench.json:ours@50 \\
                        mlflow@10=R/quality_halubench.json:mlflow@10 \\
        --set prometheus ...

Each `--set TITLE SYSTEM@STAGE=FILE:ENTRY ...` is one data set; each point is read as
`paired.py` reads it (points of one name pool their seeds). `ours@0` is the unaligned judge:
ours with an empty memory. Per point: seeds, test cases, accuracy with its Wilson 95%
interval, MAE on numeric scales, whether one verdict took 90% or more of the cases, seen
cases right with expert-verdict reuse off, tokens a judgment, and the paired difference from
`--against` (default `ours@0`, the unaligned judge) on the cases both judged, with a
bootstrap 95% interval, marked where it excludes zero. The figure (--img) draws accuracy
against feedback items, a panel a set, a line a system, with the Wilson bars. It reads
result files only: no model call.
"""

from __future__ import annotations

import argparse
from typing import Any

from paired import paired, shown, write_report
from standing import beyond, collapse_flag, load_set, set_sources


def stage_of(name: str) -> tuple[str, int]:
    """('ours', 10) from 'ours@10'; a name without a stage is refused (the curve needs one)."""
    system, sep, stage = name.rpartition("@")
    if not sep or not system or not stage.isdigit():
        raise SystemExit(f"{name!r}: a curve point is named SYSTEM@STAGE, e.g. ours@10")
    return system, int(stage)


def seen_right(points: list[tuple[int, dict[str, Any]]]) -> tuple[int, int] | None:
    """Seen cases judged right and judged, over the pooled seeds (None: none were judged)."""
    seen = [e["seen"] for _, e in points if e.get("seen")]
    if not seen:
        return None
    return sum(int(s["correct"]) for s in seen), sum(int(s["n"]) for s in seen)


def plot(panels: list[tuple[str, dict[str, list[tuple[int, float, float, float]]]]],
         path: str) -> None:  # fmt: skip
    """A panel a set; per system its (stage, accuracy, low, high) points joined in order."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig, grid = plt.subplots(rows, cols, figsize=(3.4 * cols, 3.0 * rows + 0.5), squeeze=False)
    axes = list(grid.flat)  # filled row by row
    for spare in axes[len(panels) :]:
        spare.set_visible(False)
    systems = sorted({s for _, lines in panels for s in lines}, key=lambda s: (s != "ours", s))
    colours = {s: f"C{i}" for i, s in enumerate(systems)}  # one colour a system on every panel
    for ax, (title, lines) in zip(axes, panels, strict=False):
        width = max((x for pts in lines.values() for x, *_ in pts), default=1) or 1
        for i, system in enumerate(systems):
            pts = sorted(lines.get(system, []))
            if not pts:
                continue
            # A small sideways shift per system, so that bars at one stage do not hide each other.
            shift = (i - (len(systems) - 1) / 2) * 0.02 * width
            ax.errorbar([x + shift for x, *_ in pts], [y for _, y, _, _ in pts],
                        yerr=[[y - lo for _, y, lo, _ in pts], [hi - y for _, y, _, hi in pts]],
                        marker="o", capsize=3, color=colours[system], label=system)  # fmt: skip
        ax.set_title(title)
        ax.set_xlabel("feedback items")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    for row in grid:
        row[0].set_ylabel("test accuracy (Wilson 95%)")
    handles = {h.get_label(): h for ax in axes for h in ax.get_legend_handles_labels()[0]}
    fig.legend([handles[s] for s in systems if s in handles], [s for s in systems if s in handles],
               loc="lower center", ncol=len(systems), fontsize="small")  # fmt: skip
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--set", nargs="+", action="append", required=True, dest="sets",
                    metavar="TITLE SYSTEM@STAGE=FILE:ENTRY",
                    help="a data set and its points")  # fmt: skip
    ap.add_argument(
        "--against", default="ours@0", help="the point each set's others are paired with"
    )
    ap.add_argument("--md", required=True, help="where the Markdown table goes")
    ap.add_argument("--img", help="where the figure goes (PNG)")
    ap.add_argument("--title", default="Learning curves")
    args = ap.parse_args()
    head = ["data set", "system", "feedback items", "seeds", "cases", "accuracy [95%]", "MAE",
            "one verdict ≥ 90%", "seen right (reuse off)", "tokens a judgment",
            f"accuracy − {args.against} [95%]"]  # fmt: skip
    lines = [f"## {args.title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    sources: list[str] = []
    panels = []
    for title, *specs in args.sets:
        loaded, figures, _ = load_set(title, specs, args.against)
        base = figures[args.against]["cases"]
        curve: dict[str, list[tuple[int, float, float, float]]] = {}
        for name in sorted(figures, key=lambda n: (stage_of(n)[0] != "ours", stage_of(n))):
            f = figures[name]
            system, stage = stage_of(name)
            lo, hi = f["ci"]
            curve.setdefault(system, []).append((stage, f["accuracy"], lo, hi))
            mae = "–" if f["mae"] is None else f"{f['mae']:.2f}"
            seen = seen_right(loaded[name][2])
            seen_s = "–" if seen is None else f"{seen[0]}/{seen[1]}"
            tokens = "–" if f["tokens"] != f["tokens"] else f"{f['tokens']:.0f}"
            diff = paired(f["cases"], base, 0)
            acc = "(itself)" if name == args.against else shown(diff) + beyond(diff)
            seeds = ",".join(str(s) for s in f["seeds"])
            lines.append(
                f"| {title} | {system} | {stage} | {seeds} | {len(f['cases'])} | "
                f"{f['accuracy']:.2f} [{lo:.2f}, {hi:.2f}] | {mae} | {collapse_flag(f)} | "
                f"{seen_s} | {tokens} | {acc} |"
            )
        panels.append((title, curve))
        sources += set_sources(title, loaded)
    write_report(lines, sources, args.md)
    if args.img:
        plot(panels, args.img)
