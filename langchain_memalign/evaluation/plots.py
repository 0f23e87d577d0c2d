"""Drawing learning curves with matplotlib: the optional `[bench]` extra.

Kept apart from the library's core: nothing else imports matplotlib, and this
module only when a plot is asked for.
"""

from __future__ import annotations

import os
import statistics
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

from langchain_memalign.evaluation.learning_curve import LearningCurve, StageResult


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
    try:
        import matplotlib
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            'plotting needs matplotlib: pip install "langchain-memalign[bench]"'
        ) from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
