"""Turn quality result files (benchmarks/quality.py) into Markdown tables and PNG curves.

    python benchmarks/quality_report.py benchmarks/results/quality/quality_*.json \\
        --md benchmarks/results/quality/quality.md --img-dir docs/img

Per data set: one PNG `quality_<dataset>.png` (test accuracy vs. training feedback per
system, seeds pooled, with Wilson 95% interval bars; right: balanced accuracy with
bootstrap 95% bars), and in the Markdown: a table of every system and stage (accuracy and
balanced accuracy with intervals, per-label accuracy, collapse, κ / weighted κ / CCC / MAE,
seen-case accuracy, alignment and judging cost), the run-to-run noise of identical
unaligned runs, the verdicts ours vs. unaligned and ours vs. MLflow at the last stage, and
the guidelines of the last stage (text, sources, validation). Every table names the
result file, commit and data checksums it comes from.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from quality import bootstrap, wilson

ORDER = ["unaligned", "few_shot", "ours", "mlflow"]


def system_order(name: str) -> tuple[int, str]:
    if name in ORDER:
        return ORDER.index(name), name
    return (len(ORDER) if name.startswith("ours_no_") else len(ORDER) + 1), name


def fmt(x: Any, digits: int = 2) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def mean(xs: list[Any]) -> float | None:
    xs = [x for x in xs if isinstance(x, int | float)]
    return statistics.fmean(xs) if xs else None


def entries(result: dict[str, Any]) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """(system, stage) -> that point's entries over seeds (first run of repeats only)."""
    out: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for seed, sd in sorted(result["seeds"].items()):
        for e in sd["entries"].values():
            if "test" in e and not e.get("repeat"):
                out[(e["system"], int(e["stage"]))].append({**e, "seed": int(seed)})
    return out


def pooled(es: list[dict[str, Any]], part: str = "test") -> dict[str, Any]:
    """Seeds pooled: accuracy with a Wilson interval, balanced accuracy with a bootstrap one."""
    preds = [p for e in es if e.get(part) for p in e[part]["predictions"]]
    n = len(preds)
    if not n:
        return {"n": 0}
    pairs = [(json.dumps(p["human"]), p["judge"] == p["human"]) for p in preds]
    k = sum(ok for _, ok in pairs)
    by: dict[str, list[bool]] = defaultdict(list)
    for lab, ok in pairs:
        by[lab].append(ok)
    return {
        "n": n,
        "accuracy": k / n,
        "ci": wilson(k, n),
        "balanced": statistics.fmean(sum(v) / len(v) for v in by.values()),
        "balanced_ci": bootstrap(pairs),
        "per_label": {lab: sum(v) / len(v) for lab, v in sorted(by.items())},
    }


def dataset_table(result: dict[str, Any], path: str) -> list[str]:
    ri = result["run_info"]
    name = result["dataset"]
    seeds = sorted(result["seeds"])
    sp = result["seeds"][seeds[0]]["split"] if seeds else {}
    lines = [
        f"### {name}",
        "",
        f"Result file `{path}`; commit `{ri.get('git_commit', '')[:10]}`"
        + (" (with local edits)" if ri.get("package_modified_files") else "")
        + f"; models {ri.get('models')}; seeds {', '.join(seeds)}; training pool "
        f"{len(sp.get('train_ids', []))}, test {len(sp.get('test_ids', []))} per seed "
        f"(test labels {sp.get('test_labels')}); data sha256 "
        + ", ".join(f"{k} `{v[:12]}`" for k, v in ri.get("data_sha256", {}).items())
        + ".",
        "",
        "| system | feedback | n | accuracy [95% CI] | balanced acc. [95% CI] | per label | "
        "collapsed | κ | weighted κ | CCC | MAE | seen acc. (reuse off) | align calls | "
        "align tokens | align s | judge tokens/judgment | judge s/judgment |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    pts = entries(result)
    for (system, stage), es in sorted(
        pts.items(), key=lambda kv: (system_order(kv[0][0]), kv[0][1])
    ):
        p = pooled(es)
        seen = pooled(es, "seen")
        tests = [e["test"] for e in es]
        collapsed = sum(1 for t in tests if t.get("collapsed"))
        aligns = [e.get("align") or {} for e in es]
        aligned = stage > 0 and any(aligns)
        cum = [a.get("cumulative_usage") or a for a in aligns]
        calls = mean([c.get("llm_calls") for c in cum])
        tokens = mean([(c.get("input_tokens") or 0) + (c.get("output_tokens") or 0) for c in cum])
        secs = mean([a.get("cumulative_seconds", a.get("seconds")) for a in aligns])
        per_label = ", ".join(f"{k}: {v:.2f}" for k, v in p.get("per_label", {}).items())
        few = ""
        if system == "few_shot":
            few = f" ({', '.join(str(e.get('examples_in_prompt')) for e in es)} in prompt)"
        lines.append(
            f"| {system} | {stage}{few} | {p['n']} | {fmt(p.get('accuracy'))} "
            f"[{fmt(p['ci'][0])}, {fmt(p['ci'][1])}] | {fmt(p.get('balanced'))} "
            f"[{fmt(p['balanced_ci'][0])}, {fmt(p['balanced_ci'][1])}] | {per_label} | "
            f"{collapsed}/{len(tests)} | {fmt(mean([t.get('kappa') for t in tests]))} | "
            f"{fmt(mean([t.get('weighted_kappa') for t in tests]))} | "
            f"{fmt(mean([t.get('ccc') for t in tests]))} | "
            f"{fmt(mean([t.get('mae') for t in tests]))} | "
            f"{fmt(seen.get('accuracy')) if seen.get('n') else '–'} | "
            f"{fmt(calls, 0) if aligned else '–'} | {fmt(tokens, 0) if aligned else '–'} | "
            f"{fmt(secs, 0) if aligned else '–'} | "
            f"{fmt(mean([t.get('tokens_per_judgment') for t in tests]), 0)} | "
            f"{fmt(mean([t.get('seconds_per_judgment') for t in tests]), 1)} |"
        )
    lines += ["", *noise_lines(result), "", *verdict_lines(result, pts), ""]
    return lines


def noise_lines(result: dict[str, Any]) -> list[str]:
    """Identical unaligned runs: accuracy of each and the share of verdicts that changed."""
    out = []
    for seed, sd in sorted(result["seeds"].items()):
        runs = sorted(
            (e for e in sd["entries"].values() if e.get("system") == "unaligned" and "test" in e),
            key=lambda e: e.get("repeat", 0),
        )
        if len(runs) < 2:
            continue
        first = {p["id"]: p["judge"] for p in runs[0]["test"]["predictions"]}
        flips = []
        for r in runs[1:]:
            preds = r["test"]["predictions"]
            flips.append(sum(first.get(p["id"]) != p["judge"] for p in preds) / len(preds))
        accs = [r["test"]["accuracy"] for r in runs]
        out.append(
            f"- seed {seed}: {len(runs)} identical unaligned runs, accuracy "
            f"{', '.join(fmt(a) for a in accs)} (spread {fmt(max(accs) - min(accs))}); "
            f"verdicts changed vs. the first run: {', '.join(fmt(f) for f in flips)}"
        )
    if out:
        out.insert(0, "Run-to-run noise (same judge, same test set, same servers):")
    return out


def verdict_lines(result: dict[str, Any], pts: dict[tuple[str, int], list[dict]]) -> list[str]:
    stages = sorted({st for (s, st) in pts if s == "ours"})
    if not stages:
        return []
    last = stages[-1]
    ours = pooled(pts[("ours", last)])
    out = [f"At {last} feedback items (seeds pooled):"]
    for other, stage in (("unaligned", 0), ("mlflow", last), ("few_shot", last)):
        if (other, stage) not in pts:
            continue
        o = pooled(pts[(other, stage)])
        d = ours["accuracy"] - o["accuracy"]
        overlap = not (ours["ci"][0] > o["ci"][1] or o["ci"][0] > ours["ci"][1])
        out.append(
            f"- ours {fmt(ours['accuracy'])} vs. {other} {fmt(o['accuracy'])}: "
            f"{'+' if d >= 0 else ''}{fmt(d)} (balanced {fmt(ours['balanced'] - o['balanced'])}); "
            f"intervals {'overlap' if overlap else 'do not overlap'}"
        )
    return out


def noise(result: dict[str, Any]) -> float | None:
    """The largest accuracy difference between identical unaligned runs of one seed."""
    spreads = []
    for sd in result["seeds"].values():
        accs = [
            e["test"]["accuracy"]
            for e in sd["entries"].values()
            if e.get("system") == "unaligned" and "test" in e
        ]
        if len(accs) >= 2:
            spreads.append(max(accs) - min(accs))
    return max(spreads) if spreads else None


def summary_row(result: dict[str, Any]) -> str:
    """One data set at its last stage: the systems side by side and the issue's checks."""
    pts = entries(result)
    stages = sorted({st for (s, st) in pts if s == "ours"})
    if not stages:
        return ""
    last = stages[-1]

    def acc(system: str, stage: int) -> float | None:
        es = pts.get((system, stage))
        return pooled(es)["accuracy"] if es else None

    un, ours, ml = acc("unaligned", 0), acc("ours", last), acc("mlflow", last)
    few = acc("few_shot", last)
    nz = noise(result)
    if un is None or ours is None:
        vs_un = "–"
    elif nz is None:
        vs_un = f"{ours - un:+.2f} (noise not measured)"
    else:
        verdict = (
            "better beyond noise" if ours - un > nz
            else "WORSE beyond noise" if un - ours > nz
            else "within noise"
        )  # fmt: skip
        vs_un = f"{ours - un:+.2f} ({verdict})"
    vs_ml = "–" if ml is None or ours is None else f"{ours - ml:+.2f}"
    collapsed = sorted(
        {f"{s}@{st}" for (s, st), es in pts.items() if s != "unaligned"
         for e in es if e["test"].get("collapsed")}
    )  # fmt: skip
    return (
        f"| {result['dataset']} | {last} | {fmt(un)} | {fmt(few)} | {fmt(ours)} | {fmt(ml)} | "
        f"{fmt(nz)} | {vs_un} | {vs_ml} | {', '.join(collapsed) or 'none'} |"
    )


def guideline_lines(result: dict[str, Any]) -> list[str]:
    out = [f"### {result['dataset']}: guidelines at the last stage", ""]
    for seed, sd in sorted(result["seeds"].items()):
        by_system: dict[str, dict[str, Any]] = {}
        for e in sd["entries"].values():
            if "guidelines" in e and "test" in e:
                prev = by_system.get(e["system"])
                if prev is None or e["stage"] > prev["stage"]:
                    by_system[e["system"]] = e
        for system in sorted(by_system, key=system_order):
            e = by_system[system]
            gs = e.get("guidelines") or []
            rejected = sum(
                len((x.get("align") or {}).get("rejected") or [])
                for x in sd["entries"].values()
                if x.get("system") == system
            )
            out.append(
                f"- seed {seed}, {system} at {e['stage']}: {len(gs)} guidelines"
                + (f", {rejected} proposals rejected over the stages" if rejected else "")
            )
            for g in gs:
                v = g.get("validation") or {}
                check = (
                    f" — validation: {v.get('action')}, fixed {len(v.get('fixed') or [])}, "
                    f"broken {len(v.get('broken') or [])}"
                    if v
                    else ""
                )
                src = ", ".join(map(str, g.get("sources") or []))
                out.append(f"  - {g.get('text')!r} ← [{src}]{check}")
    return [*out, ""]


def scenario_lines(result: dict[str, Any], path: str) -> list[str]:
    """A `scenario.py` result: the scenario as a new user meets it, per repetition."""
    s, ri = result["summary"], result.get("run") or {}
    n_tr, n_te = result["n_train"], result["n_test"]
    return [
        f"### {result['scenario']} (scenario.py, {len(s['unaligned_test'])} identical runs)",
        "",
        f"Result file `{path}`; commit `{ri.get('git_commit', '')[:10]}`; "
        f"{n_tr} training cases with rationales, {n_te} test cases.",
        "",
        "| run | unaligned test | aligned test | seen, reuse off | guidelines after "
        "unaligning one source | align LLM calls |",
        "|---|---|---|---|---|---|",
        *(
            f"| {i + 1} | {u}/{n_te} | {a}/{n_te} | {z}/{n_tr} | {g} | {c} |"
            for i, (u, a, z, g, c) in enumerate(
                zip(
                    s["unaligned_test"],
                    s["aligned_test"],
                    s["aligned_seen"],
                    s["guidelines_after_unalign"],
                    s["align_llm_calls"],
                    strict=False,
                )
            )
        ),
        "",
    ]


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = entries(result)
    systems = sorted({s for s, _ in pts}, key=system_order)
    stages = sorted({st for _, st in pts})
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4))
    collapsed_drawn = False
    for i, system in enumerate(systems):
        xs, ys, lo, hi, bs, blo, bhi = [], [], [], [], [], [], []
        cx, cy = [], []  # points where a seed's judge collapsed to one verdict
        for st in stages:
            if (system, st) not in pts and not (st == 0 and ("unaligned", 0) in pts):
                continue
            # Every aligned system starts at the unaligned judge (stage 0 is no feedback).
            own = (system, st) in pts
            p = pooled(pts[(system, st)] if own else pts[("unaligned", 0)])
            # Small offsets keep the interval bars apart; a borrowed point has no bar.
            xs.append(st + (i - len(systems) / 2) * 0.012 * max(stages[-1], 1))
            ys.append(p["accuracy"])
            if own and any(e["test"].get("collapsed") for e in pts[(system, st)]):
                cx.append(xs[-1])
                cy.append(p["accuracy"])
            lo.append(p["accuracy"] - p["ci"][0] if own else 0)
            hi.append(p["ci"][1] - p["accuracy"] if own else 0)
            bs.append(p["balanced"])
            blo.append(p["balanced"] - (p["balanced_ci"][0] or p["balanced"]) if own else 0)
            bhi.append((p["balanced_ci"][1] or p["balanced"]) - p["balanced"] if own else 0)
        if not xs:
            continue
        style = "-" if not system.startswith("ours_no_") else ":"
        width = 2.2 if system == "ours" else 1.2
        kw = {"marker": "o", "capsize": 3, "linestyle": style, "linewidth": width,
              "color": f"C{i}", "label": system}  # fmt: skip
        if system == "unaligned" and len(xs) == 1:
            for ax, y in ((axes[0], ys[0]), (axes[1], bs[0])):
                ax.axhline(y, color=f"C{i}", linestyle="--", linewidth=1)
        axes[0].errorbar(xs, ys, yerr=[lo, hi], **kw)
        axes[1].errorbar(xs, bs, yerr=[blo, bhi], **kw)
        if cx:
            lab = "collapsed (>=90% one verdict)" if not collapsed_drawn else None
            axes[0].scatter(cx, cy, marker="x", s=90, color="black", zorder=5, label=lab)
            collapsed_drawn = True
    n = (pooled(pts[("unaligned", 0)]) if ("unaligned", 0) in pts else {}).get("n")
    for ax, title in ((axes[0], "test accuracy (Wilson 95%)"),
                      (axes[1], "balanced accuracy (bootstrap 95%)")):  # fmt: skip
        ax.set_xlabel("training feedback aligned")
        ax.set_xticks(stages)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.set_title(f"{result['dataset']}: {title}, n={n} (seeds pooled)", fontsize=9)
    axes[1].legend(fontsize=7, loc="best")
    if collapsed_drawn:
        axes[0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--md", required=True, help="the Markdown tables")
    ap.add_argument("--img-dir", required=True, help="where quality_<dataset>.png go")
    ap.add_argument("--no-guidelines", action="store_true")
    args = ap.parse_args(argv)
    md = ["## Quality: learning curves side by side", ""]
    summary = [
        "| data set | feedback | unaligned | few-shot | ours | MLflow | run-to-run noise | "
        "ours − unaligned | ours − MLflow | aligned judges that collapsed (any seed) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    guides: list[str] = []
    drawn: set[Path] = set()
    for f in args.files:
        if not Path(f).exists():
            print(f"skipped (missing): {f}", file=sys.stderr)
            continue
        result = json.loads(Path(f).read_text(encoding="utf-8"))
        if "scenario" in result and "summary" in result:
            md += scenario_lines(result, f)
            continue
        if not result.get("seeds"):
            continue
        png = Path(args.img_dir) / f"quality_{result['dataset']}.png"
        if png in drawn:  # two result files of one data set (e.g. smoke runs)
            png = png.with_name(f"quality_{result['dataset']}_{Path(f).parent.name}.png")
        drawn.add(png)
        plot(result, png)
        rel = os.path.relpath(png, Path(args.md).parent)
        md += [*dataset_table(result, f), f"![{result['dataset']}]({rel})", ""]
        row = summary_row(result)
        if row:
            summary.append(row)
        guides += guideline_lines(result)
    md[2:2] = [
        "Test accuracy at the last stage (seeds pooled). Noise: the largest accuracy "
        "difference between identical unaligned runs (--repeat-identical).",
        "",
        *summary,
        "",
    ]
    if not args.no_guidelines:
        md += ["## Guidelines learned", "", *guides]
    Path(args.md).parent.mkdir(parents=True, exist_ok=True)
    Path(args.md).write_text("\n".join(md) + "\n", encoding="utf-8")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
