"""The agreement series of a PostgreSQL memory: the `memalign_prequential` table.

`PostgresPrequentialTables` adds to `PostgresBase` the series behind
`MemAlignJudge.agreement_history`, as the SQLite store keeps it
(`_store_prequential`): a row per review with the judge's earlier verdict and
the expert's, and a row per align. A review's row goes with its feedback.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from langchain_memalign.memory._codec import _now
from langchain_memalign.memory._codec_prequential import SeriesRow, encode_value, series_rows
from langchain_memalign.memory._pg_base import PostgresBase

_COLUMNS = "seq, at, kind, feedback_id, judge_value, expert_value, source, learned"


class PostgresPrequentialTables(PostgresBase):
    """Rows of the agreement series of one judge's memory in PostgreSQL."""

    def record_review(
        self, conn: Any, feedback_id: str, expert: Any, *, judge: Any = None,
        source: str | None = None,
    ) -> bool:  # fmt: skip
        """Record a review in the series (see `Store.record_review`)."""
        cur = conn.execute(
            "UPDATE memalign_prequential SET expert_value=%s WHERE judge=%s AND feedback_id=%s",
            (encode_value(expert), self.judge, feedback_id),
        )
        if cur.rowcount or judge is None:
            return bool(cur.rowcount)
        conn.execute(
            "INSERT INTO memalign_prequential(judge, at, kind, feedback_id, judge_value, "
            "expert_value, source) VALUES (%s, %s, 'review', %s, %s, %s, %s)",
            (self.judge, _now(), feedback_id, encode_value(judge), encode_value(expert), source),
        )
        return True

    def mark_align(self, conn: Any, learned: int) -> None:
        """Mark an align at the end of the series (see `Store.mark_align`)."""
        conn.execute(
            "INSERT INTO memalign_prequential(judge, at, kind, learned) "
            "VALUES (%s, %s, 'align', %s)",
            (self.judge, _now(), learned),
        )

    def prequential(self, feedback_ids: Iterable[str] | None = None) -> list[SeriesRow]:
        """The agreement series, oldest first (see `Store.prequential`)."""
        with self._reading("the agreement series"):
            if feedback_ids is None:
                rows = self._rows(
                    f"SELECT {_COLUMNS} FROM memalign_prequential WHERE judge=%s ORDER BY seq"
                )
            else:
                rows = self._rows(
                    f"SELECT {_COLUMNS} FROM memalign_prequential WHERE judge=%s "
                    "AND feedback_id = ANY(%s) ORDER BY seq",
                    (list(feedback_ids),),
                )
            return series_rows(rows)
