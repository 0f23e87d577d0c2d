"""The memory's tables, each specified once: both backends' DDL, copies and upgrades.

A `Table` lists its columns with their SQLite and PostgreSQL definitions (a
column kept by one backend only has `None` for the other), its keys and its
indexes. From it come the SQLite schema (`sqlite_schema`, which a folder's
file must match exactly: `_sqlite_schema`), the PostgreSQL tables
(`pg_schema`), the rows of a copy between backends (`MemoryDump` and its
inserts: `copied`, `sqlite_insert`, `pg_insert`) and the upgrade of a file or
database of an older version (`since`: a table or column added later is
created, or added if missing, by `upgrade_sqlite` and `pg_upgrade`).

Adding a column: its `Column` here (with `since` the new `VERSION`), and the
shared SQL of `base` that reads and writes it. The SQLite definitions are
compared word for word with the files written before: a table's layout here
must not change (a folder written by an older version would be refused).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

# The format version of both backends' tables: a folder or database of an older
# one is upgraded on open. 2: the agreement series (`prequential`).
VERSION = 2

Role = Literal["data", "key", "order", "judge", "stamp"]
_JUDGE_FK = "text NOT NULL REFERENCES memalign_judges(name) ON DELETE CASCADE"


@dataclass(frozen=True)
class Column:
    """One column: its definition in each backend (`None`: not kept there).

    `role`: "data" (copied as it is), "key" (a number the database gives: a
    copy into SQLite keeps it, PostgreSQL numbers its own), "order" (PostgreSQL's
    insertion order, not copied), "judge" (PostgreSQL's owner of the row) or
    "stamp" (PostgreSQL's change number of the write that made the row).
    `load` converts a value read for a copy (`None` stays `None`).
    """

    name: str
    sqlite: str | None
    pg: str | None
    role: Role = "data"
    load: Callable[[Any], Any] | None = None
    since: int = 1
    pg_name: str | None = None

    def named(self, pg: bool) -> str:
        return self.pg_name if pg and self.pg_name else self.name


@dataclass(frozen=True)
class Table:
    """One table: columns, table constraints and indexes of each backend, and its copy.

    `dump`: the `MemoryDump` field its rows are copied into (none: not copied),
    read in `order` (shared SQL); `renumbered`: its key is numbered from 1 for
    each judge when copied out of PostgreSQL (one sequence serves all judges there).
    `inline`: SQLite's definition is written on one line (as the first version did).
    """

    name: str
    columns: tuple[Column, ...]
    sqlite_keys: tuple[str, ...] = ()
    pg_keys: tuple[str, ...] = ()
    sqlite_indexes: tuple[str, ...] = ()
    pg_indexes: tuple[str, ...] = ()
    since: int = 1
    dump: str | None = None
    order: str = ""
    renumbered: bool = False
    inline: bool = False

    def copied(self) -> tuple[Column, ...]:
        """The columns of a copy's row (`MemoryDump`), in order."""
        return tuple(c for c in self.columns if c.role in ("key", "data") and c.sqlite)

    def dump_select(self, pg: bool) -> str:
        """The shared SQL (`_sql`) that reads this table's rows for a copy, in order."""
        names = ", ".join(c.named(pg) for c in self.copied())
        return f"SELECT {names} FROM {{p}}{self.name}{{w}} ORDER BY {self.order}"

    def sqlite_ddl(self, version: int = VERSION) -> str:
        lines = [
            f"{c.name} {c.sqlite}" for c in self.columns if c.sqlite and c.since <= version
        ] + list(self.sqlite_keys)
        if self.inline:
            return f"CREATE TABLE IF NOT EXISTS {self.name} ({', '.join(lines)})"
        body = ",\n".join("    " + line for line in lines)
        return f"CREATE TABLE IF NOT EXISTS {self.name} (\n{body}\n)"

    def pg_ddl(self, version: int = VERSION) -> str:
        lines = [
            f"{c.named(True)} {c.pg}" for c in self.columns if c.pg and c.since <= version
        ] + list(self.pg_keys)
        body = ",\n".join("    " + line for line in lines)
        return f"CREATE TABLE IF NOT EXISTS memalign_{self.name} (\n{body}\n)"

    def sqlite_insert(self) -> str:
        names = [c.name for c in self.copied()]
        marks = ", ".join("?" * len(names))
        return f"INSERT INTO {self.name}({', '.join(names)}) VALUES ({marks})"

    def pg_insert(
        self, judge: str, stamp: int, rows: list[tuple[Any, ...]]
    ) -> tuple[str, list[Any]]:
        """The INSERT of a copy's `rows` into this judge's table, and its rows of values."""
        copied = self.copied()
        cols = [c for c in self.columns if c.pg and c.role in ("judge", "data", "stamp")]
        at = {c.name: copied.index(c) for c in cols if c.role == "data"}
        fill: dict[str, Any] = {"judge": judge, "stamp": stamp}
        values = [
            tuple(row[at[c.name]] if c.role == "data" else fill[c.role] for c in cols)
            for row in rows
        ]
        names = ", ".join(c.named(True) for c in cols)
        text = f"INSERT INTO memalign_{self.name}({names}) VALUES ({', '.join(['%s'] * len(cols))})"
        return text, values


def _c(name: str, sqlite: str | None, pg: str | None, **kw: Any) -> Column:
    return Column(name, sqlite, pg, **kw)


_JUDGE = _c("judge", None, _JUDGE_FK, role="judge")
_OWNED = _c("judge", None, "text NOT NULL", role="judge")  # owned through a composite key
_ORD = _c("ord", None, "bigint GENERATED ALWAYS AS IDENTITY", role="order")
# The key of an append-only log (history, the agreement series): numbered as it is written.
_LOG_SEQ = _c(
    "seq",
    "INTEGER PRIMARY KEY AUTOINCREMENT",
    "bigint GENERATED ALWAYS AS IDENTITY",
    role="key",
    load=int,
)

TABLES: tuple[Table, ...] = (
    Table("schema", (
        _c("id", None, "integer PRIMARY KEY CHECK (id = 1)"),
        _c("version", None, "integer NOT NULL"),
    )),
    Table("judges", (
        _c("name", None, "text PRIMARY KEY"),
        _c("memory_id", None, "text NOT NULL"),
        _c("change_seq", None, "bigint NOT NULL DEFAULT 0"),
        _c("content_version", None, "text NOT NULL DEFAULT ''"),
    )),
    Table("meta", (
        _JUDGE,
        _c("key", "TEXT PRIMARY KEY", "text NOT NULL"),
        _c("value", "TEXT NOT NULL", "text NOT NULL"),
    ), pg_keys=("PRIMARY KEY (judge, key)",), inline=True),
    Table("feedback", (
        _JUDGE,
        _c("id", "TEXT PRIMARY KEY", "text NOT NULL"),
        _ORD,
        _c("payload", "TEXT NOT NULL", "text NOT NULL"),
        _c("content_hash", "TEXT NOT NULL", "text NOT NULL"),
        _c("reflected", "INTEGER NOT NULL DEFAULT 0", "boolean NOT NULL DEFAULT false", load=bool),
        _c("updated_at", "TEXT NOT NULL", "text NOT NULL"),
        _c("changed_seq", None, "bigint NOT NULL", role="stamp"),
    ), pg_keys=("PRIMARY KEY (judge, id)",),
        sqlite_indexes=(
            "CREATE INDEX IF NOT EXISTS feedback_pending ON feedback(reflected) "
            "WHERE reflected = 0",
        ),
        pg_indexes=(
            "CREATE INDEX IF NOT EXISTS memalign_feedback_pending\n"
            "    ON memalign_feedback(judge) WHERE NOT reflected",
        ),
        dump="feedback", order="{ord}"),
    Table("episodes", (
        _c("rowid", "INTEGER PRIMARY KEY AUTOINCREMENT", "bigint GENERATED ALWAYS AS IDENTITY "
           "PRIMARY KEY", role="key", load=int, pg_name="id"),
        _OWNED,
        _c("feedback_id", "TEXT NOT NULL UNIQUE REFERENCES feedback(id) ON DELETE CASCADE",
           "text NOT NULL"),
        _c("text_hash", "TEXT NOT NULL", "text NOT NULL"),
        _c("vector", "BLOB NOT NULL", "bytea NOT NULL", load=bytes),
        _c("added_seq", None, "bigint NOT NULL", role="stamp"),
    ), pg_keys=(
        "UNIQUE (judge, feedback_id)",
        "FOREIGN KEY (judge, feedback_id) REFERENCES memalign_feedback(judge, id) "
        "ON DELETE CASCADE",
    ), pg_indexes=(
        "CREATE INDEX IF NOT EXISTS memalign_episodes_added ON memalign_episodes(judge, added_seq)",
    ), dump="episodes", order="{eid}"),
    Table("removed_episodes", (
        _JUDGE,
        _c("seq", None, "bigint NOT NULL"),
        _c("episode_id", None, "bigint NOT NULL"),
    ), pg_indexes=(
        "CREATE INDEX IF NOT EXISTS memalign_removed_by_seq "
        "ON memalign_removed_episodes(judge, seq)",
    )),
    Table("guidelines", (
        _JUDGE,
        _c("id", "TEXT PRIMARY KEY", "text NOT NULL"),
        _ORD,
        _c("text", "TEXT NOT NULL", "text NOT NULL"),
        _c("vector", "BLOB", "bytea", load=bytes),
        _c("created_at", "TEXT NOT NULL", "text NOT NULL"),
        _c("position", "INTEGER NOT NULL", "bigint NOT NULL", load=int),
    ), pg_keys=("PRIMARY KEY (judge, id)",), dump="guidelines", order="position, {ord}"),
    Table("guideline_sources", (
        _OWNED,
        _c("guideline_id", "TEXT NOT NULL REFERENCES guidelines(id) ON DELETE CASCADE",
           "text NOT NULL"),
        _c("feedback_id", "TEXT NOT NULL", "text NOT NULL"),
        _ORD,
    ), sqlite_keys=("PRIMARY KEY (guideline_id, feedback_id)",), pg_keys=(
        "PRIMARY KEY (judge, guideline_id, feedback_id)",
        "FOREIGN KEY (judge, guideline_id) REFERENCES memalign_guidelines(judge, id)\n"
        "        ON DELETE CASCADE",
    ), sqlite_indexes=(
        "CREATE INDEX IF NOT EXISTS guideline_sources_by_feedback "
        "ON guideline_sources(feedback_id)",
    ), pg_indexes=(
        "CREATE INDEX IF NOT EXISTS memalign_sources_by_feedback\n"
        "    ON memalign_guideline_sources(judge, feedback_id)",
    ), dump="sources", order="{ord}"),
    Table("history", (
        _JUDGE,
        _LOG_SEQ,
        _c("at", "TEXT NOT NULL", "text NOT NULL"),
        _c("action", "TEXT NOT NULL", "text NOT NULL"),
        _c("feedback_ids", "TEXT NOT NULL", "text NOT NULL"),
        _c("guideline_ids", "TEXT NOT NULL", "text NOT NULL"),
    ), pg_keys=("PRIMARY KEY (judge, seq)",), dump="history", order="seq", renumbered=True),
    # The agreement series (version 2): each review beside the judge's verdict on its
    # case from before the judge learned it (`kind` "review"), and where each align
    # happened (`kind` "align"). A review's row goes with its feedback (unalign removes it).
    Table("prequential", (
        _JUDGE,
        _LOG_SEQ,
        _c("at", "TEXT NOT NULL", "text NOT NULL"),
        _c("kind", "TEXT NOT NULL", "text NOT NULL"),
        _c("feedback_id", "TEXT UNIQUE REFERENCES feedback(id) ON DELETE CASCADE", "text"),
        _c("judge_value", "TEXT", "text"),
        _c("expert_value", "TEXT", "text"),
        _c("source", "TEXT", "text"),
        _c("learned", "INTEGER", "integer", load=int),
    ), pg_keys=(
        "PRIMARY KEY (judge, seq)",
        "UNIQUE (judge, feedback_id)",
        "FOREIGN KEY (judge, feedback_id) REFERENCES memalign_feedback(judge, id) "
        "ON DELETE CASCADE",
    ), since=2, dump="prequential", order="seq", renumbered=True),
)  # fmt: skip
COPIED = tuple(t for t in TABLES if t.dump)
BY_NAME = {t.name: t for t in TABLES}


def _sqlite_tables(version: int) -> Iterator[Table]:
    return (t for t in TABLES if t.since <= version and any(c.sqlite for c in t.columns))


def sqlite_schema(version: int = VERSION) -> str:
    """The SQLite script that creates a memory file of `version` (or its missing parts)."""
    parts = []
    for t in _sqlite_tables(version):
        parts += [t.sqlite_ddl(version), *t.sqlite_indexes]
    return "".join(part + ";\n" for part in parts)


def pg_schema(version: int = VERSION) -> str:
    """The PostgreSQL script that creates the tables of `version`."""
    parts = []
    for t in TABLES:
        if t.since <= version:
            parts += [t.pg_ddl(version), *t.pg_indexes]
    return "".join(part + ";\n" for part in parts)


def pg_upgrade(version: int) -> str:
    """What brings a PostgreSQL database of `version` to the next one."""
    parts = []
    for t in TABLES:
        if t.since == version + 1:
            parts += [t.pg_ddl(version + 1), *t.pg_indexes]
        elif t.since <= version:
            parts += [
                f"ALTER TABLE memalign_{t.name} ADD COLUMN IF NOT EXISTS {c.named(True)} {c.pg}"
                for c in t.columns
                if c.pg and c.since == version + 1
            ]
    return "".join(part + ";\n" for part in parts)


def upgrade_sqlite(conn: sqlite3.Connection, version: int) -> None:
    """Bring a SQLite memory of `version` to `VERSION`: add the tables and columns it lacks.

    Each is added only if missing: a file may have gained some already (`create`
    adds missing tables). Runs in the caller's transaction.
    """
    for t in _sqlite_tables(VERSION):
        if t.since > version:
            for statement in (t.sqlite_ddl(), *t.sqlite_indexes):
                conn.execute(statement)
            continue
        have = {row[1] for row in conn.execute(f"PRAGMA table_info({t.name})")}
        for c in t.columns:
            if c.sqlite and c.since > version and c.name not in have:
                conn.execute(f"ALTER TABLE {t.name} ADD COLUMN {c.name} {c.sqlite}")


# What a later version added: a file of an older one lacks it until it is upgraded.
ADDED_LATER = frozenset(("table", t.name) for t in _sqlite_tables(VERSION) if t.since > 1)
