"""SQLite storage: the source of truth of a judge's memory.

One file, `memory.sqlite`, holds the judge's configuration, the feedback,
the episodes with their vectors, the guidelines with their provenance, and
a history of every change with the feedback that caused it. Nothing is
pickled. `secure_delete` is on so that unaligned feedback leaves no text
behind in free pages of the file.

Everything read back from a file is treated as untrusted: a damaged or
foreign database raises `MemoryFormatError` naming the problem, never a raw
`sqlite3`, JSON or pydantic error.

This module holds `MemoryStore` itself, the SQLite backend of the `Store`
contract (`base`): opening, creating and checking a memory file, writing
atomic snapshots of it and copying it to and from other backends. Its
tables are read and written by `_store_base` (schema, connection, error
mapping, meta, transactions and the episodes' before-images) and by the SQL
both database backends share (`_sql`).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from langchain_memalign.errors import (
    MemAlignError,
    MemoryBusyError,
    MemoryFormatError,
    MemoryFullError,
    MemoryReadOnlyError,
)
from langchain_memalign.memory._files import fsync, fsync_dir
from langchain_memalign.memory._sqlite_schema import check_schema, refuse_links
from langchain_memalign.memory._store_base import (
    _SCHEMA,
    DB_FILE,
    INDEX_FILE,
    LEFTOVER_PREFIXES,
    SCHEMA_VERSION,
    StoreBase,
    _connect,
    encode_feedback,
    place_memory_file,
    remove_leftovers,
    sqlite_error,
    storage_refusal,
)
from langchain_memalign.memory._tables import ADDED_LATER, BY_NAME, upgrade_sqlite
from langchain_memalign.memory.dump import MemoryDump, insert_rows

# A file stuck at an older version (read-only) lacks the agreement series only if it
# predates it: it is then read with an empty one.
_SERIES_SINCE = BY_NAME["prequential"].since

__all__ = [
    "DB_FILE",
    "INDEX_FILE",
    "LEFTOVER_PREFIXES",
    "SCHEMA_VERSION",
    "MemoryStore",
    "StoreBase",
    "encode_feedback",
    "remove_leftovers",
]


def missing_folders(folder: Path) -> list[Path]:
    """`folder` and its parents that do not exist, deepest first: what creating it makes."""
    missing: list[Path] = []
    for p in (folder, *folder.parents):
        if os.path.lexists(p):
            break
        missing.append(p)
    return missing


@contextlib.contextmanager
def undone_if_it_fails(
    folder: Path, identity: tuple[str | None, str | None]
) -> Iterator[tuple[list[Path], bool]]:
    """Around a call that may make the memory in `folder`: if it raises, what it made goes.

    Yields the folders the call would create (deepest first, `missing_folders`) and
    whether `folder` held no memory file before; on an error in a folder that held none,
    `remove_new_memory(folder, made, identity)` runs before the error propagates.
    """
    made = missing_folders(folder)
    new = not os.path.lexists(folder / DB_FILE)
    try:
        yield made, new
    except BaseException:
        if new:
            remove_new_memory(folder, made, identity)
        raise


def remove_new_memory(
    folder: Path, made: Sequence[Path], identity: tuple[str | None, str | None]
) -> None:
    """Undo a failed call that made the memory in `folder`: its files and the folders it made.

    `identity` is the (memory id, content version) the call left in the memory file.
    The file is deleted only while it holds them or no memory at all, checked and
    deleted under SQLite's write lock: another process may have opened the new memory
    meanwhile and committed to it, and what it wrote is not this call's to delete.
    With the file go the index cache and the folders of `made` (deepest first: those
    the call created), each while empty. Best effort: a failure here raises nothing,
    the caller's own error is what matters.
    """
    db = folder / DB_FILE
    with contextlib.suppress(sqlite3.Error, OSError, ValueError):
        if os.path.lexists(db) and not _delete_if_holds(db, identity):
            return
        (folder / INDEX_FILE).unlink(missing_ok=True)
        remove_leftovers(folder)
        for p in made:
            p.rmdir()


def _delete_if_holds(db: Path, identity: tuple[str | None, str | None]) -> bool:
    """Delete the memory file `db` if it holds no memory or the one of `identity`."""
    if db.is_symlink():
        return False
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=rw", uri=True, isolation_level=None)
    try:
        conn.execute("PRAGMA trusted_schema=OFF")
        conn.execute("BEGIN IMMEDIATE")
        try:
            found = dict(
                conn.execute(
                    "SELECT key, value FROM meta WHERE key IN ('memory_id', 'content_version')"
                ).fetchall()
            )
        except sqlite3.OperationalError:  # no meta table: no memory
            found = {}
        if "memory_id" in found:
            stored = (
                json.loads(found["memory_id"]),
                json.loads(found.get("content_version", "null")),
            )
            if stored != identity:
                return False
        # Unlinked while the lock is held: no other connection commits in between.
        db.unlink()
        return True
    finally:
        conn.close()


class MemoryStore(StoreBase):
    """Thread-safe access to one memory database (a file or in process)."""

    # (folders made, memory id) of a memory `create` made; `discard` removes it.
    _made: tuple[list[Path], str] | None = None

    # -- opening -----------------------------------------------------------------

    @classmethod
    def create(
        cls, folder: str | os.PathLike[str] | None, meta: dict[str, Any] | None = None
    ) -> MemoryStore:
        """Open the memory in `folder`, creating it if needed; `None` keeps it in process.

        An existing database is checked before anything is written to it: only
        this package's tables and indexes (some may be missing: they are added),
        nothing else (`_sqlite_schema`). `meta`: the values a new memory starts
        with (a judge's configuration and embedding model), written in the
        transaction that creates it; an existing memory keeps its own. If this
        call fails, a memory file it was making is removed again, with the
        folders it made; `discard` removes them after it returned.
        """
        memory_id = uuid.uuid4().hex
        if folder is None:
            return cls._create(None, meta, memory_id)
        path = Path(folder)
        with undone_if_it_fails(path, (memory_id, None)) as (made, new_file):
            store = cls._create(path, meta, memory_id)
        if new_file and store.get_meta("memory_id") == memory_id:
            store._made = (made, memory_id)
        return store

    @classmethod
    def _create(
        cls, folder: Path | None, meta: dict[str, Any] | None, memory_id: str
    ) -> MemoryStore:
        if folder is None:
            store = cls(_connect(":memory:"), None)
        else:
            path = Path(folder)
            path.mkdir(parents=True, exist_ok=True)
            remove_leftovers(path)
            store = cls(_connect(path / DB_FILE), path)
        try:
            with store.lock:
                store._check_schema(partial=True)
                # One transaction (`BEGIN` in the script: `executescript` commits an open
                # one first): a disk that fills up midway leaves no half-made memory.
                # Deferred: a complete memory needs no write, so no wait for a writer.
                try:
                    store._conn.executescript("BEGIN;" + _SCHEMA)
                    new = store.get_meta("schema_version") is None
                    if new:
                        store.set_meta("schema_version", SCHEMA_VERSION)
                    if store.get_meta("memory_id") is None:
                        store.set_meta("memory_id", memory_id)
                    if new and store.get_meta("config") is None:
                        # A new memory exists with its configuration or not at all.
                        store.set_metas(meta or {})
                    store._conn.execute("COMMIT")
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):  # SQLite may have ended it
                        store._conn.execute("ROLLBACK")
                    raise
        except MemAlignError:
            store.close()
            raise
        except (sqlite3.DatabaseError, ValueError) as e:
            store.close()
            raise sqlite_error(e, str(folder), f"{folder}: not a MemAlign memory ({e})") from e
        store._check_format()
        return store

    @classmethod
    def open(cls, folder: str | os.PathLike[str]) -> MemoryStore:
        """Open an existing memory folder, or raise `MemoryFormatError`.

        The database's schema is checked before anything is written to it
        (`_sqlite_schema`); a folder of an older version gains its memory id and
        is upgraded to this format version (`_upgrade`).
        """
        path = Path(folder)
        db = path / DB_FILE
        refuse_links(db)
        if not db.is_file():
            raise MemoryFormatError(f"{path}: no MemAlign memory here (missing {DB_FILE})")
        remove_leftovers(path)
        store = cls(_connect(db), path)
        store._check_format()
        if store.get_meta("memory_id") is None:  # written before memory ids existed
            # A read-only (or busy) folder keeps working without one.
            with contextlib.suppress(MemoryBusyError, MemoryFullError, MemoryReadOnlyError):
                store.set_meta("memory_id", uuid.uuid4().hex)
        return store

    def _check_schema(self, *, partial: bool) -> None:
        """`_sqlite_schema.check_schema` on this database; a failed read is a corrupt file."""
        try:
            check_schema(self._conn, _SCHEMA, self._where(), partial=partial, optional=ADDED_LATER)
        except MemoryFormatError:
            self.close()
            raise
        except (sqlite3.DatabaseError, ValueError) as e:
            self.close()
            where = self._where()
            raise sqlite_error(e, where, f"{where}: corrupt MemAlign memory ({e})") from e

    def _check_format(self) -> None:
        self._check_schema(partial=False)
        try:
            with self.lock:
                self._conn.execute("SELECT count(*) FROM feedback").fetchone()
        except (sqlite3.DatabaseError, ValueError) as e:
            self.close()
            where = self._where()
            raise sqlite_error(e, where, f"{where}: corrupt MemAlign memory ({e})") from e
        try:
            version = self.get_meta("schema_version")
        except MemAlignError:  # corrupt, or busy: the store is not handed out either way
            self.close()
            raise
        # `type(...) is int`: JSON `true` or `1.0` would compare equal to 1.
        if type(version) is int and 1 <= version < SCHEMA_VERSION:
            version = self._upgrade(version)
        elif type(version) is int and version == SCHEMA_VERSION and not self._has_series():
            self.close()
            raise MemoryFormatError(f"{self.folder}: not a MemAlign memory (missing prequential)")
        if type(version) is not int or not 1 <= version <= SCHEMA_VERSION:
            self.close()
            raise MemoryFormatError(
                f"{self.folder}: memory format version {version!r} is not supported "
                f"(this version reads {SCHEMA_VERSION})"
            )

    def _has_series(self) -> bool:
        with self.lock:
            row = self._conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type='table' AND name='prequential'"
            ).fetchone()
        return row is not None

    def _upgrade(self, version: int) -> int:
        """Bring a file of an older `version` to this one, adding what it lacks (empty).

        What each version added is `_tables`' (`upgrade_sqlite`; 2: the agreement
        series). The content is unchanged, so the version number and the index
        cache stay valid. A folder that cannot be written (read-only) stays at its
        version (and, from before version 2, is read with an empty series); the
        version it is at is returned.
        """
        with self.lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:
                self.series_missing = version < _SERIES_SINCE
                return version
            try:
                upgrade_sqlite(self._conn, version)
                self.set_meta("schema_version", SCHEMA_VERSION)
                self._conn.execute("COMMIT")
            except (
                sqlite3.OperationalError,
                MemoryBusyError,
                MemoryFullError,
                MemoryReadOnlyError,
            ):
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("ROLLBACK")
                self.series_missing = version < _SERIES_SINCE
                return version
        return SCHEMA_VERSION

    def discard(self) -> None:
        """Close the memory; remove it if `create` made it and nothing was committed since.

        What an opening that fails after `create` calls: a new folder is removed
        with the parents `create` made, a memory file made in an existing folder
        is deleted. A memory another process committed to meanwhile is kept
        (`remove_new_memory`).
        """
        self.close()
        if self._made is not None and self.folder is not None:
            made, memory_id = self._made
            remove_new_memory(self.folder, made, (memory_id, None))

    # -- copies ---------------------------------------------------------------------

    def replace_with(self, d: MemoryDump, check: Callable[[], None] | None = None) -> None:
        """Make this memory a copy of `d`, in one transaction (one new version).

        The format version and the version number stay this memory's; the
        memory id comes from `d` when it has one. Episode ids and history
        numbers are kept as `d` has them. `check` runs first, inside the
        transaction (which holds the write lock): see `Store.replace_with`.
        """
        own = ("schema_version", "change_seq", "content_version", "memory_id")
        with self.transaction() as conn:
            if check is not None:
                check()
            # Every episode (row ids start at 1): readers of older versions keep them.
            self._keep_before(conn, "e.rowid > ?", [0])
            # The others go by cascade; the series' align marks go with no feedback.
            for table in ("prequential", "guidelines", "feedback", "history"):
                conn.execute(f"DELETE FROM {table}")
            conn.execute(f"DELETE FROM meta WHERE key NOT IN ({','.join('?' * len(own))})", own)
            meta = {k: v for k, v in d.meta.items() if k not in own}
            if d.meta.get("memory_id"):
                meta["memory_id"] = d.meta["memory_id"]
            insert_rows(conn, d, meta)

    # -- snapshots -----------------------------------------------------------------

    def backup_to(self, folder: Path, *, exclusive: bool = False) -> None:
        """Write a consistent copy of the database into `folder`, atomically.

        The copy goes to a temporary file in the same folder and is renamed
        over the old one only when complete, so a crash leaves the previous
        memory intact (and the next open or save removes the temporary file).
        `exclusive`: see `Store.backup_to`.
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
            place_memory_file(tmp, folder, exclusive=exclusive)
            fsync_dir(folder)
        except sqlite3.Error as e:
            Path(tmp).unlink(missing_ok=True)
            # A full disk is said so; any other failure of the copy stays SQLite's own.
            refusal = storage_refusal(e, str(folder))
            if refusal is None:
                raise
            raise refusal from e
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
