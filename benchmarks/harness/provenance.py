"""What every quality result file records: commit, models, data checksums, machine, command."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def file_sha256(path: Path) -> str:
    """The sha256 of a data file, so a figure names exactly what it was measured on."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        return ""


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _version() -> tuple[str, list[str]]:
    """(commit, locally modified package files): from git, or from the VERSION file that
    `run_quality.sh` writes into a snapshot (a copy without .git)."""
    commit = _git("rev-parse", "HEAD")
    if commit:
        return commit, _git("status", "--porcelain", "langchain_memalign").splitlines()
    version = ROOT / "VERSION"
    if version.exists():
        lines = version.read_text().splitlines()
        return (lines[0] if lines else ""), [x for x in lines[1:] if "langchain_memalign" in x]
    return "", []


def run_info(*, models: dict[str, str], data: dict[str, str]) -> dict[str, Any]:
    """Commit (and whether the package had local edits), models, data checksums, machine."""
    commit, modified = _version()
    return {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "git_commit": commit,
        "package_modified_files": modified,
        "models": models,
        "data_sha256": data,
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "cpu_model": _cpu_model(),
        },
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
