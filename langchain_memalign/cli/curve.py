"""`memalign show --curve`: is the judge getting better? Read from the memory, no model.

Prints the agreement series (`MemAlignJudge.agreement_history`) as a table of
windows of reviews, with a line where each align happened, and draws it as a PNG
(matplotlib, the optional `plot` extra).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from typing import Any

from langchain_memalign.cli.context import Context
from langchain_memalign.cli.io import echo
from langchain_memalign.cli.judge_file import EXIT_FAILED, EXIT_OK, CLIError
from langchain_memalign.errors import MemoryFormatError
from langchain_memalign.memory._config_checks import _stored_config
from langchain_memalign.memory.backends import open_store
from langchain_memalign.memory.location import describe_location
from langchain_memalign.prequential import AgreementHistory, AgreementWindow, history_of


def read_history(location: Any, window: int) -> AgreementHistory:
    """The agreement history of the memory at `location` (a folder or a URL), no model."""
    store = open_store(location, create=False)
    try:
        where = store.describe()
        stored = store.get_meta("config")
        if stored is None:
            raise MemoryFormatError(f"{where}: memory has no judge configuration")
        config = _stored_config(stored, where)
        return history_of(store.prequential(), config.scale, judge=config.name, window=window)
    finally:
        store.close()


def show_curve(ctx: Context) -> int:
    """Print the agreement series as a table and draw it as a PNG."""
    args = ctx.args
    location = ctx.memory()
    try:
        history = read_history(location, args.window)
    except MemoryFormatError as e:
        raise CLIError(str(e)) from e
    png = args.curve or f"{_file_name(history.judge)}-agreement.png"
    if args.json:
        echo(json.dumps(_as_json(history), ensure_ascii=False, indent=2, default=str))
    else:
        echo(f"Judge {history.judge!r} in {describe_location(location)}")
        for line in format_table(history):
            echo(line)
    if not history.points:
        return EXIT_OK  # nothing to draw
    try:
        from langchain_memalign.evaluation.plots import plot_agreement_history

        plot_agreement_history(history, png)
    except ImportError as e:
        raise CLIError(f"--curve: {e}", EXIT_FAILED) from e
    if not args.json:
        echo(f"Drawn to {png}")
    return EXIT_OK


def format_table(history: AgreementHistory) -> list[str]:
    """The windows as table rows, with a line after the window in which each align happened."""
    aligns = len(history.aligns)
    lines = [
        f"Agreement with the experts before learning each review: {len(history.points)} "
        f"review(s) in windows of {history.window}, {aligns} align(s)"
    ]
    if not history.points:
        lines.append(
            "  (no reviews recorded yet: they come from LangSmith reviews of runs the judge "
            "had judged, `memalign align --score-first`, or align(prior_verdicts=...))"
        )
        lines += [_align_line(a) for a in history.aligns]
        return lines
    numeric = history.scale.kind == "numeric"
    header = f"  {'reviews':>11}  {'n':>4}  {'accuracy':>8}  {'kappa':>6}"
    header += f"  {'MAE':>6}" if numeric else ""
    lines += [header + "  recorded", "  " + "-" * (len(header) + 30)]
    pending = [a for a in history.aligns if a.after == 0]
    lines += [_align_line(a) for a in pending]
    for w in history.windows:
        lines.append(_row(w, numeric))
        lines += [_align_line(a) for a in history.aligns if w.first <= a.after <= w.last]
    if history.overall is not None and len(history.windows) > 1:
        lines.append("  " + "-" * (len(header) + 30))
        lines.append(_row(history.overall, numeric, label="all"))
    return lines


def _row(w: AgreementWindow, numeric: bool, label: str | None = None) -> str:
    span = label or f"{w.first}-{w.last}"
    row = f"  {span:>11}  {w.count:>4}  {_fmt(w.accuracy, pct=True):>8}  {_fmt(w.kappa):>6}"
    row += f"  {_fmt(w.mae):>6}" if numeric else ""
    return f"{row}  {w.start[:16].replace('T', ' ')} .. {w.end[:16].replace('T', ' ')}"


def _align_line(a: Any) -> str:
    return (
        f"  -- align {a.number} after review {a.after}: learned {a.learned} item(s), "
        f"{a.at[:16].replace('T', ' ')}"
    )


def _fmt(x: float | None, *, pct: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x:.0%}" if pct else f"{x:.2f}"


def _file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "judge"


def _as_json(history: AgreementHistory) -> dict[str, Any]:
    out = asdict(history)
    out["scale"] = history.scale.model_dump(mode="json")
    out["metric"] = history.metric
    return out
