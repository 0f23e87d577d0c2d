"""Drawing learning curves with matplotlib: the optional `[plot]` extra.

Kept apart from the library's core: nothing else imports matplotlib, and this
module only when a plot is asked for.
"""

from __future__ import annotations

import os
import statistics
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from langchain_memalign.evaluation.learning_curve import LearningCurve, StageResult
from langchain_memalign.prequential import AgreementHistory

__all__ = ["plot_agreement_history", "plot_curves"]

INSTALL_HINT = 'pip install "langchain-memalign[plot]"'
# Past this many aligns their labels would overlap: the lines stay, the legend names them.
_LABELLED_ALIGNS = 12


def _pyplot() -> Any:
    """Matplotlib's pyplot on the non-interactive Agg backend, or an ImportError to install it."""
    try:
        import matplotlib
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(f"plotting needs matplotlib: {INSTALL_HINT}") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(
    curves: Mapping[str, LearningCurve],
    path: str | os.PathLike[str],
    *,
    metric: str = "accuracy",
    title: str | None = None,
) -> Path:
    """Draw one or more learning curves as a PNG and return its path.

    Left: `metric` on the test set (solid, mean with min-max band over seeds)
    and on the feedback seen so far (dashed). Right: cumulative alignment
    seconds and LLM calls. Uses matplotlib's non-interactive Agg backend.
    """
    plt = _pyplot()
    fig, (ax, ax_cost) = plt.subplots(1, 2, figsize=(11, 4.2))
    ax_calls = ax_cost.twinx()
    for i, (label, curve) in enumerate(curves.items()):
        color = f"C{i}"
        for split, style in (("test", "-"), ("seen", "--")):
            series = curve.series(metric, split)
            if not series:
                continue
            xs = list(series)
            means = [statistics.fmean(v) for v in series.values()]
            ax.plot(xs, means, style, marker="o", color=color, label=f"{label} ({split})")
            if split == "test" and any(len(v) > 1 for v in series.values()):
                ax.fill_between(
                    xs,
                    [min(v) for v in series.values()],
                    [max(v) for v in series.values()],
                    color=color,
                    alpha=0.15,
                )
        by_n: dict[int, list[StageResult]] = defaultdict(list)
        for st in curve.stages:
            by_n[st.n_feedback].append(st)
        xs = sorted(by_n)
        secs = [statistics.fmean(s.cumulative_align_seconds for s in by_n[n]) for n in xs]
        calls = [statistics.fmean(s.cumulative_align_usage.llm_calls for s in by_n[n]) for n in xs]
        ax_cost.plot(xs, secs, "-", marker="s", color=color, label=f"{label} seconds")
        ax_calls.plot(xs, calls, ":", marker="^", color=color, label=f"{label} LLM calls")
    ax.set_xlabel("feedback aligned")
    ax.set_ylabel(metric)
    ax.set_title(title or f"{metric} vs. feedback")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax_cost.set_xlabel("feedback aligned")
    ax_cost.set_ylabel("cumulative alignment seconds")
    ax_calls.set_ylabel("cumulative alignment LLM calls")
    ax_cost.set_title("alignment cost")
    ax_cost.grid(alpha=0.3)
    lines = ax_cost.get_legend_handles_labels()
    more = ax_calls.get_legend_handles_labels()
    ax_cost.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="upper left")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def plot_agreement_history(history: AgreementHistory, path: str | os.PathLike[str]) -> Path:
    """Draw a judge's agreement history as a PNG and return its path.

    x: the reviews in the order they arrived. Each window of reviews is a point at
    its middle: accuracy and Cohen's kappa on label scales (higher is better), mean
    absolute error on numeric ones (lower is better; accuracy and kappa on a second
    axis for integer scores). A dashed vertical line marks each align, between the
    last review it came after and the next one, labelled with the items it learned.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 5.2))
    windows = history.windows
    mids = [(w.first + w.last) / 2 for w in windows]
    numeric = history.scale.kind == "numeric"
    n = len(history.points)
    handles: list[Any] = []
    if numeric:
        ax.set_ylabel("mean absolute error (lower is better)")
        handles += ax.plot(
            mids, [w.mae for w in windows], "-o", color="C3", label="mean absolute error"
        )
        ax.set_ylim(bottom=0)
        rates = ax.twinx() if any(w.accuracy is not None for w in windows) else None
    else:
        rates = ax
    if rates is not None:
        rates.set_ylabel("agreement with the experts (1 = always)")
        low = min([-0.05] + [w.kappa - 0.05 for w in windows if w.kappa is not None])
        rates.set_ylim(low, 1.05)
        handles += rates.plot(
            mids, [w.accuracy for w in windows], "-o", color="C0",
            label=f"accuracy: share of reviews agreed (a point per {history.window} reviews)",
        )  # fmt: skip
        if any(w.kappa is not None for w in windows):
            handles += rates.plot(
                mids,
                [w.kappa for w in windows],
                "--s",
                color="C2",
                label="Cohen's kappa: agreement beyond chance",
            )
        for w, x in zip(windows, mids, strict=True):
            if w.count < history.window and w.accuracy is not None:
                rates.annotate(
                    f"{w.count} reviews", (x, w.accuracy), textcoords="offset points",
                    xytext=(0, 8), ha="center", fontsize=8, color="C0",
                )  # fmt: skip
    align_line = None
    for a in history.aligns:
        align_line = ax.axvline(a.after + 0.5, color="0.45", linestyle=":", linewidth=1.2)
        if len(history.aligns) <= _LABELLED_ALIGNS:
            ax.annotate(
                f"align {a.number} (+{a.learned})", (a.after + 0.5, 1.0),
                xycoords=("data", "axes fraction"), xytext=(3, -4), textcoords="offset points",
                rotation=90, va="top", ha="left", fontsize=8, color="0.3",
                bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8},
            )  # fmt: skip
    if align_line is not None:
        align_line.set_label("align (+ items it learned)")
        handles.append(align_line)
    ax.set_xlim(0.5, max(n, 1) + 1)  # room for an align after the last review
    ax.set_xlabel("reviews, in the order they arrived (each graded before the judge learned it)")
    ax.set_title(
        f"Is judge {history.judge!r} getting better? Agreement with each review before "
        f"learning it\n{n} reviews, {len(history.aligns)} aligns",
        fontsize=11,
    )
    ax.grid(alpha=0.3)
    ax.legend(handles=handles, fontsize=8, loc="best", framealpha=0.9)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
