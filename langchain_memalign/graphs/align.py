r"""The alignment graph: reflect on feedback in parallel, merge into memory, consolidate.

```
START -(Send per batch)-> reflect -> merge -> validate -> calibrate -(over budget?)-> consolidate
      \\-(nothing to reflect)-------/                              \\---------------------> END
consolidate -> END
```
`reflect` distills scoped guidelines from one batch of feedback, shown beside
stored cases with other verdicts; a batch that fails is recorded, never
dropped: its feedback is stored and kept pending for the next alignment.
`merge` embeds only new or changed cases, new guidelines and the rationales
they cite, in one call, keeps only the sources whose rationale supports each
guideline, rejects case summaries, and commits episodes and guidelines in one
transaction. `validate` grades seen cases with and without each new guideline
and narrows or drops one that breaks more expert verdicts than it fixes.
`calibrate`, on integer scales, grades the stored cases as unseen and keeps the
judge's score beside the expert's (`graphs.calibrate`).
`forget` is the unalign step: it removes feedback and re-derives every
guideline that came from it.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, TypedDict, cast

import numpy as np
from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Send

from langchain_memalign import limits
from langchain_memalign._text import normalize
from langchain_memalign.feedback import Feedback
from langchain_memalign.graphs._weak import weak_node
from langchain_memalign.graphs.calibrate import ScoreCalibrator
from langchain_memalign.graphs.forget import ForgetStep
from langchain_memalign.graphs.provenance import (
    TOPIC_SEARCH_DEPTH,
    echoes_prompt,
    names_one_case,
    restates_case,
    supporting_sources,
)
from langchain_memalign.graphs.validate import GuidelineValidator
from langchain_memalign.memory.episodic import as_matrix
from langchain_memalign.memory.judge_memory import JudgeMemory
from langchain_memalign.memory.semantic import (
    Guideline,
    Proposal,
    merge_proposals,
    new_guideline_id,
    total_tokens,
)
from langchain_memalign.prompting.budget import fit_reflection, shown_guidelines
from langchain_memalign.prompting.prompts import (
    PAIR_SYSTEM,
    SINGLE_SYSTEM,
    consolidate_messages,
    pair_messages,
    reflect_messages,
)
from langchain_memalign.prompting.schemas import (
    Consolidation,
    Rederived,
    Rule,
    reflection_schema,
)
from langchain_memalign.prompting.structured import StructuredCaller
from langchain_memalign.reports import (
    CalibrationReport,
    GuidelineCheck,
    RejectedGuideline,
    Usage,
)

# -- state ------------------------------------------------------------------------------------


@dataclass
class ReflectionResult:
    """The outcome of reflecting on one batch."""

    batch_ids: list[str]
    proposals: list[Proposal] = field(default_factory=list)
    error: str | None = None
    # The batch and the contrast cases the prompt showed: a remark copied from any of
    # them is a copy, whichever sources the model cited.
    shown_ids: list[str] = field(default_factory=list)


class AlignState(TypedDict, total=False):
    """State of one alignment."""

    to_store: list[Feedback]
    # The feedback reflected on in this align (new, changed and pending items with a
    # rationale), and the batches (or contrast pairs) it is reflected in.
    to_reflect: list[Feedback]
    batches: list[list[Feedback]]
    # Case vectors already computed for this align, by feedback id: (text hash, vector).
    case_vectors: dict[str, tuple[str, Any]]
    reflections: Annotated[list[ReflectionResult], operator.add]
    usages: Annotated[list[Usage], operator.add]
    failed: Annotated[list[str], operator.add]
    errors: Annotated[list[str], operator.add]
    new_guidelines: list[str]
    rejected: Annotated[list[RejectedGuideline], operator.add]
    validation: list[GuidelineCheck]
    calibration: CalibrationReport


class ReflectInput(TypedDict, total=False):
    """Input of one `reflect` task."""

    batch: list[Feedback]
    # The feedback this task reflects on; the rest of the batch (a stored contrast
    # partner) is shown, not reflected (default: the whole batch).
    reflecting: list[str]


def _reflection_failed(ids: list[str], e: Exception) -> dict[str, Any]:
    """The `reflect` update for a call that failed: its feedback is kept pending."""
    return {
        "reflections": [ReflectionResult(ids, error=f"{type(e).__name__}: {e}")],
        "usages": [getattr(e, "usage", None) or Usage(llm_calls=1)],
        "failed": ids,
        "errors": [f"reflection on feedback {ids} failed: {e}"],
    }


class AlignNodes(ForgetStep):
    """The nodes of the alignment graph, bound to one judge's memory and reflection model."""

    def __init__(
        self,
        memory: JudgeMemory,
        model: BaseChatModel,
        validator: GuidelineValidator | None = None,
        calibrator: ScoreCalibrator | None = None,
    ) -> None:
        self.memory = memory
        retries = memory.config.options.max_retries
        self.reflection_model = model
        self.validator = validator
        self.calibrator = calibrator
        self.rederiver = StructuredCaller(
            model, Rederived, what="guideline re-derivation", retries=retries
        )
        self.consolidator = StructuredCaller(
            model, Consolidation, what="guideline consolidation", retries=retries
        )

    # -- reflect --------------------------------------------------------------------------

    def route_batches(self, state: AlignState) -> list[Send] | str:
        """Fan out one `reflect` task per batch; go straight to `merge` when there is none."""
        pending = {fb.id for fb in state.get("to_reflect") or []}
        sends = [
            Send("reflect", {"batch": b, "reflecting": [fb.id for fb in b if fb.id in pending]})
            for b in state.get("batches") or []
            if b
        ]
        return sends or "merge"

    def reflect(self, state: ReflectInput, config: RunnableConfig) -> dict[str, Any]:
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
        reflector = StructuredCaller(
            self.reflection_model, reflection_schema(citable), what="reflection",
            retries=cfg.options.max_retries,
        )  # fmt: skip
        try:
            out, usage = reflector.invoke(messages, config)
        except Exception as e:  # recorded and retried later, never dropped
            return _reflection_failed(ids, e)
        proposals = []
        for p in out.guidelines:
            sources = [s for s in dict.fromkeys(p.source_ids) if s in citable]
            # A guideline citing no known feedback is checked against the whole batch:
            # `merge` keeps only the sources whose rationale supports it.
            proposals.append(Proposal(p.text, sources or citable, p.existing_id))
        result = ReflectionResult(ids, proposals, shown_ids=citable)
        return {"reflections": [result], "usages": [usage]}

    def _reflect_pair(
        self, group: list[Feedback], ids: list[str], config: RunnableConfig
    ) -> dict[str, Any]:
        """The rule behind one contrast pair (`graphs.pairs`), citing both cases.

        `ids`: the feedback of the pair being reflected on (a stored partner is not).
        """
        cfg = self.memory.config
        cited = [fb.id for fb in group]
        max_chars = cfg.options.retrieval.episode_max_chars
        messages = pair_messages(cfg.instructions, cfg.scale, group, max_chars)
        caller = StructuredCaller(
            self.reflection_model, Rule, what="reflection", retries=cfg.options.max_retries
        )
        try:
            out, usage = caller.invoke(messages, config)
        except Exception as e:  # recorded and retried later, never dropped
            return _reflection_failed(ids, e)
        text = " ".join(out.rule.split())
        # The request's own words back are no rule.
        echo = echoes_prompt(text, PAIR_SYSTEM + "\n" + SINGLE_SYSTEM)
        proposals = [Proposal(text, cited, "")] if text and not echo else []
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

    # -- merge ----------------------------------------------------------------------------

    def merge(self, state: AlignState) -> dict[str, Any]:
        """Store episodes and merge checked guidelines into memory, in one transaction.

        Proposals that restate one case are rejected; each proposal keeps only the cited
        feedback whose rationale supports it (an embedding test, see `provenance`), and
        one that no cited rationale supports is rejected. Episodes, proposals and
        rationales are embedded in one call.
        """
        mem = self.memory
        to_store = state.get("to_store") or []
        reflections = state.get("reflections") or []
        if not to_store and not reflections:
            return {}
        failed = {i for r in reflections if r.error for i in r.batch_ids}
        reflected = {i for r in reflections if not r.error for i in r.batch_ids}
        proposals = [p for r in reflections for p in r.proposals]
        known = {fb.id: fb for fb in to_store}
        shown_ids = {i for r in reflections for i in r.shown_ids}
        cited = {s for p in proposals for s in p.source_ids}
        known.update(mem.store.get_feedback((cited | shown_ids) - known.keys()))
        rejected: list[RejectedGuideline] = []
        candidates: list[Proposal] = []
        pairs = mem.config.options.reflection.mode == "pairs"
        for r in reflections:
            # Each proposal against what its own prompt showed: linear in the feedback.
            shown = [known[i] for i in r.shown_ids if i in known]
            for p in r.proposals:
                cited_fb = [known[s] for s in p.source_ids if s in known]
                if restates_case(
                    p.text, cited_fb, mem.config.scale.choices, shown, outputs=not pairs
                ):
                    rejected.append(RejectedGuideline(text=p.text, reason="restates a case"))
                else:
                    candidates.append(p)
        # A pair's rule has its pair as sources by construction; the support test is for
        # what a model cites (docs/decisions.md#reflection-contrast-pairs).
        min_support = None if pairs else mem.config.options.reflection.source_support
        rationale_ids = (
            []
            if min_support is None
            else sorted(
                {s for p in candidates for s in p.source_ids if s in known and known[s].rationale}
            )
        )
        proposal_texts = list(dict.fromkeys(" ".join(p.text.split()) for p in candidates))

        texts = {fb.id: mem.case_text(fb.inputs, fb.outputs) for fb in to_store}
        stored = mem.store.episode_keys(texts)
        hashes = {fid: mem.text_hash(t) for fid, t in texts.items()}
        to_embed = [fid for fid in texts if stored.get(fid, (0, ""))[1] != hashes[fid]]
        usage = Usage()
        # Vectors embedded earlier in this align (to find contrast pairs) are reused.
        known_vectors = {
            fid: vec
            for fid, (h, vec) in (state.get("case_vectors") or {}).items()
            if fid in hashes and hashes[fid] == h
        }
        fresh = [fid for fid in to_embed if fid not in known_vectors]
        all_texts = (
            [texts[f] for f in fresh]
            + proposal_texts
            + [cast(str, known[s].rationale) for s in rationale_ids]
        )
        vectors = mem.embed(all_texts, usage) if all_texts else np.zeros((0, 0), np.float32)
        n_ep, n_prop = len(fresh), len(proposal_texts)
        episode_vectors = {
            **{fid: known_vectors[fid] for fid in to_embed if fid in known_vectors},
            **dict(zip(fresh, vectors[:n_ep], strict=True)),
        }
        proposal_vectors = dict(zip(proposal_texts, vectors[n_ep : n_ep + n_prop], strict=True))
        rationale_vectors = dict(zip(rationale_ids, vectors[n_ep + n_prop :], strict=True))

        supported: list[Proposal] = []
        for p in candidates:
            text = " ".join(p.text.split())
            support = (
                p.source_ids
                if min_support is None
                else supporting_sources(
                    proposal_vectors[text], p.source_ids, rationale_vectors, min_support
                )
            )
            if not support:
                rejected.append(
                    RejectedGuideline(text=text, reason="no cited rationale supports it")
                )
                continue
            topic = (
                None
                if min_support is None
                else names_one_case(
                    self._nearest_topics(proposal_vectors[text], episode_vectors, hashes)
                )
            )
            if topic is not None and set(topic) & set(support):
                rejected.append(
                    RejectedGuideline(
                        text=text,
                        reason=f"names the topic of one case ({', '.join(topic)}), not a rule",
                    )
                )
                continue
            supported.append(Proposal(text, support, p.existing_id))
        plan = merge_proposals(mem.guidelines, supported)
        room = max(0, limits.MAX_GUIDELINES - len(mem.guidelines))
        for g in plan.added[room:]:
            reason = (
                f"the memory holds the most guidelines allowed ({limits.MAX_GUIDELINES}, "
                "langchain_memalign.limits.MAX_GUIDELINES)"
            )
            rejected.append(RejectedGuideline(text=g.text, reason=reason))
        plan.added = plan.added[:room]

        with mem.write() as w:
            position = w.next_position()
            for fb in to_store:
                done = fb.rationale is None or fb.id in reflected
                w.put_feedback(fb, reflected=done and fb.id not in failed)
                if fb.id in episode_vectors:
                    w.put_episode(fb.id, hashes[fb.id], episode_vectors[fb.id])
            w.set_reflected(reflected - failed, True)
            for i, g in enumerate(plan.added):
                w.put_guideline(g, proposal_vectors[g.text], position + i)
            for g in plan.updated:
                w.put_guideline(g, None, 0)
            w.log(
                "align", [fb.id for fb in to_store] + sorted(reflected),
                [g.id for g in plan.added + plan.updated],
            )  # fmt: skip
        return {
            "usages": [usage],
            "rejected": rejected,
            "new_guidelines": [g.id for g in plan.added],
        }

    def _nearest_topics(
        self, vector: np.ndarray, new: dict[str, np.ndarray], hashes: dict[str, str], n: int = 2
    ) -> list[tuple[tuple[str, ...], float]]:
        """The `n` topics nearest `vector`, best first: (feedback ids, cosine).

        Cases embedded from the same text (several answers to one question, with
        `embed="inputs"`) are one topic, so a guideline about that question does not
        pass the gap test. `new`: vectors of cases being
        stored; `hashes`: their embedded texts' hashes.
        """
        mem = self.memory
        # The index's own normalization, so cases being stored score as stored ones do.
        q = as_matrix(vector)[0]
        # Deeper than `n`: the nearest hits may all be answers to one question.
        hits = mem.index.search(q, TOPIC_SEARCH_DEPTH * n + len(new))
        stored = mem.store.episodes_by_rowid([r for r, _ in hits])
        # The hash stored with each episode: the text its vector was embedded from.
        keys = mem.store.episode_keys(fb.id for fb in stored.values())
        scored: dict[str, tuple[str, float]] = {}
        for r, sim in hits:
            fb = stored.get(r)
            if fb is not None and fb.id not in new and fb.id in keys:
                scored[fb.id] = (keys[fb.id][1], float(sim))
        for fid, v in new.items():
            scored[fid] = (hashes[fid], float(as_matrix(v)[0] @ q))
        topics: dict[str, tuple[list[str], float]] = {}
        for fid, (key, sim) in sorted(scored.items(), key=lambda x: -x[1][1]):
            topics.setdefault(key, ([], sim))[0].append(fid)
        ranked = sorted(topics.values(), key=lambda t: -t[1])
        return [(tuple(ids), sim) for ids, sim in ranked[:n]]

    # -- validate -------------------------------------------------------------------------

    def validate(self, state: AlignState, config: RunnableConfig) -> dict[str, Any]:
        """Grade seen cases with and without each new guideline; narrow or drop bad ones."""
        new = state.get("new_guidelines") or []
        if self.validator is None or not new:
            return {}
        checks, usage, errors = self.validator.run(new, config)
        return {"validation": checks, "usages": [usage], "errors": errors}

    # -- calibrate ------------------------------------------------------------------------

    def calibrate(self, state: AlignState, config: RunnableConfig) -> dict[str, Any]:
        """On integer scales, grade the stored cases as unseen and keep calibration pairs."""
        if self.calibrator is None:
            return {}
        report = self.calibrator.run(state.get("to_store") or [], config)
        if report is None:
            return {}
        return {"calibration": report, "usages": [report.usage], "errors": report.errors}

    # -- consolidate ----------------------------------------------------------------------

    def route_consolidation(self, state: AlignState) -> str:
        """Consolidate only when the guidelines outgrow their token budget."""
        budget = self.memory.config.options.reflection.guideline_token_budget
        over = total_tokens(self.memory.guidelines) > budget
        return "consolidate" if over else END

    def consolidate(self, state: AlignState, config: RunnableConfig) -> dict[str, Any]:
        """Merge overlapping guidelines with the model, keeping the union of their provenance."""
        mem = self.memory
        cfg = mem.config
        # Past the prompt budget, this consolidation merges the guidelines that fit;
        # the next one (still over the guideline budget) takes the rest.
        guidelines = shown_guidelines(list(mem.guidelines), limits.prompt_budget_chars() // 2)
        max_words = max(30, int(cfg.options.reflection.guideline_token_budget * 0.45))
        try:
            out, usage = self.consolidator.invoke(
                consolidate_messages(cfg.instructions, guidelines, max_words), config
            )
        except Exception as e:
            # The memory stays valid (only larger); judgments still fit the budget
            # because they select the most relevant guidelines.
            return {
                "usages": [getattr(e, "usage", None) or Usage(llm_calls=1)],
                "errors": [f"consolidation failed, guidelines kept as they were: {e}"],
            }
        by_id = {g.id: g for g in guidelines}
        replaced: set[str] = set()
        created: list[Guideline] = []
        for item in out.guidelines:
            ids = [i for i in dict.fromkeys(item.merged_from) if i in by_id and i not in replaced]
            text = " ".join(item.text.split())
            if not ids or not text:
                continue
            if len(ids) == 1 and normalize(text) == normalize(by_id[ids[0]].text):
                continue
            sources = list(dict.fromkeys(s for i in ids for s in by_id[i].source_ids))
            created.append(Guideline(id=new_guideline_id(), text=text, source_ids=tuple(sources)))
            replaced.update(ids)
        if not created:
            return {"usages": [usage]}
        vectors = mem.embed([g.text for g in created], usage)
        with mem.write() as w:
            position = w.next_position()
            w.delete_guidelines(replaced)
            for i, g in enumerate(created):
                w.put_guideline(g, vectors[i], position + i)
            w.log(
                "consolidate", [s for g in created for s in g.source_ids],
                sorted(replaced) + [g.id for g in created],
            )  # fmt: skip
        return {"usages": [usage]}


def build_align_graph(
    memory: JudgeMemory,
    model: BaseChatModel,
    *,
    name: str | None = None,
    validator: GuidelineValidator | None = None,
    calibrator: ScoreCalibrator | None = None,
) -> CompiledStateGraph[AlignState, None, AlignState, AlignState]:
    """Compile the alignment graph for a memory and a reflection model.

    With a `validator`, new guidelines are checked against seen cases after `merge`;
    with a `calibrator`, the stored cases are then graded for score calibration.
    """
    nodes = AlignNodes(memory, model, validator, calibrator)
    w = weak_node
    graph = StateGraph(AlignState)
    graph.add_node("reflect", w(nodes.reflect), input_schema=ReflectInput)
    graph.add_node("merge", w(nodes.merge))
    graph.add_node("validate", w(nodes.validate))
    graph.add_node("calibrate", w(nodes.calibrate))
    graph.add_node("consolidate", w(nodes.consolidate))
    graph.add_conditional_edges(START, w(nodes.route_batches), ["reflect", "merge"])
    graph.add_edge("reflect", "merge")
    graph.add_edge("merge", "validate")
    graph.add_edge("validate", "calibrate")
    graph.add_conditional_edges("calibrate", w(nodes.route_consolidation), ["consolidate", END])
    graph.add_edge("consolidate", END)
    compiled = graph.compile(name=name or f"{memory.config.name}_align")
    compiled.memalign_nodes = nodes  # type: ignore[attr-defined]  # see _weak.py
    return compiled
