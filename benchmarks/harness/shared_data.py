"""Load labelled judge data from JSONL files into `Feedback`.

The format (one JSON object a line) is that of the team's shared data sets::

    {"id": "...", "inputs": {...}, "outputs": {...}, "reference": ... | null,
     "label": ..., "feedback": "the human rationale" | null,
     "criterion": "what is judged / a rubric" | null, "meta": {...}}

`load_jsonl` maps `label` onto a judge's scale (`"PASS"` -> `True`,
`"response_1"` -> `"A"`, `"4"` -> `4`, ...) with `Scale.validate_value`,
`feedback` becomes the rationale, `reference` the reference outputs, and the
individual annotators' labels (`meta.ratings`, `meta.annotators`,
`meta.all_scores`) go to `metadata["annotator_labels"]` for inter-annotator
agreement. `dataset_spec` gives the recommended scale and judge instructions
for the four shared data sets (halubench, pandalm, prometheus, feedbackqa).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from langchain_memalign._text import render, truncate
from langchain_memalign.errors import InvalidFeedbackError
from langchain_memalign.evaluation.agreement import ANNOTATOR_LABELS_KEY
from langchain_memalign.feedback import Feedback
from langchain_memalign.scale import Scale, ScaleSpec

_ANNOTATOR_FIELDS = ("ratings", "annotators", "all_scores")


class DatasetSpec(BaseModel):
    """How to judge one data set: its scale, judge instructions and where its rubric lives."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    scale: Scale
    instructions: str = Field(description="Judge prompt with {inputs}/{outputs} placeholders.")
    ordinal: bool = Field(default=False, description="Whether the scale's values are ordered.")
    criterion_in_inputs: bool = Field(
        default=False,
        description="The criterion differs per case (a rubric): put it in `inputs['rubric']` "
        "so the judge sees it.",
    )
    annotator_labels_are_human: bool = Field(
        default=True, description="False where the per-annotator labels are model samples."
    )
    note: str = ""


FEEDBACKQA_CHOICES = ("Excellent", "Acceptable", "Could be Improved", "Bad")

DATASETS: dict[str, DatasetSpec] = {
    "halubench": DatasetSpec(
        name="halubench",
        scale=Scale.of(bool),
        instructions=(
            "Faithfulness: is the answer supported by and consistent with the passage? "
            "true = faithful, false = hallucinated (it states something the passage does "
            "not support or contradicts).\n\n{inputs}\n\nAnswer: {outputs}"
        ),
        note="PASS/FAIL labels, no human rationale (episodic memory only).",
    ),
    "pandalm": DatasetSpec(
        name="pandalm",
        scale=Scale.of("pairwise"),
        instructions=(
            "Which response follows the instruction better? A = response_1, "
            "B = response_2, tie = equally good or equally bad.\n\n{inputs}\n\n{outputs}"
        ),
        note="Majority of 3 human annotators; per-annotator labels in meta.annotators; "
        "no rationale.",
    ),
    "prometheus": DatasetSpec(
        name="prometheus",
        scale=Scale.of((1, 5)),
        instructions=(
            "Score the response from 1 to 5 by the rubric.\n\n{inputs}\n\n"
            "Response: {outputs}\n\nReference answer (a 5): {reference_outputs}"
        ),
        ordinal=True,
        criterion_in_inputs=True,
        annotator_labels_are_human=False,
        note="1-5 with a per-case rubric (in inputs['rubric']); labels and rationales are "
        "GPT-4's (majority of 3 samples), not human.",
    ),
    "feedbackqa": DatasetSpec(
        name="feedbackqa",
        scale=Scale.of(list(FEEDBACKQA_CHOICES)),
        instructions=(
            "Rate the answer passage for the question: Excellent (fully answers it), "
            "Acceptable (answers it with minor gaps), Could be Improved (partly relevant), "
            "Bad (does not answer it).\n\n{inputs}\n\nAnswer passage: {outputs}"
        ),
        ordinal=True,
        note="Four ordered ratings; 2-3 crowd annotators per case with their rationales.",
    ),
}


def dataset_spec(name_or_path: str | os.PathLike[str]) -> DatasetSpec:
    """The recommended scale and instructions for a shared data set, by name or file path.

    A path is matched by its file name's start (`prometheus_mtbench_vicuna.jsonl`
    -> `prometheus`). Raises `KeyError` for an unknown data set.
    """
    stem = Path(name_or_path).name.lower()
    for name, spec in DATASETS.items():
        if stem.startswith(name):
            return spec
    raise KeyError(f"no dataset spec for {str(name_or_path)!r}; known: {sorted(DATASETS)}")


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSONL file (blank lines skipped)."""
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                row = json.loads(line)
                if not isinstance(row, dict):
                    raise ValueError(f"{path}:{n}: not a JSON object")
                yield row


def _truncate_strings(value: Any, max_chars: int | None) -> Any:
    if not max_chars:
        return value
    if isinstance(value, str):
        return truncate(value, max_chars)
    if isinstance(value, dict):
        return {k: _truncate_strings(v, max_chars) for k, v in value.items()}
    if isinstance(value, list):
        return [_truncate_strings(v, max_chars) for v in value]
    return value


def _case_chars(row: dict[str, Any]) -> int:
    return len(render(row.get("inputs"))) + len(render(row.get("outputs")))


def row_to_feedback(
    row: dict[str, Any],
    scale: ScaleSpec,
    *,
    criterion_in_inputs: bool = False,
    max_field_chars: int | None = None,
) -> Feedback:
    """One JSONL row as `Feedback` on `scale` (raises `InvalidFeedbackError` off the scale)."""
    sc = Scale.of(scale)
    fid = str(row["id"])
    value = sc.validate_value(row.get("label"), feedback_id=fid)
    inputs = row.get("inputs")
    criterion = row.get("criterion")
    if criterion_in_inputs and criterion:
        inputs = {**inputs, "rubric": criterion} if isinstance(inputs, dict) else {
            "input": inputs, "rubric": criterion,
        }  # fmt: skip
    meta = dict(row.get("meta") or {})
    metadata: dict[str, Any] = {"meta": meta}
    if criterion:
        metadata["criterion"] = criterion
    for key in _ANNOTATOR_FIELDS:
        raw = meta.get(key)
        if isinstance(raw, list) and len(raw) >= 2:
            labels = []
            for v in raw:
                try:
                    labels.append(sc.validate_value(v))
                except InvalidFeedbackError:
                    continue
            if len(labels) >= 2:
                metadata[ANNOTATOR_LABELS_KEY] = labels
                break
    feedback = row.get("feedback")
    return Feedback(
        id=fid,
        inputs=_truncate_strings(inputs, max_field_chars),
        outputs=_truncate_strings(row.get("outputs"), max_field_chars),
        reference_outputs=_truncate_strings(row.get("reference"), max_field_chars),
        value=value,
        rationale=feedback if isinstance(feedback, str) else None,
        metadata=metadata,
    )


def load_jsonl(
    path: str | os.PathLike[str],
    scale: ScaleSpec | None = None,
    *,
    limit: int | None = None,
    max_case_chars: int | None = None,
    max_field_chars: int | None = None,
    criterion_in_inputs: bool | None = None,
    skip_invalid: bool = False,
) -> list[Feedback]:
    """Load a JSONL file of labelled cases as `Feedback`, labels mapped onto `scale`.

    Args:
        path: The JSONL file.
        scale: The judge's scale; defaults to the data set's recommended one
            (`dataset_spec`), found from the file name.
        limit: Keep at most this many cases (after filtering), in file order.
        max_case_chars: Skip cases whose rendered inputs + outputs are longer
            (keeps prompts within a small model's context without cutting
            the evidence a label depends on).
        max_field_chars: Truncate every string in inputs, outputs and
            reference to this many characters (marked with "...").
        criterion_in_inputs: Put the row's `criterion` into `inputs["rubric"]`;
            defaults to the data set's spec (True for per-case rubrics), else False.
        skip_invalid: Skip rows whose label is not on the scale instead of raising.
    """
    spec: DatasetSpec | None
    try:
        spec = dataset_spec(path)
    except KeyError:
        spec = None
    if scale is None:
        if spec is None:
            raise ValueError(f"{path}: unknown data set; pass `scale=`")
        scale = spec.scale
    if criterion_in_inputs is None:
        criterion_in_inputs = spec.criterion_in_inputs if spec else False
    out: list[Feedback] = []
    for row in iter_jsonl(path):
        if max_case_chars is not None and _case_chars(row) > max_case_chars:
            continue
        try:
            fb = row_to_feedback(
                row,
                scale,
                criterion_in_inputs=criterion_in_inputs,
                max_field_chars=max_field_chars,
            )
        except InvalidFeedbackError:
            if skip_invalid:
                continue
            raise
        out.append(fb)
        if limit is not None and len(out) >= limit:
            break
    return out
