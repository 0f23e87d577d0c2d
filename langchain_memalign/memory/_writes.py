"""One write step of an align or unalign: the store's writes, and the index changes they imply.

Every node that changes the memory writes through `JudgeMemory.write`, which
yields a `MemoryWrite`: the store's write methods bound to one transaction.
Episodes stored or deleted through it are remembered, so that `write`, once
the transaction has committed, updates the episode index with exactly them and
publishes the new version. A node cannot commit and forget the index, or
update the index and forget to publish.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from langchain_memalign.feedback import Feedback
from langchain_memalign.memory.base import Store
from langchain_memalign.memory.calibration import META_KEY as CALIBRATION_KEY
from langchain_memalign.memory.calibration import ScoreCalibration
from langchain_memalign.memory.rulebook import META_KEY as RULEBOOK_KEY
from langchain_memalign.memory.rulebook import RulebookState
from langchain_memalign.memory.semantic import Guideline


class MemoryWrite:
    """The writes of one step, in one store transaction (see the module doc).

    Obtained from `JudgeMemory.write`; the methods are the store's write
    methods (`memory.base.Store`) without the connection argument.
    """

    def __init__(self, store: Store, conn: Any) -> None:
        self._store = store
        self._conn = conn
        # Episode index changes, applied by `JudgeMemory.write` after the commit.
        self.added_rows: list[int] = []
        self.added_vectors: list[np.ndarray] = []
        self.removed_rows: list[int] = []

    # -- feedback and episodes -------------------------------------------------------

    def put_feedback(self, fb: Feedback, *, reflected: bool) -> None:
        """Insert or replace one feedback item."""
        self._store.put_feedback(self._conn, fb, reflected=reflected)

    def set_reflected(self, ids: Iterable[str], reflected: bool) -> None:
        """Mark feedback as distilled (or pending distillation)."""
        self._store.set_reflected(self._conn, ids, reflected)

    def delete_feedback(self, ids: Iterable[str]) -> None:
        """Delete feedback and its episodes; their vectors leave the index."""
        ids = list(ids)
        self.removed_rows += [rowid for rowid, _ in self._store.episode_keys(ids).values()]
        self._store.delete_feedback(self._conn, ids)

    def put_episode(self, feedback_id: str, text_hash: str, vector: np.ndarray) -> None:
        """Store an episode's vector; it replaces the item's old one in the index."""
        rowid, old = self._store.put_episode(self._conn, feedback_id, text_hash, vector)
        self.added_rows.append(rowid)
        self.added_vectors.append(vector)
        if old is not None:
            self.removed_rows.append(old)

    # -- guidelines, calibration, history ----------------------------------------------

    def next_position(self) -> int:
        """Position after the last guideline (0 without guidelines)."""
        return self._store.next_position()

    def put_guideline(self, g: Guideline, vector: np.ndarray | None, position: int) -> None:
        """Insert or replace a guideline (see `Store.put_guideline`)."""
        self._store.put_guideline(self._conn, g, vector, position)

    def delete_guidelines(self, ids: Iterable[str]) -> None:
        """Delete guidelines and their provenance."""
        self._store.delete_guidelines(self._conn, ids)

    def put_calibration(self, calibration: ScoreCalibration) -> None:
        """Store the score calibration (none left clears it)."""
        self._store.set_meta(CALIBRATION_KEY, calibration.to_json() if calibration.pairs else None)

    def put_rulebook(self, rulebook: RulebookState) -> None:
        """Store the experts' marks, rejected rules and rulebook changes."""
        self._store.set_meta(RULEBOOK_KEY, rulebook.to_json())

    def record_review(
        self, feedback_id: str, expert: Any, *, judge: Any = None, source: str | None = None
    ) -> bool:
        """Record a review in the agreement series (see `Store.record_review`)."""
        return self._store.record_review(
            self._conn, feedback_id, expert, judge=judge, source=source
        )

    def mark_align(self, learned: int) -> None:
        """Mark an align at the end of the agreement series."""
        self._store.mark_align(self._conn, learned)

    def log(
        self, action: str, feedback_ids: Iterable[str], guideline_ids: Iterable[str] = ()
    ) -> None:
        """Record the change and the feedback that caused it (ids only, never text)."""
        self._store.log(self._conn, action, feedback_ids, guideline_ids)
