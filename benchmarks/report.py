"""Merge side-by-side result files into one Markdown table and one bar chart.

    .venv/bin/python benchmarks/report.py benchmarks/results/side_by_side_*.json \
        [--mlflow feedbackqa=benchmarks/results/mlflow_feedbackqa/mlflow_feedbackqa.json] \
        --md benchmarks/results/side_by_side.md --plot docs/img/side_by_side.png

`--mlflow` adds an MLflow result that was run apart (same split, written by
`side_by_side.mlflow_rows`) and scores it with the same metrics.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from side_by_side import FILES, markdown, mlflow_report, plot

from langchain_memalign import Scale
from shared_data import dataset_spec, load_jsonl


def add_mlflow(ds: dict[str, Any], config: dict[str, Any], path: str) -> None:
    """Score a separately run MLflow result (same split) with the same metrics."""
    res = json.loads(Path(path).read_text(encoding="utf-8"))
    name = ds["dataset"]
    spec = dataset_spec(name)
    data = load_jsonl(
        Path(config["data_dir"]) / FILES[name],
        max_case_chars=config["max_case_chars"],
        max_field_chars=config["max_field_chars"],
    )
    by_id = {fb.id: fb for fb in data}
    test = [by_id[i] for i in ds["test_ids"]]
    phases = res.get("phases", {})
    scale = Scale.model_validate(ds["scale"])
    for variant, key, phase in (
        ("mlflow_unaligned", "baseline", "baseline_predict"),
        ("mlflow_memalign", "aligned", "aligned_predict"),
    ):
        rep = mlflow_report(
            res.get(key, []), test, scale, phases.get(phase, {}), name, spec.ordinal
        )
        ds["reports"][variant] = json.loads(rep.model_dump_json())
    a = phases.get("align", {})
    ds["mlflow_align"] = {
        "seconds": a.get("seconds"),
        "llm_calls": a.get("chat_calls"),
        "input_tokens": a.get("prompt_tokens"),
        "output_tokens": a.get("completion_tokens"),
        "embedding_calls": a.get("embedding_calls"),
        "embedded_texts": a.get("embedding_inputs"),
        "guidelines": (res.get("aligned_memory") or {}).get("guidelines"),
    }


def load(paths: list[str], mlflow: dict[str, str] | None = None) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    for p in paths:
        payload = json.loads(Path(p).read_text(encoding="utf-8"))
        for ds in payload["results"]:
            if mlflow and ds["dataset"] in mlflow:
                add_mlflow(ds, payload["config"], mlflow[ds["dataset"]])
            ds["config"] = {
                k: payload["config"].get(k)
                for k in ("n_train", "n_test", "seed", "max_case_chars", "k")
            }
            results.append(ds)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--md", required=True)
    ap.add_argument("--plot", required=True)
    ap.add_argument(
        "--mlflow", action="append", default=[],
        help="DATASET=PATH: an MLflow result run apart on the same split",
    )  # fmt: skip
    ap.add_argument("--out", default=None, help="also write the merged results as JSON")
    args = ap.parse_args(argv)
    results = load(args.files, dict(m.split("=", 1) for m in args.mlflow))
    if args.out:
        Path(args.out).write_text(json.dumps({"results": results}, indent=2), encoding="utf-8")
    text = markdown(results)
    Path(args.md).write_text(text, encoding="utf-8")
    plot(results, args.plot)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
