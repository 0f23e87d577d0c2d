"""constraints-min.txt pins exactly the lower bounds pyproject.toml declares."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def _lower_bounds() -> dict[str, Version]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    for name in ("test", "bench", "plot", "postgres"):
        specs += project["optional-dependencies"][name]
    bounds = {}
    for spec in specs:
        m = re.match(r"^([A-Za-z0-9_.\-]+)(?:\[[^]]*\])?\s*>=\s*([0-9.]+)", spec)
        if m:
            bounds[m.group(1).lower()] = Version(m.group(2))
    return bounds


def test_constraints_min_pins_every_lower_bound() -> None:
    pins = {}
    for line in (ROOT / "constraints-min.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[name.strip().lower()] = Version(version.strip())
    bounds = _lower_bounds()
    assert "langsmith" in bounds and "langgraph" in bounds
    assert pins == bounds
