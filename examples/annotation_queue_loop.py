"""Annotation-queue loop: reviewers in LangSmith teach a helpfulness judge.

A support bot answers eight customers; its runs are traced to a LangSmith
project. A `JudgeAnnotationQueue` sends the runs the judge is least sure
about to reviewers, with the judge's verdict written as model feedback next to
each. The reviewers (simulated here) correct the verdicts they disagree with
in the feedback itself and add their own review where the judge was right,
then mark the items done. The next `cycle()` pulls those reviews, aligns the
judge on them and sends the next runs. The example prints the judge's
agreement with the reviewers before and after the cycle, then, once the
second batch is reviewed and learned, the agreement series: each review
beside the verdict the judge had written on that run before learning it, with
where each align happened (read from LangSmith, at no judge call).

By default it starts the local LangSmith test server of this repository
(`tests/langsmith_server.py`), so it needs no LangSmith account; with
`--langsmith` it uses the LangSmith configured in the environment
(`LANGSMITH_API_KEY`, `LANGSMITH_ENDPOINT`). Models as in the quickstart:

    OPENAI_BASE_URL=http://localhost:8000/v1 \\
      MEMALIGN_EMBEDDINGS_BASE_URL=http://localhost:8001/v1 \\
      python examples/annotation_queue_loop.py \\
        --chat-model my-chat-model --embedding-model my-embedding-model
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import langsmith
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel

from langchain_memalign import MemAlignJudge
from langchain_memalign.langsmith import JudgeAnnotationQueue
from langchain_memalign.langsmith.types import Verdict
from langchain_memalign.models import openai_compatible

INSTRUCTIONS = """Is this customer-support reply helpful to the customer?
Customer: {inputs}
Reply: {outputs}"""

# (customer message, the bot's reply, the reviewers' label, the reviewers' reason),
# oldest first: the bot answered them in this order.
CONVERSATIONS = [
    (
        "What are your store hours?",
        "We're open 9am-9pm Monday to Saturday and 10am-6pm on Sunday.",
        True,
        "Answers the question directly and completely.",
    ),
    (
        "My package arrived damaged and I'm really upset.",
        "Damaged items can be returned within 30 days for a full refund.",
        False,
        "Correct but cold: the customer is upset and the reply ignores it.",
    ),
    (
        "Can you help me track my order?",
        "Whatever.",
        False,
        "Rude one-word reply that ignores the request.",
    ),
    (
        "I've been waiting two weeks for my refund and I'm angry.",
        "Refunds take 10 business days to process.",
        False,
        "Cold reply to an angry customer: no apology, no acknowledgement.",
    ),
    (
        "I was charged twice for my order and I'm really frustrated!",
        "Duplicate charges are refunded automatically within 5-7 business days.",
        False,
        "Factually right but cold: when a customer is frustrated, acknowledge their "
        "feelings and apologize before giving the facts.",
    ),
    (
        "How do I reset my password?",
        "Figure it out yourself.",
        False,
        "Dismissive and gives no help at all.",
    ),
    (
        "Do you ship to Canada?",
        "Yes! We ship to Canada; delivery takes 5-8 business days.",
        True,
        "Direct and complete answer.",
    ),
    (
        "The sweater looks completely different from the photo. I'm so disappointed.",
        "I'm so sorry it disappointed you! Colors can vary by screen; we'll gladly take "
        "it back within 30 days for a full refund.",
        True,
        "Acknowledges the disappointment first, then gives the facts.",
    ),
]
REVIEWERS = ("alice", "bob")


def configure(argv: Sequence[str] | None) -> tuple[argparse.Namespace, str | None]:
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
    p.add_argument("--memory-dir", default=None, help="keep the judge's memory here")
    p.add_argument("--project", default="memalign-demo-support-bot")
    p.add_argument("--batch", type=int, default=4, help="runs sent to the queue per cycle")
    p.add_argument(
        "--langsmith",
        action="store_true",
        help="use the LangSmith configured in the environment instead of the local test server",
    )
    args = p.parse_args(argv)
    problem = None
    if not os.environ.get("OPENAI_API_KEY") and not args.base_url:
        problem = (
            "No model is configured. Set OPENAI_API_KEY to use OpenAI, or OPENAI_BASE_URL "
            "(and OPENAI_API_KEY=anything) for any OpenAI-compatible server; choose models with "
            "--chat-model/--embedding-model, and an embedding server with --embeddings-base-url "
            "or MEMALIGN_EMBEDDINGS_BASE_URL."
        )
    return args, problem


@contextlib.contextmanager
def langsmith_client(use_env: bool) -> Iterator[langsmith.Client]:
    """The configured LangSmith, or the repository's local LangSmith test server."""
    if use_env:
        client = langsmith.Client()
        yield client
        client.close()
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from langsmith_server import LangSmithTestServer  # type: ignore[import-not-found]

    # zstd-compressed ingestion, as LangSmith itself offers it (the client warns otherwise)
    with LangSmithTestServer(zstd_compression=True) as server:
        print(f"Local LangSmith test server at {server.url}")
        client = langsmith.Client(api_url=server.url, api_key="local")
        yield client
        client.close()


Case = tuple[str, str, bool, str]


def trace_support_bot(client: langsmith.Client, project: str) -> dict[str, Case]:
    """'Production': the bot answers every customer; each answer is a traced run."""
    answers = {question: reply for question, reply, _, _ in CONVERSATIONS}
    traced: dict[str, Case] = {}

    @langsmith.traceable(name="support_bot")
    def support_bot(question: str) -> str:
        run = langsmith.get_current_run_tree()
        assert run is not None
        traced[str(run.id)] = next(c for c in CONVERSATIONS if c[0] == question)
        return answers[question]

    with langsmith.tracing_context(enabled=True, client=client, project_name=project):
        for question, *_ in CONVERSATIONS:
            support_bot(question)
    client.flush()
    return traced


def review(
    client: langsmith.Client,
    queue: JudgeAnnotationQueue,
    verdicts: list[Verdict],
    cases: dict[str, Case],
    project_id: str,
) -> None:
    """Simulated reviewers: correct wrong verdicts, confirm right ones, mark items done."""
    for n, verdict in enumerate(verdicts):
        _, _, label, reason = cases[verdict.run_id]
        reviewer = REVIEWERS[n % len(REVIEWERS)]
        if verdict.score != label and verdict.feedback_id:
            # In the UI: open the judge's feedback, "Make correction", add an explanation.
            client.update_feedback(
                verdict.feedback_id, correction={"score": int(label), "explanation": reason}
            )
            action = "corrected the judge:"
        else:
            client.create_feedback(
                verdict.run_id,
                queue.judge.config.name,
                score=int(label),
                comment=reason,
                source_info={"annotator": reviewer},
                session_id=project_id,
            )
            action = "agreed with the judge:"
        print(f"  {reviewer} {action:23} {label!s:5} {reason}")
    queue.complete([v.run_id for v in verdicts])


def verdict(score: Any) -> str:
    return "pass" if score is True else "fail" if score is False else str(score)


def agreement(verdicts: dict[str, Any], labels: dict[str, bool], run_ids: list[str]) -> str:
    hits = sum(verdicts[r] == labels[r] for r in run_ids)
    return f"{hits}/{len(run_ids)}"


def main(
    argv: Sequence[str] | None = None,
    *,
    model: BaseChatModel | None = None,
    embeddings: Embeddings | None = None,
    client: langsmith.Client | None = None,
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
    with contextlib.ExitStack() as stack:
        if client is None:
            client = stack.enter_context(langsmith_client(args.langsmith))
        return run(args, model, embeddings, client)


def run(
    args: argparse.Namespace,
    model: BaseChatModel,
    embeddings: Embeddings,
    client: langsmith.Client,
) -> dict[str, Any]:
    cases = trace_support_bot(client, args.project)
    project_id = str(client.read_project(project_name=args.project).id)
    labels = {run_id: case[2] for run_id, case in cases.items()}
    print(f"Traced {len(cases)} support-bot runs to project {args.project!r}.")

    judge = MemAlignJudge(
        name="helpfulness",
        instructions=INSTRUCTIONS,
        model=model,
        embeddings=embeddings,
        scale=bool,
        k=3,
        path=args.memory_dir,
    )
    queue = JudgeAnnotationQueue(judge, client)
    options: dict[str, Any] = {"project": args.project, "select": "uncertain", "limit": args.batch}

    print(f"\nCycle 1: send the {args.batch} runs the judge is least sure about.")
    first = queue.cycle(write_verdicts=True, **options)
    before = {v.run_id: v.score for v in first.sent.verdicts}
    reviewed = first.sent.run_ids
    print(f"  {len(reviewed)} runs in queue {queue.name!r}, each with the judge's verdict")
    print("Reviewers work through the queue:")
    review(client, queue, [v for v in first.sent.verdicts if v.run_id in reviewed], cases,
           project_id)  # fmt: skip

    print("\nCycle 2: pull the completed reviews, align, send the next runs.")
    second = queue.cycle(write_verdicts=True, **options)
    pulled = second.pulled
    learned = len(pulled.align.guidelines_added) if pulled.align else 0
    print(f"  pulled {pulled.listed} reviews, aligned {len(pulled.added)}, {learned} guideline(s):")
    for g in judge.guidelines:
        print(f"    - {g.text}")
    print(f"  sent the next {len(second.sent.run_ids)} runs")

    after = {v.run_id: v.score for v in second.sent.verdicts}
    rejudged = judge.batch(
        [
            {"inputs": {"question": cases[r][0]}, "outputs": {"output": cases[r][1]}}
            for r in reviewed
        ],
        {"max_concurrency": 4},
    )
    after.update({r: res["score"] for r, res in zip(reviewed, rejudged, strict=True)})
    held_out = [r for r in cases if r not in reviewed]
    everything = list(cases)

    print("\nThe judge's agreement with the reviewers, before -> after the cycle:")
    for name, ids in (
        ("reviewed runs", reviewed),
        ("runs not reviewed yet", held_out),
        ("all runs", everything),
    ):
        print(f"  {name:22} {agreement(before, labels, ids)} -> {agreement(after, labels, ids)}")
    print(f"\n    {'customer (* = reviewed in cycle 1)':46} {'reviewers':9}  before  after")
    for run_id, (question, _, label, _) in cases.items():
        mark = "*" if run_id in reviewed else " "
        print(
            f"  {mark} {question[:46]:46} {verdict(label):9}  {verdict(before[run_id]):6}  "
            f"{verdict(after[run_id])}"
        )
    again = queue.pull()
    print(f"\nPulling again adds nothing: {len(again.added)} new, {len(again.updated)} changed.")

    print("\nReviewers work through the runs sent in cycle 2; cycle 3 pulls and aligns them.")
    review(client, queue, second.sent.verdicts, cases, project_id)
    queue.cycle(write_verdicts=True, **options)
    # Each review beside the verdict the judge had written on that run before it learned
    # the review: read from LangSmith, so the series costs no judge call.
    history = judge.agreement_history(window=args.batch)
    print("\nAgreement with each review before the judge learned it (memalign show --curve):")
    for w in history.windows:
        print(f"  reviews {w.first}-{w.last}: agreed on {w.accuracy:.0%} of {w.count}")
    for a in history.aligns:
        print(f"  align {a.number} after review {a.after}: learned {a.learned}")

    def rate(verdicts: dict[str, Any], ids: list[str]) -> float:
        return sum(verdicts[r] == labels[r] for r in ids) / len(ids) if ids else 0.0

    return {
        "before": rate(before, everything),
        "after": rate(after, everything),
        "before_held_out": rate(before, held_out),
        "after_held_out": rate(after, held_out),
        "reviewed": reviewed,
        "sent_next": second.sent.run_ids,
        "pulled": pulled,
        "again": again,
        "history": history,
        "judge": judge,
        "queue_id": queue.queue_id,
    }


if __name__ == "__main__":
    main()
