"""Copies of a memory between backends: every row of it, and its SQLite form.

`MemoryDump` holds every row of one memory in the stored form both backends
share (`Store.dump`, read by the shared SQL of `_sql`, and
`Store.replace_with`). This module writes one into a SQLite database
(`insert_rows`), a new file (`write_sqlite`) or, atomically, a memory
folder (`write_sqlite_folder`), which is how a database memory is saved to
a folder.
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_memalign.memory._files import fsync, fsync_dir
from langchain_memalign.memory._store_base import (
    _SCHEMA,
    SCHEMA_VERSION,
    place_memory_file,
    remove_leftovers,
)
from langchain_memalign.memory._tables import COPIED, Table

__all__ = ["MemoryDump", "insert_rows", "write_sqlite", "write_sqlite_folder"]

Row = tuple[Any, ...]


@dataclass
class MemoryDump:
    """Every row of one memory, to copy it between backends (`save`).

    Each list holds its table's rows (`_tables`: the field is the table's `dump`)
    with the table's copied columns (`Table.copied`: database-given numbers
    first, then the stored values), in the order the table is read in (`order`).
    """

    meta: dict[str, Any] = field(default_factory=dict)
    feedback: list[Row] = field(default_factory=list)
    episodes: list[Row] = field(default_factory=list)
    guidelines: list[Row] = field(default_factory=list)
    sources: list[Row] = field(default_factory=list)  # of `guideline_sources`
    history: list[Row] = field(default_factory=list)
    # The agreement series; its values are decoded by `_codec_prequential`.
    prequential: list[Row] = field(default_factory=list)

    def rows(self, table: Table) -> list[Row]:
        """The rows of `table` (one of `_tables.COPIED`)."""
        rows: list[Row] = getattr(self, str(table.dump))
        return rows


def insert_rows(conn: sqlite3.Connection, d: MemoryDump, meta: dict[str, Any]) -> None:
    """Insert the rows of `d` into a SQLite memory's empty tables, with `meta` as meta rows.

    Episode ids and history numbers are kept as the dump has them. A meta key
    already stored is overwritten; a `None` value is not stored.
    """
    conn.executemany(
        "INSERT INTO meta(key, value) VALUES (?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
        [(k, json.dumps(v, allow_nan=False)) for k, v in meta.items() if v is not None],
    )
    for table in COPIED:
        conn.executemany(table.sqlite_insert(), d.rows(table))


def write_sqlite(path: str, d: MemoryDump) -> None:
    """Write a dump into a new SQLite memory file at `path`."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA secure_delete=ON")
        conn.executescript(_SCHEMA)
        conn.execute("BEGIN")
        insert_rows(conn, d, {**d.meta, "schema_version": SCHEMA_VERSION})
        conn.execute("COMMIT")
    finally:
        conn.close()


def write_sqlite_folder(folder: Path, d: MemoryDump, *, exclusive: bool = False) -> None:
    """Write a dump into `folder` as its SQLite memory, atomically.

    The file is written under a temporary name and renamed over the old one
    when complete, so a crash leaves the previous memory intact. The folder's
    index cache is the caller's: `save` writes the copy's before the copy.
    `exclusive`: only if the folder holds no memory file (`place_memory_file`).
    """
    folder.mkdir(parents=True, exist_ok=True)
    remove_leftovers(folder)
    fd, tmp = tempfile.mkstemp(prefix=".memory-", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        write_sqlite(tmp, d)
        fsync(tmp)
        place_memory_file(tmp, folder, exclusive=exclusive)
        fsync_dir(folder)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
