"""Start a worker process and SIGKILL it at a random moment (the crash tests' loop body)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any


def run_and_kill(code: str, rng: Any, *, low: float = 0.3, high: float = 1.5) -> None:
    """Run `code` in a new interpreter; once it prints "ready", kill it after a random
    `low`-`high` seconds drawn from `rng` (a numpy Generator), and reap it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready", proc.stderr.read() if proc.stderr else ""
    time.sleep(float(rng.uniform(low, high)))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
