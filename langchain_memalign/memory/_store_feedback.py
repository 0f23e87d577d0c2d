"""The feedback and episodes tables of the memory database.

`FeedbackTables` adds to `StoreBase` the reads and writes of stored feedback
(its JSON payload, content hash and whether it has been distilled) and of
the episodes: one embedding vector per feedback item, keyed by a row id that
the FAISS index uses, with reads of older memory versions served from the
before-images the transactions keep.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from langchain_memalign.feedback import Feedback
from langchain_memalign.memory._codec import _matrix, _now, _vec_blob, _vector, encode_feedback
from langchain_memalign.memory._store_base import StoreBase, _chunks


class FeedbackTables(StoreBase):
    """Feedback and episode rows of a memory database."""

    # -- feedback ----------------------------------------------------------------

    def feedback_state(self, ids: Iterable[str]) -> dict[str, tuple[str, bool]]:
        """Map stored ids among `ids` to (content hash, reflected)."""
        out: dict[str, tuple[str, bool]] = {}
        with self.lock, self._reading("feedback"):
            for chunk in _chunks(list(ids)):
                q = ",".join("?" * len(chunk))
                for fid, h, r in self._conn.execute(
                    f"SELECT id, content_hash, reflected FROM feedback WHERE id IN ({q})", chunk
                ):
                    out[fid] = (h, bool(r))
        return out

    def get_feedback(self, ids: Iterable[str]) -> dict[str, Feedback]:
        """Stored feedback by id (missing ids are absent from the result)."""
        out: dict[str, Feedback] = {}
        with self.lock, self._reading("feedback"):
            for chunk in _chunks(list(ids)):
                q = ",".join("?" * len(chunk))
                for fid, payload in self._conn.execute(
                    f"SELECT id, payload FROM feedback WHERE id IN ({q})", chunk
                ):
                    out[fid] = self._decode(payload)
        return out

    def feedback_ids(self) -> list[str]:
        """All stored feedback ids, oldest first."""
        with self.lock, self._reading("feedback ids"):
            return [r[0] for r in self._conn.execute("SELECT id FROM feedback ORDER BY rowid")]

    def recent_feedback(self, limit: int, exclude: Iterable[str] = ()) -> list[Feedback]:
        """The `limit` most recently stored feedback items, newest first."""
        skip = set(exclude)
        with self.lock, self._reading("feedback"):
            rows = self._conn.execute(
                "SELECT id, payload FROM feedback ORDER BY rowid DESC LIMIT ?",
                (limit + len(skip),),
            ).fetchall()
        items = [self._decode(p) for fid, p in rows if fid not in skip]
        return items[:limit]

    def pending_reflection(self) -> list[str]:
        """Ids of feedback with a rationale whose distillation has not succeeded yet."""
        with self.lock, self._reading("feedback"):
            return [
                r[0]
                for r in self._conn.execute(
                    "SELECT id FROM feedback WHERE reflected=0 ORDER BY rowid"
                )
            ]

    def _count(self, table: str) -> int:
        """Row count of a table of `COUNTED_TABLES`."""
        with self.lock, self._reading(table):
            return int(self._conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    def put_feedback(self, conn: sqlite3.Connection, fb: Feedback, *, reflected: bool) -> None:
        """Insert or replace one feedback item (inside a transaction)."""
        payload = encode_feedback(fb)
        self._remember(conn, "f.id = ?", [fb.id])
        conn.execute(
            "INSERT INTO feedback(id, payload, content_hash, reflected, updated_at) "
            "VALUES(?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET payload=excluded.payload, "
            "content_hash=excluded.content_hash, reflected=excluded.reflected, "
            "updated_at=excluded.updated_at",
            (fb.id, payload, fb.content_hash(), int(reflected), _now()),
        )

    def set_reflected(self, conn: sqlite3.Connection, ids: Iterable[str], reflected: bool) -> None:
        """Mark feedback as distilled (or pending distillation)."""
        conn.executemany(
            "UPDATE feedback SET reflected=? WHERE id=?", [(int(reflected), i) for i in ids]
        )

    def delete_feedback(self, conn: sqlite3.Connection, ids: Iterable[str]) -> None:
        """Delete feedback and (by cascade) its episodes."""
        ids = list(ids)
        for chunk in _chunks(ids):
            self._remember(conn, f"f.id IN ({','.join('?' * len(chunk))})", chunk)
        conn.executemany("DELETE FROM feedback WHERE id=?", [(i,) for i in ids])

    # -- episodes ----------------------------------------------------------------

    def episode_keys(self, feedback_ids: Iterable[str]) -> dict[str, tuple[int, str]]:
        """Map feedback ids to (episode row id, hash of the embedded text)."""
        out: dict[str, tuple[int, str]] = {}
        with self.lock, self._reading("episodes"):
            for chunk in _chunks(list(feedback_ids)):
                q = ",".join("?" * len(chunk))
                for fid, rowid, th in self._conn.execute(
                    f"SELECT feedback_id, rowid, text_hash FROM episodes "
                    f"WHERE feedback_id IN ({q})",
                    chunk,
                ):
                    out[fid] = (int(rowid), th)
        return out

    def put_episode(
        self, conn: sqlite3.Connection, feedback_id: str, text_hash: str, vector: np.ndarray
    ) -> tuple[int, int | None]:
        """Store an episode's vector; return (new row id, replaced row id or None).

        A changed vector gets a fresh row id (AUTOINCREMENT never reuses one),
        so an approximate index can tombstone the old id instead of editing
        its graph in place.
        """
        old = conn.execute(
            "SELECT rowid FROM episodes WHERE feedback_id=?", (feedback_id,)
        ).fetchone()
        if old is not None:
            self._remember(conn, "e.rowid = ?", [old[0]])
            conn.execute("DELETE FROM episodes WHERE rowid=?", (old[0],))
        cur = conn.execute(
            "INSERT INTO episodes(feedback_id, text_hash, vector) VALUES(?, ?, ?)",
            (feedback_id, text_hash, _vec_blob(vector)),
        )
        assert cur.lastrowid is not None
        return int(cur.lastrowid), None if old is None else int(old[0])

    def episode_vectors(self, feedback_ids: Iterable[str]) -> dict[str, np.ndarray]:
        """The stored vectors of some episodes, by feedback id (no embedding call)."""
        out: dict[str, np.ndarray] = {}
        with self.lock, self._reading("episode vectors"):
            for chunk in _chunks(list(feedback_ids)):
                q = ",".join("?" * len(chunk))
                for fid, blob in self._conn.execute(
                    f"SELECT feedback_id, vector FROM episodes WHERE feedback_id IN ({q})", chunk
                ):
                    out[fid] = _vector(blob)
        return out

    def all_vectors(self) -> tuple[list[int], np.ndarray | None]:
        """Every episode's row id and vector, in row id order (to build the FAISS index)."""
        with self.lock, self._reading("episode vectors"):
            # One matrix from the joined bytes, not an array per row: opening a folder
            # reads every vector (a rebuild, or the proof an index cache must give).
            rows = self._conn.execute("SELECT rowid, vector FROM episodes ORDER BY rowid")
            return _matrix(rows.fetchall())

    def external_episode_changes(
        self, indexed: Callable[[], np.ndarray], *, record: bool = True
    ) -> tuple[list[int], list[int], np.ndarray | None] | None:
        """Episodes that other processes' commits removed and added, against an index.

        A folder's commits record no list of changed episodes (as PostgreSQL's
        do), so they are computed, and only when another connection committed
        since the memory last caught up (`PRAGMA data_version`): the stored
        episode ids against the index's (`indexed()`), and the vectors of the
        added ones. Ids are never reused (AUTOINCREMENT), so a changed episode
        shows as its old id removed and its new id added. `record=False` (a
        judgment's private view, whose base index may lack commits the memory
        caught up with meanwhile) computes them whatever moved and notes
        nothing. In process, no other connection exists: None.
        """
        if self.folder is None:
            return None
        with self.lock:
            seen = self._data_version()
            if record and seen == self._synced_data_version:
                return None
            have = np.asarray(indexed(), dtype=np.int64)
            with self._reading("episodes"):
                stored = np.fromiter(
                    (int(r[0]) for r in self._conn.execute("SELECT rowid FROM episodes")),
                    dtype=np.int64,
                )
                removed = np.setdiff1d(have, stored).tolist()
                rows: list[tuple[Any, ...]] = []
                todo = np.setdiff1d(stored, have).tolist()
                for i in range(0, len(todo), 500):
                    chunk = todo[i : i + 500]
                    rows += self._conn.execute(
                        f"SELECT rowid, vector FROM episodes WHERE rowid IN "
                        f"({','.join('?' * len(chunk))}) ORDER BY rowid",
                        chunk,
                    ).fetchall()
                added, vectors = _matrix(rows)
            if record:
                self._synced_data_version = seen
            return removed, added, vectors

    def episode_rowids(self) -> list[int]:
        """Every episode's row id, ascending."""
        with self.lock, self._reading("episodes"):
            return [int(r[0]) for r in self._conn.execute("SELECT rowid FROM episodes ORDER BY 1")]

    def episode_dim(self) -> int | None:
        """The dimension of the stored episode vectors (None without episodes)."""
        with self.lock, self._reading("episodes"):
            row = self._conn.execute("SELECT length(vector) FROM episodes LIMIT 1").fetchone()
            return None if row is None else int(row[0]) // 4

    def episodes_by_rowid(self, rowids: list[int], as_of: int | None = None) -> dict[int, Feedback]:
        """The feedback behind episode row ids, as of version `as_of` (default: the newest).

        A reader holding an older version of the memory (a judgment running
        while an align or unalign commits) gets that version's episodes: rows
        changed or deleted by later commits come from the before-images those
        commits kept. Past the last 64 commits the newest rows are returned.
        """
        if not rowids:
            return {}
        q = ",".join("?" * len(rowids))
        with self.lock:
            with self._reading("episodes"):
                rows: dict[int, Any] = {
                    int(r): p
                    for r, p in self._conn.execute(
                        f"SELECT e.rowid, f.payload FROM episodes e JOIN feedback f "
                        f"ON f.id = e.feedback_id WHERE e.rowid IN ({q})",
                        rowids,
                    )
                }
            if as_of is not None and self._versions and self._versions[0][0] <= as_of + 1:
                wanted, seen = set(rowids), set[int]()
                for seq, before in self._versions:
                    if seq <= as_of:
                        continue
                    for r in wanted.intersection(before).difference(seen):
                        rows[r] = before[r]
                        seen.add(r)
        return {r: self._decode(p) for r, p in rows.items()}
