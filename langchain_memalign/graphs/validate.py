"""Validated alignment: a new guideline must not break more seen verdicts than it fixes.

A rule that looks right can still make the judge fail cases outside its scope
(docs/decisions.md#validation-of-new-guidelines). So after `merge`, the seen cases each
new guideline could affect (its sources, the nearest seen cases with other scores and
the nearest other non-sources, or every seen case) are graded twice with the memory as
it now is, expert-verdict reuse off and each case's own episode left out of its
retrieval: once without the new guidelines and once with them. A guideline that breaks
more expert verdicts than it fixes (in the `require_fix` ablation, `_ablation`, one that
does not fix more than it breaks) is narrowed once by the reflection model and checked
again, or dropped. Its breaks are graded a second time first, and one that does not
happen again is not counted (`_unconfirmed`).

Cost: two judge calls per case checked, two more per break confirmed, and one more call
plus one per case for a narrowing, all capped by `ValidationOptions.max_calls` in that
order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig, RunnableLambda

from langchain_memalign import _ablation
from langchain_memalign.errors import MalformedOutputError
from langchain_memalign.feedback import Feedback
from langchain_memalign.graphs import direction
from langchain_memalign.graphs._failures import raise_unless_unusable
from langchain_memalign.graphs.align_state import Merged, Validated
from langchain_memalign.graphs.provenance import obeys_feedback, restates_case
from langchain_memalign.graphs.seen_cases import grade_unseen
from langchain_memalign.memory.judge_memory import JudgeMemory
from langchain_memalign.memory.rulebook import load_rulebook
from langchain_memalign.memory.semantic import Guideline
from langchain_memalign.prompting.prompts import format_value, narrow_messages
from langchain_memalign.prompting.schemas import (
    Declares,
    GuidelineText,
    declared_direction,
    with_direction,
)
from langchain_memalign.prompting.structured import StructuredCaller
from langchain_memalign.reports import GuidelineCheck, Usage

if TYPE_CHECKING:
    from langchain_memalign.graphs.judge import JudgeNodes

# Seen cases with other scores, nearest to a guideline, checked beside its sources.
NEIGHBORS_PER_GUIDELINE = 2


class Narrowed(Declares):
    """A guideline restated with a narrower condition; empty if none fits."""

    text: GuidelineText


class GuidelineValidator:
    """Grades seen cases with and without new guidelines, and keeps, narrows or drops them."""

    def __init__(
        self, memory: JudgeMemory, judge_nodes: JudgeNodes, reflection_model: BaseChatModel
    ) -> None:
        self.memory = memory
        self.judge_nodes = judge_nodes
        # A narrowing declares which way it moves verdicts, checked like a proposal's.
        self.narrower = StructuredCaller(
            reflection_model, with_direction(Narrowed, memory.config.scale),
            what="guideline narrowing", retries=memory.config.options.max_retries,
        )  # fmt: skip

    # -- which cases -----------------------------------------------------------------

    def cases_for(self, g: Guideline) -> list[str]:
        """Seen feedback ids a guideline could affect: its sources first, then neighbors.

        The neighbors: the `NEIGHBORS_PER_GUIDELINE` seen cases nearest the guideline with
        a score none of its sources has, then as many of the nearest other non-sources.
        """
        mem = self.memory
        if mem.config.options.validation.mode == "all":
            rest = [i for i in mem.store.feedback_ids() if i not in g.source_ids]
            return [*g.source_ids, *rest]
        vectors = mem.guideline_vectors
        ids = [x.id for x in mem.guidelines]
        if vectors is None or g.id not in ids:
            return list(g.source_ids)
        sources = mem.store.get_feedback(g.source_ids)
        values = {format_value(fb.value) for fb in sources.values()}
        # No similarity floor: a guideline is never a near duplicate of a case, and the
        # floors (made for judgments) would leave no neighbor but the rule's own cases.
        near = mem.retrieve(
            vectors[ids.index(g.id)], k=4 * NEIGHBORS_PER_GUIDELINE + 4, floors=False
        )
        near_ids = [e.feedback_id for e in near if e.feedback_id not in g.source_ids]
        scores = {e.feedback_id: format_value(e.value) for e in near}
        others = [i for i in near_ids if scores[i] not in values][:NEIGHBORS_PER_GUIDELINE]
        # And the nearest cases it was not drawn from, whatever their score: where a rule
        # gets over-applied (its sources may hold every score).
        beyond = [i for i in near_ids if i not in others][:NEIGHBORS_PER_GUIDELINE]
        return [*g.source_ids, *others, *beyond]

    # -- grading ---------------------------------------------------------------------

    def _grade(
        self,
        cases: Sequence[Feedback],
        swap: dict[str, Guideline | None],
        config: RunnableConfig,
    ) -> tuple[dict[str, bool], Usage]:
        """Whether the model grades each case as the expert did, with `swap` applied.

        `swap` maps guideline ids to a replacement (or None to leave it out).
        A case the model gives no usable grade counts as neither right nor wrong; a
        provider error is raised (`graphs._failures`): a guideline is not kept or
        dropped on what an outage left of its evidence.
        """
        mem = self.memory
        vectors = mem.store.episode_vectors(fb.id for fb in cases)

        def one(fb: Feedback) -> tuple[bool, Usage]:
            qv = vectors.get(fb.id)
            guidelines = []
            for g in mem.select_guidelines(qv):
                if g.id in swap:
                    replacement = swap[g.id]
                    if replacement is not None:
                        guidelines.append(replacement)
                else:
                    guidelines.append(g)
            # Leave-one-out: whether the rule helps on a case like this one, not recall.
            verdict, _ = grade_unseen(mem, self.judge_nodes, fb, guidelines, qv, config)
            return format_value(verdict.score) == format_value(fb.value), verdict.usage

        outcomes = RunnableLambda(one).batch(list(cases), config, return_exceptions=True)
        raise_unless_unusable(outcomes)
        right: dict[str, bool] = {}
        usage = Usage()
        for fb, out in zip(cases, outcomes, strict=True):
            if isinstance(out, BaseException):
                usage = usage + (getattr(out, "usage", None) or Usage(llm_calls=1))
                continue
            right[fb.id], u = out
            usage = usage + u
        return right, usage

    def _without_and_with(
        self,
        cases: Sequence[Feedback],
        without: dict[str, Guideline | None],
        config: RunnableConfig,
    ) -> tuple[dict[str, bool], dict[str, bool], Usage]:
        """Each case graded without the new guidelines (`without`), then with them."""
        before, usage = self._grade(cases, without, config)
        after, u = self._grade(cases, {}, config)
        return before, after, usage + u

    # -- the check -------------------------------------------------------------------

    def run(
        self, new_ids: Sequence[str], config: RunnableConfig
    ) -> tuple[list[GuidelineCheck], Usage, list[str]]:
        """Check new guidelines on seen cases; commit drops and narrowings; report each."""
        mem = self.memory
        opts = mem.config.options.validation
        require_fix = _ablation.of(mem.config).require_fix
        budget = opts.max_calls
        current = {g.id: g for g in mem.guidelines}
        # A rule an expert added, edited or pinned is not the model's to narrow or drop.
        protected = load_rulebook(mem.store).protected()
        new = [current[i] for i in new_ids if i in current and i not in protected]
        if opts.mode == "off" or budget < 2 or not new:
            return [], Usage(), []
        cases_of = {g.id: self.cases_for(g) for g in new}
        order = list(dict.fromkeys(c for g in new for c in cases_of[g.id]))
        chosen = order[: budget // 2]
        feedback = mem.store.get_feedback(chosen)
        cases = [feedback[c] for c in chosen if c in feedback]
        budget -= 2 * len(cases)
        without = dict.fromkeys((g.id for g in new), None)
        before, after, usage = self._without_and_with(cases, without, config)
        errors: list[str] = []
        failed = sorted({fb.id for fb in cases} - (before.keys() & after.keys()))
        if failed:  # such cases count for neither side; say so rather than guess
            errors.append(f"validation could not grade seen cases {failed}")
        checked_of = {g.id: [c for c in cases_of[g.id] if c in before and c in after] for g in new}
        effects = {g.id: _effect(checked_of[g.id], before, after) for g in new}
        # Breaks that would reject a guideline are graded once more before they count.
        rejecting = [
            c for g in new if _rejects(*effects[g.id], require_fix)
            for c in effects[g.id][1]
        ]  # fmt: skip
        to_confirm = [feedback[c] for c in dict.fromkeys(rejecting)][: budget // 2]
        budget -= 2 * len(to_confirm)
        unconfirmed, u = self._unconfirmed(to_confirm, without, config)
        usage = usage + u
        checks: list[GuidelineCheck] = []
        dropped: list[str] = []
        narrowed: list[Guideline] = []
        for g in new:
            checked = checked_of[g.id]
            if not checked:
                checks.append(GuidelineCheck(guideline_id=g.id, text=g.text, action="unchecked"))
                continue
            fixed, first_broken = effects[g.id]
            broken = [c for c in first_broken if c not in unconfirmed]
            check = GuidelineCheck(
                guideline_id=g.id, text=g.text, cases=checked, fixed=fixed, broken=broken,
                unconfirmed=[c for c in first_broken if c in unconfirmed], action="kept",
            )  # fmt: skip
            if _rejects(fixed, broken, require_fix):
                check.action = "dropped"
                # Narrowing spares broken cases; with none broken (a guideline that only
                # fixed nothing) there is nothing to narrow it away from.
                if broken and budget >= 1 + len(checked):
                    budget -= 1 + len(checked)
                    better, u = self._narrow(g, checked, broken, feedback, before, config)
                    usage = usage + u
                    if better is not None:
                        check.action = "narrowed"
                        check.narrowed_text = better.text
                        narrowed.append(better)
                if check.action == "dropped":
                    dropped.append(g.id)
            checks.append(check)
        if dropped or narrowed:
            self._commit(dropped, narrowed, usage)
        return checks, usage, errors

    def _unconfirmed(
        self,
        cases: Sequence[Feedback],
        without: dict[str, Guideline | None],
        config: RunnableConfig,
    ) -> tuple[set[str], Usage]:
        """Broken cases whose break does not happen again when graded a second time.

        A model server that decodes several requests together does not always give one
        prompt the same verdict, even at temperature 0, so a break that would narrow or
        drop a guideline counts only if it happens again when graded a second time; a
        case the second grading cannot grade keeps its first result
        (docs/decisions.md#the-second-grading-of-breaks).
        """
        if not cases:
            return set(), Usage()
        before, after, usage = self._without_and_with(cases, without, config)
        regraded = [fb.id for fb in cases if fb.id in before and fb.id in after]
        return {c for c in regraded if not before[c] or after[c]}, usage

    def _narrow(
        self,
        g: Guideline,
        checked: list[str],
        broken: list[str],
        feedback: dict[str, Feedback],
        before: dict[str, bool],
        config: RunnableConfig,
    ) -> tuple[Guideline | None, Usage]:
        """Restate `g` to spare the broken cases; keep it only if it then helps more than hurts."""
        cfg = self.memory.config
        supporting = [feedback[s] for s in g.source_ids if s in feedback and s not in broken]
        messages = narrow_messages(
            cfg.instructions, cfg.scale, g, supporting, [feedback[b] for b in broken],
            cfg.options.retrieval.episode_max_chars,
        )  # fmt: skip
        try:
            out, usage = self.narrower.invoke(messages, config)
        except MalformedOutputError as e:  # an unusable narrowing drops the guideline: the
            # safe side. A provider error is the align failing (`graphs._failures`), not a
            # reason to drop a guideline for good.
            return None, e.usage or Usage(llm_calls=1)
        text = " ".join(out.text.split())
        if not text or text == g.text:
            return None, usage
        # The checks a proposal passes hold for its narrowing too: a case summary is
        # dropped without grading.
        shown = [*supporting, *(feedback[b] for b in broken)]
        if restates_case(text, shown, cfg.scale.choices) or obeys_feedback(text, shown):
            return None, usage
        # It must move verdicts the way a case that still supports it went.
        values = [fb.value for fb in supporting]
        if direction.unsupported(cfg.scale, declared_direction(out), values):
            return None, usage
        candidate = g.model_copy(update={"text": text})
        cases = [feedback[c] for c in checked]
        again, u = self._grade(cases, {g.id: candidate}, config)
        usage = usage + u
        fixed, broken_now = _effect([c for c in again if c in before], before, again)
        rejected = _rejects(fixed, broken_now, _ablation.of(cfg).require_fix)
        return (None if rejected else candidate), usage

    def _commit(self, dropped: list[str], narrowed: list[Guideline], usage: Usage) -> None:
        mem = self.memory
        vectors = mem.embed([g.text for g in narrowed], usage) if narrowed else None
        with mem.write() as w:
            w.delete_guidelines(dropped)
            for i, g in enumerate(narrowed):
                assert vectors is not None
                w.put_guideline(g, vectors[i], 0)
            sources = [s for g in narrowed for s in g.source_ids]
            w.log("validate", sources, dropped + [g.id for g in narrowed])


class Validate:
    """The `validate` node: the guidelines `merge` added, graded by `validator` (if any)."""

    def __init__(self, validator: GuidelineValidator | None) -> None:
        self.validator = validator

    def __call__(self, state: Merged, config: RunnableConfig) -> Validated:
        """Grade seen cases with and without each new guideline; narrow or drop bad ones."""
        new = state.get("new_guidelines") or []
        if self.validator is None or not new:
            return {}
        checks, usage, errors = self.validator.run(new, config)
        return {"validation": checks, "usages": [usage], "errors": errors}


def _rejects(fixed: Sequence[str], broken: Sequence[str], require_fix: bool) -> bool:
    """Whether a guideline with this effect on seen cases is narrowed or dropped."""
    # By default a tie stays: a correct rule the judge already follows fixes nothing, and
    # dropping it would lose it for the cases the check did not grade; `require_fix` keeps
    # only a guideline with a net fix (docs/decisions.md#validation-keeps-a-tie).
    if require_fix:
        return len(broken) >= len(fixed)
    return len(broken) > len(fixed)


def _effect(
    cases: Sequence[str], before: dict[str, bool], after: dict[str, bool]
) -> tuple[list[str], list[str]]:
    """Which cases a change fixed (wrong before, right after) and broke (the reverse)."""
    fixed = [c for c in cases if after[c] and not before[c]]
    broken = [c for c in cases if before[c] and not after[c]]
    return fixed, broken
