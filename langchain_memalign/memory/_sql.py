"""The SQL both database backends share, written once over a small dialect.

A folder's SQLite memory and a PostgreSQL database keep the same tables. Their
SQL differs only in a few spellings, which `Dialect` names: the tables' prefix
(`memalign_`), the judge's name that scopes every row of a database holding
several judges, the parameter placeholder, the column that orders rows by
insertion (SQLite's `rowid`, PostgreSQL's `ord`) and the episode id column.
`Store` (`base`) holds the reads and writes of the feedback, episode,
guideline, history and agreement-series tables in that neutral SQL; each
backend gives it a way to run a statement (`_select`, `_run`, `_run_many`)
and keeps what truly differs: connections, transactions, locks, the meta
values, the episodes' versions (before-images in SQLite, change records in
PostgreSQL) and copies.

A dialect object of our own rather than SQLAlchemy Core: the shared SQL is
some thirty short statements, SQLAlchemy is not a dependency, and its
compilation would run on every judgment's reads (measured: rendering a
statement here is a cached string lookup).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

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
    INSERT), `{ord}` (insertion order), `{by_key}` (the order of rows fetched
    by id: SQLite's has always been the id's, PostgreSQL's insertion order),
    `{eid}` (the episode id column) and `{unreflected}` (the condition its
    pending-feedback index is built on).
    A statement that names the scope takes the judge's name (`_scope`) as its
    parameter at that place.
    """

    prefix: str
    scoped: bool
    placeholder: str
    order: str
    by_key: str
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
        by_key=d.by_key,
        eid=d.episode_id,
        unreflected=d.unreflected,
    )
    return out.replace("?", d.placeholder) if d.placeholder != "?" else out


SQLITE = Dialect(
    prefix="", scoped=False, placeholder="?", order="rowid", by_key="id", episode_id="rowid",
    unreflected="reflected=0", renumber_history=False,
)  # fmt: skip
POSTGRES = Dialect(
    prefix="memalign_", scoped=True, placeholder="%s", order="ord", by_key="ord", episode_id="id",
    unreflected="NOT reflected", renumber_history=True,
)  # fmt: skip


def _chunks(items: Sequence[Any], size: int = _CHUNK) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _blob(value: Any) -> Any:
    # PostgreSQL's binary rows give a memoryview; anything else is checked as it is.
    return bytes(value) if isinstance(value, memoryview) else value
