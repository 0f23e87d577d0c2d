"""The PostgreSQL memory's connections, transactions, locks and meta table.

`PostgresBase` is the part of `PostgresStore` every table depends on: the
connection pool (and the errors of a server that cannot be reached or that
refuses the URL), the connection a thread's transaction or consistent read
is pinned to, the translation of errors from stored values into
`MemoryFormatError`, the transactions that give each commit a new version,
the unit (`atomic`) that makes the steps of one align or unalign one
transaction, the writers' advisory lock and the meta values (some kept in
the judge row).

psycopg 3 and psycopg_pool are an optional extra, imported when a store is
opened: a `postgresql://` URL without them raises `MemoryFormatError`
naming the extra to install.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from langchain_memalign._redact import redact_logs, scrub_exception
from langchain_memalign.errors import (
    MemAlignError,
    MemoryBusyError,
    MemoryFormatError,
    MemoryFullError,
    MemoryPermissionError,
    MemoryReadOnlyError,
    MemoryUnavailableError,
)
from langchain_memalign.feedback import Feedback
from langchain_memalign.memory._codec import _matrix, _now, _vec_blob, encode_feedback
from langchain_memalign.memory._sql import POSTGRES
from langchain_memalign.memory._store_base import SCHEMA_VERSION
from langchain_memalign.memory.base import Store
from langchain_memalign.memory.location import PostgresTarget, is_postgres_url

# Several judges share one database, each under its name: every table holds a
# `judge` column (the judge row in `memalign_judges` owns the rest, so deleting it
# deletes the judge's memory; `_tables`). First key of the advisory locks this package
# takes (the second is the judge's name hashed), so they do not collide with another
# application's locks.
_LOCK_CLASS = 0x4D41  # "MA"
# Meta keys kept in the judge row rather than in `memalign_meta`.
_ROW_META = ("memory_id", "change_seq", "content_version")
INSTALL_HINT = "pip install 'langchain-memalign[postgres]'"
PRIVILEGES_HINT = (
    "judging needs USAGE on the schema and SELECT on the memalign_* tables; align, "
    "unalign and opening with a configuration also INSERT, UPDATE and DELETE; creating "
    "the tables CREATE on the schema (see 'Roles and privileges' in docs/postgres.md)"
)


def _psycopg() -> tuple[Any, Any]:
    try:
        import psycopg
        import psycopg_pool
    except ImportError as e:
        raise MemoryFormatError(
            f"a postgresql:// memory needs psycopg 3 and psycopg_pool: {INSTALL_HINT} ({e})"
        ) from e
    return psycopg, psycopg_pool


def url_problem(psycopg: Any, target: PostgresTarget) -> str | None:
    """Why libpq cannot use this URL, found without connecting; None if nothing is found.

    libpq's own parser reads it (garbage after the scheme, bad percent-encoding,
    an unknown parameter, spaces), then the ports, which libpq checks only when
    it connects: the connection pool would retry such a URL until
    `open_timeout` and report a server that cannot be reached.
    """
    try:
        params = psycopg.conninfo.conninfo_to_dict(target.conninfo)
    except psycopg.Error as e:
        return str(e).strip()
    ports = [p.strip() for p in str(params.get("port") or "").split(",")]
    for port in ports:
        if port and not (re.fullmatch(r"[0-9]{1,5}", port) and 1 <= int(port) <= 65_535):
            return f"invalid port {port!r}: a port is a number from 1 to 65535"
    hosts = str(params.get("host") or params.get("hostaddr") or "").split(",")
    if len(ports) > 1 and len(ports) != len(hosts):
        return f"could not match {len(ports)} port numbers to {len(hosts)} hosts"
    return None


# What libpq says when it refuses a connection's options before contacting any server
# (psycopg prefixes "connection is bad: "): a value it cannot use (`sslmode=bogus`).
_REFUSED_BY_CLIENT = re.compile(r"(?:connection is bad: )?(?:invalid |could not match \d+ )")


def _refused_by_client(error: BaseException) -> bool:
    """Whether a failed connection attempt was refused by libpq before any network I/O.

    Only libpq's messages about the options themselves count: a socket that is
    missing or refused (also reported at once) is a server that is unavailable.
    """
    text = str(error).strip()
    return bool(_REFUSED_BY_CLIENT.match(text)) and "connection to server" not in text


# Refusals no retry can fix, by SQLSTATE: the server refused to authenticate the role
# (28P01 invalid_password, 28000 invalid_authorization_specification: no such role, no
# pg_hba.conf entry, not permitted to log in), or has no such database (3D000).
_AUTHENTICATION_STATES = frozenset({"28P01", "28000"})
_NO_DATABASE_STATE = "3D000"
# The same refusals in libpq's and the server's English words: psycopg gives no SQLSTATE
# for a failed connection attempt (libpq keeps the server's error to itself), so this
# is all there is to read then. A server whose messages are translated (`lc_messages`)
# is not recognized by them; opening then waits `open_timeout` as for any other refusal.
_AUTHENTICATION_REFUSED = re.compile(
    r"FATAL:.*(?:authentication failed|pg_hba\.conf|role \S+ does not exist|"
    r"not permitted to log in)|fe_sendauth:|password retrieved from file",
    re.IGNORECASE,
)
_NO_DATABASE = re.compile(r"FATAL:.*\bdatabase \".*\" does not exist")


def _refusal(error: BaseException | None) -> str | None:
    """Which refusal no retry can fix a failed connection is, if any.

    "authentication", "database" (no such database), or None (another failure:
    retrying may help). Read from what is most reliable first: the SQLSTATE where
    the driver gives one (an error after connecting; a future driver), then libpq's
    own flag that the server asked for a password and none was given
    (`needs_password`), then the words.
    """
    if error is None:
        return None
    state = getattr(error, "sqlstate", None)
    if state is not None:
        if state in _AUTHENTICATION_STATES:
            return "authentication"
        return "database" if state == _NO_DATABASE_STATE else None
    if getattr(getattr(error, "pgconn", None), "needs_password", False) is True:
        return "authentication"
    text = str(error)
    if _AUTHENTICATION_REFUSED.search(text):
        return "authentication"
    return "database" if _NO_DATABASE.search(text) else None


# A server with no connection to spare for now (SQLSTATE 53300 too_many_connections):
# `max_connections` reached ("sorry, too many clients already"), the last slots kept for
# superusers, or the role's or the database's CONNECTION LIMIT reached. The URL is fine
# and connections come free as other clients leave, so it is read as a server that is
# unavailable, not as a refusal of the URL (read by SQLSTATE first, as `_refusal` is).
_OUT_OF_CONNECTIONS_STATE = "53300"
_OUT_OF_CONNECTIONS = re.compile(
    r"FATAL:.*(?:too many clients|too many connections for |"
    r"remaining connection slots are reserved)"
)


def _out_of_connections(error: BaseException | None) -> bool:
    """Whether a failed connection attempt met a server with no connection to spare."""
    if error is None:
        return False
    state = getattr(error, "sqlstate", None)
    if state is not None:
        return bool(state == _OUT_OF_CONNECTIONS_STATE)
    return bool(_OUT_OF_CONNECTIONS.search(str(error)))


def _recording_connection_class(
    psycopg: Any, target: PostgresTarget, refusals: list[tuple[str, BaseException]]
) -> Any:
    """A connection class for the pool that keeps the connection errors no retry can fix.

    The pool retries every failed connection in its own threads and only logs
    why; opening watches this list (of `(kind, error)`: "client", "authentication"
    or "database") to give up at once on a URL libpq refuses alone, credentials the
    server refuses, or a database it does not have. Every error leaves here without
    the failed connection psycopg keeps on it (`scrub_exception`): the pool logs it,
    and opening may chain it.
    """

    class RecordingConnection(psycopg.Connection):  # type: ignore[misc]
        @classmethod
        def connect(cls, conninfo: str = "", **kwargs: Any) -> Any:
            try:
                return super().connect(conninfo, **kwargs)
            except psycopg.Error as e:
                kind = "client" if _refused_by_client(e) else _refusal(e)
                scrub_exception(e, target.conninfo)
                # Opening reads the first; the pool keeps retrying for as long as it is
                # open, and a server refusing for hours must not grow the list.
                if kind is not None and not refusals:
                    refusals.append((kind, e))
                raise

    return RecordingConnection


def _connect_error(psycopg: Any, target: PostgresTarget) -> tuple[BaseException | None, str | None]:
    """The error of one direct connection attempt and its `_refusal` ((None, None): it connects).

    The error is scrubbed of the failed connection psycopg keeps on it, once read.
    """
    try:
        # libpq's connect_timeout is whole seconds, at least 2.
        timeout = max(2, min(10, int(target.open_timeout)))
        psycopg.connect(target.conninfo, connect_timeout=timeout).close()
    except psycopg.Error as e:
        error: BaseException = e
        kind = _refusal(e)
        scrub_exception(e, target.conninfo)
        return error, kind
    return None, None


def _refused_by_server(error: BaseException | None) -> bool:
    """Whether a failed connection attempt reached a server that refused this URL.

    psycopg gives no SQLSTATE for errors while connecting, only libpq's text: a
    server that answered writes "FATAL:" (no such database, authentication
    failed), except while it starts up or shuts down ("the database system is
    ..."), which is the server being unavailable, as a refused or timed-out
    socket is, and when it has no connection to spare (`_out_of_connections`,
    checked first by the caller).
    """
    text = str(error or "")
    return "FATAL:" in text and "the database system is" not in text


def safe_cause(cause: BaseException, target: PostgresTarget) -> BaseException | None:
    """`cause`, to chain an error to, once no credential of `target` is left in its chain.

    A traceback prints every exception of the chain, and code reads their attributes:
    a driver's error that quotes the URL, or psycopg's that keeps the failed connection
    (`e.pgconn`, the password among its options), would give the password away even
    with our own message redacted. The chain is scrubbed in place (`scrub_exception`);
    a cause it cannot clean is not chained (`raise ... from None`: our message says
    what it said, redacted).
    """
    return cause if scrub_exception(cause, target.conninfo) else None


def _conninfo_value(target: PostgresTarget, key: str) -> str | None:
    """A connection parameter of the URL as libpq reads it (None: not given)."""
    psycopg, _ = _psycopg()
    try:
        value = psycopg.conninfo.conninfo_to_dict(target.conninfo).get(key)
    except psycopg.Error:
        return None
    return None if value is None else str(value)


def _refusal_error(target: PostgresTarget, kind: str, why: BaseException) -> MemAlignError:
    """The documented error for a refusal no retry can fix (`_refusal`'s `kind`)."""
    if kind == "authentication":
        return _authentication_error(target, why)
    if kind == "database":
        # Without a database in the URL libpq connects to the one named as the user.
        name = _conninfo_value(target, "dbname") or _conninfo_value(target, "user")
        what = f"database {name!r}" if name else "the URL's database"
        return MemoryFormatError(
            f"{target.describe()}: {what} does not exist on the PostgreSQL server "
            f"({target.redact(str(why).strip())}); create it (CREATE DATABASE) or fix the "
            "database name in the URL (retrying cannot help)"
        )
    return MemoryFormatError(
        f"{target.describe()}: malformed PostgreSQL URL ({target.redact(str(why))})"
    )


def _authentication_error(target: PostgresTarget, why: BaseException) -> MemoryPermissionError:
    """The error of a server that refused to authenticate the URL's role."""
    role = _conninfo_value(target, "user")
    # Without a user in the URL libpq logs in as the operating system's user.
    who = f"role {role!r}" if role else "the URL's role"
    return MemoryPermissionError(
        f"{target.describe()}: PostgreSQL refused to authenticate {who}: "
        f"authentication failed ({target.redact(str(why).strip())}); check the user and "
        "password of the URL (retrying cannot help)"
    )


@dataclass
class _Unit:
    """The open transaction of one `atomic` unit: its connection, and the lock its steps take."""

    conn: Any
    # Steps (savepoints) of one unit run one at a time, whichever thread runs them.
    steps: threading.RLock = field(default_factory=threading.RLock)
    # Cleared when the unit ends: a thread it started that outlives it (its context
    # still names the unit) then reads from the pool, not from a connection given back.
    open: bool = True


class PostgresBase(Store):
    """Connections, transactions, locks and meta values of one judge's memory in PostgreSQL."""

    dialect = POSTGRES
    _row_meta = _ROW_META

    # Other processes and machines write the same judge.
    shared = True
    stores_nul = False

    def __init__(self, target: PostgresTarget) -> None:
        psycopg, psycopg_pool = _psycopg()
        self._psycopg = psycopg
        self._pool_timeout: type[Exception] = psycopg_pool.PoolTimeout
        self.target = target
        self.judge = target.judge
        self._scope = (target.judge,)
        self.staleness = target.staleness
        self._local = threading.local()
        # The running `atomic` unit, seen by the thread that opened it and by the threads
        # it starts: LangGraph and LangChain copy the context into their workers, so
        # every node and model call of an align reads and writes through the unit's
        # connection, while judgments of other threads read committed versions only.
        self._unit: ContextVar[_Unit | None] = ContextVar(
            f"memalign_unit_{target.judge}_{id(self)}", default=None
        )
        # The writers' advisory lock is database-wide: judges of one name in two
        # schemas must not wait for each other.
        self._lock_name = (
            target.judge if target.schema is None else f"{target.schema}.{target.judge}"
        )
        # psycopg's pool logs each failed connection attempt with libpq's message,
        # which may quote a piece of the URL.
        redact_logs(("psycopg", "psycopg.pool"), target.conninfo)
        problem = url_problem(psycopg, target)
        if problem is not None:
            raise MemoryFormatError(
                f"{target.describe()}: malformed PostgreSQL URL ({target.redact(problem)})"
            )
        refusals: list[tuple[str, BaseException]] = []
        self._pool: Any = None
        try:
            self._pool = psycopg_pool.ConnectionPool(
                target.conninfo,
                min_size=1,
                max_size=target.pool_size,
                kwargs={"autocommit": True},
                open=False,
                name=f"memalign-{target.judge}",
                connection_class=_recording_connection_class(psycopg, target, refusals),
                configure=None if target.schema is None else self._use_schema,
            )
            self._open_pool(psycopg_pool.PoolTimeout, refusals)
        except MemAlignError:
            self._discard_pool()
            raise
        except psycopg_pool.PoolTimeout as e:
            self._discard_pool()
            # The pool only logs why its connections failed: one direct attempt tells
            # a server that refuses this URL (no such database, authentication) from
            # one that cannot be reached.
            why, kind = _connect_error(psycopg, target)
            if why is not None and kind is not None:
                raise _refusal_error(target, kind, why) from safe_cause(e, target)
            if _out_of_connections(why):
                # Checked before `_refused_by_server`: the server answered "FATAL:", but
                # about its own load, not this URL; retrying later can connect.
                raise MemoryUnavailableError(
                    f"{target.describe()}: PostgreSQL had no connection to spare within "
                    f"{target.open_timeout:g} s (open_timeout): too many connections "
                    f"(SQLSTATE {_OUT_OF_CONNECTIONS_STATE}: "
                    f"{target.redact(str(why).strip())}); retry later, or raise the "
                    "server's max_connections or the role's or database's CONNECTION LIMIT"
                ) from safe_cause(e, target)
            if _refused_by_server(why):
                raise MemoryFormatError(
                    f"{target.describe()}: cannot connect to PostgreSQL ({target.redact(str(why))})"
                ) from safe_cause(e, target)
            raise MemoryUnavailableError(
                f"{target.describe()}: cannot reach PostgreSQL within "
                f"{target.open_timeout:g} s (open_timeout) "
                f"({target.redact(str(why).strip() if why else str(e))})"
            ) from safe_cause(e, target)
        except Exception as e:
            self._discard_pool()
            raise MemoryFormatError(
                f"{target.describe()}: cannot connect to PostgreSQL "
                f"({type(e).__name__}: {target.redact(str(e))})"
            ) from safe_cause(e, target)

    def _discard_pool(self) -> None:
        if self._pool is not None:
            self._pool.close()

    def _open_pool(
        self, pool_timeout: type[Exception], refusals: list[tuple[str, BaseException]]
    ) -> None:
        """Wait up to `open_timeout` for the pool's first connection.

        The pool retries failed connections in the background; a refusal no retry
        can fix is raised at once rather than after the whole wait: a URL that
        libpq refuses without contacting a server (`sslmode=bogus`) and a database
        the server does not have as `MemoryFormatError`, credentials it refuses as
        `MemoryPermissionError` (`_refusal_error`).
        """
        target = self.target
        deadline = time.monotonic() + target.open_timeout
        self._pool.open(wait=False)
        while True:
            if refusals:
                kind, why = refusals[0]
                raise _refusal_error(target, kind, why) from safe_cause(why, target)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise pool_timeout(f"no connection within {target.open_timeout:g} s")
            try:
                conn = self._pool.getconn(timeout=min(0.2, remaining))
            except pool_timeout:
                continue
            self._pool.putconn(conn)
            return

    def _use_schema(self, conn: Any) -> None:
        """The pool's setup of each new connection: the URL's schema is the search path."""
        sql = self._psycopg.sql
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.target.schema)))

    def _where(self) -> str:
        return self.target.describe()

    def is_at(self, location: object) -> bool:
        """Whether `location` is a URL naming this database, schema and judge."""
        if not is_postgres_url(location):
            return False
        target = PostgresTarget.parse(str(location))
        return (target.conninfo, target.judge, target.schema) == (
            self.target.conninfo,
            self.judge,
            self.target.schema,
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
        server shut down or ended the session), and the server's refusals that are
        the same as a folder's: a missing privilege, a read-only transaction
        (25006), a full disk (53100), a lock not granted within `lock_timeout`
        (55P03). Errors of the SQL itself keep their own handling.
        """
        role = None
        try:
            writer = getattr(self._local, "writer", None)
            if writer is not None:
                # This thread holds the writers' lock: its connection serves the
                # writer too, so an align holds one connection of the pool, not two
                # (with `pool_size=1` the second would never come).
                role = writer.info.user
                yield writer
                return
            with self._pool.connection() as conn:
                role = conn.info.user
                yield conn
        except self._psycopg.errors.InsufficientPrivilege as e:
            # A role without the privileges an action needs: a setup to fix, not a
            # connection to retry, and the same error wherever the refusal came from.
            raise MemoryPermissionError(
                f"{self._where()}: PostgreSQL refused role {role!r} "
                f"({self.target.redact(str(e).strip())}); {PRIVILEGES_HINT}"
            ) from safe_cause(e, self.target)
        except (
            self._psycopg.errors.ReadOnlySqlTransaction,
            self._psycopg.errors.DiskFull,
            self._psycopg.errors.LockNotAvailable,
        ) as e:
            # The memory is intact and the failed statement rolled back, as on a folder.
            kind, why = {
                "25006": (MemoryReadOnlyError, "cannot write the memory: it is read-only"),
                "53100": (MemoryFullError, "cannot write the memory: the disk is full"),
                "55P03": (MemoryBusyError, "the memory is busy: a lock was not granted in time"),
            }[e.sqlstate]
            raise kind(
                f"{self._where()}: {why} ({self.target.redact(str(e).strip())}); "
                "nothing was changed"
            ) from safe_cause(e, self.target)
        except self._pool_timeout as e:
            # Every connection of the pool stayed in use (by aligns and judgments of
            # this process) for the pool's wait: the server is fine, the pool is busy.
            raise MemoryBusyError(
                f"{self._where()}: every connection of this process's pool "
                f"(pool_size={self.target.pool_size}) stayed in use for "
                f"{self._pool.timeout:g} s ({self.target.redact(str(e).strip())}); nothing "
                "was changed. Retry, or raise pool_size in the URL."
            ) from safe_cause(e, self.target)
        except self._psycopg.OperationalError as e:
            state = getattr(e, "sqlstate", None)
            if state is not None and not state.startswith(("08", "57P")):
                raise
            raise MemoryUnavailableError(
                f"{self._where()}: lost the connection to PostgreSQL "
                f"({type(e).__name__}: {self.target.redact(str(e).strip())}); nothing of "
                "the failed call was committed, and the next call reconnects"
            ) from safe_cause(e, self.target)

    def _pinned(self) -> Any:
        """The connection this thread reads through: its transaction's, its unit's, or None."""
        pinned = getattr(self._local, "conn", None)
        if pinned is None:
            unit = self._running_unit()
            pinned = None if unit is None else unit.conn
        return pinned

    def _running_unit(self) -> _Unit | None:
        """The `atomic` unit this thread runs in, if it is still open."""
        unit = self._unit.get()
        return unit if unit is not None and unit.open else None

    @contextmanager
    def _conn(self) -> Iterator[Any]:
        """The connection of this thread's running transaction or unit, else one from the pool."""
        pinned = self._pinned()
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
        """Reads in this block (this thread) see one committed version of the memory.

        Inside a transaction or an `atomic` unit the block reads through its
        connection: the version it is writing, which no one else writes meanwhile.
        """
        if self._pinned() is not None:
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
    def transaction(self, *, add_judge: bool = False) -> Iterator[Any]:
        """All-or-nothing writes; a commit gives the memory a new version.

        The judge row is locked first (`FOR UPDATE`), so concurrent
        transactions on one judge run one after the other and each gets the
        next change sequence. Inside an `atomic` unit the block is a savepoint
        of the unit's transaction (see `atomic`). `add_judge`: insert the judge
        row first if it is missing, in this transaction, so that it is committed
        with what the block writes or not at all (a save to a new judge).
        """
        if getattr(self._local, "conn", None) is not None:
            raise RuntimeError("nested memory transactions are not supported")
        unit = self._running_unit()
        if unit is not None:
            with unit.steps, self._step(unit.conn, add_judge) as conn:
                yield conn
            return
        with (
            self._pooled() as conn,
            self._writing(conn, "BEGIN", "COMMIT", "ROLLBACK", add_judge=add_judge),
        ):
            yield conn

    @contextmanager
    def _step(self, conn: Any, add_judge: bool = False) -> Iterator[Any]:
        """One step of a unit: a savepoint that gets the next version number."""
        with self._writing(
            conn,
            "SAVEPOINT memalign_step",
            "RELEASE SAVEPOINT memalign_step",
            "ROLLBACK TO SAVEPOINT memalign_step; RELEASE SAVEPOINT memalign_step",
            add_judge=add_judge,
        ):
            yield conn

    @contextmanager
    def _writing(
        self, conn: Any, begin: str, commit: str, rollback: str, *, add_judge: bool = False
    ) -> Iterator[None]:
        """Run a write block on `conn` between `begin` and `commit` (`rollback` on error).

        `add_judge`: see `transaction`.
        """
        pg = self._psycopg
        self._local.conn = conn
        try:
            conn.execute(begin)
            if add_judge:
                # Inside the transaction, not before it: the row of a judge that a failed
                # write was to create goes with the rollback. A concurrent transaction
                # adding the same judge waits here for this one, then finds its row.
                conn.execute(
                    "INSERT INTO memalign_judges(name, memory_id) VALUES (%s, %s) "
                    "ON CONFLICT (name) DO NOTHING",
                    (self.judge, uuid.uuid4().hex),
                )
            row = conn.execute(
                "SELECT change_seq FROM memalign_judges WHERE name=%s FOR UPDATE",
                (self.judge,),
            ).fetchone()
            if row is None:
                raise MemoryFormatError(f"{self._where()}: the judge's memory was deleted")
            self._local.seq = int(row[0]) + 1
            yield
            conn.execute(
                "UPDATE memalign_judges SET change_seq=%s, content_version=%s WHERE name=%s",
                (self._local.seq, uuid.uuid4().hex, self.judge),
            )
            conn.execute(commit)
        except BaseException as e:
            with contextlib.suppress(pg.Error):
                conn.execute(rollback)
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

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """One all-or-nothing unit over several `transaction` steps (one align or unalign).

        The unit is one PostgreSQL transaction on a connection of its own; each
        step is a savepoint of it with a version number of its own. The thread
        that opens the unit and the threads it starts (the align graph's nodes,
        their model calls) read through that connection, so the unit sees its
        own steps; every other reader, in this process or another, sees the
        version before the unit until it commits, all at once. An exception
        rolls every step back, and a process killed meanwhile loses its
        session, whose transaction the server rolls back. The judge row is
        locked for the whole unit, so the writers of other processes that do
        not take the writers' lock wait for it rather than interleave. Nested
        units join the outer one.
        """
        if self._running_unit() is not None:
            yield
            return
        if getattr(self._local, "conn", None) is not None:
            raise RuntimeError("a memory unit cannot start inside a transaction")
        pg = self._psycopg
        with self._pooled() as conn:
            # Open across model calls: steps read their own writes; only writers wait on it.
            conn.execute("BEGIN")
            unit = _Unit(conn)
            token = self._unit.set(unit)
            try:
                row = conn.execute(
                    "SELECT 1 FROM memalign_judges WHERE name=%s FOR UPDATE", (self.judge,)
                ).fetchone()
                if row is None:
                    raise MemoryFormatError(f"{self._where()}: the judge's memory was deleted")
                yield
                if conn.info.transaction_status == pg.pq.TransactionStatus.INERROR:
                    # A statement failed and its error was handled: COMMIT would roll
                    # back without an error, and the caller would think the unit stored.
                    raise RuntimeError("a statement of the unit failed and ended its transaction")
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
                unit.open = False
                self._unit.reset(token)

    @property
    def in_atomic(self) -> bool:
        """Whether this thread runs inside an `atomic` unit (or a thread it started)."""
        return self._running_unit() is not None

    #: An align or unalign is one PostgreSQL transaction (`atomic`).
    supports_atomic = True

    @contextmanager
    def lock_writers(self) -> Iterator[None]:
        """Hold the judge's writer lock (a session advisory lock) for a whole align or unalign.

        The lock lives on a session, so it is released even if the process
        dies (PostgreSQL drops a closed session's locks). The thread that holds
        it reads and writes through that same connection (`_pooled`), the
        align's transaction (`atomic`) included: one align holds one connection
        of the pool, and judgments of other threads use the others.
        """
        if getattr(self._local, "writer", None) is not None:
            raise RuntimeError("the writers' lock is not re-entrant")
        with self._pooled() as conn:
            conn.execute(
                "SELECT pg_advisory_lock(%s, hashtext(%s))", (_LOCK_CLASS, self._lock_name)
            )
            self._local.writer = conn
            try:
                yield
            finally:
                self._local.writer = None
                conn.execute(
                    "SELECT pg_advisory_unlock(%s, hashtext(%s))", (_LOCK_CLASS, self._lock_name)
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

    def set_metas(self, values: dict[str, Any]) -> None:
        """Set several JSON values in the meta table in one statement: all of them or none."""
        if any(key in (*_ROW_META, "schema_version") for key in values):
            raise ValueError(f"meta.{', '.join(values)}: some are kept by the store itself")
        if not values:
            return
        with self._conn() as conn:
            conn.execute(
                "INSERT INTO memalign_meta(judge, key, value) VALUES "
                + ", ".join(["(%s, %s, %s)"] * len(values))
                + " ON CONFLICT (judge, key) DO UPDATE SET value=excluded.value",
                [
                    x
                    for k, v in values.items()
                    for x in (self.judge, k, json.dumps(v, allow_nan=False))
                ],
            )

    def change_seq(self) -> int:
        """The number of committed changes (the memory's version number)."""
        seq = self.get_meta("change_seq")
        if seq is None:
            raise MemoryFormatError(f"{self._where()}: the judge's memory was deleted")
        return int(seq)

    # -- running the shared SQL (`_sql`) --------------------------------------------

    def _select(
        self, text: str, args: Sequence[Any] = (), *, binary: bool = False
    ) -> list[tuple[Any, ...]]:
        """The rows of a query in the shared SQL.

        `binary`: fetch in PostgreSQL's binary format (vectors arrive as raw
        bytes, half the transfer of bytea's hex text).
        """
        with self._conn() as conn:
            return list(conn.execute(self.dialect.sql(text), args, binary=binary).fetchall())

    def _run_many(self, conn: Any, text: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run a write in the shared SQL once per parameter row."""
        with conn.cursor() as cur:
            cur.executemany(self.dialect.sql(text), list(rows))

    # -- feedback and episodes: what the change records make PostgreSQL's own ----------

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
