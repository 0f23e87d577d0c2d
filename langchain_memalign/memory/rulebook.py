"""The experts' marks on guidelines: who stated, fixed, pinned or rejected which rule.

Guidelines live in the memory's guidelines table whoever wrote them; what the
experts did to them is kept beside, as one JSON value in the meta table
(`META_KEY`), so that it is saved, copied and rolled back with the guidelines
it describes and needs no table of its own on either backend:

- `marks`: per guideline id, the expert who added it (its source, by name),
  whether an expert edited it, and whether it is pinned;
- `rejected`: the rules experts rejected, with who, when and why, so that
  reflection does not learn them again (`refusal`);
- `changes`: every rulebook action with who, when and why; the memory's
  history records each as well (`rule_add`, `rule_edit`, ...).

The align and unalign steps read the marks: a `protected` guideline (added,
edited or pinned by an expert) is never rewritten by a model (re-derivation,
consolidation, narrowing), and a pinned or expert-added one is never removed
by them either.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from langchain_memalign._text import normalize
from langchain_memalign.memory.base import Store

__all__ = [
    "META_KEY",
    "REJECTED_SIMILARITY",
    "RejectedRule",
    "Rule",
    "RuleChange",
    "RuleMark",
    "RulebookState",
    "load_rulebook",
]

META_KEY = "rulebook"

# A proposal whose embedding is at least this similar (cosine) to a rejected rule's text
# is taken to say the same thing and refused. High on purpose: refusing a different rule
# loses a lesson silently, while a paraphrase that slips through is visible in the
# rulebook and can be rejected again.
REJECTED_SIMILARITY = 0.9

RuleAction = Literal["add", "edit", "pin", "unpin", "reject"]


def _now() -> str:
    return datetime.now(UTC).isoformat()


class RuleMark(BaseModel):
    """What experts did to one guideline."""

    author: str | None = Field(default=None, description="The expert who added it, if one did.")
    edited_by: str | None = Field(default=None, description="The expert who last edited it.")
    pinned_by: str | None = Field(default=None, description="The expert who pinned it.")


class RejectedRule(BaseModel):
    """A rule an expert rejected: reflection does not learn it again."""

    id: str
    text: str
    reason: str
    author: str
    at: str = Field(default_factory=_now, description="When it was rejected (ISO time).")


class RuleChange(BaseModel):
    """One rulebook action: who did what to which rule, when and why."""

    at: str = Field(default_factory=_now)
    action: RuleAction
    rule_id: str
    author: str
    reason: str | None = None
    text: str | None = Field(default=None, description="The rule's text after the action.")
    previous_text: str | None = Field(default=None, description="Its text before an edit.")


class Rule(BaseModel):
    """A guideline as the rulebook shows it: text, provenance and the experts' marks."""

    model_config = ConfigDict(frozen=True)

    id: str
    text: str
    source_ids: tuple[str, ...] = Field(description="Feedback ids it was learned from.")
    author: str | None = Field(default=None, description="The expert who stated it, if one did.")
    edited_by: str | None = None
    pinned_by: str | None = None

    @property
    def pinned(self) -> bool:
        """Whether the rule is pinned (kept as it is by every automatic step)."""
        return self.pinned_by is not None

    @property
    def edited(self) -> bool:
        """Whether an expert changed its text."""
        return self.edited_by is not None


class RulebookState(BaseModel):
    """The stored rulebook (see the module doc)."""

    marks: dict[str, RuleMark] = Field(default_factory=dict)
    rejected: list[RejectedRule] = Field(default_factory=list)
    changes: list[RuleChange] = Field(default_factory=list)

    def protected(self) -> set[str]:
        """Ids no model may rewrite or remove: added, edited or pinned by an expert."""
        return {
            gid
            for gid, m in self.marks.items()
            if m.author is not None or m.edited_by is not None or m.pinned_by is not None
        }

    def pinned(self) -> set[str]:
        """Ids of pinned rules."""
        return {gid for gid, m in self.marks.items() if m.pinned_by is not None}

    def edited_from(self, text: str) -> str:
        """The id of a rule an expert edited away from `text` (up to case and spacing), or "".

        Reflection proposing a rule's old wording again is taken to mean that rule: the
        proposal cites its feedback there instead of bringing the old wording back.
        """
        norm = normalize(text)
        for c in reversed(self.changes):
            if c.action == "edit" and c.previous_text and normalize(c.previous_text) == norm:
                return c.rule_id if c.rule_id in self.marks else ""
        return ""

    def refusal(
        self, text: str, vector: np.ndarray | None, rejected_vectors: np.ndarray | None
    ) -> RejectedRule | None:
        """The rejected rule a proposal restates, or None.

        It restates one if the texts are equal up to case, spacing and a final
        period, or if their embeddings (L2-normalized, row-aligned with
        `rejected`) reach `REJECTED_SIMILARITY`.
        """
        norm = normalize(text)
        for r in self.rejected:
            if normalize(r.text) == norm:
                return r
        if vector is None or rejected_vectors is None or not len(self.rejected):
            return None
        sims = rejected_vectors @ np.asarray(vector, dtype=np.float32).reshape(-1)
        best = int(np.argmax(sims))
        return self.rejected[best] if float(sims[best]) >= REJECTED_SIMILARITY else None

    def to_json(self) -> dict[str, Any]:
        """The value stored in the meta table."""
        return self.model_dump(mode="json", exclude_none=True)


def load_rulebook(store: Store) -> RulebookState:
    """The rulebook stored in a memory (empty if no expert acted yet)."""
    with store._reading("the rulebook"):
        raw = store.get_meta(META_KEY)
        return RulebookState() if raw is None else RulebookState.model_validate(raw)
