"""The first step of an align: which of the feedback given is new, changed or known.

An id not stored is added. One stored with another case, value or rationale (its
content hash differs) is updated: `forget` detaches what its old version taught
before it is learned again. One stored with the same content is unchanged, unless
only its metadata (or date) differ: that item is stored again at once, with no
model call, and reported as updated (a retag).
"""

from __future__ import annotations

from langchain_memalign.graphs.align_state import AlignInput, Classified
from langchain_memalign.memory.judge_memory import JudgeMemory


class Classify:
    """The `classify` node (see the module doc): reads and writes the memory's feedback."""

    def __init__(self, memory: JudgeMemory) -> None:
        self.memory = memory

    def __call__(self, state: AlignInput) -> Classified:
        """Sort the feedback into added, updated and unchanged items; store retagged ones."""
        mem = self.memory
        items = state.get("feedback") or []
        known = mem.store.feedback_state(fb.id for fb in items)
        added = [fb for fb in items if fb.id not in known]
        updated = [fb for fb in items if fb.id in known and known[fb.id][0] != fb.content_hash()]
        same = [fb for fb in items if fb.id in known and known[fb.id][0] == fb.content_hash()]
        # Same case, verdict and rationale but new metadata (or date): nothing to
        # learn again, but the stored item takes the new fields.
        stored = {
            i: f.model_dump(mode="json")
            for i, f in mem.store.get_feedback(fb.id for fb in same).items()
        }
        retagged = [fb for fb in same if stored.get(fb.id) != fb.model_dump(mode="json")]
        unchanged = [fb for fb in same if fb not in retagged]
        if retagged:
            with mem.write() as w:
                for fb in retagged:
                    w.put_feedback(fb, reflected=known[fb.id][1])
                w.log("retag", [fb.id for fb in retagged], [])
        return {
            "added": [fb.id for fb in added],
            "updated": [fb.id for fb in updated],
            "retagged": [fb.id for fb in retagged],
            "unchanged": [fb.id for fb in unchanged],
            "to_store": added + updated,
        }


def route_changed(state: Classified) -> str:
    """Forget what changed items taught before learning again; else straight to batching."""
    return "forget" if state.get("updated") else "batch"
