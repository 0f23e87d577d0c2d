"""The guidelines and history tables of a PostgreSQL memory.

`PostgresGuidelineTables` adds to `PostgresBase` the distilled guidelines
(in order, with their optional vectors and the feedback ids each came from)
and the history: one row per change, recording the action and the ids of
the feedback and guidelines involved, never their text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import numpy as np

from langchain_memalign import limits
from langchain_memalign.memory._codec import _now, _vec_blob, guidelines_from_rows
from langchain_memalign.memory._pg_base import PostgresBase
from langchain_memalign.memory.semantic import Guideline


class PostgresGuidelineTables(PostgresBase):
    """Guideline and history rows of one judge's memory in PostgreSQL."""

    # -- guidelines ------------------------------------------------------------------

    def load_guidelines(self) -> tuple[list[Guideline], np.ndarray | None]:
        """All guidelines in order, and their vectors (None if any lacks one)."""
        with self._reading("guidelines"), self.consistent():
            rows = self._rows(
                "SELECT id, text, vector, created_at FROM memalign_guidelines WHERE judge=%s "
                "ORDER BY position, ord"
            )
            sources = self._rows(
                "SELECT guideline_id, feedback_id FROM memalign_guideline_sources "
                "WHERE judge=%s ORDER BY ord"
            )
            return guidelines_from_rows(rows, sources)

    def put_guideline(
        self, conn: Any, g: Guideline, vector: np.ndarray | None, position: int
    ) -> None:
        """Insert or replace a guideline with its provenance (text within the size limit)."""
        limits.check_guideline_text(g.id, g.text)
        conn.execute(
            "INSERT INTO memalign_guidelines(judge, id, text, vector, created_at, position) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (judge, id) DO UPDATE SET "
            "text=excluded.text, vector=COALESCE(excluded.vector, memalign_guidelines.vector)",
            (self.judge, g.id, g.text, None if vector is None else _vec_blob(vector),
             g.created_at.isoformat(), position),
        )  # fmt: skip
        conn.execute(
            "DELETE FROM memalign_guideline_sources WHERE judge=%s AND guideline_id=%s",
            (self.judge, g.id),
        )
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO memalign_guideline_sources(judge, guideline_id, feedback_id) "
                "VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                [(self.judge, g.id, s) for s in g.source_ids],
            )

    def delete_guidelines(self, conn: Any, ids: Iterable[str]) -> None:
        """Delete guidelines and their provenance."""
        conn.execute(
            "DELETE FROM memalign_guidelines WHERE judge=%s AND id = ANY(%s)",
            (self.judge, list(ids)),
        )

    def next_position(self) -> int:
        """Position after the last guideline."""
        with self._reading("guidelines"):
            rows = self._rows(
                "SELECT COALESCE(MAX(position), -1) FROM memalign_guidelines WHERE judge=%s"
            )
            return int(rows[0][0]) + 1

    # -- history ---------------------------------------------------------------------

    def log(
        self, conn: Any, action: str, feedback_ids: Iterable[str], guideline_ids: Iterable[str] = ()
    ) -> None:
        """Record a change and the feedback that caused it (ids only, never text)."""
        conn.execute(
            "INSERT INTO memalign_history(judge, at, action, feedback_ids, guideline_ids) "
            "VALUES (%s, %s, %s, %s, %s)",
            (self.judge, _now(), action, json.dumps(sorted(set(feedback_ids))),
             json.dumps(sorted(set(guideline_ids)))),
        )  # fmt: skip

    def history(self) -> list[dict[str, Any]]:
        """Every recorded change, oldest first (`seq` counts this judge's changes from 1)."""
        with self._reading("history"):
            rows = self._rows(
                "SELECT at, action, feedback_ids, guideline_ids FROM memalign_history "
                "WHERE judge=%s ORDER BY seq"
            )
            return [
                {"seq": n, "at": at, "action": a, "feedback_ids": json.loads(f),
                 "guideline_ids": json.loads(g)}
                for n, (at, a, f, g) in enumerate(rows, start=1)
            ]  # fmt: skip
