"""Working-memory prompt variants, side by side on one aligned memory (issue 10, item 5).

Loads a saved memory folder (so every variant sees the same guidelines and episodes),
then judges a scenario's test and seen cases with expert-verdict reuse off under each
variant of the judge prompt:

- `checklist`: guidelines and past cases before the case (human message); the rationale
  first names the guidelines whose condition the case meets;
- `plain`: the same, with a plain short rationale;
- `system`: guidelines and past cases in the system message, the case alone in the human
  message;
- `rules_last`: past cases, then the case, then the guidelines right before the answer;
- `episodes_only` / `guidelines_only`: one memory withheld (what each part contributes);
- `default_turns`: the package's default layout as it is now (`judge_prompt="turns"`);
- `breaks_fail`: the default plus one sentence: an output that breaks a guideline whose
  condition its case meets does not meet the criteria.

    .venv/bin/python benchmarks/prompt_variants.py MEMORY_FOLDER ../shared/scenarios/support-apology \
        --repeats 2 --out benchmarks/results/quality/prompt_variants_support_apology.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI, OpenAIEmbeddings
from pydantic import SecretStr

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import read_jsonl
from provenance import file_sha256, run_info

import langchain_memalign.graphs.judge as judge_graph
import langchain_memalign.graphs.prompts as prompts
from langchain_memalign import MemAlignJudge

Builder = Callable[..., list[BaseMessage]]
ORIGINAL: Builder = prompts.judge_messages


def _system(scale: Any, note: str, answer: str) -> str:
    return prompts.JUDGE_SYSTEM.format(scale=scale.describe(), memory_note=note, answer=answer)


def system_variant(instructions, scale, case, guidelines, episodes, max_chars, style="plain"):  # type: ignore[no-untyped-def]
    memory = prompts.memory_section(guidelines, episodes, max_chars)
    note = prompts.MEMORY_NOTE if memory else ""
    system = _system(scale, note, prompts.ANSWER_PLAIN)
    body = f"<case>\n{prompts.fill_instructions(instructions, case)}\n</case>"
    return [
        SystemMessage(content=f"{system}\n\n{memory}" if memory else system),
        HumanMessage(content=body),
    ]


def rules_last_variant(instructions, scale, case, guidelines, episodes, max_chars, style="plain"):  # type: ignore[no-untyped-def]
    past = prompts.memory_section([], episodes, max_chars)
    note = prompts.MEMORY_NOTE if (guidelines or episodes) else ""
    system = _system(scale, note, prompts.ANSWER_PLAIN)
    body = f"<case>\n{prompts.fill_instructions(instructions, case)}\n</case>"
    rules = ""
    if guidelines:
        rules = (
            "\n\n<guidelines>\n"
            + "\n".join(f"- {g.text}" for g in guidelines)
            + "\n</guidelines>\n"
        )
        rules += "Apply a guideline only if this case meets its condition."
    return [
        SystemMessage(content=system),
        HumanMessage(content=(past + "\n\n" if past else "") + body + rules),
    ]


def turns_variant(instructions, scale, case, guidelines, episodes, max_chars, style="plain"):  # type: ignore[no-untyped-def]
    """Guidelines in the system message; each past case a user turn and its verdict an
    assistant turn (the few-shot form chat models are trained on, as DSPy renders demos)."""
    from langchain_core.messages import AIMessage

    note = ""
    if guidelines:
        note = (
            "The experts who own this grading follow these guidelines (each applies only when "
            "its condition holds):\n" + "\n".join(f"- {g.text}" for g in guidelines) + "\n"
        )
    if episodes:
        note += "The earlier turns are cases the experts graded, with their verdicts.\n"
    system = _system(scale, note, prompts.ANSWER_PLAIN)
    msgs: list[BaseMessage] = [SystemMessage(content=system)]
    for ep in reversed(list(episodes)):  # the most similar case last, next to this one
        past = {"inputs": ep.inputs, "outputs": ep.outputs, "reference_outputs": ep.reference_outputs}
        msgs.append(HumanMessage(content=f"<case>\n{prompts.fill_instructions(instructions, past)}\n</case>"))
        verdict = {"rationale": ep.rationale or "", "score": ep.value}
        msgs.append(AIMessage(content=json.dumps(verdict)))
    body = f"<case>\n{prompts.fill_instructions(instructions, case)}\n</case>"
    msgs.append(HumanMessage(content=body))
    return msgs


def withheld(part: str) -> Builder:
    def build(instructions, scale, case, guidelines, episodes, max_chars, style="plain"):  # type: ignore[no-untyped-def]
        if part == "episodes":
            episodes = []
        else:
            guidelines = []
        return ORIGINAL(instructions, scale, case, guidelines, episodes, max_chars, "plain")

    return build


def styled(style: str) -> Builder:
    def build(instructions, scale, case, guidelines, episodes, max_chars, _style="plain"):  # type: ignore[no-untyped-def]
        return ORIGINAL(instructions, scale, case, guidelines, episodes, max_chars, style)

    return build


# Tried in the fifth session of Nov 24: the 1.5B judge wrote "does not open with an
# apology" of an upset customer's reply and still scored it true, as if the guidelines were
# not part of "the criteria"; this sentence ties them to the verdict.
BREAKS_FAIL = (
    "An output that breaks a guideline whose condition its case meets does not meet the "
    "criteria, however good it is otherwise.\n"
)


def breaks_fail_variant(instructions, scale, case, guidelines, episodes, max_chars, style="turns"):  # type: ignore[no-untyped-def]
    msgs = ORIGINAL(instructions, scale, case, guidelines, episodes, max_chars, "turns")
    if guidelines:  # right after the list of guidelines in the system message
        last = f"- {guidelines[-1].text}\n"
        text = str(msgs[0].content)
        at = text.index(last) + len(last)
        msgs[0] = SystemMessage(content=text[:at] + BREAKS_FAIL + text[at:])
    return msgs


VARIANTS: dict[str, Builder] = {
    "default_turns": styled("turns"),
    "breaks_fail": breaks_fail_variant,
    "checklist": styled("checklist"),
    "plain": styled("plain"),
    "system": system_variant,
    "rules_last": rules_last_variant,
    "turns": turns_variant,
    "episodes_only": withheld("guidelines"),
    "guidelines_only": withheld("episodes"),
}


def grade(judge: MemAlignJudge, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    cases = [{"inputs": r["inputs"], "outputs": r["outputs"]} for r in rows]
    out = judge.batch(cases, {"max_concurrency": 2})
    scores = [o.get("value", o["score"]) for o in out]
    right = sum(s == r["value"] for s, r in zip(scores, rows, strict=True))
    top = max(scores.count(s) for s in scores) if scores else 0
    return {
        "correct": right,
        "n": len(rows),
        "verdicts": {r["id"]: s for r, s in zip(rows, scores, strict=True)},
        "one_verdict_share": round(top / len(scores), 3) if scores else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("memory", type=Path)
    p.add_argument("scenario", type=Path)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--chat-url", default="http://127.0.0.1:8013/v1")
    p.add_argument("--emb-url", default="http://127.0.0.1:8012/v1")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    key = SecretStr("local")
    llm = ChatOpenAI(
        model="local",
        base_url=args.chat_url,
        api_key=key,
        temperature=0.0,
        max_tokens=400,
        timeout=600,
    )
    emb = OpenAIEmbeddings(
        model="minilm", base_url=args.emb_url, api_key=key, check_embedding_ctx_length=False
    )
    judge = MemAlignJudge.load(args.memory, model=llm, embeddings=emb, reuse_expert_verdicts=False)
    test = read_jsonl(args.scenario / "test.jsonl")
    seen = read_jsonl(args.scenario / "train.jsonl")
    result: dict[str, Any] = {
        "guidelines": [{"text": g.text, "sources": list(g.source_ids)} for g in judge.guidelines],
        "variants": {},
    }
    started = time.time()
    for name in args.variants.split(","):
        judge_graph.judge_messages = VARIANTS[name]  # what JudgeNodes calls
        runs = [
            {"test": grade(judge, test), "seen": grade(judge, seen)} for _ in range(args.repeats)
        ]
        result["variants"][name] = runs
        print(name, [(r["test"]["correct"], r["seen"]["correct"]) for r in runs], flush=True)
    judge_graph.judge_messages = ORIGINAL
    result["seconds"] = round(time.time() - started, 1)
    result["run"] = run_info(
        models={"chat": "local", "embeddings": "minilm"},
        data={f.name: file_sha256(f) for f in sorted(args.scenario.glob("*.jsonl"))},
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
