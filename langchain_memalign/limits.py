"""Size limits on what a memory stores and on what goes into an alignment prompt.

Without them one oversized item poisons a memory: a 1 MB rationale is stored
as is, and a single stored 200,000-character guideline made every later
`align` fail on a model with about 32,000 characters of context, because
every reflection prompt shows the existing guidelines.

Stored content (checked by `align` before any model call, and again by the
store before anything is written; over a limit raises `LimitExceededError`
naming the field and the limit):

- `MAX_ID_CHARS`: a feedback id.
- `MAX_RATIONALE_CHARS`: a feedback rationale (LangSmith's "comment").
- `MAX_ANNOTATOR_CHARS`: the annotator's name.
- `MAX_METADATA_CHARS`: a feedback item's metadata, as JSON.
- `MAX_CASE_CHARS`: a feedback item's inputs, outputs and reference outputs
  together, as JSON. Prompts show at most `episode_max_chars` of them and
  embeddings at most `embed_max_chars` (`RetrievalOptions`); this bounds what
  the folder keeps.
- `MAX_GUIDELINE_CHARS`: a guideline's text. Models are asked for far
  shorter ones (`GUIDELINE_MAX_CHARS`, 300); a reply past this hard limit
  is unusable output, retried and then dropped.
- `MAX_GUIDELINES`: guidelines in one memory. Proposals past it are
  rejected (`AlignReport.guidelines_rejected` says why) until consolidation
  or `unalign` makes room.

Prompts: every reflection, re-derivation, narrowing and consolidation prompt
is kept within `PROMPT_TOKEN_BUDGET` tokens, estimated as characters divided
by `CHARS_PER_TOKEN`: stored cases are cut shorter, contrast cases and
existing guidelines that do not fit are left out, consolidation works on the
guidelines that fit, and as a last resort the longest part of the prompt is
cut. Nothing is sent over the budget. (Judgment prompts are bounded by the
judge's own `k`, `episode_max_chars` and `guideline_token_budget` (`JudgeOptions`),
plus the case being judged, which is shown whole; so are the judgments with which
validation grades seen cases, whose cases are bounded by `MAX_CASE_CHARS`.)

The limits are read when used, so a deployment can change them, e.g.
`langchain_memalign.limits.PROMPT_TOKEN_BUDGET = 3_000` for a model with a
4k-token context.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from langchain_memalign.errors import LimitExceededError

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage

    from langchain_memalign.feedback import Feedback

MAX_ID_CHARS = 512
MAX_RATIONALE_CHARS = 8_000
MAX_ANNOTATOR_CHARS = 512
MAX_METADATA_CHARS = 32_000
MAX_CASE_CHARS = 500_000
MAX_GUIDELINE_CHARS = 1_000
MAX_GUIDELINES = 100
PROMPT_TOKEN_BUDGET = 6_000
CHARS_PER_TOKEN = 4


def _json_chars(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str))


def check_feedback(fb: Feedback) -> None:
    """Raise `LimitExceededError` if a feedback item is over a size limit."""
    dumped = fb.model_dump(mode="json")
    case = [dumped["inputs"], dumped["outputs"], dumped["reference_outputs"]]
    sizes: list[tuple[str, str, int]] = [
        ("id", "MAX_ID_CHARS", len(fb.id)),
        ("rationale", "MAX_RATIONALE_CHARS", len(fb.rationale or "")),
        ("annotator", "MAX_ANNOTATOR_CHARS", len(fb.annotator or "")),
        ("metadata", "MAX_METADATA_CHARS", _json_chars(dumped["metadata"])),
        ("inputs/outputs/reference_outputs", "MAX_CASE_CHARS", _json_chars(case)),
    ]
    for field, name, size in sizes:
        limit = int(globals()[name])
        if size > limit:
            shown = fb.id if len(fb.id) <= 80 else fb.id[:77] + "..."
            raise LimitExceededError(
                f"feedback {shown!r}: {field} is {size:,} characters, over the limit of "
                f"{limit:,} (langchain_memalign.limits.{name})",
                field=field,
                limit=limit,
                feedback_id=fb.id,
            )


def check_guideline_text(guideline_id: str, text: str) -> None:
    """Raise `ValueError` if a guideline's text is over `MAX_GUIDELINE_CHARS`.

    The stores' last guard: every path that makes guidelines bounds them first.
    """
    if len(text) > MAX_GUIDELINE_CHARS:
        raise ValueError(
            f"guideline {guideline_id} is {len(text):,} characters, over the limit of "
            f"{MAX_GUIDELINE_CHARS:,} (langchain_memalign.limits.MAX_GUIDELINE_CHARS)"
        )


def prompt_budget_chars() -> int:
    """The prompt budget of alignment calls, in characters."""
    return PROMPT_TOKEN_BUDGET * CHARS_PER_TOKEN


def prompt_chars(messages: list[BaseMessage]) -> int:
    """Characters of a prompt (what the budget is estimated from)."""
    return sum(len(m.content) if isinstance(m.content, str) else _json_chars(m.content)
               for m in messages)  # fmt: skip


def fit_prompt(messages: list[BaseMessage], max_chars: int | None = None) -> list[BaseMessage]:
    """The prompt cut to the budget: the longest message's text is cut until it fits.

    A last resort: the prompt builders already fit their parts (shorter cases,
    fewer guidelines); this guarantees that nothing goes out over the budget
    whatever they missed.
    """
    budget = prompt_budget_chars() if max_chars is None else max_chars
    out = list(messages)
    while (over := prompt_chars(out) - budget) > 0:
        texts = [(len(m.content), i) for i, m in enumerate(out) if isinstance(m.content, str)]
        if not texts:
            break
        size, i = max(texts)
        keep = max(0, size - over - 40)
        note = "\n[... cut to fit the prompt budget ...]"
        text = str(out[i].content)
        # Mark the cut when there is room for the mark.
        short = keep == 0 or size <= len(note)
        new = text[: max(0, size - over)] if short else text[:keep] + note
        if len(new) >= size:  # cannot shrink further
            break
        out[i] = out[i].model_copy(update={"content": new})
    return out
