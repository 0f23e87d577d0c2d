"""Contrast pairs: each feedback item beside the most similar case graded otherwise.

An unwritten rule is what separates a case the experts failed from the passing case most
like it. Shown such a pair with the experts' reasons, a model states that difference; shown
a batch of cases, it states what the batch has in common, which is mostly generic quality
(docs/decisions.md#reflection-contrast-pairs). Pairs are found with the case vectors the
memory keeps anyway: no model call.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from langchain_memalign.feedback import Feedback
from langchain_memalign.memory.episodic import as_matrix
from langchain_memalign.memory.judge_memory import JudgeMemory

# Stored cases searched per item for a partner graded otherwise: the nearest hits may
# all share its score.
SEARCH_DEPTH = 16


def contrast_groups(
    memory: JudgeMemory, items: Sequence[Feedback], vectors: np.ndarray
) -> list[list[Feedback]]:
    """Each item with its partner, the most similar other case with another score.

    Partners come from `items` and from the stored episodes; a pair is made once
    however many of its cases chose it. An item with no partner (every case
    shares its score) is a group of its own, as is every item on a pairwise scale,
    whose case already compares two outputs.
    """
    if not items:
        return []
    if memory.config.scale.kind == "pairwise":
        return [[fb] for fb in items]
    q = as_matrix(vectors)
    inner = q @ q.T
    ids = {fb.id for fb in items}
    groups: list[list[Feedback]] = []
    made: set[frozenset[str]] = set()
    for i, fb in enumerate(items):
        candidates: list[tuple[float, Feedback]] = [
            (float(inner[i, j]), other)
            for j, other in enumerate(items)
            if j != i and repr(other.value) != repr(fb.value)
        ]
        candidates += [
            (sim, other)
            for sim, other in _stored_neighbours(memory, q[i], exclude=ids)
            if repr(other.value) != repr(fb.value)
        ]
        if not candidates:
            groups.append([fb])
            continue
        partner = max(candidates, key=lambda c: c[0])[1]
        key = frozenset((fb.id, partner.id))
        if key not in made:
            made.add(key)
            groups.append([fb, partner])
    return groups


def _stored_neighbours(
    memory: JudgeMemory, vector: np.ndarray, exclude: set[str]
) -> list[tuple[float, Feedback]]:
    """Stored cases nearest `vector` with their cosine, those in `exclude` left out."""
    hits = memory.index.search(vector, SEARCH_DEPTH)
    stored = memory.store.episodes_by_rowid([r for r, _ in hits])
    return [
        (float(sim), stored[r]) for r, sim in hits if r in stored and stored[r].id not in exclude
    ]
