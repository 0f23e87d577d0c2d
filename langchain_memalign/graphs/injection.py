"""Words in graded outputs that address the grader: found and reported.

Prompt wording does not stop a judge model from obeying an instruction inside the text it
grades (docs/decisions.md#flagging-graded-text-that-addresses-the-grader), so the package
does not rely on the prompt: each result's metadata reports the words found
(`graded_text_addresses_grader`), for the caller to route to a human or fail.

The patterns are deterministic and cost no model call. They cover the families an
injection takes (an instruction to override the task, the grader addressed by name, a
fake end of the case or a fake system turn, a changed-rubric claim, a verdict written
in the judge's own answer format); a paraphrase they do not know passes unflagged.
Words about grading that do not address the grader ("return true if n is even") are not
matched.
"""

from __future__ import annotations

import re
from typing import Any

from langchain_memalign._text import render, truncate

_PATTERNS = [
    # an instruction to set the task aside
    r"\b(?:ignore|disregard|forget|override)\s+(?:all\s+|any\s+)?(?:the\s+|your\s+)?"
    r"(?:previous|prior|above|earlier|preceding|original|grading|system)\s+"
    r"(?:instructions?|prompts?|rules?|rubric|guidelines?|criteria)",
    # the grader addressed by name about the verdict
    r"\b(?:grader|evaluator|judge)\s*[,:]\s*(?:you\s+)?(?:must\s+|should\s+)?"
    r"(?:return|output|give|answer|respond|score|rate|mark|grade)\b",
    r"\bthis\s+(?:answer|response|output|reply)\s+is\s+correct\s*[,;:]\s*(?:so\s+)?"
    r"(?:return|output|give|score|mark)\b",
    # a fake end of the case, or a fake turn of the conversation
    r"</?\s*(?:case|memory|guidelines|past_cases|system|instructions)\s*>",
    r"(?:^|\n)\s*(?:system|developer)\s*:",
    r"\b(?:grading\s+)?rubric\s+(?:was|has\s+been|is)\s+(?:updated|changed|replaced)",
    # a verdict written in the judge's own answer format
    r"\{\s*\"(?:rationale|score|verdict)\"\s*:",
]
_FOUND = re.compile("|".join(f"(?:{p})" for p in _PATTERNS), re.IGNORECASE)
_QUOTE_CHARS = 120
_MAX_QUOTES = 3


def grader_directed(case: dict[str, Any]) -> list[str]:
    """Passages of a case's outputs that address the grader.

    Only the outputs, the text being graded: inputs often are conversations or
    documents with "System:" turns and instructions of their own. Each passage is the
    sentence (or line) around a match, cut to 120 characters; at most three, in order
    of appearance.
    """
    found: list[str] = []
    text = render(case.get("outputs"))
    for m in _FOUND.finditer(text):
        start = max(text.rfind("\n", 0, m.start()), text.rfind(". ", 0, m.start()) + 1, 0)
        end = min(
            (i for i in (text.find("\n", m.end()), text.find(". ", m.end())) if i >= 0),
            default=len(text),
        )
        quote = truncate(" ".join(text[start : end + 1].split()), _QUOTE_CHARS)
        if not quote or any(quote in q for q in found):
            continue
        # a longer passage around the same words replaces the shorter one
        found = [q for q in found if q not in quote] + [quote]
        if len(found) == _MAX_QUOTES:
            break
    return found
