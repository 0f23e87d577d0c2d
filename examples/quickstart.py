"""Quickstart: align a helpfulness judge with five pieces of expert feedback.

This replays the MLflow MemAlign demo: a support-reply helpfulness judge is
aligned on five expert-labelled cases, one of which teaches a rule generic
judges miss (a correct but cold reply to an upset customer is unhelpful). It
prints accuracy before and after alignment, the learned rules with the
feedback they came from and the checks tested on it, then unaligns that case and shows its guideline
gone, and finally saves and reloads the judge.

Run it on any OpenAI-compatible model:

    OPENAI_API_KEY=sk-...  python examples/quickstart.py
    OPENAI_BASE_URL=http://localhost:8000/v1 \\
      MEMALIGN_EMBEDDINGS_BASE_URL=http://localhost:8001/v1 \\
      python examples/quickstart.py --chat-model my-chat-model --embedding-model my-embedding-model
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel

from langchain_memalign import Feedback, MemAlignJudge
from langchain_memalign.models import openai_compatible

INSTRUCTIONS = """Is this customer-support reply helpful to the customer?
Customer: {inputs}
Reply: {outputs}"""

ALIGNMENT = [
    Feedback(
        id="store-hours",
        inputs="What are your store hours?",
        outputs="We're open 9am-9pm Monday through Saturday and 10am-6pm on Sunday.",
        value=True,
        rationale="Answers the question directly and completely.",
    ),
    Feedback(
        id="thanks",
        inputs="Thanks so much for your help earlier!",
        outputs="You're very welcome! Let us know if there's anything else we can do.",
        value=True,
        rationale="Warm and appropriate reply to a thank-you.",
    ),
    Feedback(
        id="figure-it-out",
        inputs="How do I reset my password?",
        outputs="Figure it out yourself.",
        value=False,
        rationale="Dismissive and gives no help at all.",
    ),
    Feedback(
        id="whatever",
        inputs="Can you help me track my order?",
        outputs="Whatever.",
        value=False,
        rationale="Rude one-word reply that ignores the request.",
    ),
    Feedback(
        id="sweater",
        inputs="The sweater I received looks completely different from the photo on your "
        "website. I'm really disappointed.",
        outputs="Product colors can vary depending on your screen settings. Items can be "
        "returned within 30 days for a full refund.",
        value=False,
        rationale="Factually correct but cold: it ignores the customer's disappointment. "
        "When a customer is upset, acknowledge their feelings and apologize before "
        "giving the facts.",
    ),
]

TEST = [
    ("Do you offer gift wrapping?", "Yes! Gift wrapping is available for $5 at checkout.", True),
    ("I love your product!", "Thank you so much, we're thrilled you love it!", True),
    (
        "How do I cancel my subscription?",
        "Why would you cancel? That's a stupid decision. Go to settings if you must.",
        False,
    ),
    ("My package arrived damaged.", "I don't care.", False),
    (
        "I was charged twice for my order and I'm really frustrated!",
        "Duplicate charges are automatically refunded within 5-7 business days.",
        False,
    ),
]


def accuracy(judge: MemAlignJudge, cases: list[tuple[str, str, bool]]) -> tuple[float, list[Any]]:
    """Judge every case in one batch; return the share that matches the label."""
    results = judge.batch(
        [{"inputs": i, "outputs": o} for i, o, _ in cases], {"max_concurrency": 4}
    )
    hits = sum(r["score"] == label for r, (_, _, label) in zip(results, cases, strict=True))
    return hits / len(cases), results


def configure(argv: list[str] | None) -> tuple[argparse.Namespace, str | None]:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--chat-model", default=os.environ.get("MEMALIGN_CHAT_MODEL", "gpt-4.1-mini"))
    p.add_argument(
        "--embedding-model",
        default=os.environ.get("MEMALIGN_EMBEDDING_MODEL", "text-embedding-3-small"),
    )
    p.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"))
    p.add_argument("--embeddings-base-url", default=os.environ.get("MEMALIGN_EMBEDDINGS_BASE_URL"))
    p.add_argument(
        "--memory-dir", default=None, help="where to save the judge (default: a temp dir)"
    )
    args = p.parse_args(argv)
    problem = None
    if not os.environ.get("OPENAI_API_KEY") and not args.base_url:
        problem = (
            "No model is configured. Set OPENAI_API_KEY to use OpenAI, or OPENAI_BASE_URL "
            "for any OpenAI-compatible server (a local one needs no key); choose models with "
            "--chat-model/--embedding-model or MEMALIGN_CHAT_MODEL/MEMALIGN_EMBEDDING_MODEL, and "
            "an embedding server with --embeddings-base-url or MEMALIGN_EMBEDDINGS_BASE_URL."
        )
    return args, problem


def main(
    argv: list[str] | None = None,
    *,
    model: BaseChatModel | None = None,
    embeddings: Embeddings | None = None,
) -> dict[str, Any]:
    args, problem = configure(argv)
    if model is None or embeddings is None:
        if problem:
            print(problem, file=sys.stderr)
            raise SystemExit(2)
        model, embeddings = openai_compatible(
            args.chat_model,
            args.embedding_model,
            base_url=args.base_url,
            embeddings_base_url=args.embeddings_base_url,
            api_key=os.environ.get("OPENAI_API_KEY"),
        )
    judge = MemAlignJudge(
        name="helpfulness",
        instructions=INSTRUCTIONS,
        model=model,
        embeddings=embeddings,
        scale=bool,
        k=3,
    )

    baseline, _ = accuracy(judge, TEST)
    print(f"Baseline accuracy on {len(TEST)} test cases: {baseline:.0%}")

    report = judge.align(ALIGNMENT)
    print(
        f"\nAligned on {len(report.added)} feedback items in {report.seconds:.1f}s: "
        f"{report.usage.llm_calls} LLM call(s), {report.usage.total_tokens} tokens, "
        f"{report.usage.embedding_calls} embedding call(s)"
    )
    seen = [(f.inputs, f.outputs, f.value) for f in ALIGNMENT]
    seen_acc, _ = accuracy(judge, seen)  # type: ignore[arg-type]
    aligned, results = accuracy(judge, TEST)
    print(
        f"Aligned accuracy on the {len(TEST)} test cases: {aligned:.0%} (baseline {baseline:.0%})"
    )
    print(f"Aligned accuracy on the {len(seen)} seen cases: {seen_acc:.0%}")
    print(f'  double-charged customer: score={results[-1]["score"]}  "{results[-1]["comment"]}"')

    print("\nLearned rules (with the feedback they came from, and their checks):")
    for rule in judge.rules.list():
        print(f"  - {rule.text}  <- {', '.join(rule.source_ids)}")
        if rule.check is not None and rule.check.covered_by is None:
            test = rule.check.test.describe() if rule.check.test else "untested"
            print(f"      check: {rule.check.describe()}\n      {test}")
    fired = [r["metadata"].get("check_fired") for r in results]
    print(f"Test cases decided by a check: {sum(f is not None for f in fired)} of {len(TEST)}")

    undo = judge.unalign(["sweater"])
    print(
        f"\nUnaligned 'sweater': {len(undo.guidelines_removed)} guideline(s) removed, "
        f"{len(undo.guidelines_rederived)} re-derived from their remaining sources."
    )
    for err in undo.errors:
        print(f"  note: {err}")
    left = [g for g in judge.guidelines if "sweater" in g.source_ids]
    print(f"Guidelines still citing 'sweater': {len(left)}")
    for g in judge.guidelines:
        print(f"  - {g.text}  <- {', '.join(g.source_ids)}")
    after_unalign, _ = accuracy(judge, TEST)
    print(f"Test accuracy after unaligning 'sweater': {after_unalign:.0%}")

    folder = args.memory_dir or tempfile.mkdtemp(prefix="memalign-quickstart-")
    judge.save(folder)
    reloaded = MemAlignJudge.load(folder, model=model, embeddings=embeddings)
    print(
        f"\nSaved to {folder} and reloaded: {len(reloaded.guidelines)} guidelines, "
        f"{len(reloaded.feedback_ids)} episodes."
    )
    return {
        "baseline": baseline,
        "aligned": aligned,
        "seen": seen_acc,
        "after_unalign": after_unalign,
        "guidelines_after_unalign": reloaded.guidelines,
        "checks_fired": sum(f is not None for f in fired),
        "folder": folder,
    }


if __name__ == "__main__":
    main()
