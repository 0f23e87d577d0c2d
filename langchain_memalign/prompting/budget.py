"""Fitting alignment prompts into `limits.PROMPT_TOKEN_BUDGET`.

The prompt builders in `prompts` show what they are given; these helpers choose
what to give them so that the prompt fits: fewer existing guidelines, fewer
contrast cases, shorter cases. `StructuredCaller` cuts whatever still does not
fit (`limits.fit_prompt`), so nothing is sent over the budget.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_memalign import limits
from langchain_memalign._text import truncate
from langchain_memalign.feedback import Feedback
from langchain_memalign.memory.semantic import Guideline

# Room kept for a prompt's fixed text (system message, the task, labels).
_FIXED = 2_000
# Room a feedback block takes beyond its budgeted text (tags, labels, the id).
_BLOCK = 160
# Shortest useful case: below this, contrast cases are left out instead.
_MIN_CASE = 400


def shown_guidelines(guidelines: Sequence[Guideline], max_chars: int) -> list[Guideline]:
    """The guidelines that fit in `max_chars`, in order, each within the hard limit.

    A guideline stored before the limit existed is shown cut to it.
    """
    out: list[Guideline] = []
    used = 0
    for g in guidelines:
        text = truncate(g.text, limits.MAX_GUIDELINE_CHARS)
        shown = g if text == g.text else g.model_copy(update={"text": text})
        if used + _shown_size(shown) > max_chars:
            break
        used += _shown_size(shown)
        out.append(shown)
    return out


def _shown_size(g: Guideline) -> int:
    """Characters a guideline takes in a prompt: its text, its id and the line's markup."""
    return len(g.text) + len(g.id) + 8


def fit_reflection(
    batch: Sequence[Feedback],
    contrast: Sequence[Feedback],
    existing: Sequence[Guideline],
    episode_max_chars: int,
) -> tuple[list[Feedback], list[Guideline], int]:
    """(contrast cases, existing guidelines, characters per case) for a reflection prompt.

    The batch is what is being distilled, so all of it is shown; existing guidelines
    get at most a quarter of the budget, then contrast cases are dropped before the
    cases are cut below a useful length.
    """
    budget = limits.prompt_budget_chars() - _FIXED
    shown = shown_guidelines(existing, budget // 4)
    room = budget - sum(_shown_size(g) for g in shown)
    kept = list(contrast)
    while kept and room // (len(batch) + len(kept)) - _BLOCK < _MIN_CASE:
        kept.pop()
    per_case = room // max(1, len(batch) + len(kept)) - _BLOCK
    return kept, shown, max(100, min(episode_max_chars, per_case))


def case_chars(n_cases: int, episode_max_chars: int) -> int:
    """Characters per case for a prompt that shows `n_cases` stored cases."""
    per_case = (limits.prompt_budget_chars() - _FIXED) // max(1, n_cases) - _BLOCK
    return max(100, min(episode_max_chars, per_case))
