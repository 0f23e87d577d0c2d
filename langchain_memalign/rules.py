"""The rulebook: experts state, fix, pin and reject the judge's guidelines directly.

`MemAlignJudge.rules` is a `Rulebook`. Its rules are the judge's guidelines,
learned or stated, each with its provenance and what experts did to it; they
go into the judge's prompt as every guideline does. Each action is one
transaction of the memory (on a folder or a PostgreSQL database alike): it
commits whole or not at all, and is recorded with who, when and why in the
rulebook's changes (`history`) and, by id, in the memory's history.

What each mark protects the rule from (docs/experts.md):

- added (`add`): its source is the expert, by name; unalign never removes it,
  and no model rewrites, merges or drops it.
- edited (`edit`): the text is the expert's; its provenance stays, and
  re-derivation, consolidation and validation never rewrite or remove it
  (unaligning its sources only takes them out of its provenance).
- pinned (`pin`): kept exactly as it is by every automatic step.
- checked (`set_check`): the rule as yes/no questions the judge asks about each case,
  written by the expert; no model rewrites or drops it. Learned rules get checks of
  their own, tested on the experts' cases (`Rule.check`).
- rejected (`reject`): removed, and a later proposal restating it (equal text,
  or an embedding similarity of at least `memory.rulebook.REJECTED_SIMILARITY`)
  is refused and listed in `AlignReport.guidelines_rejected`.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from langchain_memalign import limits
from langchain_memalign._text import normalize
from langchain_memalign.errors import InvalidRuleError, UnknownRuleError
from langchain_memalign.memory.base import Store
from langchain_memalign.memory.judge_memory import JudgeMemory
from langchain_memalign.memory.rulebook import (
    Check,
    RejectedRule,
    Rule,
    RulebookState,
    RuleChange,
    RuleMark,
    load_rulebook,
)
from langchain_memalign.memory.semantic import Guideline, new_guideline_id

__all__ = ["RejectedRule", "Rule", "RuleChange", "Rulebook"]


def rules_in_store(store: Store) -> list[Rule]:
    """Every guideline of a memory as a `Rule`, in order, read without any model."""
    guidelines, _ = store.load_guidelines()
    return _as_rules(guidelines, load_rulebook(store))


def _as_rules(guidelines: Sequence[Guideline], state: RulebookState) -> list[Rule]:
    rules = []
    for g in guidelines:
        mark = state.marks.get(g.id) or RuleMark()
        rules.append(
            Rule(
                id=g.id, text=g.text, source_ids=g.source_ids, author=mark.author,
                edited_by=mark.edited_by, pinned_by=mark.pinned_by, check=state.checks.get(g.id),
            )
        )  # fmt: skip
    return rules


def _clean(value: str, what: str, rule_id: str | None = None) -> str:
    if not isinstance(value, str):
        raise InvalidRuleError(f"the {what} must be a string", rule_id=rule_id)
    text = " ".join(value.split())
    if not text:
        raise InvalidRuleError(f"the {what} is empty", rule_id=rule_id)
    # Both backends must store it unchanged: PostgreSQL's text holds no NUL, and no
    # backend stores a lone surrogate.
    if "\x00" in text or _unencodable(text):
        raise InvalidRuleError(
            f"the {what} holds a NUL character or a lone surrogate", rule_id=rule_id
        )
    return text


def _unencodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


class Rulebook:
    """The judge's guidelines as experts see and change them (see the module doc)."""

    def __init__(self, memory: JudgeMemory) -> None:
        self._memory = memory

    # -- reading ---------------------------------------------------------------------

    def list(self) -> list[Rule]:
        """Every rule, in prompt order: text, feedback sources, author, pinned, edited."""
        # The newest version (another process's commits included), as a judgment reads it.
        return _as_rules(self._memory.snapshot().guidelines, load_rulebook(self._memory.store))

    def get(self, rule_id: str) -> Rule:
        """One rule by id, or `UnknownRuleError`."""
        for rule in self.list():
            if rule.id == rule_id:
                return rule
        raise UnknownRuleError(rule_id)

    # `builtins.list` from here on: the method `list` hides the builtin in the class body.
    def rejected(self) -> builtins.list[RejectedRule]:
        """The rules experts rejected, oldest first, with who, when and why."""
        return list(load_rulebook(self._memory.store).rejected)

    def history(self) -> builtins.list[RuleChange]:
        """Every rulebook action, oldest first, with who, when and why."""
        return list(load_rulebook(self._memory.store).changes)

    # -- changing --------------------------------------------------------------------

    def add(self, text: str, *, author: str) -> Rule:
        """State a rule: a guideline whose source is `author`; unalign never removes it.

        Raises:
            InvalidRuleError: empty text or author, a text over
                `limits.MAX_GUIDELINE_CHARS` or stated by another rule, or a
                memory at `limits.MAX_GUIDELINES`.
        """
        text = _clean(text, "rule's text")
        author = _clean(author, "author")
        self._check_length(text, None)
        # Checked again under the write lock; here so that a refusal costs no embedding.
        self._check_unique(text, {g.id: g for g in self._memory.guidelines}, None)
        vector = self._memory.embed([text])[0]
        gid = new_guideline_id()

        def change(state: RulebookState, current: dict[str, Guideline]) -> Guideline:
            if len(current) >= limits.MAX_GUIDELINES:
                raise InvalidRuleError(
                    f"the memory holds the most guidelines allowed ({limits.MAX_GUIDELINES}); "
                    "reject or unalign some first"
                )
            self._check_unique(text, current, None)
            state.marks[gid] = RuleMark(author=author)
            # An expert stating a rule overrules an earlier rejection of the same words.
            state.rejected = [r for r in state.rejected if normalize(r.text) != normalize(text)]
            state.changes.append(RuleChange(action="add", rule_id=gid, author=author, text=text))
            return Guideline(id=gid, text=text, source_ids=())

        return self._apply("rule_add", gid, change, vector, new=True)

    def edit(self, rule_id: str, text: str, *, author: str, reason: str | None = None) -> Rule:
        """Change a rule's text; its provenance stays and no model rewrites it afterwards.

        Raises:
            UnknownRuleError: no rule has this id.
            InvalidRuleError: empty text or author, a text over the limit, the
                same text, or one another rule states.
        """
        text = _clean(text, "rule's text", rule_id)
        author = _clean(author, "author", rule_id)
        reason = None if reason is None else _clean(reason, "reason", rule_id)
        self._check_length(text, rule_id)
        self.get(rule_id)  # unknown ids fail before the embedding call
        vector = self._memory.embed([text])[0]

        def change(state: RulebookState, current: dict[str, Guideline]) -> Guideline:
            old = self._existing(rule_id, current)
            if normalize(old.text) == normalize(text):
                raise InvalidRuleError(f"rule {rule_id} already says this", rule_id=rule_id)
            self._check_unique(text, current, rule_id)
            mark = state.marks.get(rule_id) or RuleMark()
            state.marks[rule_id] = mark.model_copy(update={"edited_by": author})
            state.changes.append(
                RuleChange(
                    action="edit", rule_id=rule_id, author=author, reason=reason, text=text,
                    previous_text=old.text,
                )
            )  # fmt: skip
            return old.model_copy(update={"text": text})

        return self._apply("rule_edit", rule_id, change, vector)

    def pin(self, rule_id: str, *, author: str, reason: str | None = None) -> Rule:
        """Pin a rule: no automatic step narrows, merges, re-derives or drops it.

        Pinning a pinned rule changes nothing.

        Raises:
            UnknownRuleError: no rule has this id.
            InvalidRuleError: an empty author.
        """
        return self._set_pin(rule_id, author, reason, pinned=True)

    def unpin(self, rule_id: str, *, author: str, reason: str | None = None) -> Rule:
        """Undo `pin`: the rule is treated again as its origin and edits say.

        Unpinning a rule that is not pinned changes nothing.

        Raises:
            UnknownRuleError: no rule has this id.
            InvalidRuleError: an empty author.
        """
        return self._set_pin(rule_id, author, reason, pinned=False)

    def set_check(
        self,
        rule_id: str,
        *,
        broken: str,
        author: str,
        applies: str | None = None,
        exception: str | None = None,
        broken_when: bool = True,
        consequence: Any = None,
        reason: str | None = None,
    ) -> Rule:
        """Write a rule's check as an expert: yes/no questions and the verdict breaking it gives.

        The judge asks `applies` (if given), then `broken`, then `exception` (if given)
        about each case; the rule is broken when `applies` is answered yes, `broken` is
        answered `broken_when` and `exception` no, and the judge then gives
        `consequence` (required except on pairwise scales, where the output that breaks
        the rule loses). No model rewrites or drops an expert's check; each align that
        changes the feedback tests it on the experts' cases (`Rule.check.test`).

        ```python
        judge.rules.set_check(
            rule.id,
            applies="Does the reply suggest a dose?",
            broken="Does the reply tell the patient to confirm the dose with a pharmacist?",
            broken_when=False,
            consequence=False,
            author="dana",
        )
        ```

        Raises:
            UnknownRuleError: no rule has this id.
            InvalidRuleError: an empty question or author, a consequence off the
                judge's scale or missing.
        """
        author = _clean(author, "author", rule_id)
        reason = None if reason is None else _clean(reason, "reason", rule_id)
        broken = _clean(broken, "broken question", rule_id)
        applies = None if applies is None else _clean(applies, "applies question", rule_id)
        exception = None if exception is None else _clean(exception, "exception question", rule_id)
        for text in (broken, applies, exception):
            if text is not None:
                self._check_length(text, rule_id)
        if not isinstance(broken_when, bool):
            raise InvalidRuleError("broken_when must be True or False", rule_id=rule_id)
        scale = self._memory.config.scale
        if scale.kind == "pairwise":
            consequence = None
        elif consequence is None:
            raise InvalidRuleError(
                "say which verdict breaking the rule gives: consequence=...", rule_id=rule_id
            )
        else:
            try:
                consequence = scale.validate_value(consequence)
            except ValueError as e:
                raise InvalidRuleError(
                    f"the consequence is not on the judge's scale: {e}", rule_id=rule_id
                ) from e

        def change(state: RulebookState, current: dict[str, Guideline]) -> Guideline:
            rule = self._existing(rule_id, current)
            state.checks[rule_id] = Check(
                applies=applies, broken=broken, broken_when=broken_when, exception=exception,
                consequence=consequence, rule_text=rule.text, author=author,
            )  # fmt: skip
            state.changes.append(
                RuleChange(
                    action="check", rule_id=rule_id, author=author, reason=reason,
                    text=state.checks[rule_id].describe(),
                )
            )  # fmt: skip
            return rule

        return self._apply("rule_check", rule_id, change, None)

    def remove_check(self, rule_id: str, *, author: str, reason: str | None = None) -> Rule:
        """Remove a rule's check (the rule stays); the next align may write a new one.

        Removing a check from a rule that has none changes nothing.

        Raises:
            UnknownRuleError: no rule has this id.
            InvalidRuleError: an empty author.
        """
        author = _clean(author, "author", rule_id)
        reason = None if reason is None else _clean(reason, "reason", rule_id)

        def change(state: RulebookState, current: dict[str, Guideline]) -> Guideline | None:
            rule = self._existing(rule_id, current)
            if state.checks.pop(rule_id, None) is None:
                return None
            state.changes.append(
                RuleChange(action="uncheck", rule_id=rule_id, author=author, reason=reason)
            )
            return rule

        return self._apply("rule_uncheck", rule_id, change, None)

    def reject(self, rule_id: str, *, reason: str, author: str) -> RejectedRule:
        """Remove a rule and keep reflection from learning it again.

        The rule is recorded with the reason; a later proposal restating it is
        refused and listed in the align report's `guidelines_rejected`. Its
        feedback stays in the memory.

        Raises:
            UnknownRuleError: no rule has this id.
            InvalidRuleError: an empty reason or author, or a pinned rule
                (unpin it first: a pin is an expert's word too).
        """
        reason = _clean(reason, "reason", rule_id)
        author = _clean(author, "author", rule_id)
        mem = self._memory
        with mem.atomic():
            state = load_rulebook(mem.store)
            old = self._existing(rule_id, {g.id: g for g in mem.guidelines})
            mark = state.marks.get(rule_id) or RuleMark()
            if mark.pinned_by is not None:
                raise InvalidRuleError(
                    f"rule {rule_id} is pinned (by {mark.pinned_by}); unpin it first",
                    rule_id=rule_id,
                )
            record = RejectedRule(id=rule_id, text=old.text, reason=reason, author=author)
            state.marks.pop(rule_id, None)
            state.checks.pop(rule_id, None)
            state.rejected.append(record)
            state.changes.append(
                RuleChange(
                    action="reject", rule_id=rule_id, author=author, reason=reason,
                    previous_text=old.text,
                )
            )  # fmt: skip
            with mem.write() as w:
                w.delete_guidelines([rule_id])
                w.put_rulebook(state)
                w.log("rule_reject", old.source_ids, [rule_id])
        return record

    # -- internals -------------------------------------------------------------------

    def _set_pin(self, rule_id: str, author: str, reason: str | None, *, pinned: bool) -> Rule:
        author = _clean(author, "author", rule_id)
        reason = None if reason is None else _clean(reason, "reason", rule_id)

        def change(state: RulebookState, current: dict[str, Guideline]) -> Guideline | None:
            old = self._existing(rule_id, current)
            mark = state.marks.get(rule_id) or RuleMark()
            if (mark.pinned_by is not None) == pinned:
                return None
            state.marks[rule_id] = mark.model_copy(update={"pinned_by": author if pinned else None})
            state.changes.append(
                RuleChange(
                    action="pin" if pinned else "unpin", rule_id=rule_id, author=author,
                    reason=reason, text=old.text,
                )
            )  # fmt: skip
            return old

        return self._apply("rule_pin" if pinned else "rule_unpin", rule_id, change, None)

    def _apply(
        self,
        action: str,
        rule_id: str,
        change: Callable[[RulebookState, dict[str, Guideline]], Guideline | None],
        vector: np.ndarray | None,
        *,
        new: bool = False,
    ) -> Rule:
        """Run `change` on the stored rulebook under the write lock and commit it whole.

        `change` returns the guideline to store (None: nothing to do) or raises,
        in which case nothing is written.
        """
        mem = self._memory
        with mem.atomic():
            state = load_rulebook(mem.store)
            current = {g.id: g for g in mem.guidelines}
            g = change(state, current)
            if g is not None:
                with mem.write() as w:
                    if new or g.text != current[g.id].text:
                        # A new rule goes last; a replaced one keeps its place.
                        w.put_guideline(g, vector, w.next_position() if new else 0)
                    w.put_rulebook(state)
                    w.log(action, g.source_ids, [g.id])
        return self.get(rule_id)

    def _existing(self, rule_id: str, current: dict[str, Guideline]) -> Guideline:
        if rule_id not in current:
            raise UnknownRuleError(rule_id)
        return current[rule_id]

    @staticmethod
    def _check_length(text: str, rule_id: str | None) -> None:
        if len(text) > limits.MAX_GUIDELINE_CHARS:
            raise InvalidRuleError(
                f"the rule's text has {len(text)} characters, over the limit of "
                f"{limits.MAX_GUIDELINE_CHARS} (langchain_memalign.limits.MAX_GUIDELINE_CHARS)",
                rule_id=rule_id,
            )

    @staticmethod
    def _check_unique(text: str, current: dict[str, Guideline], rule_id: str | None) -> None:
        norm = normalize(text)
        for g in current.values():
            if g.id != rule_id and normalize(g.text) == norm:
                raise InvalidRuleError(
                    f"rule {g.id} already says this; pin it rather than state it again",
                    rule_id=rule_id,
                )
