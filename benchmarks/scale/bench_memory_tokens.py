"""Target: memory tokens per judgment stay within the budget as feedback grows to 5,000 items.

5,000 feedback items with rationales are aligned 100 at a time through
`judge.align` (reflection batches of 8, merge, consolidation when the guidelines
outgrow `guideline_token_budget=800`). The fake reflection model turns each
rationale into one of 400 distinct rules (chosen by the rationale's first word,
so related feedback repeats a rule and the number of distinct rules grows to a
few hundred, far over the budget); the fake consolidation merges the listed
guidelines three by three (each merged text keeps the first one's wording), so it
shrinks the memory by about two thirds per run. `--consolidation fail` makes every
consolidation return unusable output instead (as a weak model may): the guidelines
then pile up, and only the selection of the most relevant ones keeps prompts within
the budget.

At checkpoints, 20 held-out cases are judged and the prompt the model received is
measured (tokens estimated as the package does, ~4 characters a token):
* guideline tokens in the prompt (must stay ≤ 800, the budget),
* memory tokens: the whole `<memory>` section, guidelines and the k=5 retrieved
  episodes (bounded by the budget + k × episode_max_chars),
* the stored guidelines (count and tokens) and the consolidation calls so far,
* for comparison, the tokens of every distinct rule distilled so far: what a memory
  that neither consolidates nor selects puts in every prompt (MLflow 3.18 appends
  every guideline to every judgment's instructions, optimizer.py:315-318).

    .venv/bin/python benchmarks/scale/run.py memory-tokens --items 5000
"""

from __future__ import annotations

import argparse
import re
import time
from typing import Any

from _common import (
    CaseGenerator,
    LatencyChatModel,
    TopicEmbeddings,
    clock_of,
    default_reply,
    loadavg,
    make_judge,
    query_cases,
    save_result,
)
from langchain_core.messages import AIMessage, BaseMessage

from langchain_memalign import Feedback
from langchain_memalign._text import estimate_tokens

VERBS = ["Acknowledge", "Explain", "Avoid", "Confirm", "Offer", "Name", "Quote", "Check"]
OBJECTS = [
    "the refund timeline",
    "the customer's frustration",
    "the exact error message",
    "the shipping status",
    "a human escalation path",
    "the warranty terms",
    "the billing cycle",
    "the account security steps",
    "the replacement options",
    "the data the agent cannot see",
    "the next concrete step",
    "what was already tried",
    "the store credit alternative",
    "the cancellation fee",
    "the delivery window",
    "the return label process",
    "the password reset flow",
    "the subscription tier",
    "the outage status page",
    "the device compatibility list",
    "the local store hours",
    "the price-match policy",
    "the gift card balance",
    "the order number format",
    "the courier's contact",
    "the loyalty points rules",
    "the invoice correction steps",
    "the privacy implications",
    "the accessibility options",
    "the trial expiry date",
    "the safety recall notice",
    "the installation appointment",
    "the language preference",
    "the payment plan options",
    "the damaged-item photos",
    "the tax receipt request",
    "the parental controls",
    "the roaming charges",
    "the data export steps",
    "the survey follow-up",
    "the appointment reminder",
    "the promotional terms",
    "the backorder estimate",
    "the repair turnaround",
    "the compensation voucher",
    "the service area map",
    "the contract end date",
    "the upgrade eligibility",
    "the duplicate charge",
    "the missing parts list",
]
RULES = [f"{v} {o} when the customer raises it." for o in OBJECTS for v in VERBS]  # 400


def rule_for(rationale: str) -> str:
    first = rationale.split()[0] if rationale.split() else ""
    return RULES[sum(map(ord, first)) * 7919 % len(RULES)]


class Responder:
    def __init__(self, consolidation: str = "merge3") -> None:
        self.distinct: set[str] = set()
        self.consolidations = 0
        self.consolidation = consolidation

    def __call__(self, messages: list[BaseMessage]) -> Any:
        system = str(messages[0].content)
        human = "\n".join(str(m.content) for m in messages[1:])
        if "grading rules of a team of experts" in system:
            out = []
            for fid, body in re.findall(r'<feedback id="([^"]+)">(.*?)</feedback>', human, re.S):
                m = re.search(r"Expert rationale: (.*)", body)
                if m:
                    rule = rule_for(m.group(1))
                    self.distinct.add(rule)
                    out.append({"text": rule, "source_ids": [fid]})
            return {"guidelines": out}
        if "grown too long" in system:
            self.consolidations += 1
            if self.consolidation == "fail":
                return AIMessage(
                    content="I cannot merge these."
                )  # unusable: retried, then an error
            rows = re.findall(r"^\[(G\d+)\] (.*)$", human, re.M)
            merged = []
            for i in range(0, len(rows), 3):
                group = rows[i : i + 3]
                merged.append({"text": group[0][1], "merged_from": [g for g, _ in group]})
            return {"guidelines": merged}
        return default_reply(messages)


def memory_section(messages: list[BaseMessage]) -> str:
    human = str(messages[-1].content)
    start, end = human.find("<memory>"), human.find("</memory>")
    return human[start : end + len("</memory>")] if start >= 0 else ""


def checkpoint(judge: Any, model: LatencyChatModel, cases: list[dict[str, Any]]) -> dict[str, Any]:
    by_id = {g.id: g for g in judge.guidelines}
    clock = clock_of(model)
    g_tokens, m_tokens, e_tokens, prompt_tokens = [], [], [], []
    for c in cases:
        res = judge.invoke(c)
        msgs = clock.last_messages
        mem = memory_section(msgs)
        g = sum(by_id[i].tokens for i in res["metadata"]["guideline_ids"] if i in by_id)
        g_tokens.append(g)
        m_tokens.append(estimate_tokens(mem))
        gs = re.search(r"<guidelines>.*?</guidelines>", mem, re.S)
        e_tokens.append(estimate_tokens(mem) - (estimate_tokens(gs.group(0)) if gs else 0))
        prompt_tokens.append(sum(estimate_tokens(str(m.content)) for m in msgs))
    return {
        "guideline_tokens_in_prompt_max": max(g_tokens),
        "guideline_tokens_in_prompt_median": sorted(g_tokens)[len(g_tokens) // 2],
        "memory_tokens_max": max(m_tokens),
        "memory_tokens_median": sorted(m_tokens)[len(m_tokens) // 2],
        "episode_tokens_median": sorted(e_tokens)[len(e_tokens) // 2],
        "prompt_tokens_median": sorted(prompt_tokens)[len(prompt_tokens) // 2],
        "stored_guidelines": len(judge.guidelines),
        "stored_guideline_tokens": sum(g.tokens for g in judge.guidelines),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=5000)
    ap.add_argument("--step", type=int, default=100)
    ap.add_argument("--budget", type=int, default=800)
    ap.add_argument(
        "--consolidation",
        choices=["merge3", "fail"],
        default="merge3",
        help="fail: consolidation never succeeds, so only relevance selection keeps "
        "the prompt within the budget",
    )
    ap.add_argument(
        "--checkpoints", type=int, nargs="+", default=[100, 200, 500, 1000, 2000, 3000, 4000, 5000]
    )
    args = ap.parse_args()
    responder = Responder(args.consolidation)
    model = LatencyChatModel(reply=responder)
    emb = TopicEmbeddings()
    judge = make_judge(model, emb, None, {"reflection": {"guideline_token_budget": args.budget}})
    cfg = judge.config
    max_chars = cfg.options.retrieval.episode_max_chars
    bound = args.budget + cfg.k * estimate_tokens("x" * (max_chars + 120)) + 60
    gen = CaseGenerator()
    cases = query_cases(20)
    rows = []
    llm_calls = 0
    started = time.perf_counter()
    la = loadavg()
    for start in range(0, args.items, args.step):
        items = []
        for i in range(start, min(args.items, start + args.step)):
            c = gen.case(i, salt=11)
            items.append(
                Feedback(
                    id=f"fb-{i:05d}",
                    inputs=c["inputs"],
                    outputs=c["outputs"],
                    value=c["value"],
                    rationale=c["rationale"],
                )
            )
        report = judge.align(items, raise_on_failure=False)
        llm_calls += report.usage.llm_calls
        done = min(args.items, start + args.step)
        if done in args.checkpoints:
            row = {"feedback_items": done, **checkpoint(judge, model, cases)}
            row["consolidation_calls_so_far"] = responder.consolidations
            row["distinct_rules_distilled"] = len(responder.distinct)
            row["all_distinct_rules_tokens"] = sum(
                estimate_tokens(r) + 2 for r in responder.distinct
            )
            row["align_llm_calls_so_far"] = llm_calls
            rows.append(row)
            print(
                f"{done:5d} items: guideline tokens in prompt max "
                f"{row['guideline_tokens_in_prompt_max']:4d} "
                f"(budget {args.budget}); memory tokens max {row['memory_tokens_max']:5d} "
                f"(bound {bound}); stored guidelines {row['stored_guidelines']:3d} "
                f"({row['stored_guideline_tokens']} tokens); consolidations "
                f"{responder.consolidations}; all distinct rules {row['distinct_rules_distilled']} "
                f"= {row['all_distinct_rules_tokens']} tokens",
                flush=True,
            )
    ok = all(r["guideline_tokens_in_prompt_max"] <= args.budget for r in rows) and all(
        r["memory_tokens_max"] <= bound for r in rows
    )
    print(
        f"target: memory tokens within budget up to {args.items} items: {'PASS' if ok else 'FAIL'}"
    )
    save_result(
        f"memory_tokens_{args.items}"
        + ("" if args.consolidation == "merge3" else "_no_consolidation"),
        {
            "consolidation": args.consolidation,
            "items": args.items,
            "guideline_token_budget": args.budget,
            "memory_token_bound": bound,
            "k": cfg.k,
            "episode_max_chars": max_chars,
            "checkpoints": rows,
            "seconds": round(time.perf_counter() - started, 1),
            "pass": ok,
            "loadavg": la,
            "loadavg_end": loadavg(),
        },
    )
