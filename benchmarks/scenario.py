"""A regression scenario as a new user meets it: unaligned, aligned, seen cases, unalign one source.

A scenario folder holds `train.jsonl` (graded cases with rationales) and `test.jsonl`
(labels only), like `../shared/scenarios/support-apology`. For each repetition, on the
same servers:

1. an unaligned judge grades the test cases;
2. the judge aligns on the training cases (report: calls, tokens, seconds, guidelines
   with their sources, validation per guideline);
3. the aligned judge grades the test cases and, with expert-verdict reuse off, the seen
   (training) cases;
4. one source of the most-cited guideline is unaligned; the guidelines left and the test
   accuracy after it are recorded.

`--align-only` runs step 2 alone: repeated, it measures how often validation keeps a
guideline, and what the first grading alone would have decided (`summary.validation`).

Repetitions on identical inputs measure the noise between identical runs. The result file
records the commit, models, data checksums and machine.

    .venv/bin/python benchmarks/scenario.py ../shared/scenarios/support-apology \
        --repeats 3 --out benchmarks/results/scenario_support_apology.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from langchain_openai import ChatOpenAI, OpenAIEmbeddings
from pydantic import SecretStr

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.datasets import read_feedback, scenario_instructions
from harness.options import judge_kwargs, option_value
from harness.provenance import file_sha256, run_info

from langchain_memalign import Feedback, MemAlignJudge
from langchain_memalign.graphs.validate import _rejects


def accuracy(judge: MemAlignJudge, rows: list[Feedback]) -> dict[str, Any]:
    cases = [{"inputs": r.inputs, "outputs": r.outputs} for r in rows]
    results = judge.batch(cases, {"max_concurrency": 2})
    verdicts = [
        {
            "id": r.id,
            "label": r.value,
            "score": res["score"],
            "comment": res["comment"],
            **{k: v for k, v in res["metadata"].items() if k.startswith("guidelines_")},
        }
        for r, res in zip(rows, results, strict=True)
    ]
    right = sum(v["score"] == v["label"] for v in verdicts)
    return {"correct": right, "n": len(rows), "accuracy": right / len(rows), "verdicts": verdicts}


def judge_options(args: argparse.Namespace) -> dict[str, Any]:
    """The further MemAlignJudge options given as JSON (`--options`)."""
    options: dict[str, Any] = json.loads(args.options) if args.options else {}
    return options


def make_judge(args: argparse.Namespace) -> tuple[MemAlignJudge, ChatOpenAI]:
    """A fresh judge on the local servers, as a new user would build it, and its model."""
    key = SecretStr("local")
    llm = ChatOpenAI(
        model=args.chat_model,
        base_url=args.chat_url,
        api_key=key,
        temperature=0.0,
        max_tokens=args.max_tokens,
        timeout=600,
        max_retries=1,
    )
    emb = OpenAIEmbeddings(
        model=args.embedding_model,
        base_url=args.emb_url,
        api_key=key,
        check_embedding_ctx_length=False,
    )
    judge = MemAlignJudge(
        name="appropriate",
        instructions=args.instructions,
        model=llm,
        embeddings=emb,
        scale=bool,
        **judge_kwargs(
            {"k": args.k, "retrieval.reuse_expert_verdicts": False}, judge_options(args)
        ),
    )
    return judge, llm


def one_run(
    args: argparse.Namespace, train: list[Feedback], test: list[Feedback]
) -> dict[str, Any]:
    judge, _ = make_judge(args)
    out: dict[str, Any] = {"options": judge_options(args)}
    if not args.align_only:
        out["unaligned_test"] = accuracy(judge, test)
        print(f"  unaligned test {out['unaligned_test']['correct']}/{len(test)}", flush=True)
    report = judge.align(train, raise_on_failure=False)
    out["align"] = json.loads(report.model_dump_json())
    out["guidelines"] = [
        {"id": g.id, "text": g.text, "sources": list(g.source_ids)} for g in judge.guidelines
    ]
    print(f"  aligned: {report.usage.llm_calls} calls, {report.seconds:.0f} s", flush=True)
    for g in out["guidelines"]:
        print(f"    - {g['text']}  <- {g['sources']}", flush=True)
    for r in report.guidelines_rejected:
        print(f"    rejected ({r.reason}): {r.text}", flush=True)
    for c in report.validation:
        print(
            f"    validated {c.action}: fixed {c.fixed} broken {c.broken}"
            f" (not again: {c.unconfirmed}): {c.text}"
            + (f" -> {c.narrowed_text}" if c.narrowed_text else ""),
            flush=True,
        )
    if args.align_only:
        return out
    out["aligned_test"] = accuracy(judge, test)
    out["aligned_seen"] = accuracy(judge, train)
    print(
        f"  aligned test {out['aligned_test']['correct']}/{len(test)}, "
        f"seen {out['aligned_seen']['correct']}/{len(train)}",
        flush=True,
    )
    if judge.guidelines:
        top = max(judge.guidelines, key=lambda g: len(g.source_ids))
        victim = top.source_ids[0]
        un = judge.unalign([victim])
        out["unalign"] = {
            "removed": victim,
            "report": json.loads(un.model_dump_json()),
            "guidelines_after": [
                {"id": g.id, "text": g.text, "sources": list(g.source_ids)}
                for g in judge.guidelines
            ],
            "test_after": accuracy(judge, test),
        }
        print(
            f"  unaligned {victim!r}: {len(judge.guidelines)} guidelines left, test "
            f"{out['unalign']['test_after']['correct']}/{len(test)}",
            flush=True,
        )
    return out


def validation_of(check: dict[str, Any], require_fix: bool) -> dict[str, Any]:
    """One guideline's validation, and what the first grading alone would have decided.

    A break that did not happen again when graded a second time (`unconfirmed`) counted
    before the package graded breaks twice; `first_grading_rejects` is that decision
    (the package's own rule, `validate._rejects`), so each repeat shows both.
    """
    fixed, broken, again = (check.get(k, []) for k in ("fixed", "broken", "unconfirmed"))
    return {
        "text": check["text"],
        "action": check["action"],
        "fixed": len(fixed),
        "broken": len(broken),
        "unconfirmed": len(again),
        "first_grading_rejects": _rejects(fixed, [*broken, *again], require_fix),
    }


def add_judge_args(p: argparse.ArgumentParser) -> None:
    """The scenario folder, the judge's options and servers, and the result file."""
    p.add_argument("scenario", type=Path)
    p.add_argument("--instructions", default=None)
    p.add_argument("--k", type=int, default=3)
    p.add_argument(
        "--options",
        default="",
        help="JSON of further MemAlignJudge options, nested or dotted "
        "('{\"validation.require_fix\": true}')",
    )
    p.add_argument("--chat-url", default="http://127.0.0.1:8013/v1")
    p.add_argument("--emb-url", default="http://127.0.0.1:8012/v1")
    p.add_argument("--chat-model", default="local")
    p.add_argument("--embedding-model", default="minilm")
    p.add_argument("--max-tokens", type=int, default=400)
    p.add_argument("--out", type=Path, required=True)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_judge_args(p)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument(
        "--align-only",
        action="store_true",
        help="only step 2: repeat the alignment (and its validation) without judging",
    )
    args = p.parse_args()
    args.instructions = args.instructions or scenario_instructions(args.scenario)
    train = read_feedback(args.scenario / "train.jsonl")
    test = read_feedback(args.scenario / "test.jsonl")
    runs: list[dict[str, Any]] = []
    started = time.time()
    for i in range(args.repeats):
        print(f"run {i + 1}/{args.repeats}", flush=True)
        runs.append(one_run(args, train, test))
        save(args, train, test, runs, time.time() - started)  # each run, in case of a stop


def save(
    args: argparse.Namespace,
    train: list[Feedback],
    test: list[Feedback],
    runs: list[dict[str, Any]],
    seconds: float,
) -> None:
    summary: dict[str, Any] = {
        key: [r[key]["correct"] if key in r else None for r in runs]
        for key in ("unaligned_test", "aligned_test", "aligned_seen")
    }
    summary["guidelines"] = [len(r["guidelines"]) for r in runs]
    summary["guidelines_after_unalign"] = [
        None if args.align_only else len(r.get("unalign", {}).get("guidelines_after", []))
        for r in runs
    ]
    summary["test_after_unalign"] = [
        r.get("unalign", {}).get("test_after", {}).get("correct") for r in runs
    ]
    summary["align_llm_calls"] = [r["align"]["usage"]["llm_calls"] for r in runs]
    require_fix = bool(option_value(judge_options(args), "validation.require_fix", False))
    summary["validation"] = [
        [validation_of(c, require_fix) for c in r["align"]["validation"]] for r in runs
    ]
    result = {
        "run": run_info(
            models={"chat": args.chat_model, "embeddings": args.embedding_model},
            data={f.name: file_sha256(f) for f in sorted(args.scenario.glob("*.jsonl"))},
        ),
        "scenario": str(args.scenario.name),
        "instructions": args.instructions,
        "n_train": len(train),
        "n_test": len(test),
        "seconds": round(seconds, 1),
        "summary": summary,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
