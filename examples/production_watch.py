"""Production watch: a judge on a support bot's live traffic, learning from reviews.

A support bot answers customers; its runs are traced to a LangSmith project. A
`JudgeMonitor` (what `memalign watch` runs) watches the project in cycles. Each
cycle it learns the reviews completed in the judge's annotation queue (saying how
often the judge had agreed with them before learning), judges the new runs it has
not read yet, oldest first and at most `--scan` a cycle (the rest are left for the
next cycles, and the report says how many), writes every verdict on its run as
model feedback, and sends the runs the judge is least sure about to the queue.

Here the traffic comes in two waves and the reviewers (simulated) correct the
verdicts they disagree with in the feedback itself, then mark the items done. The
example prints each cycle's report, what the judge learned, the agreement series
(each review beside the verdict the judge had written on that run before learning
it) and checks that every run was judged exactly once; a restarted watch reads on
from where the last one stopped.

`--offline` runs it with no network and no account, in a few seconds: scripted
models that play the judge's and the reflection's parts (the repository's test
fakes) and the repository's local LangSmith stand-in (`tests/langsmith_server.py`)
in this process. Without it, models as in the quickstart, and the local stand-in
unless `--langsmith` uses the LangSmith configured in the environment
(`LANGSMITH_API_KEY`, `LANGSMITH_ENDPOINT`):

    python examples/production_watch.py --offline
    OPENAI_BASE_URL=http://localhost:8000/v1 python examples/production_watch.py \\
        --chat-model my-chat-model --embedding-model my-embedding-model

The same loop from the command line, on a real project (cron or a long-lived process):

    memalign watch -c judge.toml --langsmith-project support-bot --interval 300
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import langsmith
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel

from langchain_memalign import MemAlignJudge
from langchain_memalign.langsmith import JudgeMonitor, MonitorCycle
from langchain_memalign.models import openai_compatible

TESTS = Path(__file__).resolve().parents[1] / "tests"

INSTRUCTIONS = """Is this customer-support reply helpful to the customer?
Customer: {inputs}
Reply: {outputs}"""

# (customer message, the bot's reply, the reviewers' label, the reviewers' reason).
FIRST_WAVE = [
    ("What are your store hours?", "We're open 9am-9pm, Monday to Saturday.", True,
     "Answers the question directly."),
    ("I was charged twice and I'm really frustrated!",
     "Duplicate charges are refunded automatically within 5-7 business days.", False,
     "Factually right but cold: when a customer is upset, acknowledge their feelings "
     "and apologize before giving the facts."),
    ("Can you help me track my order?", "Whatever.", False, "Rude, and no help."),
    ("Do you ship to Canada?", "Yes, in 5-8 business days.", True, "Direct and complete."),
    ("My package arrived damaged and I'm upset.",
     "Damaged items can be returned within 30 days.", False,
     "Cold reply to an upset customer: no apology, no acknowledgement."),
    ("How do I reset my password?", "Click 'Forgot password' on the sign-in page.", True,
     "Gives the exact step."),
]  # fmt: skip
SECOND_WAVE = [
    ("I've waited two weeks for my refund and I'm angry.",
     "Refunds take 10 business days to process.", False,
     "Ignores the customer's anger: acknowledge it and apologize first."),
    ("The sweater looks different from the photo. I'm disappointed.",
     "I'm so sorry it disappointed you! Colors vary by screen; we'll gladly take it back.",
     True, "Acknowledges the disappointment, then helps."),
    ("Is there a student discount?", "Yes: 10% with a student email.", True,
     "Answers the question."),
    ("Your app keeps crashing and I'm frustrated.",
     "Reinstall the app from the store.", False,
     "No acknowledgement of the frustration before the fix."),
]  # fmt: skip
Case = tuple[str, str, bool, str]
REVIEWERS = ("alice", "bob")


def configure(argv: Sequence[str] | None) -> tuple[argparse.Namespace, str | None]:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--offline",
        action="store_true",
        help="scripted models and the local LangSmith stand-in: no network, no account",
    )
    p.add_argument("--chat-model", default=os.environ.get("MEMALIGN_CHAT_MODEL", "gpt-4.1-mini"))
    p.add_argument(
        "--embedding-model",
        default=os.environ.get("MEMALIGN_EMBEDDING_MODEL", "text-embedding-3-small"),
    )
    p.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"))
    p.add_argument("--embeddings-base-url", default=os.environ.get("MEMALIGN_EMBEDDINGS_BASE_URL"))
    p.add_argument("--memory-dir", default=None, help="keep the judge's memory here")
    p.add_argument("--project", default="memalign-demo-production")
    p.add_argument("--scan", type=int, default=4, help="new runs read a cycle (default: 4)")
    p.add_argument(
        "--review-limit", type=int, default=2, help="runs sent for review a cycle (default: 2)"
    )
    p.add_argument(
        "--langsmith",
        action="store_true",
        help="use the LangSmith configured in the environment instead of the local stand-in",
    )
    args = p.parse_args(argv)
    if args.offline and args.langsmith:
        p.error("--offline runs on the local LangSmith stand-in: leave out --langsmith")
    problem = None
    if not args.offline and not os.environ.get("OPENAI_API_KEY") and not args.base_url:
        problem = (
            "No model is configured. Pass --offline to run with scripted models, set "
            "OPENAI_API_KEY to use OpenAI, or OPENAI_BASE_URL (and OPENAI_API_KEY=anything) "
            "for any OpenAI-compatible server."
        )
    return args, problem


def offline_models() -> tuple[BaseChatModel, Embeddings]:
    """Scripted models from the repository's test fakes (`tests/fakes.py`).

    The judge's part fails rude replies, and once its memory holds a rule about
    acknowledging feelings, replies to upset customers that do not apologize; the
    reflection's part turns each reviewer's reason into a rule.
    """
    sys.path.insert(0, str(TESTS))
    from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel  # type: ignore[import-not-found]

    def judge_rule(case: str, memory: str) -> dict[str, Any]:
        text = case.lower()
        rude = "whatever" in text
        upset = any(w in text for w in ("frustrated", "upset", "angry", "disappointed"))
        if rude or ("acknowledge" in memory.lower() and upset and "sorry" not in text):
            return {"rationale": "Unhelpful.", "score": False}
        return {"rationale": "Helpful.", "score": True}

    return ScriptedChatModel(responder=RoleResponder(judge_rule)), HashEmbeddings()


@contextlib.contextmanager
def langsmith_client(use_env: bool) -> Iterator[langsmith.Client]:
    """The configured LangSmith, or the repository's local LangSmith stand-in."""
    if use_env:
        client = langsmith.Client()
        yield client
        client.close()
        return
    sys.path.insert(0, str(TESTS))
    from langsmith_server import LangSmithTestServer  # type: ignore[import-not-found]

    # zstd-compressed ingestion, as LangSmith itself offers it (the client warns otherwise)
    with LangSmithTestServer(zstd_compression=True) as server:
        print(f"Local LangSmith stand-in at {server.url}")
        client = langsmith.Client(api_url=server.url, api_key="local")
        yield client
        client.close()


def serve(client: langsmith.Client, project: str, wave: list[Case]) -> dict[str, Case]:
    """'Production': the bot answers each customer; each answer is a traced root run."""
    traced: dict[str, Case] = {}
    by_question = {case[0]: case for case in wave}

    # Traced with the customer's message alone: the run the judge reads is what
    # production sees, never the reviewers' verdict and reason.
    @langsmith.traceable(name="support_bot")
    def support_bot(question: str) -> str:
        run = langsmith.get_current_run_tree()
        assert run is not None
        case = by_question[question]
        traced[str(run.id)] = case
        return case[1]

    with langsmith.tracing_context(enabled=True, client=client, project_name=project):
        for case in wave:
            support_bot(case[0])
    client.flush()
    return traced


def review(
    client: langsmith.Client, monitor: JudgeMonitor, sent: list[str], cases: dict[str, Case]
) -> None:
    """Simulated reviewers: correct the verdicts they disagree with, confirm the others."""
    key = monitor.judge.config.name
    verdicts = {
        str(f.run_id): f
        for f in client.list_feedback(run_ids=sent, feedback_key=[key])
        if f.feedback_source is not None and f.feedback_source.type == "model"
    }
    for n, run_id in enumerate(sent):
        question, _, label, reason = cases[run_id]
        reviewer = REVIEWERS[n % len(REVIEWERS)]
        verdict = verdicts[run_id]
        if bool(verdict.score) != label:
            # In the UI: open the judge's feedback, "Make correction", add an explanation.
            client.update_feedback(
                verdict.id, correction={"score": int(label), "explanation": reason}
            )
            print(f"  {reviewer} corrected the judge on {question!r}: {reason}")
        else:
            client.create_feedback(
                run_id,
                key,
                score=int(label),
                comment=reason,
                source_info={"annotator": reviewer},
                session_id=monitor.api.project(monitor.project).id,
            )
            print(f"  {reviewer} agreed with the judge on {question!r}")
    monitor.queue.complete(sent)


def main(
    argv: Sequence[str] | None = None,
    *,
    model: BaseChatModel | None = None,
    embeddings: Embeddings | None = None,
    client: langsmith.Client | None = None,
) -> dict[str, Any]:
    args, problem = configure(argv)
    if model is None or embeddings is None:
        if args.offline:
            model, embeddings = offline_models()
        elif problem:
            print(problem, file=sys.stderr)
            raise SystemExit(2)
        else:
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
    judge = MemAlignJudge(
        name="helpfulness",
        instructions=INSTRUCTIONS,
        model=model,
        embeddings=embeddings,
        scale=bool,
        k=3,
        path=args.memory_dir,
    )
    cases = serve(client, args.project, FIRST_WAVE)
    print(f"The bot answered {len(cases)} customers (traced to {args.project!r}).")

    def watch() -> JudgeMonitor:
        # A new monitor each cycle, as cron's `memalign watch --once` would start: the
        # cursor and the failures it counts are kept in the judge's memory.
        return JudgeMonitor(
            judge, client, project=args.project, scan=args.scan, review_limit=args.review_limit
        )

    cycles: list[MonitorCycle] = []

    def cycle(title: str) -> MonitorCycle:
        report = watch().run_once()
        cycles.append(report)
        print(f"\n{title}\n  {report.summary()}")
        return report

    first = cycle("Cycle 1: judge the oldest runs, send the least sure for review.")
    print("Reviewers work through the queue:")
    review(client, watch(), first.sent, cases)
    second = cycle("Cycle 2: learn the reviews, judge the next runs.")
    print(
        f"  The judge's memory: {len(judge.guidelines)} rule(s), "
        f"{len(judge.feedback_ids)} reviewed case(s) it recalls when judging a similar one"
    )
    for g in judge.guidelines:
        print(f"    rule: {g.text}")
    review(client, watch(), second.sent, cases)

    more = serve(client, args.project, SECOND_WAVE)
    cases |= more
    print(f"\nA second wave: {len(more)} more customers.")
    n = 3
    while True:
        report = cycle(f"Cycle {n}: read on from where the last cycle stopped.")
        n += 1
        if not report.considered and not report.left:
            break  # nothing new: the reviews sent so far are learned
        if report.sent:
            review(client, watch(), report.sent, cases)

    key = judge.config.name
    verdicts = Counter(
        str(f.run_id)
        for f in client.list_feedback(run_ids=list(cases), feedback_key=[key])
        if f.feedback_source is not None and f.feedback_source.type == "model"
    )
    once = all(verdicts[r] == 1 for r in cases)
    print(f"\nVerdicts in LangSmith: {sum(verdicts.values())} on {len(cases)} runs, "
          f"{'each judged exactly once' if once else 'NOT each once'}.")  # fmt: skip
    history = judge.agreement_history(window=2)
    print("Agreement with each review before the judge learned it (memalign show --curve):")
    for w in history.windows:
        print(f"  reviews {w.first}-{w.last}: agreed on {w.accuracy:.0%} of {w.count}")
    judged = {v.run_id: v.score for c in cycles for v in c.verdicts}
    right = sum(judged[r] == cases[r][2] for r in more if r in judged)
    print(f"Second wave, judged after learning: {right}/{len(more)} as the reviewers would.")
    return {
        "cycles": cycles,
        "cases": cases,
        "verdicts": dict(verdicts),
        "once": once,
        "second_wave_right": right,
        "history": history,
        "judge": judge,
    }


if __name__ == "__main__":
    main()
