"""SQLite storage: the source of truth of a judge's memory.

One file, `memory.sqlite`, holds the judge's configuration, the feedback,
the episodes with their vectors, the guidelines with their provenance, and
a history of every change with the feedback that caused it. Nothing is
pickled. `secure_delete` is on so that unaligned feedback leaves no text
behind in free pages of the file.
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from langchain_memalign.errors import MemoryFormatError
from langchain_memalign.feedback import Feedback
from langchain_memalign.memory._files import fsync, fsync_dir
from langchain_memalign.memory.semantic import Guideline

SCHEMA_VERSION = 1
DB_FILE = "memory.sqlite"
INDEX_FILE = "episodes.faiss"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS feedback (
    id TEXT PRIMARY KEY,
    payload TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    reflected INTEGER NOT NULL DEFAULT 0,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS episodes (
    rowid INTEGER PRIMARY KEY AUTOINCREMENT,
    feedback_id TEXT NOT NULL UNIQUE REFERENCES feedback(id) ON DELETE CASCADE,
    text_hash TEXT NOT NULL,
    vector BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS guidelines (
    id TEXT PRIMARY KEY,
    text TEXT NOT NULL,
    vector BLOB,
    created_at TEXT NOT NULL,
    position INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS guideline_sources (
    guideline_id TEXT NOT NULL REFERENCES guidelines(id) ON DELETE CASCADE,
    feedback_id TEXT NOT NULL,
    PRIMARY KEY (guideline_id, feedback_id)
);
CREATE INDEX IF NOT EXISTS guideline_sources_by_feedback ON guideline_sources(feedback_id);
CREATE INDEX IF NOT EXISTS feedback_pending ON feedback(reflected) WHERE reflected = 0;
CREATE TABLE IF NOT EXISTS history (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    action TEXT NOT NULL,
    feedback_ids TEXT NOT NULL,
    guideline_ids TEXT NOT NULL
);
"""


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _vec_blob(v: np.ndarray) -> bytes:
    return np.asarray(v, dtype=np.float32).tobytes()


class MemoryStore:
    """Thread-safe access to one memory database (a file or in process)."""

    def __init__(self, conn: sqlite3.Connection, folder: Path | None) -> None:
        self._conn = conn
        self.folder = folder
        self.lock = threading.RLock()
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA secure_delete=ON")

    # -- opening -----------------------------------------------------------------

    @classmethod
    def create(cls, folder: str | os.PathLike[str] | None) -> MemoryStore:
        """Open the memory in `folder`, creating it if needed; `None` keeps it in process."""
        if folder is None:
            conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
            store = cls(conn, None)
        else:
            path = Path(folder)
            path.mkdir(parents=True, exist_ok=True)
            store = cls(_connect(path / DB_FILE), path)
        try:
            with store.lock:
                store._conn.executescript(_SCHEMA)
                if store.get_meta("schema_version") is None:
                    store.set_meta("schema_version", SCHEMA_VERSION)
        except sqlite3.DatabaseError as e:
            raise MemoryFormatError(f"{folder}: not a MemAlign memory ({e})") from e
        store._check_version()
        return store

    @classmethod
    def open(cls, folder: str | os.PathLike[str]) -> MemoryStore:
        """Open an existing memory folder, or raise `MemoryFormatError`."""
        path = Path(folder)
        db = path / DB_FILE
        if not db.is_file():
            raise MemoryFormatError(f"{path}: no MemAlign memory here (missing {DB_FILE})")
        store = cls(_connect(db), path)
        store._check_version()
        return store

    def _check_version(self) -> None:
        try:
            version = self.get_meta("schema_version")
            self._conn.execute("SELECT count(*) FROM feedback").fetchone()
        except sqlite3.DatabaseError as e:
            raise MemoryFormatError(f"{self.folder}: corrupt MemAlign memory ({e})") from e
        if version != SCHEMA_VERSION:
            raise MemoryFormatError(
                f"{self.folder}: memory format version {version!r} is not supported "
                f"(this version reads {SCHEMA_VERSION})"
            )

    def close(self) -> None:
        """Close the database connection."""
        with self.lock:
            self._conn.close()

    # -- meta --------------------------------------------------------------------

    def get_meta(self, key: str) -> Any:
        """A JSON value from the meta table, or None."""
        with self.lock:
            row = self._conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def set_meta(self, key: str, value: Any) -> None:
        """Set a JSON value in the meta table (inside or outside a transaction)."""
        with self.lock:
            self._conn.execute(
                "INSERT INTO meta(key, value) VALUES(?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                (key, json.dumps(value)),
            )

    # -- transactions ------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """All-or-nothing writes; bumps the change sequence that stamps the index cache."""
        with self.lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
                seq = int(self.get_meta("change_seq") or 0) + 1
                self.set_meta("change_seq", seq)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            # The cached FAISS file now describes an older memory (and may hold
            # vectors of unaligned feedback): drop it, `save` writes a fresh one.
            if self.folder is not None:
                (self.folder / INDEX_FILE).unlink(missing_ok=True)

    # -- feedback ----------------------------------------------------------------

    def feedback_state(self, ids: Iterable[str]) -> dict[str, tuple[str, bool]]:
        """Map stored ids among `ids` to (content hash, reflected)."""
        out: dict[str, tuple[str, bool]] = {}
        with self.lock:
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
        with self.lock:
            for chunk in _chunks(list(ids)):
                q = ",".join("?" * len(chunk))
                for fid, payload in self._conn.execute(
                    f"SELECT id, payload FROM feedback WHERE id IN ({q})", chunk
                ):
                    out[fid] = Feedback.model_validate_json(payload)
        return out

    def feedback_ids(self) -> list[str]:
        """All stored feedback ids, oldest first."""
        with self.lock:
            return [r[0] for r in self._conn.execute("SELECT id FROM feedback ORDER BY rowid")]

    def recent_feedback(self, limit: int, exclude: Iterable[str] = ()) -> list[Feedback]:
        """The `limit` most recently stored feedback items, newest first."""
        skip = set(exclude)
        with self.lock:
            rows = self._conn.execute(
                "SELECT id, payload FROM feedback ORDER BY rowid DESC LIMIT ?",
                (limit + len(skip),),
            ).fetchall()
        items = [Feedback.model_validate_json(p) for fid, p in rows if fid not in skip]
        return items[:limit]

    def pending_reflection(self) -> list[str]:
        """Ids of feedback with a rationale whose distillation has not succeeded yet."""
        with self.lock:
            return [
                r[0]
                for r in self._conn.execute(
                    "SELECT id FROM feedback WHERE reflected=0 ORDER BY rowid"
                )
            ]

    def count(self, table: str) -> int:
        """Row count of a table."""
        assert table in {"feedback", "episodes", "guidelines", "history"}
        with self.lock:
            return int(self._conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    @staticmethod
    def put_feedback(conn: sqlite3.Connection, fb: Feedback, *, reflected: bool) -> None:
        """Insert or replace one feedback item (inside a transaction)."""
        conn.execute(
            "INSERT INTO feedback(id, payload, content_hash, reflected, updated_at) "
            "VALUES(?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET payload=excluded.payload, "
            "content_hash=excluded.content_hash, reflected=excluded.reflected, "
            "updated_at=excluded.updated_at",
            (fb.id, fb.model_dump_json(), fb.content_hash(), int(reflected), _now()),
        )

    @staticmethod
    def set_reflected(conn: sqlite3.Connection, ids: Iterable[str], reflected: bool) -> None:
        """Mark feedback as distilled (or pending distillation)."""
        conn.executemany(
            "UPDATE feedback SET reflected=? WHERE id=?", [(int(reflected), i) for i in ids]
        )

    @staticmethod
    def delete_feedback(conn: sqlite3.Connection, ids: Iterable[str]) -> None:
        """Delete feedback and (by cascade) its episodes."""
        conn.executemany("DELETE FROM feedback WHERE id=?", [(i,) for i in ids])

    # -- episodes ----------------------------------------------------------------

    def episode_keys(self, feedback_ids: Iterable[str]) -> dict[str, tuple[int, str]]:
        """Map feedback ids to (episode row id, hash of the embedded text)."""
        out: dict[str, tuple[int, str]] = {}
        with self.lock:
            for chunk in _chunks(list(feedback_ids)):
                q = ",".join("?" * len(chunk))
                for fid, rowid, th in self._conn.execute(
                    f"SELECT feedback_id, rowid, text_hash FROM episodes "
                    f"WHERE feedback_id IN ({q})",
                    chunk,
                ):
                    out[fid] = (int(rowid), th)
        return out

    @staticmethod
    def put_episode(
        conn: sqlite3.Connection, feedback_id: str, text_hash: str, vector: np.ndarray
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
        with self.lock:
            for chunk in _chunks(list(feedback_ids)):
                q = ",".join("?" * len(chunk))
                for fid, blob in self._conn.execute(
                    f"SELECT feedback_id, vector FROM episodes WHERE feedback_id IN ({q})", chunk
                ):
                    out[fid] = np.frombuffer(blob, dtype=np.float32).copy()
        return out

    def all_vectors(self) -> tuple[list[int], np.ndarray | None]:
        """Every episode's row id and vector, to rebuild the FAISS index without embedding."""
        with self.lock:
            rows = self._conn.execute("SELECT rowid, vector FROM episodes").fetchall()
        if not rows:
            return [], None
        ids = [int(r[0]) for r in rows]
        mat = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32)
        return ids, mat.reshape(len(rows), -1)

    def episodes_by_rowid(self, rowids: list[int]) -> dict[int, Feedback]:
        """The feedback behind episode row ids."""
        if not rowids:
            return {}
        q = ",".join("?" * len(rowids))
        with self.lock:
            rows = self._conn.execute(
                f"SELECT e.rowid, f.payload FROM episodes e JOIN feedback f "
                f"ON f.id = e.feedback_id WHERE e.rowid IN ({q})",
                rowids,
            ).fetchall()
        return {int(r): Feedback.model_validate_json(p) for r, p in rows}

    # -- guidelines --------------------------------------------------------------

    def load_guidelines(self) -> tuple[list[Guideline], np.ndarray | None]:
        """All guidelines in order, and their vectors (None if any lacks one)."""
        with self.lock:
            rows = self._conn.execute(
                "SELECT id, text, vector, created_at FROM guidelines ORDER BY position, rowid"
            ).fetchall()
            src: dict[str, list[str]] = {}
            for gid, fid in self._conn.execute(
                "SELECT guideline_id, feedback_id FROM guideline_sources ORDER BY rowid"
            ):
                src.setdefault(gid, []).append(fid)
        guidelines = [
            Guideline(
                id=gid, text=text, source_ids=tuple(src.get(gid, ())),
                created_at=datetime.fromisoformat(created),
            )
            for gid, text, _, created in rows
        ]  # fmt: skip
        if rows and all(r[2] is not None for r in rows):
            vectors = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32)
            return guidelines, vectors.reshape(len(rows), -1).copy()
        return guidelines, None

    @staticmethod
    def put_guideline(
        conn: sqlite3.Connection, g: Guideline, vector: np.ndarray | None, position: int
    ) -> None:
        """Insert or replace a guideline with its provenance."""
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

    @staticmethod
    def delete_guidelines(conn: sqlite3.Connection, ids: Iterable[str]) -> None:
        """Delete guidelines and their provenance."""
        conn.executemany("DELETE FROM guidelines WHERE id=?", [(i,) for i in ids])

    def next_position(self) -> int:
        """Position after the last guideline."""
        with self.lock:
            row = self._conn.execute(
                "SELECT COALESCE(MAX(position), -1) FROM guidelines"
            ).fetchone()
        return int(row[0]) + 1

    # -- history -----------------------------------------------------------------

    @staticmethod
    def log(
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
        with self.lock:
            rows = self._conn.execute(
                "SELECT seq, at, action, feedback_ids, guideline_ids FROM history ORDER BY seq"
            ).fetchall()
        return [
            {"seq": s, "at": at, "action": a, "feedback_ids": json.loads(f),
             "guideline_ids": json.loads(g)}
            for s, at, a, f, g in rows
        ]  # fmt: skip

    # -- snapshots -----------------------------------------------------------------

    def backup_to(self, folder: Path) -> None:
        """Write a consistent copy of the database into `folder`, atomically.

        The copy goes to a temporary file in the same folder and is renamed
        over the old one only when complete, so a crash leaves the previous
        memory intact.
        """
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".memory-", suffix=".tmp", dir=folder)
        os.close(fd)
        try:
            dest = sqlite3.connect(tmp)
            try:
                with self.lock:
                    self._conn.backup(dest)
                dest.execute("PRAGMA secure_delete=ON")
                dest.execute("VACUUM")
            finally:
                dest.close()
            fsync(tmp)
            os.replace(tmp, folder / DB_FILE)
            fsync_dir(folder)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _connect(db: Path) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(db, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA synchronous=FULL")
    except sqlite3.DatabaseError as e:
        raise MemoryFormatError(f"{db}: cannot open MemAlign memory ({e})") from e
    return conn


def _chunks(items: list[str], size: int = 500) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
