"""Does an aligned judge copy the verdicts of the past cases it is shown? (issue 10)

For one system and stage of a `quality.py` result file, re-retrieves each test case's past
cases from the saved memory (embedding calls only, no chat call) and compares the judge's
recorded verdicts with them: how often the verdict is one of the retrieved verdicts, how
often it is the nearest one's, and how often the retrieved verdicts alone (nearest, and
majority of k) are right.

    python benchmarks/retrieved_verdicts.py \\
        benchmarks/results/quality/partial/quality_feedbackqa.json --stage 10 \\
        --data-dir ../shared/data \\
        --out benchmarks/results/quality/retrieved_verdicts_feedbackqa.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _data import FILES, load_jsonl
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from provenance import file_sha256, run_info
from side_by_side import build_embeddings

from langchain_memalign import MemAlignJudge


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("result", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--system", default="ours")
    ap.add_argument("--stage", type=int, required=True)
    ap.add_argument(
        "--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared" / "data")
    )
    ap.add_argument("--emb-url", default="http://127.0.0.1:8012/v1")
    ap.add_argument("--embedding-model", default="minilm")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    emb = build_embeddings(a.emb_url, a.embedding_model)

    source = json.loads(a.result.read_text())
    name, protocol = source["dataset"], source["protocol"]
    entry = source["seeds"][str(a.seed)]["entries"][f"{a.system}@{a.stage}"]
    memory = a.result.parent / "work" / name / f"seed{a.seed}" / a.system / f"stage{a.stage}"
    path = Path(a.data_dir) / FILES[name]
    cut = {"max_case_chars": protocol["max_case_chars"],
           "max_field_chars": protocol["max_field_chars"]}  # fmt: skip
    rows = {fb.id: fb for fb in load_jsonl(path, **cut)}
    predictions = entry["test"]["predictions"]
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(memory, Path(tmp) / "m")
        # No chat call is made: the fake model only satisfies the constructor.
        judge = MemAlignJudge.load(Path(tmp) / "m", FakeListChatModel(responses=["-"]), emb)
        mem = judge.memory
        vectors = mem.embed([mem.case_text(rows[p["id"]].inputs, rows[p["id"]].outputs)
                             for p in predictions])  # fmt: skip
        counts: Counter[str] = Counter()
        for p, vector in zip(predictions, vectors, strict=True):
            shown = [json.dumps(ep.value) for ep in mem.retrieve(vector)]
            if not shown:
                continue
            human, verdict = json.dumps(p["human"]), json.dumps(p["judge"])
            majority = Counter(shown).most_common(1)[0][0]
            counts["n"] += 1
            counts["verdict_among_retrieved"] += verdict in shown
            counts["verdict_is_nearest"] += verdict == shown[0]
            counts["nearest_right"] += shown[0] == human
            counts["majority_right"] += majority == human
            counts["judge_right"] += verdict == human
        judge.close()
    out = {
        "run_info": run_info(models={"embeddings": f"{a.embedding_model} @ {a.emb_url}"},
                             data={path.name: file_sha256(path)}) | {"argv": sys.argv},
        "source_result": str(a.result), "system": a.system, "stage": a.stage, "k": mem.config.k,
        "counts": dict(counts),
    }  # fmt: skip
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=1))
    print(json.dumps(out["counts"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
