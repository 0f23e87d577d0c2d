"""Does a seen case's verdict repeat when validation grades it again at once?

Validation grades each seen case without and with the new guidelines; since the
fourteenth session a break that would narrow or drop a guideline is graded once more and
counts only if it happens again (`graphs/validate.py`, `_unconfirmed`). That helps only if
the server's noise is not the same from one grading to the next. This script aligns a
judge on a scenario's training cases once, then grades every seen case without and with
the guidelines it kept, `--rounds` times in a row, exactly as validation does (the
package's `GuidelineValidator._without_and_with`: reuse off, each case's own episode left
out), and reports per case how often it was fixed or broken, how often a break was broken again in
the next round, and the decision validation would take on each round alone and on each
round confirmed by the next.

    .venv/bin/python benchmarks/regrade.py ../shared/scenarios/support-apology --k 5 \\
        --rounds 6 --out benchmarks/results/quality/regrade_support_apology.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from itertools import pairwise
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import read_feedback, scenario_instructions
from provenance import file_sha256, run_info
from scenario import add_judge_args, make_judge

from langchain_memalign.graphs.validate import GuidelineValidator, _rejects


def status(before: bool, after: bool) -> str:
    """A case's effect in one round: fixed, broken, or the same without and with."""
    if before == after:
        return "right" if after else "wrong"
    return "fixed" if after else "broken"


def analyse(rounds: list[dict[str, str]], require_fix: bool = False) -> dict[str, Any]:
    """Per case: its statuses, breaks and breaks that repeat in the next round; decisions."""
    cases = sorted(rounds[0])
    per_case = {}
    for c in cases:
        seq = [r[c] for r in rounds if c in r]
        pairs = list(pairwise(seq))
        per_case[c] = {
            "statuses": seq,
            "broken": seq.count("broken"),
            "fixed": seq.count("fixed"),
            "broken_then_broken": sum(a == b == "broken" for a, b in pairs),
            "broken_then_other": sum(a == "broken" != b for a, b in pairs),
        }

    def rejects(r: dict[str, str], confirm: dict[str, str] | None) -> bool:
        """The package's decision (`validate._rejects`) on one round, its breaks kept
        only where `confirm` (the next round) broke the case too."""
        fixed = [c for c, s in r.items() if s == "fixed"]
        broken = [
            c for c, s in r.items()
            if s == "broken" and (confirm is None or confirm.get(c) == "broken")
        ]  # fmt: skip
        return _rejects(fixed, broken, require_fix)

    return {
        "per_case": per_case,
        "rounds_rejecting": sum(rejects(r, None) for r in rounds),
        "rounds_rejecting_confirmed_by_next": sum(rejects(r, nxt) for r, nxt in pairwise(rounds)),
        "round_pairs": max(len(rounds) - 1, 0),
    }


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_judge_args(p)
    p.add_argument("--rounds", type=int, default=6)
    args = p.parse_args()
    args.instructions = args.instructions or scenario_instructions(args.scenario)
    train = read_feedback(args.scenario / "train.jsonl")
    started = time.time()
    judge, llm = make_judge(args)
    report = judge.align(train, raise_on_failure=False)
    kept = [g.id for g in judge.guidelines]
    print(f"aligned: {[g.text for g in judge.guidelines]}", flush=True)
    result: dict[str, Any] = {
        "run": run_info(
            models={"chat": args.chat_model, "embeddings": args.embedding_model},
            data={f.name: file_sha256(f) for f in sorted(args.scenario.glob("*.jsonl"))},
        ),
        "scenario": args.scenario.name,
        "align": json.loads(report.model_dump_json()),
        "guidelines": [g.text for g in judge.guidelines],
        "rounds": [],
    }
    if kept:
        # The judge's own grading nodes, as MemAlignJudge gives them to its validator.
        nodes = cast(Any, judge.graph).memalign_nodes
        validator = GuidelineValidator(judge.memory, nodes, llm)
        cases = list(judge.memory.store.get_feedback([fb.id for fb in train]).values())
        without: dict[str, Any] = dict.fromkeys(kept, None)
        for i in range(args.rounds):
            before, after, _ = validator._without_and_with(cases, without, {"max_concurrency": 2})
            r = {c: status(before[c], after[c]) for c in before if c in after}
            result["rounds"].append(r)
            print(f"round {i + 1}/{args.rounds}: {r}", flush=True)
        result["analysis"] = analyse(result["rounds"], judge.memory.config.validate_require_fix)
    result["seconds"] = round(time.time() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(json.dumps(result.get("analysis"), indent=1), flush=True)


if __name__ == "__main__":
    main()
