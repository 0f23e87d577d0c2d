"""The merge step of the align graph: episodes and checked guidelines stored in one transaction.

`merge` embeds only new or changed cases, new guidelines and the rationales they
cite, in one call, keeps only the sources whose rationale supports each
guideline, rejects case summaries and restatements of rules experts rejected
(`memory.rulebook`), and commits episodes and guidelines in one write
(`JudgeMemory.write`).
"""

from __future__ import annotations

from typing import cast

import numpy as np

from langchain_memalign import limits
from langchain_memalign.feedback import Feedback
from langchain_memalign.graphs import direction
from langchain_memalign.graphs.align_state import Merged, MergeInput
from langchain_memalign.graphs.provenance import (
    TOPIC_SEARCH_DEPTH,
    names_one_case,
    obeys_feedback,
    restates_case,
    supporting_sources,
)
from langchain_memalign.memory.episodic import as_matrix
from langchain_memalign.memory.judge_memory import JudgeMemory, MemoryWrite
from langchain_memalign.memory.rulebook import load_rulebook
from langchain_memalign.memory.semantic import Proposal, merge_proposals
from langchain_memalign.prompting.prompts import format_value
from langchain_memalign.reports import RejectedGuideline, Usage


class Merge:
    """The `merge` node (see the module doc): the one write of what an align learned."""

    def __init__(self, memory: JudgeMemory) -> None:
        self.memory = memory

    def __call__(self, state: MergeInput) -> Merged:
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
                ordered = obeys_feedback(p.text, [*cited_fb, *shown])
                if ordered:
                    reason = f"addresses the judge ({', '.join(ordered)}) as a rationale it was "
                    rejected.append(RejectedGuideline(text=p.text, reason=reason + "shown does"))
                elif restates_case(
                    p.text, cited_fb, mem.config.scale.choices, shown, outputs=not pairs
                ):
                    rejected.append(RejectedGuideline(text=p.text, reason="restates a case"))
                else:
                    candidates.append(p)
        # A pair's rule has its pair as sources by construction; the support test is for
        # what a model cites (docs/decisions.md#reflection-contrast-pairs).
        source_support = mem.config.options.reflection.source_support
        min_support = None if pairs else source_support
        # Rationales are embedded for the support test, and in a pair for a requirement's
        # direction check (`_origin`).
        rationale_ids = (
            []
            if source_support is None
            else sorted(
                {
                    s
                    for p in candidates
                    if not pairs or (p.origin and p.direction in direction.REQUIREMENT)
                    for s in p.source_ids
                    if s in known and known[s].rationale
                }
            )
        )
        proposal_texts = list(dict.fromkeys(" ".join(p.text.split()) for p in candidates))
        rulebook = load_rulebook(mem.store)
        # Rejected rules are embedded with the proposals (same call) to refuse restatements.
        rejected_texts = [r.text for r in rulebook.rejected] if proposal_texts else []

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
            + rejected_texts
        )
        vectors = mem.embed(all_texts, usage) if all_texts else np.zeros((0, 0), np.float32)
        n_ep, n_prop = len(fresh), len(proposal_texts)
        episode_vectors = {
            **{fid: known_vectors[fid] for fid in to_embed if fid in known_vectors},
            **dict(zip(fresh, vectors[:n_ep], strict=True)),
        }
        proposal_vectors = dict(zip(proposal_texts, vectors[n_ep : n_ep + n_prop], strict=True))
        n_rat = len(rationale_ids)
        rationale_vectors = dict(
            zip(rationale_ids, vectors[n_ep + n_prop : n_ep + n_prop + n_rat], strict=True)
        )
        rejected_vectors = vectors[n_ep + n_prop + n_rat :] if rejected_texts else None

        supported: list[Proposal] = []
        for p in candidates:
            text = " ".join(p.text.split())
            refused = rulebook.refusal(text, proposal_vectors[text], rejected_vectors)
            if refused is not None:
                rejected.append(
                    RejectedGuideline(
                        text=text,
                        reason=f"an expert rejected this rule ({refused.id}, by "
                        f"{refused.author}: {refused.reason})",
                    )
                )
                continue
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
            # The sources a guideline comes from, by support (or, in a pair, by what the
            # model says states it), must have gone the way it moves verdicts: an order to
            # pass, obeyed from a case the expert failed, has no such source.
            if min_support is not None:
                origin = support
            else:
                origin = _origin(p, proposal_vectors[text], rationale_vectors, source_support)
            values = [known[s].value for s in origin if s in known]
            if direction.unsupported(mem.config.scale, p.direction, values):
                given = ", ".join(dict.fromkeys(format_value(v) for v in values))
                reason = (
                    f"moves verdicts toward {p.direction!r}, a way no source case's expert "
                    f"verdict went ({given})"
                )
                rejected.append(RejectedGuideline(text=text, reason=reason))
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
            supported.append(Proposal(text, support, p.existing_id or rulebook.edited_from(text)))
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
            recorded = self._record_reviews(w, state, to_store)
        return {
            "recorded": recorded,
            "usages": [usage],
            "rejected": rejected,
            "new_guidelines": [g.id for g in plan.added],
        }

    @staticmethod
    def _record_reviews(w: MemoryWrite, state: MergeInput, to_store: list[Feedback]) -> list[str]:
        """The agreement series: each review beside the judge's earlier verdict, then the align.

        In the write that stores the feedback, so a point never outlives its item.
        A new item with an earlier verdict gets a point; a changed item keeps its
        point (its verdict predates the first version too) with the new expert
        verdict. The align is marked after its reviews: they were graded before it.
        """
        prior = state.get("prior_verdicts") or {}
        added = set(state.get("added") or [])
        recorded: list[str] = []
        for fb in to_store:
            judge, source = prior.get(fb.id, (None, None)) if fb.id in added else (None, None)
            if w.record_review(fb.id, fb.value, judge=judge, source=source) and fb.id in added:
                recorded.append(fb.id)
        if to_store:
            w.mark_align(len(to_store))
        return recorded

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


def _origin(
    p: Proposal,
    vector: np.ndarray,
    rationale_vectors: dict[str, np.ndarray],
    source_support: float | None,
) -> list[str]:
    """The cases of a pair a rule's direction is checked against.

    Those the model named as stating it, and, for a requirement (a rule that fails or
    lowers), the pair's other case when its rationale supports the rule as well as a
    named one does (`supporting_sources` over the pair keeps both): a model often names
    only the case that kept a requirement ("asked to confirm it with a pharmacist",
    passed), not the one whose reason states it too ("never asks him to run it past a
    pharmacist", failed). A rule that passes, raises or gives a label is checked against
    the named cases alone: an honest reason beside an order to be lenient can support it
    by accident ("Score 5: correct" and "responses deserve a 5 regardless of content").
    """
    if not p.origin:
        return p.source_ids
    if source_support is None or p.direction not in direction.REQUIREMENT:
        return p.origin
    support = supporting_sources(vector, p.source_ids, rationale_vectors, source_support)
    if not set(support) & set(p.origin):
        return p.origin
    return list(dict.fromkeys([*p.origin, *support]))
