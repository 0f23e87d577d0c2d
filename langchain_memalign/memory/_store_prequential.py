"""The agreement series of a SQLite memory: the `prequential` table.

`PrequentialTables` adds to `StoreBase` the series behind
`MemAlignJudge.agreement_history`: a row per review that arrived for a case the
judge had already graded (the judge's verdict from before it learned the review,
the expert's, the feedback id, the time) and a row per align (where it happened
in the series, and how many items it learned). A review's row belongs to its
feedback: deleting the feedback (unalign) deletes it, by cascade.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

from langchain_memalign.memory._codec import _now
from langchain_memalign.memory._codec_prequential import SeriesRow, encode_value, series_rows
from langchain_memalign.memory._store_base import StoreBase, _chunks


class PrequentialTables(StoreBase):
    """Rows of the agreement series of a memory database."""

    #: A version-1 folder that could not be upgraded (read-only): its series is empty.
    series_missing: bool = False

    def record_review(
        self,
        conn: sqlite3.Connection,
        feedback_id: str,
        expert: Any,
        *,
        judge: Any = None,
        source: str | None = None,
    ) -> bool:
        """Record a review in the series (see `Store.record_review`)."""
        cur = conn.execute(
            "UPDATE prequential SET expert_value=? WHERE feedback_id=?",
            (encode_value(expert), feedback_id),
        )
        if cur.rowcount or judge is None:
            return bool(cur.rowcount)
        conn.execute(
            "INSERT INTO prequential(at, kind, feedback_id, judge_value, expert_value, source) "
            "VALUES (?, 'review', ?, ?, ?, ?)",
            (_now(), feedback_id, encode_value(judge), encode_value(expert), source),
        )
        return True

    def mark_align(self, conn: sqlite3.Connection, learned: int) -> None:
        """Mark an align at the end of the series (see `Store.mark_align`)."""
        conn.execute(
            "INSERT INTO prequential(at, kind, learned) VALUES (?, 'align', ?)", (_now(), learned)
        )

    def prequential(self, feedback_ids: Iterable[str] | None = None) -> list[SeriesRow]:
        """The agreement series, oldest first (see `Store.prequential`)."""
        if self.series_missing:
            return []
        cols = "seq, at, kind, feedback_id, judge_value, expert_value, source, learned"
        with self.lock, self._reading("the agreement series"):
            if feedback_ids is None:
                rows = self._conn.execute(f"SELECT {cols} FROM prequential ORDER BY seq").fetchall()
            else:
                rows = []
                for chunk in _chunks(list(feedback_ids)):
                    q = ",".join("?" * len(chunk))
                    rows += self._conn.execute(
                        f"SELECT {cols} FROM prequential WHERE feedback_id IN ({q})", chunk
                    ).fetchall()
                rows.sort(key=lambda r: int(r[0]))
            return series_rows(rows)
