"""The SQLite memory's schema, connection and error mapping.

`StoreBase` is the part of the SQLite `MemoryStore` every table depends on:
the SQL schema and the columns this version reads, the connection with its
lock, the translation of SQLite's errors (a damaged file into
`MemoryFormatError`; a busy, full or read-only one into the errors that say
so), the meta table (format version, memory id, version number) and the
transactions that give each commit a new version and keep the before-images
older readers need. The module also holds the file names of a memory
folder, the cleanup of leftovers of interrupted writes and the small
helpers (chunked id lists). How values are encoded is in `_codec`, the same
for both backends.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import sqlite3
import stat
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from langchain_memalign.errors import (
    MemAlignError,
    MemoryBusyError,
    MemoryFormatError,
    MemoryFullError,
    MemoryReadOnlyError,
)
from langchain_memalign.feedback import Feedback
from langchain_memalign.memory._codec import _matrix, _vec_blob

# `_now` and `encode_feedback` are re-exported: code elsewhere imports them from here.
from langchain_memalign.memory._codec import _now as _now
from langchain_memalign.memory._codec import encode_feedback as encode_feedback
from langchain_memalign.memory._sql import SQLITE
from langchain_memalign.memory._sqlite_schema import refuse_links
from langchain_memalign.memory._tables import VERSION, sqlite_schema
from langchain_memalign.memory.base import Store
from langchain_memalign.memory.location import is_postgres_url

# A folder of an older version is upgraded on open (`MemoryStore`).
SCHEMA_VERSION = VERSION
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

# The tables as `_tables` specifies them.
_SCHEMA = sqlite_schema()


def storage_refusal(e: BaseException, where: str) -> MemAlignError | None:
    """The error for a SQLite failure that says nothing of the file's content, else None.

    SQLite names why a call failed in its result code: another connection held
    the write lock past the busy timeout (BUSY), the disk or the file's page
    limit is full (FULL), the file, its folder or its volume cannot be written
    (READONLY). The message (`database is locked`, ...) is SQLite's and may be
    translated; the code is not. Extended codes (`SQLITE_READONLY_DIRECTORY`)
    keep their primary code in the low byte.
    """
    code = getattr(e, "sqlite_errorcode", None)
    if not isinstance(e, sqlite3.Error) or not isinstance(code, int):
        return None
    primary = code & 0xFF
    if primary == sqlite3.SQLITE_BUSY:
        return MemoryBusyError(
            f"{where}: the memory is busy: another connection is writing it and did not "
            f"finish within SQLite's busy timeout ({e}); nothing was changed, try again"
        )
    if primary == sqlite3.SQLITE_FULL:
        return MemoryFullError(
            f"{where}: cannot write the memory: the disk is full ({e}); nothing was changed"
        )
    if primary == sqlite3.SQLITE_READONLY:
        return MemoryReadOnlyError(
            f"{where}: cannot write the memory: it is read-only (its file, its folder or "
            f"the volume) ({e}); nothing was changed"
        )
    return None


def sqlite_error(e: BaseException, where: str, message: str) -> MemAlignError:
    """`storage_refusal(e, where)` if it is one, else `MemoryFormatError(message)`."""
    return storage_refusal(e, where) or MemoryFormatError(message)


# What a file operation in a memory folder fails with when the folder cannot be
# written (EACCES: no permission; EPERM: an immutable file) or the disk is full.
_READ_ONLY_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def os_error(e: OSError, where: str) -> OSError:
    """`e` as `MemoryReadOnlyError` or `MemoryFullError` if it is one, else `e` itself.

    The new error keeps `e.errno`, for code that inspected the `OSError` a
    `save` raised before these errors existed.
    """
    if isinstance(e, MemAlignError):
        return e
    error: OSError
    if e.errno in _READ_ONLY_ERRNOS:
        error = MemoryReadOnlyError(f"{where}: cannot write the folder: it is read-only ({e})")
    elif e.errno in _FULL_ERRNOS:
        error = MemoryFullError(f"{where}: cannot write the folder: the disk is full ({e})")
    else:
        return e
    # `errno` alone (no `strerror`) leaves the message as it is.
    error.errno = e.errno
    return error


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


# What `os.link` fails with on a file system without hard links: the copy is then
# renamed into place, and a memory created in the target meanwhile is replaced.
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK})


class MemoryFileAppeared(FileExistsError):
    """An exclusive `place_memory_file` found a memory file put there meanwhile."""


def place_memory_file(tmp: str, folder: Path, *, exclusive: bool) -> None:
    """Put the complete memory file `tmp` at `folder / DB_FILE`, atomically.

    `exclusive`: only if no memory file is there, decided as the file is put in place
    (a hard link is created or not: `MemoryFileAppeared`, and `tmp` is left for the
    caller to remove); else renamed over whatever is there. Either way a reader sees
    the old file or the new one, never part of one.
    """
    dest = folder / DB_FILE
    if exclusive:
        try:
            os.link(tmp, dest)
        except FileExistsError as e:
            raise MemoryFileAppeared(e.errno, e.strerror, str(dest)) from e
        except OSError as e:
            if e.errno not in _NO_HARD_LINKS:
                raise
        else:
            os.unlink(tmp)
            return
    os.replace(tmp, dest)


@contextmanager
def holding_memory_file(folder: Path) -> Iterator[str]:
    """Hold the write lock of the memory file in `folder` while the block replaces it.

    Yields what was found: "held" (the file is there, and no other connection can
    write it until the block ends: SQLite's own write lock, which every writer of
    the file takes, `save`s included), "absent" (no memory file: put one in place
    with `exclusive`, see `place_memory_file`), or "unheld" (a file that cannot be
    locked: not a database, read-only, a symbolic link; it is replaced unlocked).
    The lock is taken on the file that is at the path once it is held: another save
    may rename its copy over the file between opening and locking it, and the lock
    of a file no longer there would keep no one out. Another connection holding
    the lock past SQLite's busy timeout is `MemoryBusyError`.
    """
    path = folder / DB_FILE
    conn: sqlite3.Connection | None = None
    state = "unheld"
    try:
        for _ in range(16):
            try:
                before = os.lstat(path)
            except FileNotFoundError:
                state = "absent"
                break
            except OSError:
                break
            if not stat.S_ISREG(before.st_mode):
                break
            try:
                # mode=rw: a lock on a file that does not exist would create it.
                conn = sqlite3.connect(
                    f"{path.resolve().as_uri()}?mode=rw", uri=True, isolation_level=None,
                    check_same_thread=False,
                )  # fmt: skip
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as e:
                if conn is not None:
                    conn.close()
                    conn = None
                refusal = storage_refusal(e, str(folder))
                if isinstance(refusal, MemoryBusyError):
                    raise refusal from e
                break  # not a database, or read-only: the replacement decides
            try:
                after = os.lstat(path)
            except FileNotFoundError:
                after = None
            if after is not None and (after.st_dev, after.st_ino) == (
                before.st_dev,
                before.st_ino,
            ):
                state = "held"
                break
            conn.close()  # replaced meanwhile: lock the file that is there now
            conn = None
        else:
            raise MemoryBusyError(
                f"{folder}: the memory file kept being replaced by other saves; try again"
            )
        yield state
    finally:
        if conn is not None:
            conn.close()  # rolls the empty transaction back: the lock goes with it


class StoreBase(Store):
    """Connection, lock, error mapping, meta table and transactions of a SQLite memory."""

    dialect = SQLITE

    def __init__(self, conn: sqlite3.Connection, folder: Path | None) -> None:
        self._conn = conn
        self.folder = folder
        # One connection for every thread: held while SQL runs, and through a transaction.
        self.lock = threading.RLock()
        self._closed = False
        # rowid -> payload before the running transaction changed it.
        self._tx_before: dict[int, str] | None = None
        # (change_seq, {rowid: payload before that commit}) for recent commits, oldest first.
        self._versions: list[tuple[int, dict[int, str]]] = []
        # Set while `atomic` holds one SQLite transaction open for several steps.
        self._atomic_depth = 0
        # The highest version number this process gave out: a rolled-back `atomic`
        # unit must not let a later commit reuse the numbers of its steps, which
        # readers may still hold.
        self._seq_floor = 0
        # `PRAGMA data_version` when the memory last caught up with the commits of
        # other connections (another process on the folder); None: never.
        self._synced_data_version: int | None = None
        try:
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA secure_delete=ON")
        except (sqlite3.DatabaseError, ValueError) as e:
            where = self._where()
            raise sqlite_error(e, where, f"{where}: cannot open MemAlign memory ({e})") from e

    def _where(self) -> str:
        return str(self.folder) if self.folder is not None else "in-process memory"

    def is_at(self, location: object) -> bool:
        """Whether `location` is this memory's folder (an in-process memory is nowhere)."""
        if self.folder is None or not isinstance(location, str | os.PathLike):
            return False
        return not is_postgres_url(location) and Path(location).resolve() == self.folder.resolve()

    def close(self) -> None:
        """Close the database connection."""
        with self.lock:
            self._conn.close()
            self._closed = True

    @contextmanager
    def consistent(self) -> Iterator[None]:
        """Reads in this block see one committed version of the memory.

        Every write of this process holds the store lock until it commits or
        rolls back, so holding it here keeps its commits out of the block. A
        folder may be written by other processes too: there the block is one
        read transaction, whose shared lock keeps their commits out until it
        ends; inside a transaction of this connection (an `atomic` unit) no
        other connection can commit, so none is begun.
        """
        with self.lock:
            if self.folder is None or self._conn.in_transaction:
                yield
                return
            try:
                self._conn.execute("BEGIN")
            except sqlite3.ProgrammingError:  # a closed store: a usage error
                raise
            except (sqlite3.DatabaseError, ValueError) as e:
                where = self._where()
                raise sqlite_error(e, where, f"{where}: cannot read the memory ({e})") from e
            try:
                yield
            finally:
                # A read transaction has nothing to write; SQLite may have ended it
                # already (an error inside the block).
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("COMMIT")

    @contextmanager
    def _reading(self, what: str) -> Iterator[None]:
        """Turn errors from stored bytes (SQLite, JSON, pydantic) into `MemoryFormatError`.

        A read that waited too long for another connection's commit is
        `MemoryBusyError` (`storage_refusal`), not a corrupt memory.
        """
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
            raise sqlite_error(
                e,
                self._where(),
                f"{self._where()}: corrupt MemAlign memory: cannot read {what} "
                f"({type(e).__name__}: {e})",
            ) from e

    # -- meta --------------------------------------------------------------------

    def get_meta(self, key: str) -> Any:
        """A JSON value from the meta table, or None."""
        with self.lock, self._reading(f"meta.{key}"):
            row = self._conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
            return None if row is None else json.loads(row[0])

    def set_meta(self, key: str, value: Any) -> None:
        """Set a JSON value in the meta table (inside or outside a transaction)."""
        self._write_meta({key: value}, f"meta.{key}")

    def set_metas(self, values: dict[str, Any]) -> None:
        """Set several JSON values in the meta table in one statement: all of them or none."""
        if values:
            self._write_meta(values, ", ".join(values))

    def _write_meta(self, values: dict[str, Any], what: str) -> None:
        with self.lock:
            try:
                self._conn.execute(
                    "INSERT INTO meta(key, value) VALUES "
                    + ", ".join(["(?, ?)"] * len(values))
                    + " ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                    [x for k, v in values.items() for x in (k, json.dumps(v, allow_nan=False))],
                )
            except sqlite3.ProgrammingError:  # a closed store: a usage error
                raise
            except sqlite3.DatabaseError as e:
                where = self._where()
                raise sqlite_error(e, where, f"{where}: cannot write {what} ({e})") from e

    def _data_version(self) -> int:
        """SQLite's count of other connections' commits (`PRAGMA data_version`).

        It moves when another connection (another process on the folder)
        commits, never for this connection's own commits: those are published
        by their writer already.
        """
        with self.lock, self._reading("the data version"):
            return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def newer_commit(self, seq: int) -> int | None:
        """The check before a judgment: the newest version, if another process committed.

        A folder's check is `PRAGMA data_version` (no table is read); only when
        another connection committed since the memory last caught up is the
        change sequence read. A commit that changed only what judgments do not
        read (meta outside a transaction: an opening judge's configuration, an
        integration's state) leaves the version number as it is: it is noted as
        seen here, so the next judgments go back to the one read. In process,
        no other connection exists: None, without a read.
        """
        if self.folder is None:
            return None
        with self.lock:
            seen = self._data_version()
            if seen == self._synced_data_version:
                return None
            newest = self.change_seq()
            if newest > seq:
                return newest
            self._synced_data_version = seen
            return None

    # -- transactions ------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """All-or-nothing writes; a commit gives the memory a new version.

        The change sequence and a random content version are written in the
        same commit, so the index cache can tell which content it describes.
        """
        with self.lock:
            # Inside `atomic`, a step is a savepoint of the one open transaction:
            # it "commits" for the readers of this process, and the whole unit
            # reaches the file (or is rolled back) at once.
            nested = self._atomic_depth > 0
            begin, commit = ("SAVEPOINT step", "RELEASE step") if nested else (
                "BEGIN IMMEDIATE", "COMMIT")  # fmt: skip
            try:
                self._conn.execute(begin)
            except sqlite3.ProgrammingError:
                raise
            except (sqlite3.DatabaseError, ValueError) as e:
                where = self._where()
                raise sqlite_error(e, where, f"{where}: cannot write the memory ({e})") from e
            self._tx_before = {}
            try:
                yield self._conn
                seq = max(self.change_seq(), self._seq_floor) + 1
                self.set_meta("change_seq", seq)
                self.set_meta("content_version", uuid.uuid4().hex)
                self._conn.execute(commit)
                self._seq_floor = seq
            except BaseException as e:
                # SQLite may have rolled back already (a full disk, a corrupt page).
                with contextlib.suppress(sqlite3.Error):
                    if nested:
                        self._conn.execute("ROLLBACK TO step")
                        self._conn.execute("RELEASE step")
                    else:
                        self._conn.execute("ROLLBACK")
                self._tx_before = None
                # UnicodeDecodeError: text of a corrupt page read during the write.
                if isinstance(e, sqlite3.DatabaseError | UnicodeDecodeError) and not isinstance(
                    e, sqlite3.ProgrammingError
                ):
                    where = self._where()
                    raise sqlite_error(
                        e, where, f"{where}: cannot write the memory ({e}); nothing was changed"
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

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """One all-or-nothing unit over several `transaction` steps (one align or unalign).

        The steps commit as savepoints of one SQLite transaction: readers in
        this process see each step as it completes (they read through this
        connection), the file gets the whole unit at once, and an exception
        rolls every step back. A process killed meanwhile leaves a hot journal
        that SQLite rolls back on the next open. The caller serializes writers
        (the memory's write lock); the store lock is held only while SQL runs,
        so judgments keep reading during the unit's model calls. Nested units
        join the outer one.
        """
        start = 0
        with self.lock:
            if self._atomic_depth:
                self._atomic_depth += 1
                outer = False
            else:
                try:
                    self._conn.execute("BEGIN IMMEDIATE")
                except sqlite3.ProgrammingError:
                    raise
                except (sqlite3.DatabaseError, ValueError) as e:
                    where = self._where()
                    raise sqlite_error(e, where, f"{where}: cannot write the memory ({e})") from e
                self._atomic_depth = 1
                outer = True
                start = self.change_seq()
        try:
            yield
        except BaseException:
            with self.lock:
                self._atomic_depth -= 1
                if outer:
                    self._roll_back_unit(start)
            raise
        with self.lock:
            self._atomic_depth -= 1
            if not outer:
                return
            try:
                self._conn.execute("COMMIT")
            except sqlite3.Error as e:
                self._roll_back_unit(start)
                if isinstance(e, sqlite3.ProgrammingError):
                    raise
                where = self._where()
                raise sqlite_error(
                    e, where, f"{where}: cannot write the memory ({e}); nothing was changed"
                ) from e

    def _roll_back_unit(self, start: int) -> None:
        """Undo an `atomic` unit: its rows and the before-images of its steps."""
        with contextlib.suppress(sqlite3.Error):
            self._conn.execute("ROLLBACK")
        self._versions = [(seq, b) for seq, b in self._versions if seq <= start]
        if self._seq_floor > start:
            # The unit's version numbers are void, not missing: an empty entry keeps
            # the kept images contiguous, so a reader of version `start` still gets
            # its rows from the before-images of later commits (`episodes_by_rowid`).
            self._versions.append((start + 1, {}))

    @property
    def in_atomic(self) -> bool:
        """Whether an `atomic` unit is open."""
        return self._atomic_depth > 0

    #: A folder runs one align or unalign as one transaction (`atomic`).
    supports_atomic = True

    def _keep_before(self, conn: Any, where: str, args: list[Any]) -> None:
        """Keep the payloads of episodes a transaction is about to change (first write wins)."""
        if self._tx_before is None or not args:
            return
        for rowid, payload in conn.execute(
            f"SELECT e.rowid, f.payload FROM episodes e JOIN feedback f "
            f"ON f.id = e.feedback_id WHERE {where}",
            args,
        ):
            self._tx_before.setdefault(int(rowid), payload)

    def forget_versions(self, up_to: int) -> None:
        """Drop the before-images no reader needs: those of commits up to version `up_to`.

        A reader at version v needs the images of commits after v only; the
        memory calls this with the oldest version a reader still holds, so
        text of unaligned feedback does not linger in process memory.
        """
        with self.lock:
            self._versions = [(seq, before) for seq, before in self._versions if seq > up_to]

    # -- running the shared SQL (`_sql`) ------------------------------------------

    def _select(
        self, text: str, args: Sequence[Any] = (), *, binary: bool = False
    ) -> list[tuple[Any, ...]]:
        """The rows of a query in the shared SQL (one connection: under the store lock)."""
        with self.lock:
            return self._conn.execute(self.dialect.sql(text), args).fetchall()

    def _run_many(self, conn: Any, text: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run a write in the shared SQL once per parameter row."""
        conn.executemany(self.dialect.sql(text), rows)

    def _snapshot(self) -> AbstractContextManager[Any]:
        """Several reads see one version: this process's writes wait for the store lock."""
        return self.lock

    # -- episodes: what the before-images make SQLite's own ---------------------------

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
            self._keep_before(conn, "e.rowid = ?", [old[0]])
            conn.execute("DELETE FROM episodes WHERE rowid=?", (old[0],))
        cur = conn.execute(
            "INSERT INTO episodes(feedback_id, text_hash, vector) VALUES(?, ?, ?)",
            (feedback_id, text_hash, _vec_blob(vector)),
        )
        assert cur.lastrowid is not None
        return int(cur.lastrowid), None if old is None else int(old[0])

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


def _connect(db: Path | str) -> sqlite3.Connection:
    """A connection to a memory database (`":memory:"`: in process), schema untrusted.

    `trusted_schema` off before anything else: a schema's functions with side
    effects never run (`_sqlite_schema` checks the schema itself before use).
    A path that is a symbolic link is refused before it is opened.
    """
    if isinstance(db, Path):
        refuse_links(db)
    try:
        conn = sqlite3.connect(db, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA trusted_schema=OFF")
        conn.execute("PRAGMA synchronous=FULL")
    except (sqlite3.DatabaseError, ValueError) as e:  # ValueError: undecodable schema text
        raise sqlite_error(e, str(db), f"{db}: cannot open MemAlign memory ({e})") from e
    return conn
