"""PostgreSQL storage: one database shared by many processes and machines.

`PostgresStore` is the PostgreSQL backend of the `Store` contract (see
`base`), so `JudgeMemory` and the graphs use it as they use the SQLite
`MemoryStore`. Several judges live in one database, each under its name
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
- A whole `align`/`unalign` is one transaction (`atomic`): its steps are
  savepoints, read by the run's own threads, and other readers see the
  version before it until it commits.
- Readers that need one consistent version (the memory's publish step) read
  inside one `REPEATABLE READ` transaction (`consistent`).

This module opens a judge's memory (creating the tables and the judge when
asked) and copies it to and from other backends. The rest is in the classes
it combines: `_pg_base` (connections, transactions, locks, meta, the
episodes' change records) and the SQL both database backends share
(`_sql`), over the tables of `_tables`. Parsing a URL is `location`'s.

psycopg 3 and psycopg_pool are an optional extra; a `postgresql://` URL
without them raises `MemoryFormatError` naming the extra to install.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable
from typing import Any

from langchain_memalign.errors import MemoryFormatError, MemoryPermissionError
from langchain_memalign.memory._pg_base import (
    _LOCK_CLASS,
    _ROW_META,
    INSTALL_HINT,
    PRIVILEGES_HINT,
    PostgresBase,
    safe_cause,
)
from langchain_memalign.memory._tables import COPIED, VERSION, pg_schema, pg_upgrade
from langchain_memalign.memory.backends import memory_exists

# Some only re-exported (see `__all__`): code outside this package imports them from here.
from langchain_memalign.memory.dump import (
    MemoryDump,
    write_sqlite,
)
from langchain_memalign.memory.location import (
    PostgresTarget,
    describe_location,
    is_postgres_url,
    redact,
)

# The version of the tables; a database with another refuses to open, except an
# older one that `_PG_UPGRADES` brings to this version (on open).
PG_SCHEMA_VERSION = VERSION
_PG_SCHEMA = pg_schema()
# What brings a database of an older version to the next one, by its version.
_PG_UPGRADES = {version: pg_upgrade(version) for version in range(1, VERSION)}

__all__ = [
    "INSTALL_HINT",
    "PG_SCHEMA_VERSION",
    "MemoryDump",
    "PostgresStore",
    "PostgresTarget",
    "describe_location",
    "is_postgres_url",
    "memory_exists",
    "redact",
    "write_sqlite",
]


class PostgresStore(PostgresBase):
    """One judge's memory in a PostgreSQL database (see the module doc)."""

    # -- opening ---------------------------------------------------------------------

    # The memory id of the judge `create` added; `discard` deletes that judge.
    _added: str | None = None

    @classmethod
    def create(
        cls, url: str, *, add_judge: bool = True, meta: dict[str, Any] | None = None
    ) -> PostgresStore:
        """Open the judge named in `url`, creating the tables and the judge if needed.

        `add_judge=False` creates the tables but not the judge: the store of a
        `save`'s target, whose `replace_with` adds the judge row in the transaction
        that copies its content, so a save that fails leaves no empty judge behind.
        `meta`: the values a judge this call adds starts with (its configuration
        and embedding model), written in the transaction that adds its row; a
        judge that exists keeps its own.

        The schema and the tables are created once per database and stay: they
        are shared by every judge of the database (other processes may be
        opening judges in them meanwhile) and hold nothing of a judge but its rows.
        """
        store = cls(PostgresTarget.parse(url))
        try:
            store._enter_schema(create=True)
            store._install()
            if add_judge:
                memory_id = uuid.uuid4().hex
                with store._conn() as conn, conn.transaction():
                    added = conn.execute(
                        "INSERT INTO memalign_judges(name, memory_id) VALUES (%s, %s) "
                        "ON CONFLICT (name) DO NOTHING RETURNING name",
                        (store.judge, memory_id),
                    ).fetchone()
                    if added is not None and meta:
                        # The row and its configuration commit together: a judge is
                        # never without them, whatever interrupts its creation.
                        store._local.conn = conn
                        try:
                            store.set_metas(meta)
                        finally:
                            store._local.conn = None
                if added is not None:
                    store._added = memory_id
        except BaseException:
            store.close()
            raise
        return store

    def discard(self) -> None:
        """Close the store; delete the judge if `create` added it and nothing was committed since.

        Only the row this store added (its memory id) at version 0 is deleted, with
        its meta rows: a judge another process added, or one written since, stays.
        """
        try:
            if self._added is not None:
                with contextlib.suppress(Exception), self._pooled() as conn:
                    conn.execute(
                        "DELETE FROM memalign_judges WHERE name=%s AND memory_id=%s "
                        "AND change_seq=0",
                        (self.judge, self._added),
                    )
        finally:
            self.close()

    @classmethod
    def open(cls, url: str) -> PostgresStore:
        """Open an existing judge's memory, or raise `MemoryFormatError`."""
        store = cls(PostgresTarget.parse(url))
        try:
            store._enter_schema(create=False)
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

    def _enter_schema(self, *, create: bool) -> None:
        """Check the URL's schema (`?schema=`) before anything looks for tables in it.

        PostgreSQL skips a schema of the search path that the role may not use, as
        if it did not exist: without this check a role without `USAGE` would be
        told there are no tables, or have its tables created elsewhere. `create`:
        create the schema if it does not exist (needs `CREATE` on the database).
        """
        schema = self.target.schema
        if schema is None:
            return
        pg = self._psycopg
        with self._conn() as conn:
            row = conn.execute(
                "SELECT has_schema_privilege(oid, 'USAGE'), current_user "
                "FROM pg_namespace WHERE nspname=%s",
                (schema,),
            ).fetchone()
            if row is None and not create:
                raise MemoryFormatError(f"{self._where()}: no schema {schema!r} in this database")
            if row is None:
                try:
                    conn.execute(
                        pg.sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                            pg.sql.Identifier(schema)
                        )
                    )
                except (pg.errors.UniqueViolation, pg.errors.DuplicateSchema):
                    pass  # another process created it at the same moment
                except pg.errors.InsufficientPrivilege as e:
                    role = conn.info.user
                    raise MemoryPermissionError(
                        f"{self._where()}: schema {schema!r} does not exist and role {role!r} "
                        f"may not create it ({self.target.redact(str(e).strip())}); create it "
                        "first (CREATE SCHEMA ... AUTHORIZATION <role>)"
                    ) from safe_cause(e, self.target)
                return
            if not row[0]:
                raise MemoryPermissionError(
                    f"{self._where()}: role {row[1]!r} has no USAGE privilege on schema "
                    f"{schema!r}; {PRIVILEGES_HINT}"
                )

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
                    where = (
                        "this database"
                        if self.target.schema is None
                        else f"schema {self.target.schema!r} of this database"
                    )
                    raise MemoryFormatError(f"{self._where()}: no MemAlign tables in {where}")
                row = conn.execute("SELECT version FROM memalign_schema WHERE id=1").fetchone()
        except pg.Error as e:
            raise MemoryFormatError(f"{self._where()}: not a MemAlign database ({e})") from e
        version = None if row is None else row[0]
        if version in _PG_UPGRADES:
            version = self._upgrade()
        if version != PG_SCHEMA_VERSION:
            raise MemoryFormatError(
                f"{self._where()}: memory schema version {version!r} is not supported "
                f"(this version reads {PG_SCHEMA_VERSION})"
            )

    def _upgrade(self) -> Any:
        """Bring the database's tables of an older version to this one; the version now.

        Once per database, under the same lock as `_install`: every judge in it
        gains what the new version adds (empty), nothing else changes.
        """
        pg = self._psycopg
        try:
            with self._conn() as conn, conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (_LOCK_CLASS,))
                row = conn.execute("SELECT version FROM memalign_schema WHERE id=1").fetchone()
                version = None if row is None else row[0]
                while version in _PG_UPGRADES:
                    conn.execute(_PG_UPGRADES[version])
                    version += 1
                    conn.execute("UPDATE memalign_schema SET version=%s WHERE id=1", (version,))
        except pg.Error as e:
            raise MemoryFormatError(
                f"{self._where()}: cannot upgrade the tables to version {PG_SCHEMA_VERSION} "
                f"({e}); open the memory once as a user who may create tables"
            ) from e
        return version

    # -- copies between backends -------------------------------------------------------

    def replace_with(self, d: MemoryDump, check: Callable[[], None] | None = None) -> None:
        """Make this judge's memory a copy of `d`, in one transaction (one new version).

        Rows of the old content are deleted (their episode ids recorded as
        removed, so processes with this judge open drop them from their index).
        `check` runs first, inside the transaction, once it has locked the judge's
        row (which every write of this judge locks first): see `Store.replace_with`.
        A judge the database does not hold yet is added by the same transaction
        (`create(url, add_judge=False)`): a copy that fails leaves no judge row.
        """
        with self.transaction(add_judge=True) as conn:
            if check is not None:
                check()
            seq = self._seq()
            conn.execute(
                "INSERT INTO memalign_removed_episodes(judge, seq, episode_id) "
                "SELECT judge, %s, id FROM memalign_episodes WHERE judge=%s",
                (seq, self.judge),
            )
            # The series first: its align marks go with no feedback.
            for name in (
                "memalign_prequential", "memalign_guidelines", "memalign_feedback",
                "memalign_history",
            ):  # fmt: skip
                conn.execute(f"DELETE FROM {name} WHERE judge=%s", (self.judge,))
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
                for table in COPIED:
                    cur.executemany(*table.pg_insert(self.judge, seq, d.rows(table)))
            if d.meta.get("memory_id"):
                conn.execute(
                    "UPDATE memalign_judges SET memory_id=%s WHERE name=%s",
                    (d.meta["memory_id"], self.judge),
                )
