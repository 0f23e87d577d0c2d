"""Bringing a memory saved by an earlier version up to what a judge-time ablation needs."""

from __future__ import annotations

from typing import Any

from langchain_memalign import MemAlignJudge
from langchain_memalign.memory.rulebook import load_rulebook

# A judge-time ablation option handled here, not by the judge: `_failed_from_missing=true`.
FAILED_FROM_MISSING = "_failed_from_missing"


def mark_unchecked_as_failed(judge: MemAlignJudge) -> None:
    """Record every guideline without a check as one whose checks failed.

    For memories saved before failed checks were recorded (`RulebookState.failed_checks`):
    true of memories aligned with contrast pairs, where each rule has a source the check's
    verdict describes, so each was tested.
    """
    mem = judge.memory
    book = load_rulebook(mem.store)
    book.failed_checks = {g.id: g.text for g in mem.guidelines if g.id not in book.checks}
    with mem.write() as w:
        w.put_rulebook(book)


def pop_failed_from_missing(options: dict[str, Any]) -> bool:
    """Whether `options` asked for `mark_unchecked_as_failed` (the key is removed)."""
    return bool(options.pop(FAILED_FROM_MISSING, False))
