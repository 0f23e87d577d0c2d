"""A memory folder's SQLite file is used only if its schema is exactly ours.

A memory folder may come from anyone (a colleague, an archive, a shared
drive), and SQLite runs what a database file's schema holds: a trigger fires
inside our own transactions (one that copies deleted feedback into another
table keeps text `unalign` removed), a view or an index expression runs when
read, and a CHECK or DEFAULT expression runs on every write. So before
anything else touches the file, its schema is read from `sqlite_master` and
compared with the one this package writes: the same tables with the same
definitions, the same indexes, SQLite's own bookkeeping entries (those of
our tables, and the statistics tables `ANALYZE` or `PRAGMA optimize` adds),
and nothing else. Any other entry (a trigger, a view, an extra table or index, a changed
table) refuses the file with `MemoryFormatError` naming what was found; none
of it has run, and the file is unchanged. `trusted_schema` is off on every
connection as well, so that SQLite itself refuses to run functions with side
effects from a schema.

The database and its journal files must be regular files inside the folder:
a symbolic link (`memory.sqlite` pointing elsewhere) or a hard link (a name
inside the folder for a file that also has a name outside it) would make
every write of the memory land outside it, so either is refused before the
file is opened.

A hot journal (`-journal` or `-wal` left by a writer that crashed, or
crafted) is replayed by SQLite when the first read begins, before any
statement of ours reads a row. The replay copies pages, never SQL, but a
replayed page may hold a trigger; the schema check is that first read, so it
sees the database as recovered, and refuses it before anything is written.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import stat
from pathlib import Path

from langchain_memalign.errors import MemoryFormatError
from langchain_memalign.memory._tables import VERSION, sqlite_schema, upgrade_sqlite

# The files SQLite writes next to a database: none may point out of the folder.
_COMPANIONS = ("", "-journal", "-wal", "-shm")
# Written by versions before the pending-reflection index existed; `create`
# adds it, so such a folder opens (read-only too) and gains it on its next create.
_OPTIONAL = frozenset({("index", "feedback_pending")})
# How many unexpected entries a message lists.
_SHOWN = 5

Entry = tuple[str, str, str, str | None]  # (type, name, table, normalized SQL)

# The statistics tables `ANALYZE` (and `PRAGMA optimize`) adds, as SQLite defines them
# (analyze.c; stat2 and stat3 by older versions, stat4 by builds with SQLITE_ENABLE_STAT4).
# Routine maintenance of a memory: SQLite reads their rows to plan queries and runs none
# of them, and a definition with anything else in it (a CHECK, a DEFAULT) is refused.
_STATISTICS: frozenset[Entry] = frozenset(
    ("table", name, name, f"CREATE TABLE {name}({columns})")
    for name, columns in (
        ("sqlite_stat1", "tbl,idx,stat"),
        ("sqlite_stat2", "tbl,idx,sampleno,sample"),
        ("sqlite_stat3", "tbl,idx,neq,nlt,ndlt,sample"),
        ("sqlite_stat4", "tbl,idx,neq,nlt,ndlt,sample"),
    )
)


def refuse_links(db: Path) -> None:
    """Raise `MemoryFormatError` if the database or a journal of it is a link.

    A symbolic link, or a hard link (a file with another name elsewhere: `st_nlink`
    above 1), would make SQLite's writes (and the replay of a journal) change a file
    outside the folder; either is refused before the file is opened.
    """
    for suffix in _COMPANIONS:
        path = db.with_name(db.name + suffix)
        if path.is_symlink():
            try:
                target = os.readlink(path)
            except OSError:
                target = "?"
            raise MemoryFormatError(
                f"{db.parent}: {path.name} is a symbolic link (to {target}); a memory's "
                "database must be a regular file inside its folder, so it was not opened"
            )
        try:
            info = path.lstat()
        except OSError:  # absent (most companions, most of the time)
            continue
        if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
            raise MemoryFormatError(
                f"{db.parent}: {path.name} is a hard link ({info.st_nlink} names share the "
                "file, so writing it would change a file outside the folder); a memory's "
                "database must be a regular file of its own inside its folder, so it was "
                "not opened (copy the file to break the link)"
            )


def _normalized(sql: str | None) -> str | None:
    # Whitespace only: our statements are stored as written, and a reformatted
    # `_SCHEMA` must still accept the folders written before.
    return None if sql is None else " ".join(sql.split())


@functools.cache
def expected_entries(schema: str) -> frozenset[Entry]:
    """The `sqlite_master` entries a database made by `schema` holds."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(schema)
        return frozenset(_entries(conn))
    finally:
        conn.close()


@functools.cache
def _older_entries() -> frozenset[Entry]:
    """The definitions files of older versions hold: as written then, and as upgraded since.

    A column added later is appended to a table's definition by `ALTER TABLE`, in
    SQLite's own spelling, so an upgraded table is read from a file upgraded here.
    """
    found: set[Entry] = set()
    for version in range(1, VERSION):
        conn = sqlite3.connect(":memory:")
        try:
            conn.executescript(sqlite_schema(version))
            found.update(_entries(conn))
            upgrade_sqlite(conn, version)
            found.update(_entries(conn))
        finally:
            conn.close()
    return frozenset(found)


def _entries(conn: sqlite3.Connection) -> list[Entry]:
    return [
        (str(kind), str(name), str(table), _normalized(sql))
        for kind, name, table, sql in conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master"
        )
    ]


def _describe(entry: Entry) -> str:
    kind, name, table, _ = entry
    return f"{kind} {name!r}" + (f" on {table}" if table != name else "")


def check_schema(
    conn: sqlite3.Connection,
    schema: str,
    where: str,
    *,
    partial: bool,
    optional: frozenset[tuple[str, str]] = frozenset(),
) -> None:
    """Refuse a database whose schema is not exactly `schema`'s, before anything runs.

    A definition of an older format version (`_older_entries`) is accepted too:
    the caller upgrades the file once it has read its version. Reads
    `sqlite_master` only: parsing a schema runs none of it. With `partial`,
    entries of `schema` may be missing (a new file, or one whose
    creation was interrupted: `create` adds them); otherwise only those of
    older versions may (see `_OPTIONAL`), and the (type, name) entries in
    `optional` (what a later format version added: the caller upgrades the
    file or refuses it once it has read the file's version).
    """
    ours = expected_entries(schema)
    found = _entries(conn)
    accepted = ours | _STATISTICS | _older_entries()
    keys = {entry[:2] for entry in accepted}
    foreign: list[str] = []
    for entry in found:
        if entry[:2] not in keys:
            foreign.append(_describe(entry))
        elif entry not in accepted:
            foreign.append(f"{_describe(entry)} defined otherwise than this package defines it")
    if foreign:
        raise MemoryFormatError(
            f"{where}: not a MemAlign memory: its database holds {', '.join(foreign[:_SHOWN])}"
            + (f" and {len(foreign) - _SHOWN} more" if len(foreign) > _SHOWN else "")
            + " (a memory has only this package's tables and indexes: no triggers, views or "
            "tables of its own); it was refused without running any of it"
        )
    if partial:
        return
    present = {entry[:2] for entry in found}
    missing = sorted(
        name
        for kind, name, *_ in ours
        if (kind, name) not in present
        and (kind, name) not in _OPTIONAL
        and (kind, name) not in optional
        # SQLite's own entries come with the tables they serve.
        and not name.startswith("sqlite_")
    )
    if missing:
        raise MemoryFormatError(
            f"{where}: not a MemAlign memory (missing {', '.join(missing[:_SHOWN])})"
        )
