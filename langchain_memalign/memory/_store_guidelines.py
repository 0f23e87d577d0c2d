"""The guidelines and history tables of the memory database.

`GuidelineTables` adds to `StoreBase` the distilled guidelines (in order,
with their optional vectors and the feedback ids each came from) and the
history: one row per change, recording the action and the ids of the
feedback and guidelines involved, never their text.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from typing import Any

import numpy as np

from langchain_memalign import limits
from langchain_memalign.memory._codec import _now, _vec_blob, guidelines_from_rows
from langchain_memalign.memory._store_base import StoreBase
from langchain_memalign.memory.semantic import Guideline


class GuidelineTables(StoreBase):
    """Guideline and history rows of a memory database."""

    # -- guidelines --------------------------------------------------------------

    def load_guidelines(self) -> tuple[list[Guideline], np.ndarray | None]:
        """All guidelines in order, and their vectors (None if any lacks one)."""
        with self.lock, self._reading("guidelines"):
            rows = self._conn.execute(
                "SELECT id, text, vector, created_at FROM guidelines ORDER BY position, rowid"
            ).fetchall()
            sources = self._conn.execute(
                "SELECT guideline_id, feedback_id FROM guideline_sources ORDER BY rowid"
            ).fetchall()
            return guidelines_from_rows(rows, sources)

    def put_guideline(
        self, conn: sqlite3.Connection, g: Guideline, vector: np.ndarray | None, position: int
    ) -> None:
        """Insert or replace a guideline with its provenance.

        A text over `limits.MAX_GUIDELINE_CHARS` is refused (`ValueError`): every
        path that makes guidelines checks it first, so this only guards the file.
        """
        limits.check_guideline_text(g.id, g.text)
        conn.execute(
            "INSERT INTO guidelines(id, text, vector, created_at, position) VALUES(?, ?, ?, ?, ?) "
            "ON CONFLICT(id) DO UPDATE SET text=excluded.text, "
            "vector=COALESCE(excluded.vector, guidelines.vector)",
            (g.id, g.text, None if vector is None else _vec_blob(vector),
             g.created_at.isoformat(), position),
        )  # fmt: skip
        conn.execute("DELETE FROM guideline_sources WHERE guideline_id=?", (g.id,))
        conn.executemany(
            "INSERT INTO guideline_sources(guideline_id, feedback_id) VALUES(?, ?)",
            [(g.id, s) for s in g.source_ids],
        )

    def delete_guidelines(self, conn: sqlite3.Connection, ids: Iterable[str]) -> None:
        """Delete guidelines and their provenance."""
        conn.executemany("DELETE FROM guidelines WHERE id=?", [(i,) for i in ids])

    def next_position(self) -> int:
        """Position after the last guideline."""
        with self.lock, self._reading("guidelines"):
            row = self._conn.execute(
                "SELECT COALESCE(MAX(position), -1) FROM guidelines"
            ).fetchone()
            return int(row[0]) + 1

    # -- history -----------------------------------------------------------------

    def log(
        self,
        conn: sqlite3.Connection,
        action: str,
        feedback_ids: Iterable[str],
        guideline_ids: Iterable[str] = (),
    ) -> None:
        """Record a change and the feedback that caused it (ids only, never text)."""
        conn.execute(
            "INSERT INTO history(at, action, feedback_ids, guideline_ids) VALUES(?, ?, ?, ?)",
            (_now(), action, json.dumps(sorted(set(feedback_ids))),
             json.dumps(sorted(set(guideline_ids)))),
        )  # fmt: skip

    def history(self) -> list[dict[str, Any]]:
        """Every recorded change, oldest first."""
        with self.lock, self._reading("history"):
            rows = self._conn.execute(
                "SELECT seq, at, action, feedback_ids, guideline_ids FROM history ORDER BY seq"
            ).fetchall()
            return [
                {"seq": s, "at": at, "action": a, "feedback_ids": json.loads(f),
                 "guideline_ids": json.loads(g)}
                for s, at, a, f, g in rows
            ]  # fmt: skip
