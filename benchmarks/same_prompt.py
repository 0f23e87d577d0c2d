"""Does an aligned judge send the unaligned judge's prompt? Compared case by case, no LLM call.

Where alignment kept no guideline and no test case has a past case above the floor, ours
should send the unaligned judge's prompt word for word; then any difference between
their verdicts is the chat server's run-to-run noise, not the memory. This script opens
the memory `quality.py` saved for a run, builds both judges on a chat model that refuses
every connection (the messages are captured by a callback just before the call fails),
and counts the test cases whose messages differ. Only the embedding server is used
(the aligned judge embeds each case to search its memory).

    python benchmarks/same_prompt.py benchmarks/results/quality/quality_halubench_s16.json \
        --seeds 0,1 --out benchmarks/results/quality/same_prompt_halubench.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _data import load_as_run
from langchain_core.callbacks import BaseCallbackHandler
from langchain_openai import ChatOpenAI
from provenance import file_sha256, run_info
from side_by_side import build_embeddings

from langchain_memalign import Feedback, MemAlignJudge


class _Captured(BaseCallbackHandler):
    """Keeps the messages of the last chat model call."""

    def __init__(self) -> None:
        self.messages: list[list[Any]] | None = None

    def on_chat_model_start(self, serialized: Any, messages: Any, **kw: Any) -> None:
        self.messages = [[(m.type, m.content) for m in batch] for batch in messages]


def prompt_of(judge: MemAlignJudge, fb: Feedback) -> list[list[Any]]:
    """The messages `judge` sends for this case (the call itself fails: nothing listens)."""
    captured = _Captured()
    # The refused connection is the point: the call fails after its callback ran.
    with contextlib.suppress(Exception):
        judge.invoke({"inputs": fb.inputs, "outputs": fb.outputs}, {"callbacks": [captured]})
    if captured.messages is None:
        raise SystemExit(f"{fb.id}: the judge made no chat call to capture")
    return captured.messages


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("result", type=Path, help="a quality_<dataset>_<tag>.json with saved memories")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--system", default="ours")
    ap.add_argument("--stage", type=int, default=50)
    shared = Path(__file__).resolve().parents[2] / "shared"
    ap.add_argument("--data-dir", default=str(shared / "data"))
    ap.add_argument("--emb-url", default="http://127.0.0.1:8012/v1")
    ap.add_argument("--embedding-model", default="minilm")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)

    source = json.loads(a.result.read_text())
    path, spec, by_id = load_as_run(source, a.data_dir)
    # Port 9 (discard): nothing listens, so each call fails at once after its callback.
    refusing = ChatOpenAI(model="local", base_url="http://127.0.0.1:9/v1", api_key="none",
                          max_retries=0, timeout=2)  # fmt: skip
    emb = build_embeddings(a.emb_url, a.embedding_model)
    out: dict[str, Any] = {
        "run_info": run_info(models={"embeddings": f"{a.embedding_model} @ {a.emb_url}"},
                             data={path.name: file_sha256(path)}) | {"argv": sys.argv},
        "source_result": str(a.result), "system": a.system, "stage": a.stage, "seeds": {},
    }  # fmt: skip
    folder = a.result.stem.removeprefix("quality_")
    for seed in [int(x) for x in a.seeds.split(",") if x.strip()]:
        split = source["seeds"][str(seed)]["split"]
        test = [by_id[i] for i in split["test_ids"]]
        saved = a.result.parent / "work" / folder / f"seed{seed}" / a.system / f"stage{a.stage}"
        with tempfile.TemporaryDirectory() as tmp:
            scratch = Path(tmp) / "memory"
            shutil.copytree(saved, scratch)  # the saved memory stays as it was
            ours = MemAlignJudge.load(scratch, refusing, emb, reuse_expert_verdicts=False)
            unaligned = MemAlignJudge(name=spec.name, instructions=spec.instructions,
                                      model=refusing, embeddings=emb, scale=spec.scale,
                                      reuse_expert_verdicts=False)  # fmt: skip
            differ = [fb.id for fb in test if prompt_of(ours, fb) != prompt_of(unaligned, fb)]
            ours.close()
            unaligned.close()
        out["seeds"][str(seed)] = {"test_cases": len(test), "prompts_differ": differ}
        print(f"seed {seed}: {len(differ)} of {len(test)} prompts differ", file=sys.stderr)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
