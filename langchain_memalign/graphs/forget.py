"""The forget step: detach feedback from memory and re-derive what it fed.

`Forget` is the whole of the unalign graph's `forget` node (`unalign`: the feedback is
removed), and the align graph's `forget` node before a changed feedback item is learned
again (`replaced`: the item stays, what its old version taught is re-derived).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import RunnableConfig, RunnableLambda

from langchain_memalign._text import normalize
from langchain_memalign.errors import UnknownFeedbackError
from langchain_memalign.feedback import Feedback
from langchain_memalign.graphs import direction
from langchain_memalign.graphs._failures import raise_unless_unusable
from langchain_memalign.graphs.align_state import Classified, Costs, UnalignState
from langchain_memalign.graphs.provenance import obeys_feedback, supporting_sources
from langchain_memalign.memory.judge_memory import JudgeMemory
from langchain_memalign.memory.rulebook import load_rulebook
from langchain_memalign.memory.semantic import Guideline
from langchain_memalign.prompting.budget import case_chars
from langchain_memalign.prompting.prompts import rederive_messages
from langchain_memalign.prompting.schemas import Rederived, declared_direction
from langchain_memalign.prompting.structured import StructuredCaller
from langchain_memalign.reports import Usage


@dataclass
class ForgetResult:
    """What `forget` removed and re-derived."""

    removed: list[str] = field(default_factory=list)
    rederived: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)


class Forget:
    """Removing feedback and re-deriving the guidelines it fed (see the module doc).

    `rederiver`: the structured call that re-distills a guideline from its remaining
    sources, declaring which way it moves verdicts (`schemas.with_direction`).
    """

    def __init__(self, memory: JudgeMemory, rederiver: StructuredCaller[Rederived]) -> None:
        self.memory = memory
        self.rederiver = rederiver

    def unalign(self, state: UnalignState, config: RunnableConfig) -> UnalignState:
        """Remove feedback and re-derive what it fed; unknown ids remove nothing and raise."""
        ids = state.get("ids") or []
        known = self.memory.store.feedback_state(ids)
        missing = [i for i in ids if i not in known]
        if missing:
            raise UnknownFeedbackError(missing)
        result = self.forget(ids, delete=True, config=config)
        return {
            "removed": result.removed,
            "rederived": result.rederived,
            "errors": result.errors,
            "usage": result.usage,
        }

    def replaced(self, state: Classified, config: RunnableConfig) -> Costs:
        """Before changed feedback is learned again: re-derive what its old version taught."""
        result = self.forget(state.get("updated") or [], delete=False, config=config)
        return {"usages": [result.usage], "errors": result.errors}

    def _still_supported(
        self,
        redo: Sequence[Guideline],
        gone: set[str],
        support: dict[str, Feedback],
        usage: Usage,
    ) -> list[Guideline]:
        """Guidelines whose remaining sources' rationales still support them, re-cited."""
        mem = self.memory
        threshold = mem.config.options.reflection.source_support
        rationales = {s: fb.rationale for s, fb in support.items() if fb.rationale}
        vectors = mem.guideline_vectors
        ids = [g.id for g in mem.guidelines]
        if threshold is None or not redo or not rationales or vectors is None:
            return []
        order = sorted(rationales)
        embedded = mem.embed([rationales[s] for s in order], usage)
        by_source = dict(zip(order, embedded, strict=True))
        still = []
        for g in redo:
            remaining = [s for s in g.source_ids if s not in gone]
            if g.id in ids and supporting_sources(
                vectors[ids.index(g.id)], remaining, by_source, threshold
            ):
                still.append(g.model_copy(update={"source_ids": tuple(remaining)}))
        return still

    def forget(
        self, ids: Sequence[str], *, delete: bool, config: RunnableConfig | None = None
    ) -> ForgetResult:
        """Detach feedback from memory and re-derive the guidelines it fed.

        A guideline whose every source is among `ids` is removed. One with
        other sources stays as it is, citing only those, when their rationales
        support it (the embedding test of `provenance`, no model call: a model
        asked may wrongly say that nothing supports it); otherwise it is
        re-distilled from the remaining feedback alone, and removed when
        nothing remaining supports it. A rule an expert added, edited or pinned
        is neither re-derived nor removed: it only stops citing `ids`. With
        `delete`, the feedback and its episodes are removed too (unalign);
        without, only the guidelines are re-derived (the feedback is about to
        be replaced).
        """
        mem = self.memory
        gone = set(ids)
        result = ForgetResult()
        protected = load_rulebook(mem.store).protected()
        affected = [g for g in mem.guidelines if gone & set(g.source_ids)]
        # A rule an expert added, edited or pinned keeps its text and its place; it only
        # stops citing the withdrawn feedback (docs/experts.md).
        kept = {
            g.id: g.model_copy(
                update={"source_ids": tuple(s for s in g.source_ids if s not in gone)}
            )
            for g in affected
            if g.id in protected
        }
        affected = [g for g in affected if g.id not in kept]
        redo = [g for g in affected if set(g.source_ids) - gone]
        result.removed = [g.id for g in affected if not set(g.source_ids) - gone]
        support = mem.store.get_feedback({s for g in redo for s in g.source_ids if s not in gone})
        still = self._still_supported(redo, gone, support, result.usage)
        redo = [g for g in redo if g.id not in {x.id for x in still}]
        outcomes: list[Any] = []
        if redo:
            cfg = mem.config

            def one(g: Guideline) -> Any:
                remaining = [support[s] for s in g.source_ids if s in support]
                chars = case_chars(len(remaining), cfg.options.retrieval.episode_max_chars)
                msgs = rederive_messages(cfg.instructions, g, remaining, chars, scale=cfg.scale)
                return self.rederiver.invoke(msgs, config)

            outcomes = RunnableLambda(one).batch(redo, config, return_exceptions=True)
            # An unusable answer drops its guideline (below); a provider error would
            # drop it just the same and leave its sources pending: it fails the call.
            raise_unless_unusable(outcomes)
        keep_texts = {
            normalize(g.text): kept.get(g.id, g) for g in mem.guidelines if g not in affected
        }
        rederived: list[Guideline] = []
        widened: dict[str, Guideline] = {}
        pending: set[str] = set()
        for g, outcome in zip(redo, outcomes, strict=True):
            remaining = tuple(s for s in g.source_ids if s not in gone)
            if isinstance(outcome, Exception):
                # Drop the guideline (it may carry the withdrawn feedback) and
                # let the next align distill its remaining sources afresh.
                result.usage = result.usage + (
                    getattr(outcome, "usage", None) or Usage(llm_calls=1)
                )
                result.errors.append(f"re-deriving guideline {g.id} failed: {outcome}")
                result.removed.append(g.id)
                pending.update(remaining)
                continue
            out, usage = outcome
            result.usage = result.usage + usage
            text = " ".join(out.text.split())
            twin = keep_texts.get(normalize(text))
            left = [support[s] for s in remaining if s in support]
            # An order a remaining rationale gave is no restatement (`obeys_feedback`), nor
            # one that moves verdicts a way none of the remaining cases went (`direction`).
            declared = declared_direction(out)
            moved = direction.unsupported(mem.config.scale, declared, [fb.value for fb in left])
            if not text or obeys_feedback(text, left) or moved:
                result.removed.append(g.id)
            elif twin is not None:  # it now says what another guideline says
                base = widened.get(twin.id, twin)
                merged = tuple(dict.fromkeys(base.source_ids + remaining))
                widened[twin.id] = base.model_copy(update={"source_ids": merged})
                result.removed.append(g.id)
            else:
                rederived.append(g.model_copy(update={"text": text, "source_ids": remaining}))
        result.rederived = [g.id for g in rederived + still]
        vectors = mem.embed([g.text for g in rederived], result.usage) if rederived else None
        with mem.write() as w:
            w.delete_guidelines(result.removed)
            for i, g in enumerate(rederived):
                assert vectors is not None
                w.put_guideline(g, vectors[i], 0)
            for g in [*(g for i, g in kept.items() if i not in widened), *widened.values(), *still]:
                w.put_guideline(g, None, 0)
            if delete:
                w.delete_feedback(ids)
            else:
                w.set_reflected(ids, False)
            w.set_reflected(pending, False)
            # A calibration pair belongs to its feedback: gone with it, and stale once the
            # feedback is replaced (the align that replaces it grades it again).
            calibration = mem.stored_calibration()
            if gone & {p.feedback_id for p in calibration.pairs}:
                w.put_calibration(calibration.updated([], gone))
            w.log(
                "unalign" if delete else "replace", ids,
                result.removed + result.rederived + list(widened) + list(kept),
            )  # fmt: skip
        return result
