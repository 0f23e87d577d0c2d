"""The feedback and episodes tables of a PostgreSQL memory.

`PostgresFeedbackTables` adds to `PostgresBase` the reads and writes of
stored feedback and of the episodes: one embedding vector per feedback item,
under an id that the FAISS index uses. Every commit that adds an episode
records its version (`added_seq`) and every commit that removes one leaves
its id (never its text) in `memalign_removed_episodes`, so a process whose
index is at some version fetches only what changed since (`episode_changes`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from langchain_memalign.feedback import Feedback
from langchain_memalign.memory._codec import _matrix, _now, _vec_blob, _vector, encode_feedback
from langchain_memalign.memory._pg_base import PostgresBase
from langchain_memalign.memory._pg_schema import _TABLES


class PostgresFeedbackTables(PostgresBase):
    """Feedback and episode rows of one judge's memory in PostgreSQL."""

    # -- feedback --------------------------------------------------------------------

    def feedback_state(self, ids: Iterable[str]) -> dict[str, tuple[str, bool]]:
        """Map stored ids among `ids` to (content hash, reflected)."""
        with self._reading("feedback"):
            rows = self._rows(
                "SELECT id, content_hash, reflected FROM memalign_feedback "
                "WHERE judge=%s AND id = ANY(%s)",
                (list(ids),),
            )
        return {fid: (h, bool(r)) for fid, h, r in rows}

    def get_feedback(self, ids: Iterable[str]) -> dict[str, Feedback]:
        """Stored feedback by id (missing ids are absent from the result)."""
        with self._reading("feedback"):
            rows = self._rows(
                "SELECT id, payload FROM memalign_feedback WHERE judge=%s AND id = ANY(%s) "
                "ORDER BY ord",
                (list(ids),),
            )
        return {fid: self._decode(p) for fid, p in rows}

    def feedback_ids(self) -> list[str]:
        """All stored feedback ids, oldest first."""
        with self._reading("feedback ids"):
            return [
                r[0]
                for r in self._rows("SELECT id FROM memalign_feedback WHERE judge=%s ORDER BY ord")
            ]

    def recent_feedback(self, limit: int, exclude: Iterable[str] = ()) -> list[Feedback]:
        """The `limit` most recently stored feedback items, newest first."""
        skip = set(exclude)
        with self._reading("feedback"):
            rows = self._rows(
                "SELECT id, payload FROM memalign_feedback WHERE judge=%s "
                "ORDER BY ord DESC LIMIT %s",
                (limit + len(skip),),
            )
        return [self._decode(p) for fid, p in rows if fid not in skip][:limit]

    def pending_reflection(self) -> list[str]:
        """Ids of feedback with a rationale whose distillation has not succeeded yet."""
        with self._reading("feedback"):
            return [
                r[0]
                for r in self._rows(
                    "SELECT id FROM memalign_feedback WHERE judge=%s AND NOT reflected ORDER BY ord"
                )
            ]

    def _count(self, table: str) -> int:
        """Row count of a table of `COUNTED_TABLES` (this judge's rows)."""
        name = _TABLES[table]
        with self._reading(table):
            return int(self._rows(f"SELECT count(*) FROM {name} WHERE judge=%s")[0][0])

    def put_feedback(self, conn: Any, fb: Feedback, *, reflected: bool) -> None:
        """Insert or replace one feedback item (inside a transaction)."""
        conn.execute(
            "INSERT INTO memalign_feedback(judge, id, payload, content_hash, reflected, "
            "updated_at, changed_seq) VALUES (%s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (judge, id) DO UPDATE SET payload=excluded.payload, "
            "content_hash=excluded.content_hash, reflected=excluded.reflected, "
            "updated_at=excluded.updated_at, changed_seq=excluded.changed_seq",
            (self.judge, fb.id, encode_feedback(fb), fb.content_hash(), reflected, _now(),
             self._seq()),
        )  # fmt: skip

    def set_reflected(self, conn: Any, ids: Iterable[str], reflected: bool) -> None:
        """Mark feedback as distilled (or pending distillation)."""
        conn.execute(
            "UPDATE memalign_feedback SET reflected=%s WHERE judge=%s AND id = ANY(%s)",
            (reflected, self.judge, list(ids)),
        )

    def delete_feedback(self, conn: Any, ids: Iterable[str]) -> None:
        """Delete feedback and (by cascade) its episodes, leaving the episodes' ids only."""
        ids = list(ids)
        conn.execute(
            "INSERT INTO memalign_removed_episodes(judge, seq, episode_id) "
            "SELECT judge, %s, id FROM memalign_episodes WHERE judge=%s AND feedback_id = ANY(%s)",
            (self._seq(), self.judge, ids),
        )
        conn.execute(
            "DELETE FROM memalign_feedback WHERE judge=%s AND id = ANY(%s)", (self.judge, ids)
        )

    # -- episodes --------------------------------------------------------------------

    def episode_keys(self, feedback_ids: Iterable[str]) -> dict[str, tuple[int, str]]:
        """Map feedback ids to (episode id, hash of the embedded text)."""
        with self._reading("episodes"):
            rows = self._rows(
                "SELECT feedback_id, id, text_hash FROM memalign_episodes "
                "WHERE judge=%s AND feedback_id = ANY(%s)",
                (list(feedback_ids),),
            )
        return {fid: (int(i), th) for fid, i, th in rows}

    def put_episode(
        self, conn: Any, feedback_id: str, text_hash: str, vector: np.ndarray
    ) -> tuple[int, int | None]:
        """Store an episode's vector; return (new id, replaced id or None).

        A changed vector gets a fresh id (an identity column never reuses
        one) and the old id is recorded as removed, so other processes drop
        it from their index.
        """
        seq = self._seq()
        old = conn.execute(
            "DELETE FROM memalign_episodes WHERE judge=%s AND feedback_id=%s RETURNING id",
            (self.judge, feedback_id),
        ).fetchone()
        if old is not None:
            conn.execute(
                "INSERT INTO memalign_removed_episodes(judge, seq, episode_id) VALUES (%s, %s, %s)",
                (self.judge, seq, old[0]),
            )
        new = conn.execute(
            "INSERT INTO memalign_episodes(judge, feedback_id, text_hash, vector, added_seq) "
            "VALUES (%s, %s, %s, %s, %s) RETURNING id",
            (self.judge, feedback_id, text_hash, _vec_blob(vector), seq),
        ).fetchone()
        return int(new[0]), None if old is None else int(old[0])

    def episode_vectors(self, feedback_ids: Iterable[str]) -> dict[str, np.ndarray]:
        """The stored vectors of some episodes, by feedback id (no embedding call)."""
        with self._reading("episode vectors"):
            rows = self._rows(
                "SELECT feedback_id, vector FROM memalign_episodes "
                "WHERE judge=%s AND feedback_id = ANY(%s)",
                (list(feedback_ids),),
            )
            return {fid: _vector(bytes(v)) for fid, v in rows}

    def all_vectors(self) -> tuple[list[int], np.ndarray | None]:
        """Every episode's id and vector, to build the FAISS index without embedding."""
        with self._reading("episode vectors"):
            rows = self._rows(
                "SELECT id, vector FROM memalign_episodes WHERE judge=%s ORDER BY id", binary=True
            )
            return _matrix(rows)

    def episode_changes(self, since: int) -> tuple[list[int], list[int], np.ndarray | None]:
        """Episodes removed and added by the commits after version `since`.

        Returns (removed ids, added ids, added vectors); ids only for removed
        episodes, whose rows (and text) are gone.
        """
        with self._reading("episode changes"):
            removed = [
                int(r[0])
                for r in self._rows(
                    "SELECT episode_id FROM memalign_removed_episodes WHERE judge=%s AND seq > %s",
                    (since,),
                )
            ]
            added = self._rows(
                "SELECT id, vector FROM memalign_episodes WHERE judge=%s AND added_seq > %s "
                "ORDER BY id",
                (since,),
                binary=True,
            )
            ids, mat = _matrix(added)
            return removed, ids, mat

    def episode_rowids(self) -> list[int]:
        """Every episode's id, ascending."""
        with self._reading("episodes"):
            return [
                int(r[0])
                for r in self._rows("SELECT id FROM memalign_episodes WHERE judge=%s ORDER BY id")
            ]

    def episode_dim(self) -> int | None:
        """The dimension of the stored episode vectors (None without episodes)."""
        with self._reading("episodes"):
            rows = self._rows(
                "SELECT octet_length(vector) FROM memalign_episodes WHERE judge=%s LIMIT 1"
            )
            return None if not rows else int(rows[0][0]) // 4

    def episodes_by_rowid(self, rowids: list[int], as_of: int | None = None) -> dict[int, Feedback]:
        """The feedback behind episode ids, as of version `as_of` (default: the newest).

        Other processes' commits keep no before-images here, so a reader at
        an older version gets the episodes that version and the newest share:
        an episode removed or changed by a later commit is left out rather
        than shown in its newer form (and never with text of unaligned feedback).
        """
        if not rowids:
            return {}
        with self._reading("episodes"):
            rows = self._rows(
                "SELECT e.id, f.payload FROM memalign_episodes e JOIN memalign_feedback f "
                "ON f.judge = e.judge AND f.id = e.feedback_id "
                "WHERE e.judge=%s AND e.id = ANY(%s) "
                "AND (%s::bigint IS NULL OR (f.changed_seq <= %s AND e.added_seq <= %s))",
                (list(rowids), as_of, as_of, as_of),
            )
        return {int(r): self._decode(p) for r, p in rows}
