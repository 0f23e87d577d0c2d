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
  history records each as well (`rule_add`, `rule_edit`, ...);
- `checks`: per guideline id, the rule as a `Check` (literal yes/no questions about
  one case and the verdict breaking it gets), with how it did on the experts' own
  cases. Kept here so that a check commits and rolls back with its rule;
- `attempts`: per guideline id that kept no check, the candidates tried and the
  answers they got (`CheckAttempt`).

The align and unalign steps read the marks: a `protected` guideline (added,
edited or pinned by an expert) is never rewritten by a model (re-derivation,
consolidation, narrowing), and a pinned or expert-added one is never removed
by them either.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from langchain_memalign._text import normalize
from langchain_memalign.memory.base import Store

__all__ = [
    "META_KEY",
    "REJECTED_SIMILARITY",
    "Check",
    "CheckAttempt",
    "CheckTest",
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

RuleAction = Literal["add", "edit", "pin", "unpin", "reject", "check", "uncheck"]


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


class CheckTest(BaseModel):
    """How a check did on the experts' own cases: its unit test, re-run as feedback changes.

    On each tested case the check either fired (the rule is broken there) or not. It
    agrees with the experts where it fired and they gave its consequence, and where it
    stayed silent on a case they graded otherwise; it disagrees where it fired on a case
    they graded otherwise (a false alarm) or stayed silent on one of its rule's own
    source cases that got the consequence (a miss). A case the experts gave the
    consequence for another reason, where the check stayed silent, does not count.
    """

    fired: dict[str, bool | list[bool]] = Field(
        default_factory=dict,
        description="Per tested feedback id: whether the check fired (on a pairwise case, "
        "for each output).",
    )
    answers: dict[str, dict[str, bool]] = Field(
        default_factory=dict,
        description="Per tested case (a pairwise case's outputs as `<id>#1`, `<id>#2`): the "
        "answers the model gave, kept so a re-test asks only about new cases.",
    )
    agreed: int = 0
    counted: int = Field(default=0, description="Tested cases that count (see the class doc).")
    caught: int = Field(default=0, description="Cases where it fired and the experts agree.")
    false_alarms: int = 0
    missed: int = 0
    tried: int = Field(default=1, description="Phrasings tried before this one was kept.")
    at: str = Field(default_factory=_now, description="When it was last tested (ISO time).")

    @property
    def agreement(self) -> float:
        """The share of counted cases where the check agrees with the experts (0 if none)."""
        return self.agreed / self.counted if self.counted else 0.0

    def describe(self) -> str:
        """One line, e.g. "agrees with the experts on 7 of 8 of their cases (fired on 3)"."""
        if not self.counted:
            return "not tested on the experts' cases yet"
        return (
            f"agrees with the experts on {self.agreed} of {self.counted} of their cases "
            f"(fired on {sum(any(f) if isinstance(f, list) else f for f in self.fired.values())}; "
            f"{self.false_alarms} false alarm(s), "
            f"{self.missed} miss(es))"
        )


class Check(BaseModel):
    """A rule as literal questions a reader answers from one case, and what breaking it gives.

    The rule is broken in a case when `applies` (if any) is answered yes, `broken` is
    answered `broken_when`, and `exception` (if any) is answered no. The judge then
    gives `consequence` (the verdict the experts gave where it was broken; None on a
    pairwise scale, where the output that breaks the rule loses to one that keeps it).
    """

    applies: str | None = Field(default=None, description="Yes means the rule applies.")
    broken: str = Field(description="The question whose answer shows the rule broken.")
    broken_when: bool = Field(default=True, description="The answer to `broken` that breaks it.")
    exception: str | None = Field(default=None, description="Yes means an exception holds.")
    consequence: Any = Field(default=None, description="The verdict when the rule is broken.")
    rule_text: str = Field(description="The rule's text the check was written for.")
    author: str | None = Field(
        default=None, description="The expert who wrote it; no model rewrites or drops it."
    )
    test: CheckTest | None = None
    covered_by: str | None = Field(
        default=None,
        description="A rule whose check caught every case this one caught on the experts' "
        "cases: this check is not asked while that one is.",
    )

    @property
    def agreement(self) -> float:
        """Its test's agreement with the experts' cases (0 while untested)."""
        return self.test.agreement if self.test is not None else 0.0

    def questions(self) -> list[str]:
        """The questions, in the order they are asked."""
        return [q for q in (self.applies, self.broken, self.exception) if q]

    def fires(self, answers: dict[str, bool]) -> bool | None:
        """Whether the rule is broken given these answers, or None while one is missing."""
        if self.applies:
            if self.applies not in answers:
                return None
            if not answers[self.applies]:
                return False
        if self.broken not in answers:
            return None
        if answers[self.broken] != self.broken_when:
            return False
        if self.exception:
            if self.exception not in answers:
                return None
            return not answers[self.exception]
        return True

    def next_question(self, answers: dict[str, bool]) -> str | None:
        """The next question to ask one at a time, or None once the outcome is known."""
        if self.fires(answers) is not None:
            return None
        return next(q for q in self.questions() if q not in answers)

    def describe(self) -> str:
        """The check in one line: its questions and consequence."""
        yes_no = "yes" if self.broken_when else "no"
        parts = [f"applies if yes to: {self.applies}"] if self.applies else []
        parts.append(f"broken if {yes_no} to: {self.broken}")
        if self.exception:
            parts.append(f"unless yes to: {self.exception}")
        if self.consequence is not None:
            parts.append(f"then {json.dumps(self.consequence, default=str)}")
        return "; ".join(parts)


class CheckAttempt(BaseModel):
    """The candidate checks tried for a rule that kept none, and the answers they got.

    Kept so that the next align asks them only about new cases and writes no new
    questions for the rule while its text stays the same: without it, every align would
    try every such rule again from the start, at a cost that grows with its cases.
    """

    rule_text: str = Field(description="The rule's text the candidates were written for.")
    candidates: list[list[Check]] = Field(
        default_factory=list, description="The candidates tried, in groups (see `Check`)."
    )
    written: bool = Field(
        default=False,
        description="Whether the reflection model wrote questions for it (False: the "
        "writing call failed or was not needed yet, and is made again).",
    )
    answers: dict[str, dict[str, bool]] = Field(
        default_factory=dict,
        description="Per tested case, the answers to the candidates' questions (as in "
        "`CheckTest.answers`).",
    )


class Rule(BaseModel):
    """A guideline as the rulebook shows it: text, provenance and the experts' marks."""

    model_config = ConfigDict(frozen=True)

    id: str
    text: str
    source_ids: tuple[str, ...] = Field(description="Feedback ids it was learned from.")
    author: str | None = Field(default=None, description="The expert who stated it, if one did.")
    edited_by: str | None = None
    pinned_by: str | None = None
    check: Check | None = Field(
        default=None, description="The rule as questions about a case, with its test."
    )

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
    checks: dict[str, Check] = Field(default_factory=dict)
    attempts: dict[str, CheckAttempt] = Field(default_factory=dict)

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
