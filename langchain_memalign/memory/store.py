"""SQLite storage: the source of truth of a judge's memory.

One file, `memory.sqlite`, holds the judge's configuration, the feedback,
the episodes with their vectors, the guidelines with their provenance, and
a history of every change with the feedback that caused it. Nothing is
pickled. `secure_delete` is on so that unaligned feedback leaves no text
behind in free pages of the file.

Everything read back from a file is treated as untrusted: a damaged or
foreign database raises `MemoryFormatError` naming the problem, never a raw
`sqlite3`, JSON or pydantic error.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import tempfile
import threading
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from langchain_memalign.errors import InvalidFeedbackError, MemoryFormatError
from langchain_memalign.feedback import Feedback, storable_problem
from langchain_memalign.memory._files import fsync, fsync_dir
from langchain_memalign.memory.semantic import Guideline

SCHEMA_VERSION = 1
DB_FILE = "memory.sqlite"
INDEX_FILE = "episodes.faiss"
# Temporary files of an atomic write; a killed save leaves them behind, and
# they may hold text of feedback unaligned since, so every open and save
# removes them.
LEFTOVER_PREFIXES = (".memory-", "." + INDEX_FILE + "-")
_LEFTOVER_ENDS = (".tmp", ".tmp-journal", ".tmp-wal", ".tmp-shm")
# Per-commit "before" images of changed episode payloads kept in process, so
# that a reader holding an older memory version still sees that version's
# episodes (see `episodes_by_rowid`).
_KEPT_VERSIONS = 64

# The tables and columns this version reads; a database without them is not
# a memory this version can use.
_COLUMNS = {
    "meta": {"key", "value"},
    "feedback": {"id", "payload", "content_hash", "reflected", "updated_at"},
    "episodes": {"feedback_id", "text_hash", "vector"},
    "guidelines": {"id", "text", "vector", "created_at", "position"},
    "guideline_sources": {"guideline_id", "feedback_id"},
    "history": {"seq", "at", "action", "feedback_ids", "guideline_ids"},
}

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


def encode_feedback(fb: Feedback) -> str:
    """The JSON stored for a feedback item; `InvalidFeedbackError` if it cannot round-trip.

    JSON has no NaN or Infinity (pydantic would write them as `null`, silently
    changing the feedback) and SQLite stores text as UTF-8 (a lone surrogate
    cannot be encoded), so both are refused here, before anything is written.
    """
    try:
        problem = storable_problem(fb.model_dump())
        if problem:
            raise ValueError(problem)
        text = json.dumps(fb.model_dump(mode="json"), ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")
    except (ValueError, TypeError, UnicodeError, RecursionError) as e:
        raise InvalidFeedbackError(
            f"feedback {fb.id!r} cannot be stored: {type(e).__name__}: {e}", feedback_id=fb.id
        ) from e
    return text


def remove_leftovers(folder: Path) -> list[str]:
    """Delete the temporary files (or folders) of atomic writes that a crash left behind.

    They are copies of an older memory and may hold text of feedback that has
    been unaligned since. Only one process should write a folder at a time:
    another process's save in progress would lose its temporary file.
    """
    removed: list[str] = []
    with contextlib.suppress(OSError):
        for p in folder.iterdir():
            # SQLite's journal of a temporary copy killed mid-write ends in
            # `.tmp-journal` and holds page images of the copy: text too.
            if not (p.name.startswith(LEFTOVER_PREFIXES) and p.name.endswith(_LEFTOVER_ENDS)):
                continue
            with contextlib.suppress(OSError):
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p)
                else:
                    p.unlink()
                removed.append(p.name)
    return removed


class MemoryStore:
    """Thread-safe access to one memory database (a file or in process)."""

    def __init__(self, conn: sqlite3.Connection, folder: Path | None) -> None:
        self._conn = conn
        self.folder = folder
        self.lock = threading.RLock()
        # rowid -> payload before the running transaction changed it.
        self._tx_before: dict[int, str] | None = None
        # (change_seq, {rowid: payload before that commit}) for recent commits, oldest first.
        self._versions: list[tuple[int, dict[int, str]]] = []
        try:
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA secure_delete=ON")
        except (sqlite3.DatabaseError, ValueError) as e:
            raise MemoryFormatError(f"{self._where()}: cannot open MemAlign memory ({e})") from e

    def _where(self) -> str:
        return str(self.folder) if self.folder is not None else "in-process memory"

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
            remove_leftovers(path)
            store = cls(_connect(path / DB_FILE), path)
        try:
            with store.lock:
                store._conn.executescript(_SCHEMA)
                if store.get_meta("schema_version") is None:
                    store.set_meta("schema_version", SCHEMA_VERSION)
                if store.get_meta("memory_id") is None:
                    store.set_meta("memory_id", uuid.uuid4().hex)
        except (sqlite3.DatabaseError, ValueError) as e:
            store.close()
            raise MemoryFormatError(f"{folder}: not a MemAlign memory ({e})") from e
        store._check_format()
        return store

    @classmethod
    def open(cls, folder: str | os.PathLike[str]) -> MemoryStore:
        """Open an existing memory folder, or raise `MemoryFormatError`."""
        path = Path(folder)
        db = path / DB_FILE
        if not db.is_file():
            raise MemoryFormatError(f"{path}: no MemAlign memory here (missing {DB_FILE})")
        remove_leftovers(path)
        store = cls(_connect(db), path)
        store._check_format()
        if store.get_meta("memory_id") is None:  # written before memory ids existed
            with contextlib.suppress(sqlite3.Error):  # a read-only folder keeps working
                store.set_meta("memory_id", uuid.uuid4().hex)
        return store

    def _check_format(self) -> None:
        try:
            with self.lock:
                found = {
                    t: {r[1] for r in self._conn.execute(f"PRAGMA table_info({t})")}
                    for t in _COLUMNS
                }
                missing = [
                    f"{t}.{c}" for t, cols in _COLUMNS.items() for c in sorted(cols - found[t])
                ]
                if not missing:
                    self._conn.execute("SELECT count(*) FROM feedback").fetchone()
        except (sqlite3.DatabaseError, ValueError) as e:
            self.close()
            raise MemoryFormatError(f"{self.folder}: corrupt MemAlign memory ({e})") from e
        if missing:
            self.close()
            raise MemoryFormatError(
                f"{self.folder}: not a MemAlign memory (missing {', '.join(missing[:5])})"
            )
        try:
            version = self.get_meta("schema_version")
        except MemoryFormatError:
            self.close()
            raise
        # `type(...) is int`: JSON `true` or `1.0` would compare equal to 1.
        if type(version) is not int or version != SCHEMA_VERSION:
            self.close()
            raise MemoryFormatError(
                f"{self.folder}: memory format version {version!r} is not supported "
                f"(this version reads {SCHEMA_VERSION})"
            )

    def close(self) -> None:
        """Close the database connection."""
        with self.lock:
            self._conn.close()

    @contextmanager
    def _reading(self, what: str) -> Iterator[None]:
        """Turn errors from stored bytes (SQLite, JSON, pydantic) into `MemoryFormatError`."""
        try:
            yield
        except MemoryFormatError:
            raise
        except sqlite3.ProgrammingError:  # a closed store: a usage error, not a bad file
            raise
        except (
            sqlite3.DatabaseError, ValueError, TypeError, KeyError, IndexError, OverflowError,
            RecursionError,
        ) as e:  # fmt: skip
            raise MemoryFormatError(
                f"{self._where()}: corrupt MemAlign memory: cannot read {what} "
                f"({type(e).__name__}: {e})"
            ) from e

    # -- meta --------------------------------------------------------------------

    def get_meta(self, key: str) -> Any:
        """A JSON value from the meta table, or None."""
        with self.lock, self._reading(f"meta.{key}"):
            row = self._conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
            return None if row is None else json.loads(row[0])

    def set_meta(self, key: str, value: Any) -> None:
        """Set a JSON value in the meta table (inside or outside a transaction)."""
        with self.lock:
            self._conn.execute(
                "INSERT INTO meta(key, value) VALUES(?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                (key, json.dumps(value, allow_nan=False)),
            )

    def change_seq(self) -> int:
        """The number of committed changes (the memory's version number)."""
        seq = self.get_meta("change_seq")
        if seq is None:
            return 0
        if type(seq) is not int or seq < 0:
            raise MemoryFormatError(f"{self._where()}: meta.change_seq is {seq!r}, not a count")
        return seq

    def identity(self) -> dict[str, Any]:
        """What the stored content is: memory id, version number and version token.

        The token is random per commit, so two copies of one memory that
        diverge never share an identity even at the same version number.
        """
        with self.lock:
            return {
                "memory_id": self.get_meta("memory_id"),
                "change_seq": self.change_seq(),
                "content_version": self.get_meta("content_version"),
            }

    # -- transactions ------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """All-or-nothing writes; a commit gives the memory a new version.

        The change sequence and a random content version are written in the
        same commit, so the index cache can tell which content it describes.
        """
        with self.lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.ProgrammingError:
                raise
            except (sqlite3.DatabaseError, ValueError) as e:
                raise MemoryFormatError(f"{self._where()}: cannot write the memory ({e})") from e
            self._tx_before = {}
            try:
                yield self._conn
                seq = self.change_seq() + 1
                self.set_meta("change_seq", seq)
                self.set_meta("content_version", uuid.uuid4().hex)
                self._conn.execute("COMMIT")
            except BaseException as e:
                # SQLite may have rolled back already (a full disk, a corrupt page).
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("ROLLBACK")
                self._tx_before = None
                # UnicodeDecodeError: text of a corrupt page read during the write.
                if isinstance(e, sqlite3.DatabaseError | UnicodeDecodeError) and not isinstance(
                    e, sqlite3.ProgrammingError
                ):
                    raise MemoryFormatError(
                        f"{self._where()}: cannot write the memory ({e}); nothing was changed"
                    ) from e
                raise
            before, self._tx_before = self._tx_before, None
            self._versions.append((seq, before))
            del self._versions[:-_KEPT_VERSIONS]
            # The cached FAISS file now describes an older memory (and may hold
            # vectors of unaligned feedback): drop it, `save` writes a fresh one.
            if self.folder is not None:
                with contextlib.suppress(OSError):
                    (self.folder / INDEX_FILE).unlink(missing_ok=True)

    def _remember(self, conn: sqlite3.Connection, where: str, args: list[Any]) -> None:
        """Keep the payloads of episodes a transaction is about to change (first write wins)."""
        if self._tx_before is None or not args:
            return
        for rowid, payload in conn.execute(
            f"SELECT e.rowid, f.payload FROM episodes e JOIN feedback f "
            f"ON f.id = e.feedback_id WHERE {where}",
            args,
        ):
            self._tx_before.setdefault(int(rowid), payload)

    # -- feedback ----------------------------------------------------------------

    def _decode(self, payload: Any) -> Feedback:
        with self._reading("a feedback payload"):
            return Feedback.model_validate_json(payload)

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

    def count(self, table: str) -> int:
        """Row count of a table."""
        assert table in {"feedback", "episodes", "guidelines", "history"}
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

    @staticmethod
    def set_reflected(conn: sqlite3.Connection, ids: Iterable[str], reflected: bool) -> None:
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
        """Every episode's row id and vector, to rebuild the FAISS index without embedding."""
        with self.lock, self._reading("episode vectors"):
            rows = self._conn.execute("SELECT rowid, vector FROM episodes").fetchall()
            if not rows:
                return [], None
            ids = [int(r[0]) for r in rows]
            vectors = [_vector(r[1]) for r in rows]
            if len({v.shape[0] for v in vectors}) != 1:
                raise ValueError("episode vectors of different dimensions")
            mat = np.stack(vectors)
            if not np.isfinite(mat).all():
                raise ValueError("non-finite numbers in episode vectors")
            return ids, mat

    def episode_rowids(self) -> list[int]:
        """Every episode's row id, ascending."""
        with self.lock, self._reading("episodes"):
            return [int(r[0]) for r in self._conn.execute("SELECT rowid FROM episodes ORDER BY 1")]

    def forget_versions(self, up_to: int) -> None:
        """Drop the before-images no reader needs: those of commits up to version `up_to`.

        A reader at version v needs the images of commits after v only; the
        memory calls this with the oldest version a reader still holds, so
        text of unaligned feedback does not linger in process memory.
        """
        with self.lock:
            self._versions = [(seq, before) for seq, before in self._versions if seq > up_to]

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

    # -- guidelines --------------------------------------------------------------

    def load_guidelines(self) -> tuple[list[Guideline], np.ndarray | None]:
        """All guidelines in order, and their vectors (None if any lacks one)."""
        with self.lock, self._reading("guidelines"):
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
                vectors = [_vector(r[2]) for r in rows]
                if len({v.shape[0] for v in vectors}) != 1:
                    raise ValueError("guideline vectors of different dimensions")
                return guidelines, np.stack(vectors)
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
        with self.lock, self._reading("guidelines"):
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
        with self.lock, self._reading("history"):
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
        memory intact (and the next open or save removes the temporary file).
        """
        folder.mkdir(parents=True, exist_ok=True)
        remove_leftovers(folder)
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


def _vector(blob: Any) -> np.ndarray:
    if not isinstance(blob, bytes) or not blob or len(blob) % 4:
        raise ValueError(f"a stored vector is not float32 bytes ({type(blob).__name__})")
    return np.frombuffer(blob, dtype=np.float32).copy()


def _connect(db: Path) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(db, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA synchronous=FULL")
    except (sqlite3.DatabaseError, ValueError) as e:  # ValueError: undecodable schema text
        raise MemoryFormatError(f"{db}: cannot open MemAlign memory ({e})") from e
    return conn


def _chunks(items: list[str], size: int = 500) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
