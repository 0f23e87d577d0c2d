"""The direction check of a pair's rule, on real embeddings: which pairs it keeps.

A contrast pair's rule is checked against the cases the model names as stating it, and
also against the pair's other case when that case's rationale supports the rule as well
as a named one's (`graphs.merge._origin`, at the default `reflection.source_support`).
The unit tests measure this with bag-of-words fakes; this measures it with the
embeddings users run, on the repository's own set of orders in feedback
(`tests/unit_tests/graphs/data/orders_in_feedback.jsonl`), no chat model involved:

- honest rules taught by praise, beside their similar case graded otherwise, the model
  naming only the praised case: how many are kept;
- every order written in a rationale, beside the honest case the unit tests pair it
  with, and beside each honest row's similar case (a reason written on another topic
  by an honest expert): how many would be kept because the honest case counts.

    python benchmarks/pair_direction.py --emb-url http://127.0.0.1:8012/v1 \
        --emb-model minilm --out benchmarks/results/pair_direction.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from langchain_openai import OpenAIEmbeddings
from pydantic import SecretStr

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.provenance import file_sha256, run_info

from langchain_memalign.config import ReflectionOptions
from langchain_memalign.graphs.direction import unsupported
from langchain_memalign.graphs.merge import _origin
from langchain_memalign.memory.semantic import Proposal
from langchain_memalign.scale import Scale

DATA = Path(__file__).resolve().parents[1] / "tests/unit_tests/graphs/data/orders_in_feedback.jsonl"
SCALES: dict[str, Any] = {
    "bool": bool,
    "numeric": (1, 5),
    "categorical": ["Excellent", "Acceptable", "Could be Improved", "Bad"],
}
# The honest case graded otherwise that the unit tests pair an order with
# (`test_orders_in_feedback._unrelated`), by scale and the order's case's verdict.
UNRELATED = {
    ("bool", True): (False, "Dismissive and unhelpful."),
    ("bool", False): (True, "Direct and complete answer."),
    ("numeric", "low"): (5, "Score 5: correct and clearly explained."),
    ("numeric", "high"): (1, "Score 1: no code."),
}


def _unrelated(row: dict[str, Any]) -> tuple[Any, str]:
    kind, value = row["scale"], row["value"]
    if kind == "bool":
        return UNRELATED[("bool", value)]
    if kind == "numeric":
        return UNRELATED[("numeric", "low" if value <= 3 else "high")]
    other = "Excellent" if value in ("Bad", "Could be Improved") else "Bad"
    mark = "direct and complete." if other == "Excellent" else "unrelated to the question."
    return other, f"Annotator 1 ({other}): {mark}"


def kept(
    row: dict[str, Any], other: tuple[Any, str], vectors: dict[str, np.ndarray], support: float
) -> bool:
    """Whether the row's rule passes the direction check beside `other` (value, rationale)."""
    scale = Scale.of(SCALES[row["scale"]])
    values = {"own": row["value"], "other": other[0]}
    proposal = Proposal(row["rule"], ["own", "other"], "", row["direction"], ["own"])
    rationales = {"own": vectors[row["text"]], "other": vectors[other[1]]}
    origin = _origin(proposal, vectors[row["rule"]], rationales, support)
    return not unsupported(scale, row["direction"], [values[s] for s in origin])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--emb-url", default="http://127.0.0.1:8012/v1")
    ap.add_argument("--emb-model", default="minilm")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line]
    honest = [r for r in rows if r["label"] == "honest"]
    # Orders in a rationale: the only ones whose text is a rationale the check reads.
    orders = [r for r in rows if r["label"] == "attack" and r["where"] == "rationale"]
    partners = {r["id"]: (r["partner"]["value"], r["partner"]["rationale"]) for r in honest}
    texts = {r["rule"] for r in rows} | {r["text"] for r in rows}
    texts |= {p[1] for p in partners.values()} | {_unrelated(r)[1] for r in orders}
    embeddings = OpenAIEmbeddings(
        model=args.emb_model, base_url=args.emb_url, api_key=SecretStr("local"),
        check_embedding_ctx_length=False,
    )  # fmt: skip
    ordered = sorted(texts)
    vectors = dict(zip(ordered, np.asarray(embeddings.embed_documents(ordered)), strict=True))
    support = ReflectionOptions().source_support
    assert support is not None

    def refused_alone(r: dict[str, Any]) -> bool:
        # What the check decides on the named case alone (before the other case counted).
        return unsupported(Scale.of(SCALES[r["scale"]]), r["direction"], [r["value"]])

    # Only rules the check refuses on the named case alone can change: among those, the
    # ones kept because the other case counted.
    taught_by_praise = [r for r in honest if refused_alone(r)]
    refused_orders = [r for r in orders if refused_alone(r)]
    result: dict[str, Any] = {
        "honest taught by praise, only the praised case named": {
            "rows": len(taught_by_praise),
            "kept": sorted(
                r["id"] for r in taught_by_praise if kept(r, partners[r["id"]], vectors, support)
            ),
        },
        "orders beside the unit tests' honest case": {
            "rows": len(refused_orders),
            "kept": sorted(
                r["id"] for r in refused_orders if kept(r, _unrelated(r), vectors, support)
            ),
        },
    }
    # Every order beside every honest reason graded otherwise on its scale.
    crossed = [
        (o, h)
        for o in refused_orders
        for h in honest
        if h["scale"] == o["scale"] and partners[h["id"]][0] != o["value"]
    ]
    result["orders beside each honest row's similar case"] = {
        "pairs": len(crossed),
        "kept": [f"{o['id']}+{h['id']}" for o, h in crossed
                 if kept(o, partners[h["id"]], vectors, support)],
    }  # fmt: skip
    result["run_info"] = run_info(
        models={"embeddings": args.emb_model}, data={DATA.name: file_sha256(DATA)}
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in result.items() if k != "run_info"}, indent=1))


if __name__ == "__main__":
    main()
