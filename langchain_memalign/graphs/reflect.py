"""The reflection steps of the align graph: guidelines distilled from feedback, in parallel.

`Batch` chooses what this align reflects on (the new and changed items with a
rationale, and the stored items whose reflection failed before) and groups it: each
item beside the most similar case graded otherwise (`pairs`, the default), or in
batches that each hold every score present. `route_batches` fans out one `reflect`
task per group. `Reflect` distills scoped guidelines from one batch of feedback,
shown beside stored cases with other verdicts, or the rule of one contrast pair; a
batch that fails is recorded, never dropped: its feedback is stored and kept
pending for the next alignment.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langgraph.types import Send

from langchain_memalign.feedback import Feedback
from langchain_memalign.graphs.align_state import (
    Batched,
    Classified,
    Reflected,
    ReflectInput,
    ReflectionResult,
)
from langchain_memalign.graphs.pairs import contrast_groups
from langchain_memalign.graphs.provenance import echoes_prompt
from langchain_memalign.memory.judge_memory import JudgeMemory
from langchain_memalign.memory.semantic import Proposal
from langchain_memalign.prompting.budget import fit_reflection
from langchain_memalign.prompting.directions import describe
from langchain_memalign.prompting.handles import feedback_handles, guideline_handles
from langchain_memalign.prompting.prompts import (
    FEEDBACK_IS_MATERIAL,
    PAIR_SYSTEM,
    SINGLE_SYSTEM,
    pair_messages,
    reflect_messages,
)
from langchain_memalign.prompting.schemas import declared_direction, reflection_schema, rule_schema
from langchain_memalign.prompting.structured import StructuredCaller
from langchain_memalign.reports import Usage


def mixed_batches(items: list[Feedback], size: int) -> list[list[Feedback]]:
    """Reflection batches that each hold every score present, as evenly as possible.

    A rule's condition is learned from contrast: a batch of only failing cases invites
    a rule that also catches the passing ones.
    """
    if len(items) <= size:
        return [items] if items else []
    by_value: dict[str, list[Feedback]] = {}
    for fb in items:
        by_value.setdefault(repr(fb.value), []).append(fb)
    n = -(-len(items) // size)
    batches: list[list[Feedback]] = [[] for _ in range(n)]
    i = 0
    for group in by_value.values():
        for fb in group:
            batches[i % n].append(fb)
            i += 1
    return batches


def _reflection_failed(ids: list[str], e: Exception) -> Reflected:
    """The `reflect` update for a call that failed: its feedback is kept pending."""
    return {
        "reflections": [ReflectionResult(ids, error=f"{type(e).__name__}: {e}")],
        "usages": [getattr(e, "usage", None) or Usage(llm_calls=1)],
        "failed": ids,
        "errors": [f"reflection on feedback {ids} failed: {e}"],
    }


class Batch:
    """The `batch` node (see the module doc): reads the pending feedback, embeds for pairs."""

    def __init__(self, memory: JudgeMemory) -> None:
        self.memory = memory

    def __call__(self, state: Classified) -> Batched:
        """What this align reflects on, grouped in contrast pairs or mixed batches."""
        mem = self.memory
        to_store = state.get("to_store") or []
        fresh = {fb.id for fb in to_store}
        pending = [i for i in mem.store.pending_reflection() if i not in fresh]
        to_reflect = [fb for fb in to_store if fb.rationale]
        to_reflect += [fb for fb in mem.store.get_feedback(pending).values() if fb.rationale]
        if mem.config.options.reflection.mode == "pairs" and to_reflect:
            # Each item beside the most similar case graded otherwise; the vectors
            # are the ones `merge` stores, embedded once.
            usage = Usage()
            texts = [mem.case_text(fb.inputs, fb.outputs) for fb in to_reflect]
            vectors = mem.embed(texts, usage)
            return {
                "to_reflect": to_reflect,
                "batches": contrast_groups(mem, to_reflect, vectors),
                "case_vectors": {
                    fb.id: (mem.text_hash(t), v)
                    for fb, t, v in zip(to_reflect, texts, vectors, strict=True)
                },
                "usages": [usage],
            }
        batches = mixed_batches(to_reflect, mem.config.options.reflection.batch_size)
        return {"to_reflect": to_reflect, "batches": batches}


def route_batches(state: Batched) -> list[Send] | str:
    """Fan out one `reflect` task per batch; go straight to `merge` when there is none."""
    pending = {fb.id for fb in state.get("to_reflect") or []}
    sends = [
        Send("reflect", {"batch": b, "reflecting": [fb.id for fb in b if fb.id in pending]})
        for b in state.get("batches") or []
        if b
    ]
    return sends or "merge"


class Reflect:
    """The `reflect` node (see the module doc): one task per batch, with the reflection model."""

    def __init__(self, memory: JudgeMemory, model: BaseChatModel) -> None:
        self.memory = memory
        self.reflection_model = model

    def __call__(self, state: ReflectInput, config: RunnableConfig) -> Reflected:
        """Distill guidelines from one batch of feedback, or the rule of one contrast pair."""
        batch = state["batch"]
        ids = [fb.id for fb in batch]
        cfg = self.memory.config
        if cfg.options.reflection.mode == "pairs":
            return self._reflect_pair(batch, state.get("reflecting") or ids, config)
        shown_chars = cfg.options.retrieval.episode_max_chars
        contrast, existing, max_chars = fit_reflection(
            batch, self._contrast(batch), self.memory.guidelines, shown_chars
        )
        messages = reflect_messages(
            cfg.instructions, cfg.scale, batch, existing, max_chars, contrast=contrast,
        )  # fmt: skip
        citable = ids + [fb.id for fb in contrast]
        # The prompt names feedback and guidelines by handles, never by id; the model
        # cites handles (the schema allows no other) and they are mapped back here.
        shown = feedback_handles([*batch, *contrast])
        existing_shown = guideline_handles(existing)
        reflector = StructuredCaller(
            self.reflection_model, reflection_schema(shown.names, cfg.scale), what="reflection",
            retries=cfg.options.max_retries,
        )  # fmt: skip
        try:
            out, usage = reflector.invoke(messages, config)
        except Exception as e:  # recorded and retried later, never dropped
            return _reflection_failed(ids, e)
        proposals = []
        for p in out.guidelines:
            cited = (shown.resolve(s) for s in dict.fromkeys(p.source_ids))
            sources = [s for s in cited if s is not None]
            existing_id = existing_shown.resolve(p.existing_id) or ""
            # A guideline citing no known feedback is checked against the whole batch:
            # `merge` keeps only the sources whose rationale supports it, and refuses one
            # whose declared direction none of those went (`graphs.direction`).
            declared = declared_direction(p)
            proposals.append(Proposal(p.text, sources or citable, existing_id, declared))
        result = ReflectionResult(ids, proposals, shown_ids=citable)
        return {"reflections": [result], "usages": [usage]}

    def _reflect_pair(
        self, group: list[Feedback], ids: list[str], config: RunnableConfig
    ) -> Reflected:
        """The rule behind one contrast pair (`graphs.pairs`), citing both cases.

        `ids`: the feedback of the pair being reflected on (a stored partner is not).
        """
        cfg = self.memory.config
        cited = [fb.id for fb in group]
        max_chars = cfg.options.retrieval.episode_max_chars
        messages = pair_messages(cfg.instructions, cfg.scale, group, max_chars)
        shown = feedback_handles(group)
        caller = StructuredCaller(
            self.reflection_model, rule_schema(shown.names, cfg.scale), what="reflection",
            retries=cfg.options.max_retries,
        )  # fmt: skip
        try:
            out, usage = caller.invoke(messages, config)
        except Exception as e:  # recorded and retried later, never dropped
            return _reflection_failed(ids, e)
        text = " ".join(out.rule.split())
        # The request's own words back are no rule.
        asked = (PAIR_SYSTEM, SINGLE_SYSTEM, FEEDBACK_IS_MATERIAL, describe(cfg.scale))
        echo = echoes_prompt(text, "\n".join(asked))
        # The pair is the rule's provenance by construction; the cases whose reason the
        # model says states it are what its direction is checked against (a pair always
        # holds both verdicts: an order in one case's text would otherwise be supported by
        # the other's).
        named = (shown.resolve(h) for h in getattr(out, "source_ids", ()))
        origin = [i for i in dict.fromkeys(named) if i is not None]
        proposal = Proposal(text, cited, "", declared_direction(out), origin or None)
        proposals = [proposal] if text and not echo else []
        return {
            "reflections": [ReflectionResult(ids, proposals, shown_ids=cited)],
            "usages": [usage],
        }

    def _contrast(self, batch: Sequence[Feedback]) -> list[Feedback]:
        """Stored cases with rationales and other scores than the batch's, newest first.

        A batch that holds only failing cases cannot show the model when its rule does
        not apply; already-learned cases with other verdicts can.
        """
        n = self.memory.config.options.reflection.contrast
        if n <= 0:
            return []
        values = {repr(fb.value) for fb in batch}
        ids = {fb.id for fb in batch}
        recent = self.memory.store.recent_feedback(8 * n, exclude=ids)
        other = [fb for fb in recent if fb.rationale and repr(fb.value) not in values]
        return other[:n]
