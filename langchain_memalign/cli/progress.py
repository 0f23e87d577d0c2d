"""Progress bars on stderr and text learning curves."""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any, TextIO
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

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


class AlignSteps(BaseCallbackHandler):
    """Says which step of an align runs, as it runs: its start, its model calls, its end.

    An align's time goes to steps whose length is not known in advance (reflection,
    validation's judge calls, calibration), so a count of feedback items stays at 0% for
    minutes; this names the step and counts its model calls instead. Steps are the
    align and unalign graphs' nodes, told apart by LangGraph's `langgraph_node`
    metadata, which their model calls inherit. Lines go to `stream` when a step starts
    and ends, and every `interval` seconds while one runs.
    """

    # Steps worth a line: the ones that call a model or write the memory.
    STEPS = ("reflect", "merge", "validate", "calibrate", "consolidate", "forget", "checks")

    def __init__(self, label: str, *, stream: TextIO | None = None, interval: float = 10.0):
        super().__init__()
        self.label = label
        self.stream = stream or sys.stderr
        self._lock = threading.Lock()
        self._runs: dict[UUID, str] = {}
        self._active: dict[str, int] = {}  # step -> runs of it in flight
        self._calls: dict[str, int] = {}
        self._started: dict[str, float] = {}
        self._tests: set[UUID] = set()  # the checks step's tests of candidate checks
        self._stop = threading.Event()
        self._ticker = threading.Thread(
            target=self._tick, args=(interval,), name="memalign-steps", daemon=True
        )
        self._ticker.start()

    @staticmethod
    def _step(metadata: Mapping[str, Any] | None) -> str | None:
        node = (metadata or {}).get("langgraph_node")
        return node if node in AlignSteps.STEPS else None

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A step starts when the node's own run starts (not the runs nested in it)."""
        step = self._step(metadata)
        if step == "checks" and kwargs.get("name") == "test_check":
            with self._lock:
                self._tests.add(run_id)
            return
        if step is None or kwargs.get("name") != step:
            return
        with self._lock:
            self._runs[run_id] = step
            first = not self._active.get(step)
            self._active[step] = self._active.get(step, 0) + 1
            if first:
                self._started[step] = time.monotonic()
                self._calls[step] = 0
                self._write(f"{step}...")

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A step ends when the last of its runs (one per reflection batch) ends.

        A candidate check's test ends with a line per rule: how it agreed with the experts.
        """
        with self._lock:
            test = run_id in self._tests
            self._tests.discard(run_id)
        if test and isinstance(outputs, dict):
            for rule_id, agreement in outputs.items():
                self._write(f"checks: {rule_id} {agreement}")
            return
        self._end(run_id, "done")

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """A step that raised ends too."""
        with self._lock:
            self._tests.discard(run_id)
        self._end(run_id, "failed")

    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: Any,
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Count a model call to the step it runs in."""
        step = self._step(metadata)
        if step is not None:
            with self._lock:
                self._calls[step] = self._calls.get(step, 0) + 1

    def _end(self, run_id: UUID, how: str) -> None:
        with self._lock:
            step = self._runs.pop(run_id, None)
            if step is None:
                return
            self._active[step] -= 1
            if self._active[step] == 0:
                self._write(f"{step} {how} ({self._summary(step)})")

    def _summary(self, step: str) -> str:
        secs = int(time.monotonic() - self._started[step])
        calls = self._calls.get(step, 0)
        return f"{calls} model call{'' if calls == 1 else 's'}, {secs // 60}:{secs % 60:02d}"

    def _tick(self, interval: float) -> None:
        while not self._stop.wait(interval):
            with self._lock:
                for step, n in self._active.items():
                    if n:
                        self._write(f"{step} ({self._summary(step)} so far)")

    def _write(self, text: str) -> None:
        self.stream.write(f"{self.label}: {text}\n")
        self.stream.flush()

    def close(self) -> None:
        """Stop the periodic lines."""
        self._stop.set()
        self._ticker.join()

    def __enter__(self) -> AlignSteps:
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
