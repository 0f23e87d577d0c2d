"""The SQL both database backends share, written once over a small dialect.

A folder's SQLite memory and a PostgreSQL database keep the same tables. Their
SQL differs only in a few spellings, which `Dialect` names: the tables' prefix
(`memalign_`), the judge's name that scopes every row of a database holding
several judges, the parameter placeholder, the column that orders rows by
insertion (SQLite's `rowid`, PostgreSQL's `ord`) and the episode id column.
`SqlTables` holds the reads and writes of the feedback, episode, guideline,
history and agreement-series tables in that neutral SQL; each backend gives
it a way to run a statement (`_select`, `_run`, `_run_many`) and keeps what
truly differs: connections, transactions, locks, the meta values, the
episodes' versions (before-images in SQLite, change records in PostgreSQL)
and copies.

A dialect object of our own rather than SQLAlchemy Core: the shared SQL is
some thirty short statements, SQLAlchemy is not a dependency, and its
compilation would run on every judgment's reads (measured: rendering a
statement here is a cached string lookup).
"""

from __future__ import annotations

import functools
import json
from abc import abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from langchain_memalign import limits
from langchain_memalign.feedback import Feedback
from langchain_memalign.memory._codec import _matrix, _now, _vec_blob, _vector, guidelines_from_rows
from langchain_memalign.memory._codec_prequential import SeriesRow, encode_value, series_rows
from langchain_memalign.memory.base import Store

if TYPE_CHECKING:
    from langchain_memalign.memory.dump import MemoryDump
from langchain_memalign.memory.semantic import Guideline

# SQLite allows 999 parameters in old builds: id lists go in chunks there.
_CHUNK = 500
_SERIES_COLUMNS = "seq, at, kind, feedback_id, judge_value, expert_value, source, learned"


@dataclass(frozen=True)
class Dialect:
    """How one backend spells the shared SQL (see the module doc).

    Statements are written with `?` placeholders and these fields: `{p}`
    (table prefix), `{w}` (the scope alone: ` WHERE judge=?` or nothing),
    `{a}` (the scope before another condition: `WHERE judge=? AND ` or
    `WHERE `), `{jc}`/`{jv}` (the judge column and its placeholder in an
    INSERT), `{ord}` (insertion order), `{eid}` (the episode id column) and
    `{unreflected}` (the condition its pending-feedback index is built on).
    A statement that names the scope takes the judge's name (`_scope`) as its
    parameter at that place.
    """

    prefix: str
    scoped: bool
    placeholder: str
    order: str
    episode_id: str
    unreflected: str
    #: The history's `seq` is shared by every judge of the database: number each one's from 1.
    renumber_history: bool

    def sql(self, text: str) -> str:
        """`text` in this dialect."""
        return _render(self, text)


@functools.lru_cache(maxsize=2048)
def _render(d: Dialect, text: str) -> str:
    scope = "judge=?"
    out = text.format(
        p=d.prefix,
        w=f" WHERE {scope}" if d.scoped else "",
        a=f"WHERE {scope} AND " if d.scoped else "WHERE ",
        jc="judge, " if d.scoped else "",
        jv="?, " if d.scoped else "",
        ord=d.order,
        eid=d.episode_id,
        unreflected=d.unreflected,
    )
    return out.replace("?", d.placeholder) if d.placeholder != "?" else out


SQLITE = Dialect(
    prefix="", scoped=False, placeholder="?", order="rowid", episode_id="rowid",
    unreflected="reflected=0", renumber_history=False,
)  # fmt: skip
POSTGRES = Dialect(
    prefix="memalign_", scoped=True, placeholder="%s", order="ord", episode_id="id",
    unreflected="NOT reflected", renumber_history=True,
)  # fmt: skip


def _chunks(items: Sequence[Any], size: int = _CHUNK) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _blob(value: Any) -> Any:
    # PostgreSQL's binary rows give a memoryview; anything else is checked as it is.
    return bytes(value) if isinstance(value, memoryview) else value


class SqlTables(Store):
    """The tables' SQL shared by the SQLite and PostgreSQL stores (see the module doc)."""

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

    @abstractmethod
    def _run_many(self, conn: Any, text: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run a write in the shared SQL once per parameter row (inside a transaction)."""

    @abstractmethod
    def _snapshot(self) -> AbstractContextManager[Any]:
        """Several reads of one method see one committed version."""

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
        rows: list[tuple[Any, ...]] = []
        for sql, args in self._in(text, ids):
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
                "SELECT id, payload FROM {p}feedback {a}id {in} ORDER BY {ord}", ids
            )
            return {fid: self._decode(p) for fid, p in rows}

    def feedback_ids(self) -> list[str]:
        """All stored feedback ids, oldest first."""
        with self._reading("feedback ids"):
            return [
                r[0]
                for r in self._select("SELECT id FROM {p}feedback{w} ORDER BY {ord}", self._scope)
            ]

    def recent_feedback(self, limit: int, exclude: Iterable[str] = ()) -> list[Feedback]:
        """The `limit` most recently stored feedback items, newest first."""
        skip = set(exclude)
        with self._reading("feedback"):
            rows = self._select(
                "SELECT id, payload FROM {p}feedback{w} ORDER BY {ord} DESC LIMIT ?",
                (*self._scope, limit + len(skip)),
            )
            return [self._decode(p) for fid, p in rows if fid not in skip][:limit]

    def pending_reflection(self) -> list[str]:
        """Ids of feedback with a rationale whose distillation has not succeeded yet."""
        with self._reading("feedback"):
            return [
                r[0]
                for r in self._select(
                    "SELECT id FROM {p}feedback {a}{unreflected} ORDER BY {ord}", self._scope
                )
            ]

    def _count(self, table: str) -> int:
        """Row count of a table of `COUNTED_TABLES` (this memory's rows)."""
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
        """Every episode's id and vector, in id order (to build the FAISS index)."""
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
        """All guidelines in order, and their vectors (None if any lacks one)."""
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
        """Insert or replace a guideline with its provenance.

        A text over `limits.MAX_GUIDELINE_CHARS` is refused (`ValueError`): every
        path that makes guidelines checks it first, so this only guards the file.
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
        """Position after the last guideline."""
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
        """Every recorded change, oldest first."""
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
        """Record a review in the series (see `Store.record_review`)."""
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
        """Mark an align at the end of the series (see `Store.mark_align`)."""
        self._run(
            conn,
            "INSERT INTO {p}prequential({jc}at, kind, learned) VALUES ({jv}?, 'align', ?)",
            (*self._scope, _now(), learned),
        )

    def prequential(self, feedback_ids: Iterable[str] | None = None) -> list[SeriesRow]:
        """The agreement series, oldest first (see `Store.prequential`)."""
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
            d.feedback = [
                (i, p, h, bool(r), u)
                for i, p, h, r, u in self._select(
                    "SELECT id, payload, content_hash, reflected, updated_at FROM {p}feedback{w} "
                    "ORDER BY {ord}",
                    scope,
                )
            ]
            d.episodes = [
                (int(r), f, t, bytes(v))
                for r, f, t, v in self._select(
                    "SELECT {eid}, feedback_id, text_hash, vector FROM {p}episodes{w} "
                    "ORDER BY {eid}",
                    scope,
                )
            ]
            d.guidelines = [
                (i, t, None if v is None else bytes(v), c, int(p))
                for i, t, v, c, p in self._select(
                    "SELECT id, text, vector, created_at, position FROM {p}guidelines{w} "
                    "ORDER BY position, {ord}",
                    scope,
                )
            ]
            d.sources = [
                (g, f)
                for g, f in self._select(
                    "SELECT guideline_id, feedback_id FROM {p}guideline_sources{w} ORDER BY {ord}",
                    scope,
                )
            ]
            renumber = self.dialect.renumber_history
            d.history = [
                (n if renumber else int(s), at, a, f, g)
                for n, (s, at, a, f, g) in enumerate(
                    self._select(
                        "SELECT seq, at, action, feedback_ids, guideline_ids FROM {p}history{w} "
                        "ORDER BY seq",
                        scope,
                    ),
                    start=1,
                )
            ]
            if not self.series_missing:
                d.prequential = [
                    (n if renumber else int(s), at, k, f, j, e, src,
                     None if learned is None else int(learned))
                    for n, (s, at, k, f, j, e, src, learned) in enumerate(
                        self._select(
                            f"SELECT {_SERIES_COLUMNS} FROM {{p}}prequential{{w}} ORDER BY seq",
                            scope,
                        ),
                        start=1,
                    )
                ]  # fmt: skip
        return d
