"""Prompts for judging, reflecting, re-deriving and consolidating guidelines."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from langchain_memalign._text import render, truncate
from langchain_memalign.feedback import Feedback
from langchain_memalign.memory.episodic import Episode
from langchain_memalign.memory.semantic import Guideline
from langchain_memalign.scale import Scale

_PLACEHOLDER = re.compile(
    r"\{\{\s*(inputs|outputs|reference_outputs)\s*\}\}|\{(inputs|outputs|reference_outputs)\}"
)

JUDGE_SYSTEM = """You are an expert evaluator. Grade the case in <case> by the instructions in it.
{scale}
{memory_note}Think briefly, then answer with a JSON object: {{"rationale": "<1-3 sentences>", "score": <score>}}. Write the rationale before the score."""

MEMORY_NOTE = (
    "<memory> holds what the experts who own this grading taught you: guidelines distilled "
    "from their feedback, and past cases they graded with their reasons. Where they differ "
    "from generic best practice, follow the experts.\n"
)

REFLECT_SYSTEM = """You help an LLM judge learn the grading rules of a team of experts.
The judge's task: {task}
{scale}
Below, experts graded cases and explained why. For each feedback item whose rationale teaches a rule, write that rule as a guideline the judge must follow on future cases.
- One short imperative sentence per guideline, in the experts' terms, general enough for other cases (no details of this one case).
- Prefer what the experts care about that a generic judge would miss.
- Do not restate an existing guideline: if feedback supports one, return its text with its id in "existing_id".
- "source_ids": only the id(s) of the feedback whose rationale states the rule.
Answer with JSON: {{"guidelines": [{{"text": "...", "source_ids": ["<feedback id>"], "existing_id": ""}}]}}"""

REDERIVE_SYSTEM = """You maintain the grading guidelines of an LLM judge.
The judge's task: {task}
A guideline was learned from several feedback items and some of them have been withdrawn. Restate the guideline using only what the remaining feedback below supports: keep it as it is if the remaining feedback supports it, narrow it if it supports only part. Answer with an empty text only if no remaining feedback supports any part of it.
Answer with JSON: {{"text": "..."}}"""

CONSOLIDATE_SYSTEM = """You maintain the grading guidelines of an LLM judge.
The judge's task: {task}
The guidelines below have grown too long. Merge guidelines that overlap or say the same thing into one, keep distinct rules distinct, and keep every rule the experts taught. Use at most {max_words} words in all.
For each resulting guideline list in "merged_from" the ids of the guidelines it replaces.
Answer with JSON: {{"guidelines": [{{"text": "...", "merged_from": ["..."]}}]}}"""


def fill_instructions(instructions: str, case: dict[str, Any]) -> str:
    """Fill `{inputs}`-style (or `{{ inputs }}`-style) placeholders with the case.

    Any part of the case the instructions do not mention is appended, so a
    judge never grades without seeing what it grades.
    """
    used: set[str] = set()

    def sub(m: re.Match[str]) -> str:
        key = m.group(1) or m.group(2)
        used.add(key)
        return render(case.get(key))

    text = _PLACEHOLDER.sub(sub, instructions)
    labels = {"inputs": "Inputs", "outputs": "Outputs", "reference_outputs": "Reference outputs"}
    extra = [
        f"{label}:\n{render(case[key])}"
        for key, label in labels.items()
        if key not in used and case.get(key) is not None
    ]
    return "\n\n".join([text, *extra]) if extra else text


def format_value(value: Any) -> str:
    """A score as the model should write it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _episode_block(ep: Episode, max_chars: int, *, verdict_first: bool = False) -> str:
    parts = [("Inputs", render(ep.inputs)), ("Outputs", render(ep.outputs))]
    if ep.reference_outputs is not None:
        parts.append(("Reference outputs", render(ep.reference_outputs)))
    # The verdict and rationale are what the episode teaches: they get their
    # share of the budget first, the case text gets the rest.
    reason = truncate(ep.rationale or "", max_chars // 3)
    room = max(60, (max_chars - len(reason)) // len(parts))
    case = [f"{name}: {truncate(text, room)}" for name, text in parts if text]
    verdict = [f"Expert score: {format_value(ep.value)}"]
    if reason:
        verdict.append(f"Expert rationale: {reason}")
    return "\n".join(verdict + case if verdict_first else case + verdict)


def memory_section(
    guidelines: Sequence[Guideline], episodes: Sequence[Episode], episode_max_chars: int
) -> str:
    """The working memory, delimited so the model can tell it from the case."""
    if not guidelines and not episodes:
        return ""
    out = ["<memory>"]
    if guidelines:
        out.append("<guidelines>")
        out.extend(f"- {g.text}" for g in guidelines)
        out.append("</guidelines>")
    if episodes:
        out.append("<past_cases>")
        for i, ep in enumerate(episodes, 1):
            out.append(f"<case_{i}>\n{_episode_block(ep, episode_max_chars)}\n</case_{i}>")
        out.append("</past_cases>")
    out.append("</memory>")
    return "\n".join(out)


def judge_messages(
    instructions: str,
    scale: Scale,
    case: dict[str, Any],
    guidelines: Sequence[Guideline],
    episodes: Sequence[Episode],
    episode_max_chars: int,
) -> list[BaseMessage]:
    """The judge prompt: instructions + working memory + the case."""
    memory = memory_section(guidelines, episodes, episode_max_chars)
    system = JUDGE_SYSTEM.format(scale=scale.describe(), memory_note=MEMORY_NOTE if memory else "")
    body = f"<case>\n{fill_instructions(instructions, case)}\n</case>"
    return [
        SystemMessage(content=system),
        HumanMessage(content=f"{memory}\n\n{body}" if memory else body),
    ]


def _task(instructions: str) -> str:
    # The template without the case placeholders is the clearest statement of the task.
    return truncate(_PLACEHOLDER.sub("", instructions).strip(), 600)


def _feedback_block(fb: Feedback, max_chars: int) -> str:
    ep = Episode(
        feedback_id=fb.id, inputs=fb.inputs, outputs=fb.outputs,
        reference_outputs=fb.reference_outputs, value=fb.value, rationale=fb.rationale,
    )  # fmt: skip
    # Reflection is about the rationale: lead with it, so a small model reads it first.
    block = _episode_block(ep, max_chars, verdict_first=True)
    return f'<feedback id="{fb.id}">\n{block}\n</feedback>'


def reflect_messages(
    instructions: str,
    scale: Scale,
    batch: Sequence[Feedback],
    existing: Sequence[Guideline],
    max_chars: int,
) -> list[BaseMessage]:
    """Ask the model to distill guidelines from a batch of feedback."""
    system = REFLECT_SYSTEM.format(task=_task(instructions), scale=scale.describe())
    parts = []
    if existing:
        parts.append("Existing guidelines:\n" + "\n".join(f"[{g.id}] {g.text}" for g in existing))
    parts.append("Expert feedback:\n" + "\n".join(_feedback_block(fb, max_chars) for fb in batch))
    return [SystemMessage(content=system), HumanMessage(content="\n\n".join(parts))]


def rederive_messages(
    instructions: str, guideline: Guideline, remaining: Sequence[Feedback], max_chars: int
) -> list[BaseMessage]:
    """Ask the model to restate a guideline from its remaining sources only."""
    system = REDERIVE_SYSTEM.format(task=_task(instructions))
    body = f"Guideline: {guideline.text}\n\nRemaining feedback:\n" + "\n".join(
        _feedback_block(fb, max_chars) for fb in remaining
    )
    return [SystemMessage(content=system), HumanMessage(content=body)]


def consolidate_messages(
    instructions: str, guidelines: Sequence[Guideline], max_words: int
) -> list[BaseMessage]:
    """Ask the model to merge overlapping guidelines."""
    system = CONSOLIDATE_SYSTEM.format(task=_task(instructions), max_words=max_words)
    body = "Guidelines:\n" + "\n".join(f"[{g.id}] {g.text}" for g in guidelines)
    return [SystemMessage(content=system), HumanMessage(content=body)]
