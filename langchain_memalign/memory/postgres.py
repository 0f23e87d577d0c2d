"""PostgreSQL storage: one database shared by many processes and machines.

`PostgresStore` is the PostgreSQL twin of the SQLite `MemoryStore`: it has
the same methods (see `_store_protocol.Store`), so `JudgeMemory` and the
graphs use either. Several judges live in one database, each under its name
(`postgresql://host/db?judge=name`, default `default`); every table holds a
`judge` column and every query names it.

What differs from a folder, and why:

- The database is the only source of truth. There is no index file: every
  process builds its own FAISS index from the stored vectors when it opens
  (no embedding call) and catches up from the change sequence afterwards.
- Every commit bumps the judge row's `change_seq`. An episode row records the
  sequence that added it (`added_seq`); a removed episode leaves its id (never
  its text) in `memalign_removed_episodes`, so a process whose index is at
  version `v` fetches only what changed after `v` (`episode_changes`).
- Writers serialize twice: a whole `align`/`unalign` run holds a session
  advisory lock on the judge (`lock_writers`), so two processes never
  reflect on the same feedback at once, and each transaction locks the judge
  row (`SELECT ... FOR UPDATE`) so no commit is lost even without it.
- Readers that need one consistent version (the memory's publish step) read
  inside one `REPEATABLE READ` transaction (`consistent`).

psycopg 3 and psycopg_pool are an optional extra; a `postgresql://` URL
without them raises `MemoryFormatError` naming the extra to install.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import tempfile
import threading
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import numpy as np

from langchain_memalign import limits
from langchain_memalign.errors import MemoryFormatError, MemoryUnavailableError
from langchain_memalign.feedback import Feedback
from langchain_memalign.memory._files import fsync, fsync_dir
from langchain_memalign.memory._store_base import (
    _SCHEMA,
    DB_FILE,
    INDEX_FILE,
    SCHEMA_VERSION,
    _now,
    _vec_blob,
    _vector,
    encode_feedback,
    remove_leftovers,
)
from langchain_memalign.memory._store_guidelines import guidelines_from_rows
from langchain_memalign.memory.semantic import Guideline

__all__ = [
    "INSTALL_HINT",
    "PG_SCHEMA_VERSION",
    "MemoryDump",
    "PostgresStore",
    "PostgresTarget",
    "describe_location",
    "is_postgres_url",
    "memory_exists",
]

# The version of the tables below; a database with another refuses to open.
PG_SCHEMA_VERSION = 1
INSTALL_HINT = "pip install 'langchain-memalign[postgres]'"
# First key of the advisory locks this package takes (the second is the judge's
# name hashed), so they do not collide with another application's locks.
_LOCK_CLASS = 0x4D41  # "MA"
_DEFAULT_JUDGE = "default"
# Parameters of a memory URL that are ours, not libpq's.
_OUR_PARAMS = ("judge", "staleness", "pool_size", "open_timeout")

_PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS memalign_schema (
    id integer PRIMARY KEY CHECK (id = 1),
    version integer NOT NULL
);
CREATE TABLE IF NOT EXISTS memalign_judges (
    name text PRIMARY KEY,
    memory_id text NOT NULL,
    change_seq bigint NOT NULL DEFAULT 0,
    content_version text NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS memalign_meta (
    judge text NOT NULL REFERENCES memalign_judges(name) ON DELETE CASCADE,
    key text NOT NULL,
    value text NOT NULL,
    PRIMARY KEY (judge, key)
);
CREATE TABLE IF NOT EXISTS memalign_feedback (
    judge text NOT NULL REFERENCES memalign_judges(name) ON DELETE CASCADE,
    id text NOT NULL,
    ord bigint GENERATED ALWAYS AS IDENTITY,
    payload text NOT NULL,
    content_hash text NOT NULL,
    reflected boolean NOT NULL DEFAULT false,
    updated_at text NOT NULL,
    changed_seq bigint NOT NULL,
    PRIMARY KEY (judge, id)
);
CREATE INDEX IF NOT EXISTS memalign_feedback_pending
    ON memalign_feedback(judge) WHERE NOT reflected;
CREATE TABLE IF NOT EXISTS memalign_episodes (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    judge text NOT NULL,
    feedback_id text NOT NULL,
    text_hash text NOT NULL,
    vector bytea NOT NULL,
    added_seq bigint NOT NULL,
    UNIQUE (judge, feedback_id),
    FOREIGN KEY (judge, feedback_id) REFERENCES memalign_feedback(judge, id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS memalign_episodes_added ON memalign_episodes(judge, added_seq);
CREATE TABLE IF NOT EXISTS memalign_removed_episodes (
    judge text NOT NULL REFERENCES memalign_judges(name) ON DELETE CASCADE,
    seq bigint NOT NULL,
    episode_id bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS memalign_removed_by_seq ON memalign_removed_episodes(judge, seq);
CREATE TABLE IF NOT EXISTS memalign_guidelines (
    judge text NOT NULL REFERENCES memalign_judges(name) ON DELETE CASCADE,
    id text NOT NULL,
    ord bigint GENERATED ALWAYS AS IDENTITY,
    text text NOT NULL,
    vector bytea,
    created_at text NOT NULL,
    position bigint NOT NULL,
    PRIMARY KEY (judge, id)
);
CREATE TABLE IF NOT EXISTS memalign_guideline_sources (
    judge text NOT NULL,
    guideline_id text NOT NULL,
    feedback_id text NOT NULL,
    ord bigint GENERATED ALWAYS AS IDENTITY,
    PRIMARY KEY (judge, guideline_id, feedback_id),
    FOREIGN KEY (judge, guideline_id) REFERENCES memalign_guidelines(judge, id)
        ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS memalign_sources_by_feedback
    ON memalign_guideline_sources(judge, feedback_id);
CREATE TABLE IF NOT EXISTS memalign_history (
    judge text NOT NULL REFERENCES memalign_judges(name) ON DELETE CASCADE,
    seq bigint GENERATED ALWAYS AS IDENTITY,
    at text NOT NULL,
    action text NOT NULL,
    feedback_ids text NOT NULL,
    guideline_ids text NOT NULL,
    PRIMARY KEY (judge, seq)
);
"""

_TABLES = {
    "feedback": "memalign_feedback",
    "episodes": "memalign_episodes",
    "guidelines": "memalign_guidelines",
    "history": "memalign_history",
}
# Meta keys kept in the judge row rather than in `memalign_meta`.
_ROW_META = ("memory_id", "change_seq", "content_version")


def is_postgres_url(location: object) -> bool:
    """Whether a memory location is a PostgreSQL URL rather than a folder."""
    return isinstance(location, str) and location.startswith(("postgresql://", "postgres://"))


@dataclass(frozen=True)
class PostgresTarget:
    """A parsed memory URL: libpq connection string, judge name and our settings.

    `postgresql://user:pw@host:5432/db?judge=helpfulness&staleness=2` names
    the database, the judge inside it (default `default`), how many seconds
    a judgment may lag behind the newest commit (default 0: every judgment
    sees every committed change), the connection pool's size (default 8) and
    how many seconds opening waits for the server (`open_timeout`, default 30).
    Every other parameter goes to libpq unchanged (`sslmode`, `host=/socket/dir` ...).
    """

    conninfo: str
    judge: str
    staleness: float = 0.0
    pool_size: int = 8
    open_timeout: float = 30.0

    @classmethod
    def parse(cls, url: str) -> PostgresTarget:
        """Split a memory URL into the libpq part and ours; `ValueError` if malformed."""
        parts = urlsplit(url)
        params = parse_qsl(parts.query, keep_blank_values=True)
        ours = {k: v for k, v in params if k in _OUR_PARAMS}
        rest = [(k, v) for k, v in params if k not in _OUR_PARAMS]
        judge = ours.get("judge") or _DEFAULT_JUDGE
        try:
            staleness = float(ours.get("staleness") or 0)
            pool_size = int(ours.get("pool_size") or 8)
            open_timeout = float(ours.get("open_timeout") or 30)
        except ValueError as e:
            raise MemoryFormatError(f"{redact(url)}: bad memory URL parameter ({e})") from e
        if (
            not (0 <= staleness < 86_400)
            or not (1 <= pool_size <= 256)
            or not (0 < open_timeout <= 3_600)
        ):
            raise MemoryFormatError(
                f"{redact(url)}: staleness must be in [0, 86400) seconds, pool_size in "
                "[1, 256] and open_timeout in (0, 3600] seconds"
            )
        conninfo = urlunsplit(parts._replace(query=urlencode(rest)))
        return cls(conninfo, judge, staleness, pool_size, open_timeout)

    def describe(self) -> str:
        """The URL without its password, with the judge name (for messages)."""
        return f"{redact(self.conninfo)} (judge {self.judge!r})"


def describe_location(location: object) -> str:
    """A memory location for messages: a folder as is, a URL without its password."""
    return redact(str(location)) if is_postgres_url(location) else str(location)


def memory_exists(location: object) -> bool:
    """Whether a folder or a database holds a memory (for a URL: the judge's row exists)."""
    if is_postgres_url(location):
        try:
            PostgresStore.open(str(location)).close()
        except MemoryFormatError:
            return False
        return True
    return (Path(str(location)) / DB_FILE).is_file()


def redact(url: str) -> str:
    """A URL with its password replaced by `***`."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _psycopg() -> tuple[Any, Any]:
    try:
        import psycopg
        import psycopg_pool
    except ImportError as e:
        raise MemoryFormatError(
            f"a postgresql:// memory needs psycopg 3 and psycopg_pool: {INSTALL_HINT} ({e})"
        ) from e
    return psycopg, psycopg_pool


def _connect_error(psycopg: Any, target: PostgresTarget) -> BaseException | None:
    """The error of one direct connection attempt (None if it connects)."""
    try:
        # libpq's connect_timeout is whole seconds, at least 2.
        timeout = max(2, min(10, int(target.open_timeout)))
        psycopg.connect(target.conninfo, connect_timeout=timeout).close()
    except psycopg.Error as e:
        error: BaseException = e
        return error
    return None


def _refused_by_server(error: BaseException | None) -> bool:
    """Whether a failed connection attempt reached a server that refused this URL.

    psycopg gives no SQLSTATE for errors while connecting, only libpq's text: a
    server that answered writes "FATAL:" (no such database, authentication
    failed), except while it starts up or shuts down ("the database system is
    ..."), which is the server being unavailable, as a refused or timed-out
    socket is.
    """
    text = str(error or "")
    return "FATAL:" in text and "the database system is" not in text


@dataclass
class MemoryDump:
    """Every row of one memory, to copy it between backends (`save`)."""

    meta: dict[str, Any] = field(default_factory=dict)
    # (id, payload, content_hash, reflected, updated_at), oldest first
    feedback: list[tuple[str, str, str, bool, str]] = field(default_factory=list)
    # (episode id, feedback_id, text_hash, vector bytes)
    episodes: list[tuple[int, str, str, bytes]] = field(default_factory=list)
    # (id, text, vector bytes or None, created_at, position), in order
    guidelines: list[tuple[str, str, bytes | None, str, int]] = field(default_factory=list)
    # (guideline_id, feedback_id), in order
    sources: list[tuple[str, str]] = field(default_factory=list)
    # (seq, at, action, feedback_ids JSON, guideline_ids JSON), oldest first
    history: list[tuple[int, str, str, str, str]] = field(default_factory=list)


def dump_sqlite(conn: sqlite3.Connection) -> MemoryDump:
    """Every row of a SQLite memory (the caller holds its lock)."""
    d = MemoryDump()
    d.meta = {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM meta")}
    d.feedback = [
        (i, p, h, bool(r), u)
        for i, p, h, r, u in conn.execute(
            "SELECT id, payload, content_hash, reflected, updated_at FROM feedback ORDER BY rowid"
        )
    ]
    d.episodes = [
        (int(r), f, t, bytes(v))
        for r, f, t, v in conn.execute(
            "SELECT rowid, feedback_id, text_hash, vector FROM episodes ORDER BY rowid"
        )
    ]
    d.guidelines = [
        (i, t, None if v is None else bytes(v), c, int(p))
        for i, t, v, c, p in conn.execute(
            "SELECT id, text, vector, created_at, position FROM guidelines ORDER BY position, rowid"
        )
    ]
    d.sources = list(
        conn.execute("SELECT guideline_id, feedback_id FROM guideline_sources ORDER BY rowid")
    )
    d.history = list(
        conn.execute(
            "SELECT seq, at, action, feedback_ids, guideline_ids FROM history ORDER BY seq"
        )
    )
    return d


class PostgresStore:
    """One judge's memory in a PostgreSQL database (see the module doc)."""

    # A database memory has no folder: no index file, no leftovers to clean.
    folder: Path | None = None

    def __init__(self, target: PostgresTarget) -> None:
        psycopg, psycopg_pool = _psycopg()
        self._psycopg = psycopg
        self.target = target
        self.judge = target.judge
        self.staleness = target.staleness
        # Kept for the `Store` interface; PostgreSQL does its own locking.
        self.lock = threading.RLock()
        self._local = threading.local()
        try:
            self._pool = psycopg_pool.ConnectionPool(
                target.conninfo,
                min_size=1,
                max_size=target.pool_size,
                kwargs={"autocommit": True},
                open=False,
                name=f"memalign-{target.judge}",
            )
            self._pool.open(wait=True, timeout=target.open_timeout)
        except psycopg_pool.PoolTimeout as e:
            self._pool.close()
            # The pool only logs why its connections failed: one direct attempt tells
            # a server that refuses this URL (no such database, authentication) from
            # one that cannot be reached.
            why = _connect_error(psycopg, target)
            if _refused_by_server(why):
                raise MemoryFormatError(
                    f"{target.describe()}: cannot connect to PostgreSQL ({why})"
                ) from e
            raise MemoryUnavailableError(
                f"{target.describe()}: cannot reach PostgreSQL within {target.open_timeout:g} s "
                f"(open_timeout) ({str(why).strip() if why else e})"
            ) from e
        except Exception as e:
            raise MemoryFormatError(
                f"{target.describe()}: cannot connect to PostgreSQL ({type(e).__name__}: {e})"
            ) from e

    def _where(self) -> str:
        return self.target.describe()

    def __repr__(self) -> str:
        return f"PostgresStore({self._where()})"

    # -- opening ---------------------------------------------------------------------

    @classmethod
    def create(cls, url: str) -> PostgresStore:
        """Open the judge named in `url`, creating the tables and the judge if needed."""
        store = cls(PostgresTarget.parse(url))
        try:
            store._install()
            with store._conn() as conn:
                conn.execute(
                    "INSERT INTO memalign_judges(name, memory_id) VALUES (%s, %s) "
                    "ON CONFLICT (name) DO NOTHING",
                    (store.judge, uuid.uuid4().hex),
                )
        except BaseException:
            store.close()
            raise
        return store

    @classmethod
    def open(cls, url: str) -> PostgresStore:
        """Open an existing judge's memory, or raise `MemoryFormatError`."""
        store = cls(PostgresTarget.parse(url))
        try:
            store._check_schema()
            with store._conn() as conn:
                row = conn.execute(
                    "SELECT 1 FROM memalign_judges WHERE name=%s", (store.judge,)
                ).fetchone()
            if row is None:
                raise MemoryFormatError(f"{store._where()}: no MemAlign memory for this judge")
        except BaseException:
            store.close()
            raise
        return store

    def _install(self) -> None:
        """Create the tables once per database; concurrent first opens wait for each other."""
        pg = self._psycopg
        try:
            with self._conn() as conn, conn.transaction():
                # CREATE TABLE IF NOT EXISTS is not safe against itself run concurrently.
                conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (_LOCK_CLASS,))
                exists = conn.execute(
                    "SELECT to_regclass('memalign_schema') IS NOT NULL"
                ).fetchone()[0]
                if not exists:
                    conn.execute(_PG_SCHEMA)
                    conn.execute(
                        "INSERT INTO memalign_schema(id, version) VALUES (1, %s)",
                        (PG_SCHEMA_VERSION,),
                    )
        except pg.Error as e:
            raise MemoryFormatError(f"{self._where()}: cannot create the tables ({e})") from e
        self._check_schema()

    def _check_schema(self) -> None:
        pg = self._psycopg
        try:
            with self._conn() as conn:
                exists = conn.execute(
                    "SELECT to_regclass('memalign_schema') IS NOT NULL"
                ).fetchone()[0]
                if not exists:
                    raise MemoryFormatError(f"{self._where()}: no MemAlign tables in this database")
                row = conn.execute("SELECT version FROM memalign_schema WHERE id=1").fetchone()
        except pg.Error as e:
            raise MemoryFormatError(f"{self._where()}: not a MemAlign database ({e})") from e
        version = None if row is None else row[0]
        if version != PG_SCHEMA_VERSION:
            raise MemoryFormatError(
                f"{self._where()}: memory schema version {version!r} is not supported "
                f"(this version reads {PG_SCHEMA_VERSION})"
            )

    def close(self) -> None:
        """Close the connection pool."""
        self._pool.close()

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        return bool(self._pool.closed)

    # -- connections -----------------------------------------------------------------

    @contextmanager
    def _pooled(self) -> Iterator[Any]:
        """A connection from the pool; a lost server becomes `MemoryUnavailableError`.

        Only connection failures are translated (no SQLSTATE: the client lost the
        socket or the pool timed out; class 08: connection exception; 57P: the
        server shut down or ended the session). Errors of the SQL itself keep
        their own handling.
        """
        try:
            with self._pool.connection() as conn:
                yield conn
        except self._psycopg.OperationalError as e:
            state = getattr(e, "sqlstate", None)
            if state is not None and not state.startswith(("08", "57P")):
                raise
            raise MemoryUnavailableError(
                f"{self._where()}: lost the connection to PostgreSQL "
                f"({type(e).__name__}: {str(e).strip()}); nothing of the failed call "
                "was committed, and the next call reconnects"
            ) from e

    @contextmanager
    def _conn(self) -> Iterator[Any]:
        """The connection of this thread's running transaction, else one from the pool."""
        pinned = getattr(self._local, "conn", None)
        if pinned is not None:
            yield pinned
            return
        with self._pooled() as conn:
            yield conn

    @contextmanager
    def _reading(self, what: str) -> Iterator[None]:
        """Turn errors from stored values into `MemoryFormatError` (not connection errors)."""
        pg = self._psycopg
        try:
            yield
        except MemoryFormatError:
            raise
        except (pg.errors.UndefinedTable, pg.errors.UndefinedColumn, pg.DataError) as e:
            raise MemoryFormatError(
                f"{self._where()}: corrupt MemAlign memory: cannot read {what} ({e})"
            ) from e
        except (ValueError, TypeError, KeyError, IndexError, OverflowError) as e:
            raise MemoryFormatError(
                f"{self._where()}: corrupt MemAlign memory: cannot read {what} "
                f"({type(e).__name__}: {e})"
            ) from e

    def _rows(
        self, sql: str, args: Iterable[Any] = (), *, binary: bool = False
    ) -> list[tuple[Any, ...]]:
        """Rows of a query whose first parameter is the judge's name.

        `binary`: fetch in PostgreSQL's binary format (vectors arrive as raw
        bytes, half the transfer of bytea's hex text).
        """
        with self._conn() as conn:
            return list(conn.execute(sql, (self.judge, *args), binary=binary).fetchall())

    @contextmanager
    def consistent(self) -> Iterator[None]:
        """Reads in this block (this thread) see one committed version of the memory."""
        if getattr(self._local, "conn", None) is not None:
            yield
            return
        with self._pooled() as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            self._local.conn = conn
            try:
                yield
            finally:
                self._local.conn = None
                conn.execute("ROLLBACK")

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """All-or-nothing writes; a commit gives the memory a new version.

        The judge row is locked first (`FOR UPDATE`), so concurrent
        transactions on one judge run one after the other and each gets the
        next change sequence.
        """
        pg = self._psycopg
        if getattr(self._local, "conn", None) is not None:
            raise RuntimeError("nested memory transactions are not supported")
        with self._pooled() as conn:
            self._local.conn = conn
            try:
                conn.execute("BEGIN")
                row = conn.execute(
                    "SELECT change_seq FROM memalign_judges WHERE name=%s FOR UPDATE",
                    (self.judge,),
                ).fetchone()
                if row is None:
                    raise MemoryFormatError(f"{self._where()}: the judge's memory was deleted")
                self._local.seq = int(row[0]) + 1
                yield conn
                conn.execute(
                    "UPDATE memalign_judges SET change_seq=%s, content_version=%s WHERE name=%s",
                    (self._local.seq, uuid.uuid4().hex, self.judge),
                )
                conn.execute("COMMIT")
            except BaseException as e:
                with contextlib.suppress(pg.Error):
                    conn.execute("ROLLBACK")
                if isinstance(e, pg.errors.UndefinedTable | pg.errors.UndefinedColumn):
                    raise MemoryFormatError(
                        f"{self._where()}: cannot write the memory ({e}); nothing was changed"
                    ) from e
                raise
            finally:
                self._local.conn = None
                self._local.seq = None

    def _seq(self) -> int:
        seq = getattr(self._local, "seq", None)
        if seq is None:
            raise RuntimeError("a memory write outside a transaction")
        return int(seq)

    # Not yet on PostgreSQL: an align's steps (forget, merge, validation, consolidation)
    # commit one by one, each all-or-nothing, and a failure leaves the steps before it
    # committed. One transaction across the steps needs the pinned connection to follow
    # the align graph's worker threads; see docs/postgres.md.
    supports_atomic = False
    in_atomic = False

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """Run the steps of an align or unalign; each commits on its own (see `supports_atomic`)."""
        yield

    @contextmanager
    def lock_writers(self) -> Iterator[None]:
        """Hold the judge's writer lock (a session advisory lock) for a whole align or unalign.

        The lock lives on a connection of its own, so it is released even if
        the process dies (PostgreSQL drops a closed session's locks).
        """
        with self._pooled() as conn:
            conn.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (_LOCK_CLASS, self.judge))
            try:
                yield
            finally:
                conn.execute(
                    "SELECT pg_advisory_unlock(%s, hashtext(%s))", (_LOCK_CLASS, self.judge)
                )

    # -- meta ------------------------------------------------------------------------

    def get_meta(self, key: str) -> Any:
        """A JSON value from the meta table, or None."""
        with self._reading(f"meta.{key}"):
            if key == "schema_version":
                # The folder's format version: a database memory converts to it on save.
                return SCHEMA_VERSION
            if key in _ROW_META:
                rows = self._rows(f"SELECT {key} FROM memalign_judges WHERE name=%s")
                if not rows:
                    return None
                value = rows[0][0]
                return int(value) if key == "change_seq" else (value or None)
            rows = self._rows("SELECT value FROM memalign_meta WHERE judge=%s AND key=%s", (key,))
            return json.loads(rows[0][0]) if rows else None

    def set_meta(self, key: str, value: Any) -> None:
        """Set a JSON value in the meta table (inside or outside a transaction)."""
        if key in (*_ROW_META, "schema_version"):
            raise ValueError(f"meta.{key} is kept by the store itself")
        with self._conn() as conn:
            if value is None:
                conn.execute(
                    "DELETE FROM memalign_meta WHERE judge=%s AND key=%s", (self.judge, key)
                )
                return
            conn.execute(
                "INSERT INTO memalign_meta(judge, key, value) VALUES (%s, %s, %s) "
                "ON CONFLICT (judge, key) DO UPDATE SET value=excluded.value",
                (self.judge, key, json.dumps(value, allow_nan=False)),
            )

    def change_seq(self) -> int:
        """The number of committed changes (the memory's version number)."""
        seq = self.get_meta("change_seq")
        if seq is None:
            raise MemoryFormatError(f"{self._where()}: the judge's memory was deleted")
        return int(seq)

    def identity(self) -> dict[str, Any]:
        """What the stored content is: memory id, version number and version token."""
        with self.consistent():
            return {
                "memory_id": self.get_meta("memory_id"),
                "change_seq": self.change_seq(),
                "content_version": self.get_meta("content_version"),
            }

    def forget_versions(self, up_to: int) -> None:
        """Nothing to forget: a database memory keeps no before-images in process."""

    # -- feedback --------------------------------------------------------------------

    def _decode(self, payload: Any) -> Feedback:
        with self._reading("a feedback payload"):
            return Feedback.model_validate_json(payload)

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

    def count(self, table: str) -> int:
        """Row count of a table (this judge's rows)."""
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

    # -- copies between backends -------------------------------------------------------

    def dump(self) -> MemoryDump:
        """Every row of this judge's memory, read at one version."""
        d = MemoryDump()
        with self._reading("the memory"), self.consistent():
            d.meta = {
                k: json.loads(v)
                for k, v in self._rows("SELECT key, value FROM memalign_meta WHERE judge=%s")
            }
            for key in _ROW_META:
                d.meta[key] = self.get_meta(key)
            d.feedback = [
                (i, p, h, bool(r), u)
                for i, p, h, r, u in self._rows(
                    "SELECT id, payload, content_hash, reflected, updated_at "
                    "FROM memalign_feedback WHERE judge=%s ORDER BY ord"
                )
            ]
            d.episodes = [
                (int(i), f, t, bytes(v))
                for i, f, t, v in self._rows(
                    "SELECT id, feedback_id, text_hash, vector FROM memalign_episodes "
                    "WHERE judge=%s ORDER BY id"
                )
            ]
            d.guidelines = [
                (i, t, None if v is None else bytes(v), c, int(p))
                for i, t, v, c, p in self._rows(
                    "SELECT id, text, vector, created_at, position FROM memalign_guidelines "
                    "WHERE judge=%s ORDER BY position, ord"
                )
            ]
            d.sources = [
                (g, f)
                for g, f in self._rows(
                    "SELECT guideline_id, feedback_id FROM memalign_guideline_sources "
                    "WHERE judge=%s ORDER BY ord"
                )
            ]
            d.history = [
                (n, at, a, f, g)
                for n, (at, a, f, g) in enumerate(
                    self._rows(
                        "SELECT at, action, feedback_ids, guideline_ids FROM memalign_history "
                        "WHERE judge=%s ORDER BY seq"
                    ),
                    start=1,
                )
            ]
        return d

    def replace_with(self, d: MemoryDump) -> None:
        """Make this judge's memory a copy of `d`, in one transaction (one new version).

        Rows of the old content are deleted (their episode ids recorded as
        removed, so processes with this judge open drop them from their index).
        """
        with self.transaction() as conn:
            seq = self._seq()
            conn.execute(
                "INSERT INTO memalign_removed_episodes(judge, seq, episode_id) "
                "SELECT judge, %s, id FROM memalign_episodes WHERE judge=%s",
                (seq, self.judge),
            )
            for table in ("memalign_guidelines", "memalign_feedback", "memalign_history"):
                conn.execute(f"DELETE FROM {table} WHERE judge=%s", (self.judge,))
            conn.execute("DELETE FROM memalign_meta WHERE judge=%s", (self.judge,))
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO memalign_meta(judge, key, value) VALUES (%s, %s, %s)",
                    [
                        (self.judge, k, json.dumps(v, allow_nan=False))
                        for k, v in d.meta.items()
                        if k not in (*_ROW_META, "schema_version")
                    ],
                )
                cur.executemany(
                    "INSERT INTO memalign_feedback(judge, id, payload, content_hash, reflected, "
                    "updated_at, changed_seq) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    [(self.judge, *row, seq) for row in d.feedback],
                )
                cur.executemany(
                    "INSERT INTO memalign_episodes(judge, feedback_id, text_hash, vector, "
                    "added_seq) VALUES (%s, %s, %s, %s, %s)",
                    [(self.judge, f, t, v, seq) for _, f, t, v in d.episodes],
                )
                cur.executemany(
                    "INSERT INTO memalign_guidelines(judge, id, text, vector, created_at, "
                    "position) VALUES (%s, %s, %s, %s, %s, %s)",
                    [(self.judge, *row) for row in d.guidelines],
                )
                cur.executemany(
                    "INSERT INTO memalign_guideline_sources(judge, guideline_id, feedback_id) "
                    "VALUES (%s, %s, %s)",
                    [(self.judge, g, f) for g, f in d.sources],
                )
                cur.executemany(
                    "INSERT INTO memalign_history(judge, at, action, feedback_ids, "
                    "guideline_ids) VALUES (%s, %s, %s, %s, %s)",
                    [(self.judge, *row[1:]) for row in d.history],
                )
            if d.meta.get("memory_id"):
                conn.execute(
                    "UPDATE memalign_judges SET memory_id=%s WHERE name=%s",
                    (d.meta["memory_id"], self.judge),
                )

    def backup_to(self, folder: Path) -> None:
        """Write this judge's memory into `folder` as a SQLite memory, atomically.

        Episode ids are kept as the SQLite row ids, so an index built from
        either copy has the same ids.
        """
        d = self.dump()
        folder.mkdir(parents=True, exist_ok=True)
        remove_leftovers(folder)
        fd, tmp = tempfile.mkstemp(prefix=".memory-", suffix=".tmp", dir=folder)
        os.close(fd)
        try:
            write_sqlite(tmp, d)
            fsync(tmp)
            os.replace(tmp, folder / DB_FILE)
            # The old folder's index cache describes other content.
            (folder / INDEX_FILE).unlink(missing_ok=True)
            fsync_dir(folder)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def write_sqlite(path: str, d: MemoryDump) -> None:
    """Write a dump into a new SQLite memory file at `path`."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA secure_delete=ON")
        conn.executescript(_SCHEMA)
        conn.execute("BEGIN")
        meta = {**d.meta, "schema_version": SCHEMA_VERSION}
        conn.executemany(
            "INSERT INTO meta(key, value) VALUES (?, ?)",
            [(k, json.dumps(v, allow_nan=False)) for k, v in meta.items() if v is not None],
        )
        conn.executemany(
            "INSERT INTO feedback(id, payload, content_hash, reflected, updated_at) "
            "VALUES (?, ?, ?, ?, ?)",
            [(i, p, h, int(r), u) for i, p, h, r, u in d.feedback],
        )
        conn.executemany(
            "INSERT INTO episodes(rowid, feedback_id, text_hash, vector) VALUES (?, ?, ?, ?)",
            d.episodes,
        )
        conn.executemany(
            "INSERT INTO guidelines(id, text, vector, created_at, position) VALUES (?, ?, ?, ?, ?)",
            d.guidelines,
        )
        conn.executemany(
            "INSERT INTO guideline_sources(guideline_id, feedback_id) VALUES (?, ?)", d.sources
        )
        conn.executemany(
            "INSERT INTO history(seq, at, action, feedback_ids, guideline_ids) "
            "VALUES (?, ?, ?, ?, ?)",
            d.history,
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


def _matrix(rows: list[tuple[Any, ...]]) -> tuple[list[int], np.ndarray | None]:
    """Ids and vectors of (id, float32 bytes) rows, as one matrix (one copy of the bytes)."""
    if not rows:
        return [], None
    ids = [int(r[0]) for r in rows]
    lengths = {len(r[1]) for r in rows}
    if len(lengths) != 1:
        raise ValueError("episode vectors of different dimensions")
    (length,) = lengths
    if not length or length % 4:
        raise ValueError(f"a stored vector is not float32 bytes ({length} bytes)")
    # Read-only view of the joined bytes: the index copies (and normalizes) it anyway.
    mat = np.frombuffer(b"".join(bytes(r[1]) for r in rows), dtype=np.float32)
    mat = mat.reshape(len(rows), length // 4)
    if not np.isfinite(mat).all():
        raise ValueError("non-finite numbers in episode vectors")
    return ids, mat
