"""The benchmarks' data loader (benchmarks/harness/shared_data.py): labels mapped onto scales,
rationales, rubrics and per-annotator labels."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from langchain_memalign import InvalidFeedbackError, Scale
from langchain_memalign.evaluation.agreement import agreement_report

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from harness.datasets import load_derived
from harness.shared_data import DATASETS, dataset_spec, load_jsonl, row_to_feedback

HALU = {
    "id": "halubench_1", "inputs": {"question": "Who wrote it?", "context": "Ann wrote it."},
    "outputs": {"response": "Bob wrote it."}, "reference": None, "label": "FAIL",
    "feedback": None, "criterion": "Faithfulness: PASS = faithful, FAIL = hallucinated.",
    "meta": {"source_ds": "RAGTruth"},
}  # fmt: skip
PANDA = {
    "id": "pandalm_0", "inputs": {"instruction": "Shorten.", "input": "A long sentence."},
    "outputs": {"response_1": "Short.", "response_2": "A sentence."}, "reference": None,
    "label": "response_2", "feedback": None, "criterion": None,
    "meta": {"annotators": ["response_2", "response_2", "tie"]},
}  # fmt: skip
PROM = {
    "id": "prometheus_0", "inputs": {"instruction": "Write a limerick."},
    "outputs": {"response": "There once was..."}, "reference": "A perfect limerick.",
    "label": 4, "feedback": "Good rhyme, weak meter.",
    "criterion": "[Is it a limerick?]\nScore 1: no\nScore 5: yes",
    "meta": {"all_scores": [4, 4, 3]},
}  # fmt: skip
FQA = {
    "id": "feedbackqa_0", "inputs": {"question": "How do I report income?"},
    "outputs": {"response": "Use the app."}, "reference": None, "label": "Acceptable",
    "feedback": "Annotator 1 (Acceptable): brief.\nAnnotator 2 (Excellent): direct.",
    "criterion": "Rate the answer passage", "meta": {"ratings": ["Acceptable", "Excellent"]},
}  # fmt: skip


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    return path


def test_dataset_spec_by_name_and_path() -> None:
    assert dataset_spec("halubench").scale == Scale.of(bool)
    assert dataset_spec("/x/prometheus_mtbench_vicuna.jsonl").scale == Scale.of((1, 5))
    assert dataset_spec("pandalm.jsonl").scale.kind == "pairwise"
    fqa = dataset_spec("feedbackqa")
    assert fqa.ordinal and fqa.scale.choices == (
        "Excellent",
        "Acceptable",
        "Could be Improved",
        "Bad",
    )
    for spec in DATASETS.values():
        assert "{inputs}" in spec.instructions and "{outputs}" in spec.instructions
    with pytest.raises(KeyError, match="known"):
        dataset_spec("mystery.jsonl")


def test_halubench_labels_map_to_bool(tmp_path: Path) -> None:
    ok = {**HALU, "id": "halubench_2", "label": "PASS"}
    [fail, passed] = load_jsonl(write(tmp_path / "halubench.jsonl", [HALU, ok]))
    assert (fail.value, passed.value) == (False, True)
    assert fail.rationale is None
    assert fail.inputs == HALU["inputs"] and fail.outputs == HALU["outputs"]
    assert fail.metadata["criterion"].startswith("Faithfulness")
    assert "annotator_labels" not in fail.metadata
    # the same file on a categorical scale keeps the names
    [cat, _] = load_jsonl(tmp_path / "halubench.jsonl", ["PASS", "FAIL"])
    assert cat.value == "FAIL"


def test_pandalm_labels_map_to_pairwise(tmp_path: Path) -> None:
    [fb] = load_jsonl(write(tmp_path / "pandalm.jsonl", [PANDA]))
    assert fb.value == "B"
    assert fb.metadata["annotator_labels"] == ["B", "B", "tie"]


def test_prometheus_rubric_goes_into_inputs(tmp_path: Path) -> None:
    [fb] = load_jsonl(write(tmp_path / "prometheus_mtbench_vicuna.jsonl", [PROM]))
    assert fb.value == 4 and isinstance(fb.value, int)
    assert fb.inputs == {"instruction": "Write a limerick.", "rubric": PROM["criterion"]}
    assert fb.reference_outputs == "A perfect limerick."
    assert fb.rationale == "Good rhyme, weak meter."
    assert fb.metadata["annotator_labels"] == [4, 4, 3]
    [plain] = load_jsonl(tmp_path / "prometheus_mtbench_vicuna.jsonl", criterion_in_inputs=False)
    assert "rubric" not in plain.inputs


def test_feedbackqa_ratings_and_inter_annotator(tmp_path: Path) -> None:
    rows = [
        FQA,
        {**FQA, "id": "feedbackqa_1", "label": "Bad", "meta": {"ratings": ["Bad", "Bad", "Bad"]}},
    ]
    items = load_jsonl(write(tmp_path / "feedbackqa.jsonl", rows))
    assert [fb.value for fb in items] == ["Acceptable", "Bad"]
    assert items[0].metadata["annotator_labels"] == ["Acceptable", "Excellent"]
    assert items[0].rationale and "Annotator 2" in items[0].rationale
    rep = agreement_report(
        items, ["Acceptable", "Bad"], dataset_spec("feedbackqa").scale, ordinal=True
    )
    ia = rep.inter_annotator
    assert ia is not None and ia.n_cases == 2 and ia.n_labels == 5
    # pairs: (Acc, Exc) | 3 x (Bad, Bad) -> 3/4
    assert ia.pairwise_agreement == pytest.approx(0.75)


def test_feedbackqa_as_pass_fail(tmp_path: Path) -> None:
    rows = [
        FQA,
        {**FQA, "id": "feedbackqa_1", "label": "Could be Improved",
         "meta": {"ratings": ["Could be Improved", "Excellent"]}},
    ]  # fmt: skip
    write(tmp_path / "feedbackqa.jsonl", rows)
    spec, items, path = load_derived("feedbackqa_bool", tmp_path)
    assert spec.scale.kind == "bool" and path.name == "feedbackqa.jsonl"
    assert [fb.value for fb in items] == [True, False]
    assert [fb.metadata["annotator_labels"] for fb in items] == [[True, True], [False, True]]
    assert items[0].rationale == FQA["feedback"]  # the crowd's rationales are kept


def test_filters_limits_and_truncation(tmp_path: Path) -> None:
    long = {**FQA, "id": "feedbackqa_long", "outputs": {"response": "x" * 5000}}
    path = write(tmp_path / "feedbackqa.jsonl", [long, FQA, {**FQA, "id": "feedbackqa_9"}])
    assert [fb.id for fb in load_jsonl(path, max_case_chars=1000)] == [
        "feedbackqa_0",
        "feedbackqa_9",
    ]
    assert [fb.id for fb in load_jsonl(path, limit=2)] == ["feedbackqa_long", "feedbackqa_0"]
    [cut, *_] = load_jsonl(path, max_field_chars=100)
    assert len(cut.outputs["response"]) == 100 and cut.outputs["response"].endswith("...")


def test_labels_off_the_scale(tmp_path: Path) -> None:
    bad = {**FQA, "id": "feedbackqa_x", "label": "Superb"}
    path = write(tmp_path / "feedbackqa.jsonl", [bad, FQA])
    with pytest.raises(InvalidFeedbackError, match="Superb"):
        load_jsonl(path)
    assert [fb.id for fb in load_jsonl(path, skip_invalid=True)] == ["feedbackqa_0"]
    with pytest.raises(ValueError, match="scale"):
        load_jsonl(write(tmp_path / "other.jsonl", [FQA]))
    fb = row_to_feedback({**FQA, "label": 3}, (1, 5))
    assert fb.value == 3
