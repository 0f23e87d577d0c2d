"""Progress bars on stderr and text learning curves."""

from __future__ import annotations

import math
import sys
import time
from typing import TextIO

# -- progress ----------------------------------------------------------------------------------


class Progress:
    """A one-line progress bar on stderr: `label [#####.....] 12/40 30% 0:05`.

    Drawn only when enabled (by default: when the stream is a terminal).
    """

    def __init__(
        self, total: int, label: str, *, enabled: bool | None = None, stream: TextIO | None = None
    ) -> None:
        self.total = max(total, 0)
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.done = 0
        self.started = time.monotonic()
        self._draw()

    def advance(self, n: int = 1) -> None:
        """Count `n` more items done."""
        self.done = min(self.total, self.done + n)
        self._draw()

    def _draw(self, end: str = "") -> None:
        if not self.enabled:
            return
        width = 30
        filled = width * self.done // self.total if self.total else width
        pct = 100 * self.done // self.total if self.total else 100
        secs = int(time.monotonic() - self.started)
        bar = "#" * filled + "." * (width - filled)
        self.stream.write(
            f"\r{self.label} [{bar}] {self.done}/{self.total} {pct}% {secs // 60}:{secs % 60:02d}"
            + end
        )
        self.stream.flush()

    def close(self) -> None:
        """Finish the line."""
        self._draw(end="\n")

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def ascii_curve(points: dict[int, float], *, metric: str = "accuracy", width: int = 40) -> str:
    """A learning curve as a text bar chart: one row per feedback count."""
    lines = [f"  {'feedback':>8}  {metric:>9}"]
    values = [v for v in points.values() if not math.isnan(v)]
    low = min(0.0, *values) if values else 0.0
    high = max(1.0, *values) if values else 1.0
    for n, v in points.items():
        if math.isnan(v):
            lines.append(f"  {n:>8}  {'n/a':>9}")
            continue
        filled = round(width * (v - low) / (high - low)) if high > low else 0
        lines.append(f"  {n:>8}  {v:>9.3f}  " + "#" * filled + "." * (width - filled))
    return "\n".join(lines)
