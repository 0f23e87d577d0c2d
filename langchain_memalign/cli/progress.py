"""Progress bars on stderr and text learning curves."""

from __future__ import annotations

import math
import sys
import threading
import time
from typing import TextIO

# -- progress ----------------------------------------------------------------------------------


class Progress:
    """Progress on stderr, for terminals and logs alike.

    On a terminal, a one-line bar redrawn in place: `label [#####.....] 12/40 30% 0:05`.
    Elsewhere (a log file, a CI job), a plain line every `interval` seconds while
    work runs, `label: 12/40 (30%) 0:50`, so a long step shows it is alive,
    and a last line at the end if any was written. `enabled=True` forces the
    bar, `False` silences both.
    """

    def __init__(
        self,
        total: int,
        label: str,
        *,
        enabled: bool | None = None,
        stream: TextIO | None = None,
        interval: float = 10.0,
    ) -> None:
        self.total = max(total, 0)
        self.label = label
        self.stream = stream or sys.stderr
        tty = self.stream.isatty()
        self.enabled = tty if enabled is None else enabled
        # Lines for logs: only when nobody chose, and no terminal to draw on.
        self.lines = enabled is None and not tty
        self.done = 0
        self.started = time.monotonic()
        self._wrote_line = False
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if self.lines:
            self._ticker = threading.Thread(
                target=self._tick, args=(interval,), name="memalign-progress", daemon=True
            )
            self._ticker.start()
        self._draw()

    def advance(self, n: int = 1) -> None:
        """Count `n` more items done."""
        self.done = min(self.total, self.done + n)
        self._draw()

    def _elapsed(self) -> str:
        secs = int(time.monotonic() - self.started)
        return f"{secs // 60}:{secs % 60:02d}"

    def _pct(self) -> int:
        return 100 * self.done // self.total if self.total else 100

    def _tick(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self._line()

    def _line(self) -> None:
        self.stream.write(
            f"{self.label}: {self.done}/{self.total} ({self._pct()}%) {self._elapsed()}\n"
        )
        self.stream.flush()
        self._wrote_line = True

    def _draw(self, end: str = "") -> None:
        if not self.enabled:
            return
        width = 30
        filled = width * self.done // self.total if self.total else width
        bar = "#" * filled + "." * (width - filled)
        self.stream.write(
            f"\r{self.label} [{bar}] {self.done}/{self.total} {self._pct()}% {self._elapsed()}"
            + end
        )
        self.stream.flush()

    def close(self) -> None:
        """Finish: end the bar's line, or write the last log line."""
        if self._ticker is not None:
            self._stop.set()
            self._ticker.join()
            if self._wrote_line:
                self._line()
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
