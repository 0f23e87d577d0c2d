"""The one place the benchmarks import the data-set loaders from.

The data-set specs and loader live in `shared_data` (benchmark material, not
library code). Also: the shared data files by data set name, and the scenario folders
(`../shared/scenarios/<name>`: train.jsonl with rationales, test.jsonl) as data sets.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from langchain_memalign import Feedback, Scale
from langchain_memalign.evaluation.agreement import ANNOTATOR_LABELS_KEY

from .shared_data import DatasetSpec, dataset_spec, load_jsonl

__all__ = [
    "DERIVED",
    "FILES",
    "DatasetSpec",
    "dataset_spec",
    "load_as_run",
    "load_derived",
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


# feedbackqa as a pass/fail judge (Excellent or Acceptable pass). Why: support-apology is
# the only bool set with rationales, and its rationales state a rule; feedbackqa's remark
# on one answer ("Directs people to the tools ..."). A bool default about past cases with
# rationales (config.DEFAULT_FLOOR) is checked on this kind too.
FEEDBACKQA_PASS = ("Excellent", "Acceptable")
DERIVED: dict[str, tuple[str, DatasetSpec]] = {
    "feedbackqa_bool": (
        "feedbackqa",
        DatasetSpec(
            name="feedbackqa_bool",
            scale=Scale.of(bool),
            instructions=(
                "Does the answer passage answer the question well enough? true = it fully "
                "answers it or answers it with minor gaps; false = it is only partly relevant "
                "or does not answer it.\n\n{inputs}\n\nAnswer passage: {outputs}"
            ),
            note="feedbackqa's ratings as pass (Excellent, Acceptable) or fail (Could be "
            "Improved, Bad); 2-3 crowd annotators per case with their rationales.",
        ),
    ),
}


def load_derived(
    name: str, data_dir: Path, **load_options: Any
) -> tuple[DatasetSpec, list[Feedback], Path]:
    """A data set derived from a shared one (`DERIVED`): its spec, cases and source file."""
    source, spec = DERIVED[name]
    path = data_dir / FILES[source]
    out = []
    for fb in load_jsonl(path, **load_options):
        meta = dict(fb.metadata)
        if ANNOTATOR_LABELS_KEY in meta:
            meta[ANNOTATOR_LABELS_KEY] = [v in FEEDBACKQA_PASS for v in meta[ANNOTATOR_LABELS_KEY]]
        out.append(fb.model_copy(update={"value": fb.value in FEEDBACKQA_PASS, "metadata": meta}))
    return spec, out, path


def load_as_run(
    result: dict[str, Any], data_dir: str | Path
) -> tuple[Path, DatasetSpec, dict[str, Feedback]]:
    """A shared data set's file, spec and cases by id, cut as the quality run that wrote
    `result` cut them (its `protocol`), so that its split's ids find the same cases."""
    name, protocol = result["dataset"], result["protocol"]
    path = Path(data_dir) / FILES[name]
    rows = load_jsonl(path, max_case_chars=protocol["max_case_chars"],
                      max_field_chars=protocol["max_field_chars"])  # fmt: skip
    return path, dataset_spec(name), {fb.id: fb for fb in rows}


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

    return spec, read_feedback(folder / "train.jsonl"), read_feedback(folder / "test.jsonl")


def read_feedback(path: Path) -> list[Feedback]:
    """A scenario file's rows (`id`, `inputs`, `outputs`, `value`, `rationale`) as feedback."""
    return [
        Feedback(
            id=r["id"], inputs=r["inputs"], outputs=r["outputs"], value=r["value"],
            rationale=r.get("rationale"),
        )
        for r in read_jsonl(path)
    ]  # fmt: skip
