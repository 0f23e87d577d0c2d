"""Crash-safe file writes: write to a temporary file, fsync, rename over the target."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any


def fsync(path: str | Path) -> None:
    """Flush a file to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(folder: Path) -> None:
    """Flush a folder's entries (a rename) to disk, where the filesystem allows."""
    with contextlib.suppress(OSError):  # some filesystems cannot fsync a directory
        fsync(folder)


def write_atomic(path: Path, write: Any) -> None:
    """Call `write(tmp_path)` then rename the temporary file onto `path`."""
    fd, tmp = tempfile.mkstemp(prefix="." + path.name + "-", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        fsync(tmp)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
