"""The store contract: what every backend of a judge's memory provides.

A judge's memory is kept by a `Store`: SQLite in a folder or in process
(`store.MemoryStore`), or a PostgreSQL database that many processes share
(`postgres.PostgresStore`). `JudgeMemory`, the graphs and `memalign show`
use only what this class declares, so they work on either, and one test
suite (`tests/unit_tests/memory/test_store_contract.py`) runs on every
backend. Both backends keep the same tables, so their SQL is written once
here, over a small dialect (`_sql.Dialect`: table prefix, judge scope,
placeholder, ordering column). As in LangGraph's `BaseStore`, only what
truly differs is abstract: the connection and its errors (`_select`,
`_reading`), transactions and consistent reads, the meta values, the
episodes' versions (`put_episode`, `episodes_by_rowid`) and `replace_with`.

What differs between backends is told by attributes, not by the class:

- `shared`: other processes write this memory as a matter of course
  (PostgreSQL). A reader catches up from `episode_changes`, and writers of
  all processes serialize on `lock_writers`.
- `folder`: the folder of a memory kept in one (its FAISS index cache lives
  there), else None. Another process may open the folder too.
- `others_commit`: `shared` or a folder: other connections may commit while
  this one is open, so a judgment first asks `newer_commit` (one small
  read) and catches up when it says so.
- `staleness`: how many seconds a judgment may lag behind the newest commit.
- `supports_atomic`: whether `atomic` makes several transactions one.
- `stores_nul`: whether text may hold a NUL character (PostgreSQL's cannot).

Writes run inside `transaction()`, which yields a connection handle; the
write methods take it as their first argument, and only the store that gave
it out understands it. Every commit gives the memory a new version number
(`change_seq`).
"""

from __future__ import annotations

import contextlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from langchain_memalign import limits
from langchain_memalign.errors import MemoryFormatError
from langchain_memalign.feedback import Feedback
from langchain_memalign.memory._codec import (
    _matrix,
    _now,
    _vec_blob,
    _vector,
    encode_feedback,
    guidelines_from_rows,
)
from langchain_memalign.memory._codec_prequential import SeriesRow, encode_value, series_rows
from langchain_memalign.memory._sql import _SERIES_COLUMNS, Dialect, _blob, _chunks
from langchain_memalign.memory._tables import COPIED
from langchain_memalign.memory.semantic import Guideline

if TYPE_CHECKING:
    from langchain_memalign.memory.dump import MemoryDump

__all__ = ["COUNTED_TABLES", "Store"]

# The tables `Store.count` counts.
COUNTED_TABLES = ("feedback", "episodes", "guidelines", "history")


class Store(ABC):
    """One judge's memory in a backend (see the module doc)."""

    #: Other processes may write this memory (see `episode_changes`, `lock_writers`).
    shared: bool = False
    #: The folder of a memory kept in one, else None.
    folder: Path | None = None
    #: Seconds a judgment may lag behind the newest commit of another process.
    staleness: float = 0.0
    #: Whether `atomic` runs several transactions as one.
    supports_atomic: bool = False
    #: Whether stored text may hold a NUL character (PostgreSQL's text cannot).
    stores_nul: bool = True
    _closed: bool = False

    # -- identity and lifetime -----------------------------------------------------

    @abstractmethod
    def _where(self) -> str:
        """Where this memory lives, for messages (a URL without its password)."""

    def describe(self) -> str:
        """Where this memory lives, for messages (a URL without its password)."""
        return self._where()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._where()})"

    @abstractmethod
    def is_at(self, location: object) -> bool:
        """Whether `location` (a folder or a URL) names this very memory."""

    @abstractmethod
    def close(self) -> None:
        """Release the backend's connections; the store is unusable afterwards."""

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        return self._closed

    def discard(self) -> None:
        """Close the store; remove the memory if its opening made it, uncommitted to since.

        What an opening that fails after the store was created calls (a judge's
        constructor): a backend removes only what its own `create` made (a new
        folder's memory file, a new judge's row). In process nothing outlives
        the store. Best effort: it raises nothing but what `close` raises.
        """
        self.close()

    # -- reading, transactions and locks -------------------------------------------

    @abstractmethod
    def _reading(self, what: str) -> AbstractContextManager[None]:
        """Turn errors from stored values into `MemoryFormatError` naming `what`."""

    def _decode(self, payload: Any) -> Feedback:
        with self._reading("a feedback payload"):
            return Feedback.model_validate_json(payload)

    @abstractmethod
    def consistent(self) -> AbstractContextManager[None]:
        """Reads in this block (this thread) see one committed version of the memory."""

    @abstractmethod
    def transaction(self) -> AbstractContextManager[Any]:
        """All-or-nothing writes; yields the connection the write methods take.

        A commit gives the memory a new version: `change_seq` goes up by one
        and `content_version` changes. An exception rolls every write of the
        block back (meta included) and propagates.
        """

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """Run several transactions (one align or unalign) as one unit, if supported.

        Here, without `supports_atomic`, each transaction commits on its own
        (each all-or-nothing) and a failure keeps the ones before it.
        """
        yield

    @property
    def in_atomic(self) -> bool:
        """Whether an `atomic` unit is open."""
        return False

    def lock_writers(self) -> AbstractContextManager[None]:
        """Hold the writer lock of all processes for a whole align or unalign.

        Here nothing: a memory no other process writes (not `shared`) is
        serialized by the memory's own write lock.
        """
        return contextlib.nullcontext()

    @property
    def others_commit(self) -> bool:
        """Whether other connections (processes) may commit while this store is open.

        True for a `shared` store and for a folder; a judgment then checks for
        their commits first (`newer_commit`). An in-process memory has no
        other connection.
        """
        return self.shared or self.folder is not None

    def newer_commit(self, seq: int) -> int | None:
        """The check before a judgment: a commit newer than version `seq`, if any.

        Returns the newest version number when the store may hold a commit
        that the version `seq` this process published lacks, else None. It
        must stay cheap (one small read): every judgment asks. Here: the
        stored change sequence, read and compared.
        """
        newest = self.change_seq()
        return newest if newest > seq else None

    def forget_versions(self, up_to: int) -> None:
        """Drop what this process keeps for readers of versions up to `up_to`.

        Here nothing is kept (see `episodes_by_rowid`).
        """
        return

    # -- meta ----------------------------------------------------------------------

    @abstractmethod
    def get_meta(self, key: str) -> Any:
        """A JSON value from the meta table, or None."""

    @abstractmethod
    def set_meta(self, key: str, value: Any) -> None:
        """Set a JSON value in the meta table (inside or outside a transaction).

        `None` clears the key. Inside a transaction the value commits (or
        rolls back) with it.
        """

    def set_metas(self, values: dict[str, Any]) -> None:
        """Set several JSON values in the meta table at once: all of them or none.

        For values that mean something only together (a new memory's
        configuration and the embedding model its vectors come from): a
        failure between two `set_meta` calls would store one without the other.
        """
        with self.transaction():
            for key, value in values.items():
                self.set_meta(key, value)

    def change_seq(self) -> int:
        """The number of committed changes (the memory's version number).

        Here: the meta value, 0 before the first commit.
        """
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
        with self.consistent():
            return {
                "memory_id": self.get_meta("memory_id"),
                "change_seq": self.change_seq(),
                "content_version": self.get_meta("content_version"),
            }

    # -- feedback ------------------------------------------------------------------

    def count(self, table: str) -> int:
        """Row count of one of `COUNTED_TABLES` (this memory's rows)."""
        if table not in COUNTED_TABLES:
            raise ValueError(f"{table!r} is not one of {', '.join(COUNTED_TABLES)}")
        return self._count(table)

    def put_feedback(self, conn: Any, fb: Feedback, *, reflected: bool) -> None:
        """Insert or replace one feedback item (inside a transaction).

        Invalid feedback raises `InvalidFeedbackError` before anything is written.
        """
        payload = encode_feedback(fb)
        self._keep_before(conn, "f.id = ?", [fb.id])
        self._run(
            conn,
            "INSERT INTO {p}feedback({jc}id, payload, content_hash, reflected, updated_at) "
            "VALUES ({jv}?, ?, ?, ?, ?) ON CONFLICT ({jc}id) DO UPDATE SET "
            "payload=excluded.payload, content_hash=excluded.content_hash, "
            "reflected=excluded.reflected, updated_at=excluded.updated_at",
            (*self._scope, fb.id, payload, fb.content_hash(), bool(reflected), _now()),
        )

    def delete_feedback(self, conn: Any, ids: Iterable[str]) -> None:
        """Delete feedback and (by cascade) its episodes (unknown ids are ignored)."""
        ids = list(ids)
        for where, args in self._in("f.id {in}", ids):
            self._keep_before(conn, where, args)
        self._run_many(conn, "DELETE FROM {p}feedback {a}id=?", [(*self._scope, i) for i in ids])

    def _keep_before(self, conn: Any, where: str, args: list[Any]) -> None:
        """Keep, for readers of older versions, the episodes a write is about to change.

        `where` selects them (SQLite's before-images); here nothing is kept.
        """
        return

    # -- episodes ------------------------------------------------------------------

    @abstractmethod
    def put_episode(
        self, conn: Any, feedback_id: str, text_hash: str, vector: np.ndarray
    ) -> tuple[int, int | None]:
        """Store an episode's vector; return (new episode id, replaced id or None).

        Every call gives a fresh id, greater than every id given before (ids
        are never reused), so an index can drop the old id rather than edit it.
        """

    def episode_changes(self, since: int) -> tuple[list[int], list[int], np.ndarray | None] | None:
        """Episodes removed and added by the commits after version `since`.

        Returns (removed ids, added ids, added vectors). A store that is not
        `shared` sees only its own writes, which its caller applied already:
        it tracks nothing and returns None.
        """
        return None

    def external_episode_changes(
        self, indexed: Callable[[], np.ndarray], *, record: bool = True
    ) -> tuple[list[int], list[int], np.ndarray | None] | None:
        """Episodes other connections' commits removed and added, computed against an index.

        For a store whose commits do not record them (a folder:
        `episode_changes` is None). `indexed()` gives the ids of the index to
        bring up to date. Returns (removed ids, added ids, added vectors), or
        None when there is nothing to apply. With `record`, the caller applies
        them and the store notes that it is up to date; call it inside
        `consistent`. Here: None (the changes come from `episode_changes`, or
        nobody else commits).
        """
        return None

    @abstractmethod
    def episodes_by_rowid(self, rowids: list[int], as_of: int | None = None) -> dict[int, Feedback]:
        """The feedback behind episode ids, as of version `as_of` (default: the newest).

        A reader at an older version never gets what a later commit wrote: an
        episode changed or removed since is returned as that version had it,
        or left out, as the backend can (see each backend).
        """

    # -- copies --------------------------------------------------------------------

    @abstractmethod
    def replace_with(self, d: MemoryDump, check: Callable[[], None] | None = None) -> None:
        """Make this memory a copy of `d`, in one transaction (one new version).

        The memory id comes from `d` (when it has one); the version number
        goes on from this memory's, so readers never see it go back. `check`
        runs first inside that transaction, once it holds the memory's write
        lock, and may raise to replace nothing: what it reads cannot change
        before the replacement (`save`'s check of what it replaces).
        """

    def backup_to(self, folder: Path, *, exclusive: bool = False) -> None:
        """Write this memory into `folder` as a SQLite memory, atomically.

        Episode ids are kept, so an index built from either copy has the same ids.
        `exclusive`: only if `folder` holds no memory file, checked as the file is
        put in place (`FileExistsError` otherwise, with nothing written). Here: its
        `dump` written as a new file.
        """
        # Imported here: `dump` builds on the SQLite store, which builds on this module.
        from langchain_memalign.memory.dump import write_sqlite_folder

        write_sqlite_folder(folder, self.dump(), exclusive=exclusive)

    # == the tables, in the SQL both database backends share (`_sql.Dialect`) ==
    #
    # Each backend runs a statement (`_select`, `_run`, `_run_many`) and keeps what
    # truly differs: connections, transactions, meta, the episodes' versions
    # (`put_episode`, `episodes_by_rowid`) and `replace_with`.

    dialect: Dialect
    #: A version-1 folder that could not be upgraded (read-only): its series is empty.
    series_missing: bool = False
    #: Meta values kept outside the meta table (PostgreSQL's judge row), read by `get_meta`.
    _row_meta: tuple[str, ...] = ()

    # -- how a backend runs a statement --------------------------------------------

    #: The parameters of the scope (`{w}`, `{a}`, `{jv}`): the judge's name, or none.
    _scope: tuple[Any, ...] = ()

    @abstractmethod
    def _select(
        self, text: str, args: Sequence[Any] = (), *, binary: bool = False
    ) -> list[tuple[Any, ...]]:
        """The rows of a query in the shared SQL (`binary`: vectors as raw bytes, if it can)."""

    def _run_many(self, conn: Any, text: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run a write in the shared SQL once per parameter row (inside a transaction)."""
        for args in rows:
            self._run(conn, text, args)

    def _snapshot(self) -> AbstractContextManager[Any]:
        """Several reads of one method see one committed version."""
        return self.consistent()

    def _run(self, conn: Any, text: str, args: Sequence[Any] = ()) -> Any:
        """Run a write in the shared SQL (inside a transaction); its cursor."""
        return conn.execute(self.dialect.sql(text), args)

    def _in(self, text: str, ids: Iterable[Any]) -> Iterator[tuple[str, list[Any]]]:
        """`text` with `{in}` replaced by a test against `ids`, and the ids it takes.

        PostgreSQL takes the whole list as one array; SQLite a placeholder per
        id, so the ids come in chunks.
        """
        ids = list(ids)
        if self.dialect.scoped:
            yield text.replace("{in}", "= ANY(?)"), [ids]
            return
        for chunk in _chunks(ids):
            yield text.replace("{in}", f"IN ({','.join('?' * len(chunk))})"), list(chunk)

    def _select_in(self, text: str, ids: Iterable[Any]) -> list[tuple[Any, ...]]:
        """The rows of a query whose `{in}` tests `ids`: one version, however many chunks."""
        statements = list(self._in(text, ids))
        rows: list[tuple[Any, ...]] = []
        with self._snapshot() if len(statements) > 1 else contextlib.nullcontext():
            for sql, args in statements:
                rows += self._select(sql, (*self._scope, *args))
        return rows

    # -- feedback ------------------------------------------------------------------

    def feedback_state(self, ids: Iterable[str]) -> dict[str, tuple[str, bool]]:
        """Map stored ids among `ids` to (content hash, reflected)."""
        with self._reading("feedback"):
            rows = self._select_in(
                "SELECT id, content_hash, reflected FROM {p}feedback {a}id {in}", ids
            )
        return {fid: (h, bool(r)) for fid, h, r in rows}

    def get_feedback(self, ids: Iterable[str]) -> dict[str, Feedback]:
        """Stored feedback by id (missing ids are absent from the result)."""
        with self._reading("feedback"):
            rows = self._select_in(
                "SELECT id, payload FROM {p}feedback {a}id {in} ORDER BY {by_key}", ids
            )
            return {fid: self._decode(p) for fid, p in rows}

    def feedback_ids(self) -> list[str]:
        """All stored feedback ids, oldest first (replacing an item keeps its place)."""
        with self._reading("feedback ids"):
            return [
                r[0]
                for r in self._select("SELECT id FROM {p}feedback{w} ORDER BY {ord}", self._scope)
            ]

    def recent_feedback(self, limit: int, exclude: Iterable[str] = ()) -> list[Feedback]:
        """The `limit` most recently stored feedback items not in `exclude`, newest first."""
        skip = set(exclude)
        with self._reading("feedback"):
            rows = self._select(
                "SELECT id, payload FROM {p}feedback{w} ORDER BY {ord} DESC LIMIT ?",
                (*self._scope, limit + len(skip)),
            )
            return [self._decode(p) for fid, p in rows if fid not in skip][:limit]

    def pending_reflection(self) -> list[str]:
        """Ids of stored feedback not marked reflected, oldest first."""
        with self._reading("feedback"):
            return [
                r[0]
                for r in self._select(
                    "SELECT id FROM {p}feedback {a}{unreflected} ORDER BY {ord}", self._scope
                )
            ]

    def _count(self, table: str) -> int:
        """Row count of a table of `COUNTED_TABLES`."""
        with self._reading(table):
            return int(self._select(f"SELECT count(*) FROM {{p}}{table}{{w}}", self._scope)[0][0])

    def set_reflected(self, conn: Any, ids: Iterable[str], reflected: bool) -> None:
        """Mark feedback as distilled (or pending distillation)."""
        for sql, args in self._in("UPDATE {p}feedback SET reflected=? {a}id {in}", ids):
            self._run(conn, sql, (bool(reflected), *self._scope, *args))

    # -- episodes ------------------------------------------------------------------

    def episode_keys(self, feedback_ids: Iterable[str]) -> dict[str, tuple[int, str]]:
        """Map feedback ids to (episode id, hash of the embedded text)."""
        with self._reading("episodes"):
            rows = self._select_in(
                "SELECT feedback_id, {eid}, text_hash FROM {p}episodes {a}feedback_id {in}",
                feedback_ids,
            )
        return {fid: (int(i), th) for fid, i, th in rows}

    def episode_vectors(self, feedback_ids: Iterable[str]) -> dict[str, np.ndarray]:
        """The stored vectors of some episodes, by feedback id (no embedding call)."""
        with self._reading("episode vectors"):
            rows = self._select_in(
                "SELECT feedback_id, vector FROM {p}episodes {a}feedback_id {in}", feedback_ids
            )
            return {fid: _vector(_blob(v)) for fid, v in rows}

    def all_vectors(self) -> tuple[list[int], np.ndarray | None]:
        """Every episode's id and vector (a row each), or ([], None) without episodes."""
        with self._reading("episode vectors"):
            # One matrix from the joined bytes, not an array per row: opening a folder
            # reads every vector (a rebuild, or the proof an index cache must give).
            rows = self._select(
                "SELECT {eid}, vector FROM {p}episodes{w} ORDER BY {eid}", self._scope, binary=True
            )
            return _matrix(rows)

    def episode_rowids(self) -> list[int]:
        """Every episode's id, ascending."""
        with self._reading("episodes"):
            return [
                int(r[0])
                for r in self._select(
                    "SELECT {eid} FROM {p}episodes{w} ORDER BY {eid}", self._scope
                )
            ]

    def episode_dim(self) -> int | None:
        """The dimension of the stored episode vectors (None without episodes)."""
        with self._reading("episodes"):
            # length() of a blob (bytea) counts bytes in both.
            rows = self._select("SELECT length(vector) FROM {p}episodes{w} LIMIT 1", self._scope)
            return None if not rows else int(rows[0][0]) // 4

    # -- guidelines ----------------------------------------------------------------

    def load_guidelines(self) -> tuple[list[Guideline], np.ndarray | None]:
        """All guidelines in order (position, then first insertion), and their vectors.

        The vectors come back (a row per guideline) only if every guideline has one.
        """
        with self._reading("guidelines"), self._snapshot():
            rows = self._select(
                "SELECT id, text, vector, created_at FROM {p}guidelines{w} "
                "ORDER BY position, {ord}",
                self._scope,
            )
            sources = self._select(
                "SELECT guideline_id, feedback_id FROM {p}guideline_sources{w} ORDER BY {ord}",
                self._scope,
            )
            return guidelines_from_rows(rows, sources)

    def put_guideline(
        self, conn: Any, g: Guideline, vector: np.ndarray | None, position: int
    ) -> None:
        """Insert or replace a guideline with its provenance (inside a transaction).

        Replacing keeps the stored vector when `vector` is None, and the
        guideline's position. A text over `limits.MAX_GUIDELINE_CHARS` raises
        `ValueError`.
        """
        limits.check_guideline_text(g.id, g.text)
        self._run(
            conn,
            "INSERT INTO {p}guidelines({jc}id, text, vector, created_at, position) "
            "VALUES ({jv}?, ?, ?, ?, ?) ON CONFLICT ({jc}id) DO UPDATE SET text=excluded.text, "
            "vector=COALESCE(excluded.vector, {p}guidelines.vector)",
            (*self._scope, g.id, g.text, None if vector is None else _vec_blob(vector),
             g.created_at.isoformat(), position),
        )  # fmt: skip
        self._run(conn, "DELETE FROM {p}guideline_sources {a}guideline_id=?", (*self._scope, g.id))
        self._run_many(
            conn,
            "INSERT INTO {p}guideline_sources({jc}guideline_id, feedback_id) VALUES ({jv}?, ?) "
            "ON CONFLICT DO NOTHING",
            [(*self._scope, g.id, s) for s in g.source_ids],
        )

    def delete_guidelines(self, conn: Any, ids: Iterable[str]) -> None:
        """Delete guidelines and their provenance."""
        for sql, args in self._in("DELETE FROM {p}guidelines {a}id {in}", ids):
            self._run(conn, sql, (*self._scope, *args))

    def next_position(self) -> int:
        """Position after the last guideline (0 without guidelines)."""
        with self._reading("guidelines"):
            rows = self._select(
                "SELECT COALESCE(MAX(position), -1) FROM {p}guidelines{w}", self._scope
            )
            return int(rows[0][0]) + 1

    # -- history -------------------------------------------------------------------

    def log(
        self, conn: Any, action: str, feedback_ids: Iterable[str], guideline_ids: Iterable[str] = ()
    ) -> None:
        """Record a change and the feedback that caused it (ids only, never text)."""
        self._run(
            conn,
            "INSERT INTO {p}history({jc}at, action, feedback_ids, guideline_ids) "
            "VALUES ({jv}?, ?, ?, ?)",
            (*self._scope, _now(), action, json.dumps(sorted(set(feedback_ids))),
             json.dumps(sorted(set(guideline_ids)))),
        )  # fmt: skip

    def history(self) -> list[dict[str, Any]]:
        """Every recorded change, oldest first.

        Each entry: `seq` (increasing; a new memory's first change is 1), `at`
        (ISO time), `action`, and the sorted, distinct `feedback_ids` and
        `guideline_ids`.
        """
        with self._reading("history"):
            rows = self._select(
                "SELECT seq, at, action, feedback_ids, guideline_ids FROM {p}history{w} "
                "ORDER BY seq",
                self._scope,
            )
            renumber = self.dialect.renumber_history
            return [
                {"seq": n if renumber else s, "at": at, "action": a,
                 "feedback_ids": json.loads(f), "guideline_ids": json.loads(g)}
                for n, (s, at, a, f, g) in enumerate(rows, start=1)
            ]  # fmt: skip

    # -- the agreement series ------------------------------------------------------

    def record_review(
        self, conn: Any, feedback_id: str, expert: Any, *, judge: Any = None,
        source: str | None = None,
    ) -> bool:  # fmt: skip
        """Record the expert's verdict on a feedback item in the series (inside a transaction).

        An item with a point keeps its place and its judge's verdict and takes the
        new expert verdict (a changed review). Without a point, `judge` (the judge's
        verdict on the case from before it learned it; `source`: where that came
        from) adds one at the end of the series; without `judge` nothing is added.
        The feedback must be stored: the point goes with it. Returns whether a
        point was added or changed.
        """
        cur = self._run(
            conn,
            "UPDATE {p}prequential SET expert_value=? {a}feedback_id=?",
            (encode_value(expert), *self._scope, feedback_id),
        )
        if cur.rowcount or judge is None:
            return bool(cur.rowcount)
        self._run(
            conn,
            "INSERT INTO {p}prequential({jc}at, kind, feedback_id, judge_value, expert_value, "
            "source) VALUES ({jv}?, 'review', ?, ?, ?, ?)",
            (*self._scope, _now(), feedback_id, encode_value(judge), encode_value(expert), source),
        )
        return True

    def mark_align(self, conn: Any, learned: int) -> None:
        """Mark an align at the end of the series: it learned `learned` items."""
        self._run(
            conn,
            "INSERT INTO {p}prequential({jc}at, kind, learned) VALUES ({jv}?, 'align', ?)",
            (*self._scope, _now(), learned),
        )

    def prequential(self, feedback_ids: Iterable[str] | None = None) -> list[SeriesRow]:
        """The agreement series (or its reviews of `feedback_ids`), oldest first."""
        if self.series_missing:
            return []
        with self._reading("the agreement series"):
            if feedback_ids is None:
                rows = self._select(
                    f"SELECT {_SERIES_COLUMNS} FROM {{p}}prequential{{w}} ORDER BY seq",
                    self._scope,
                )
            else:
                rows = self._select_in(
                    f"SELECT {_SERIES_COLUMNS} FROM {{p}}prequential {{a}}feedback_id {{in}}",
                    feedback_ids,
                )
                rows.sort(key=lambda r: int(r[0]))
            return series_rows(rows)

    # -- copies --------------------------------------------------------------------

    def dump(self) -> MemoryDump:
        """Every row of this memory, read at one version."""
        # Imported here: `dump` writes SQLite files with the schema of `_store_base`,
        # which builds on this module.
        from langchain_memalign.memory.dump import MemoryDump

        d = MemoryDump()
        scope = self._scope
        with self._reading("the memory"), self.consistent():
            d.meta = {
                k: json.loads(v)
                for k, v in self._select("SELECT key, value FROM {p}meta{w}", scope)
            }
            for key in self._row_meta:
                d.meta[key] = self.get_meta(key)
            for table in COPIED:
                if table.name == "prequential" and self.series_missing:
                    continue
                renumber = table.renumbered and self.dialect.renumber_history
                rows = d.rows(table)
                # `scoped`: PostgreSQL's names (one database holds several judges).
                select = table.dump_select(self.dialect.scoped)
                for n, row in enumerate(self._select(select, scope), 1):
                    rows.append(
                        tuple(
                            v if c.load is None or v is None else c.load(v)
                            for c, v in zip(table.copied(), row, strict=True)
                        )
                    )
                    if renumber:  # the series' and history's numbers are per judge
                        rows[-1] = (n, *rows[-1][1:])
        return d
