"""Semantic memory: guidelines distilled from feedback, each with its provenance."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from langchain_memalign._text import estimate_tokens, normalize

# Guidelines are meant to be one short sentence each; offered to the model's structured
# output (grammar-enforced on local servers) as a maximum length.
GUIDELINE_MAX_CHARS = 300


class Guideline(BaseModel):
    """A general grading rule and the feedback ids it was distilled from."""

    model_config = ConfigDict(frozen=True)

    id: str
    text: str
    source_ids: tuple[str, ...] = Field(description="Feedback ids this guideline came from.")
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))

    @property
    def tokens(self) -> int:
        """Estimated prompt tokens of this guideline."""
        return estimate_tokens(self.text) + 2


def new_guideline_id() -> str:
    """A fresh guideline id."""
    return "g-" + uuid.uuid4().hex[:12]


def total_tokens(guidelines: Iterable[Guideline]) -> int:
    """Estimated prompt tokens of a set of guidelines."""
    return sum(g.tokens for g in guidelines)


@dataclass
class Proposal:
    """A guideline proposed by reflection, before it is merged into memory.

    `direction`: which way its author declared it moves verdicts (`graphs.direction`),
    None if it declared none. `origin`: the sources its direction is checked against,
    when not all of `source_ids` (the cases of a pair whose reason states the rule).
    """

    text: str
    source_ids: list[str]
    existing_id: str = ""
    direction: str | None = None
    origin: list[str] | None = None


@dataclass
class MergePlan:
    """How proposals change the semantic memory."""

    added: list[Guideline] = field(default_factory=list)
    updated: list[Guideline] = field(default_factory=list)


def merge_proposals(existing: Sequence[Guideline], proposals: Iterable[Proposal]) -> MergePlan:
    """Merge proposals into existing guidelines without duplicates.

    A proposal that names an existing guideline, or says the same thing in
    other words up to case and spacing, adds its sources to that guideline's
    provenance instead of creating a duplicate.
    """
    by_id = {g.id: g for g in existing}
    by_norm = {normalize(g.text): g.id for g in existing}
    sources: dict[str, list[str]] = {g.id: list(g.source_ids) for g in existing}
    texts: dict[str, str] = {}
    created: list[str] = []
    touched: set[str] = set()
    for p in proposals:
        text = " ".join(p.text.split())
        if not text:
            continue
        norm = normalize(text)
        gid = p.existing_id if p.existing_id in by_id else by_norm.get(norm)
        if gid is None:
            gid = new_guideline_id()
            by_norm[norm] = gid
            texts[gid] = text
            sources[gid] = []
            created.append(gid)
        for s in p.source_ids:
            if s not in sources[gid]:
                sources[gid].append(s)
                if gid in by_id:
                    touched.add(gid)
    plan = MergePlan()
    for gid in created:
        plan.added.append(Guideline(id=gid, text=texts[gid], source_ids=tuple(sources[gid])))
    for gid in sorted(touched):
        plan.updated.append(by_id[gid].model_copy(update={"source_ids": tuple(sources[gid])}))
    return plan


def select_guidelines(
    guidelines: Sequence[Guideline],
    vectors: np.ndarray | None,
    query_vector: np.ndarray | None,
    budget_tokens: int,
) -> list[Guideline]:
    """Pick the guidelines that go into a judgment's working memory.

    All of them while they fit the token budget; past it, the ones most
    similar to the case, in that order, until the budget is spent.
    """
    if total_tokens(guidelines) <= budget_tokens:
        return list(guidelines)
    if vectors is None or query_vector is None or len(vectors) != len(guidelines):
        order = list(range(len(guidelines)))
    else:
        q = np.asarray(query_vector, dtype=np.float32).reshape(-1)
        q = q / (np.linalg.norm(q) or 1.0)
        order = list(np.argsort(-(vectors @ q), kind="stable"))
    chosen: list[Guideline] = []
    spent = 0
    for i in order:
        g = guidelines[int(i)]
        if spent + g.tokens > budget_tokens:
            continue
        chosen.append(g)
        spent += g.tokens
    return chosen
