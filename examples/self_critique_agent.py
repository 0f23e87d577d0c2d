"""Self-critique: a support agent whose drafts an aligned helpfulness judge critiques.

A small LangGraph support agent drafts a reply; a helpfulness judge aligned
with a few expert reviews critiques it. A failing draft goes back to the
agent with the judge's rationale as a revision note (at most two rounds); a
passing one is sent. Afterwards a human reviewer looks at the sent replies:
confirming one verdict and correcting another. Both are recorded as feedback,
so the judge keeps learning from the agent's own outcomes.

    agent -> critique --pass--> END
      ^         |
      \\-revise--/

Run it on any OpenAI-compatible model:

    OPENAI_API_KEY=sk-...  python examples/self_critique_agent.py
    OPENAI_BASE_URL=http://localhost:8000/v1 \\
      MEMALIGN_EMBEDDINGS_BASE_URL=http://localhost:8001/v1 \\
      python examples/self_critique_agent.py \\
        --chat-model my-chat-model --embedding-model my-embedding-model
"""

from __future__ import annotations

import argparse
import operator
import os
import sys
from typing import Annotated, Any, TypedDict

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.graph import START, StateGraph

from langchain_memalign import Feedback, MemAlignJudge
from langchain_memalign.critique import CritiqueState, SelfCritique
from langchain_memalign.models import openai_compatible

JUDGE_INSTRUCTIONS = """Is this customer-support reply helpful to the customer?
Customer: {inputs}
Reply: {outputs}"""

AGENT_PROMPT = (
    "You are a customer-support agent for an online clothing store. Reply to the "
    "customer in two or three sentences. Refunds for duplicate charges take 5-7 business "
    "days; items can be returned within 30 days."
)

# Expert reviews the judge is aligned with before the agent goes live.
REVIEWS = [
    Feedback(
        id="store-hours",
        inputs="What are your store hours?",
        outputs="We're open 9am-9pm Monday through Saturday and 10am-6pm on Sunday.",
        value=True,
        rationale="Answers the question directly and completely.",
    ),
    Feedback(
        id="figure-it-out",
        inputs="How do I reset my password?",
        outputs="Figure it out yourself.",
        value=False,
        rationale="Dismissive and gives no help at all.",
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

TICKETS = [
    ("ticket-101", "I was charged twice for my order and I'm really frustrated!"),
    ("ticket-102", "Can I return a jacket I already wore once?"),
]


class SupportState(TypedDict, total=False):
    """The agent's state: the question, the current draft and the critique."""

    question: str
    draft: str
    drafts: Annotated[list[str], operator.add]
    critique: CritiqueState


def build_agent(model: BaseChatModel, critic: SelfCritique) -> Any:
    """The support agent: `agent -> critique -> END`, or back to `agent` to revise."""

    def agent(state: SupportState) -> dict[str, Any]:
        messages: list[BaseMessage] = [
            SystemMessage(content=AGENT_PROMPT),
            HumanMessage(content=state["question"]),
        ]
        note = (state.get("critique") or {}).get("note")
        if note:  # revising: show the previous draft and the reviewer's note
            messages += [AIMessage(content=state["draft"]), HumanMessage(content=note)]
        draft = str(model.invoke(messages).content).strip()
        return {"draft": draft, "drafts": [draft]}

    builder = StateGraph(SupportState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    critic.add_to(builder, agent="agent")
    return builder.compile()


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
    p.add_argument("--max-rounds", type=int, default=2, help="revision rounds per reply")
    p.add_argument("--memory-dir", default=None, help="keep the judge's memory in this folder")
    args = p.parse_args(argv)
    problem = None
    if not os.environ.get("OPENAI_API_KEY") and not args.base_url:
        problem = (
            "No model is configured. Set OPENAI_API_KEY to use OpenAI, or OPENAI_BASE_URL "
            "(and OPENAI_API_KEY=anything) for any OpenAI-compatible server; choose models with "
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
        instructions=JUDGE_INSTRUCTIONS,
        model=model,
        embeddings=embeddings,
        scale=bool,
        k=3,
        path=args.memory_dir,
    )
    judge.align(REVIEWS)
    print(f"Judge aligned with {len(REVIEWS)} expert reviews; guidelines:")
    for g in judge.guidelines:
        print(f"  - {g.text}  <- {', '.join(g.source_ids)}")

    critic = SelfCritique(
        judge,
        to_case=lambda s: {"inputs": s["question"], "outputs": s["draft"]},
        max_rounds=args.max_rounds,
    )
    app = build_agent(model, critic)

    outcomes: dict[str, Any] = {}
    for ticket, question in TICKETS:
        print(f"\n[{ticket}] Customer: {question}")
        out = app.invoke({"question": question})
        critique = out["critique"]
        for n, draft in enumerate(out["drafts"], 1):
            print(f"  draft {n}: {draft}")
        for n, result in enumerate([*critique["history"], critique["result"]], 1):
            print(f"  critique {n}: score={result['score']}  {result['comment']}")
        verdict = "passed" if critique["passed"] else "still failing, sent anyway"
        print(f"  -> sent after {critique['round']} critique(s), {verdict}")
        outcomes[ticket] = out

    # Closing the loop: a reviewer checks the sent replies. The first verdict is
    # confirmed; the second is corrected. Both become feedback the judge learns from.
    before = len(judge.guidelines)
    confirmed = critic.record(outcomes["ticket-101"], id="ticket-101", annotator="reviewer")
    corrected = critic.record(
        outcomes["ticket-102"],
        id="ticket-102",
        value=False,
        rationale="Worn items cannot be returned: the reply must state the return policy "
        "accurately instead of promising a return.",
        annotator="reviewer",
    )
    print(
        f"\nRecorded the reviewer's verdicts: ticket-101 confirmed "
        f"({len(confirmed.added)} feedback added), ticket-102 corrected "
        f"({len(corrected.guidelines_added)} new guideline(s)). "
        f"Guidelines: {before} -> {len(judge.guidelines)}."
    )
    for g in judge.guidelines:
        print(f"  - {g.text}  <- {', '.join(g.source_ids)}")
    if args.memory_dir:
        judge.close()
    return {
        "outcomes": outcomes,
        "judge": judge,
        "guidelines_before": before,
        "guidelines_after": len(judge.guidelines),
    }


if __name__ == "__main__":
    main()
