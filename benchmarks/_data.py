"""The one place the benchmarks import the data-set loaders from.

The data-set specs and loader live in `benchmarks/shared_data.py` (benchmark material, not
library code). Also: the shared data files by data set name, and the scenario folders
(`../shared/scenarios/<name>`: train.jsonl with rationales, test.jsonl) as data sets.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from langchain_memalign import Feedback, Scale
from shared_data import DatasetSpec, dataset_spec, load_jsonl

__all__ = [
    "FILES",
    "DatasetSpec",
    "dataset_spec",
    "load_jsonl",
    "load_scenario",
    "scenario_instructions",
]

FILES = {
    "halubench": "halubench.jsonl",
    "pandalm": "pandalm.jsonl",
    "prometheus": "prometheus_mtbench_vicuna.jsonl",
    "feedbackqa": "feedbackqa.jsonl",
}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def scenario_instructions(folder: Path) -> str:
    """The judge question quoted in a scenario's README: ("...", bool)."""
    readme = (folder / "README.md").read_text()
    m = re.search(r'\("([^"]+)",\s*bool\)', readme)
    if not m:
        raise SystemExit(f"{folder}/README.md names no judge question; pass --instructions")
    return m.group(1)


def load_scenario(folder: Path) -> tuple[DatasetSpec, list[Feedback], list[Feedback]]:
    """A scenario folder as (spec, training pool, test set): the split is the folder's own."""
    spec = DatasetSpec(
        name=folder.name,
        scale=Scale.of(bool),
        instructions=scenario_instructions(folder),  # the bare question, as a new user writes it
        note=f"scenario {folder.name}: fixed train/test files",
    )

    def rows(name: str) -> list[Feedback]:
        return [
            Feedback(
                id=r["id"], inputs=r["inputs"], outputs=r["outputs"], value=r["value"],
                rationale=r.get("rationale"),
            )
            for r in read_jsonl(folder / name)
        ]  # fmt: skip

    return spec, rows("train.jsonl"), rows("test.jsonl")
