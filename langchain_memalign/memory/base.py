"""The store contract: what every backend of a judge's memory provides.

A judge's memory is kept by a `Store`: SQLite in a folder or in process
(`store.MemoryStore`), or a PostgreSQL database that many processes share
(`postgres.PostgresStore`). `JudgeMemory`, the graphs and `memalign show`
use only what this class declares, so they work on either, and one test
suite (`tests/unit_tests/memory/test_store_contract.py`) runs on every
backend. As in LangGraph's `BaseStore`, the methods each backend must write
(its tables, transactions and copies) are abstract, and the logic they
share is written once here.

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
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from langchain_memalign.feedback import Feedback
from langchain_memalign.memory.semantic import Guideline

if TYPE_CHECKING:
    from langchain_memalign.memory._codec_prequential import SeriesRow
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
    @abstractmethod
    def closed(self) -> bool:
        """Whether `close` was called."""

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

    @abstractmethod
    def change_seq(self) -> int:
        """The number of committed changes (the memory's version number)."""

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

    @abstractmethod
    def feedback_state(self, ids: Iterable[str]) -> dict[str, tuple[str, bool]]:
        """Map stored ids among `ids` to (content hash, reflected)."""

    @abstractmethod
    def get_feedback(self, ids: Iterable[str]) -> dict[str, Feedback]:
        """Stored feedback by id (missing ids are absent from the result)."""

    @abstractmethod
    def feedback_ids(self) -> list[str]:
        """All stored feedback ids, oldest first (replacing an item keeps its place)."""

    @abstractmethod
    def recent_feedback(self, limit: int, exclude: Iterable[str] = ()) -> list[Feedback]:
        """The `limit` most recently stored feedback items not in `exclude`, newest first."""

    @abstractmethod
    def pending_reflection(self) -> list[str]:
        """Ids of stored feedback not marked reflected, oldest first."""

    def count(self, table: str) -> int:
        """Row count of one of `COUNTED_TABLES` (this memory's rows)."""
        if table not in COUNTED_TABLES:
            raise ValueError(f"{table!r} is not one of {', '.join(COUNTED_TABLES)}")
        return self._count(table)

    @abstractmethod
    def _count(self, table: str) -> int:
        """Row count of a table of `COUNTED_TABLES`."""

    @abstractmethod
    def put_feedback(self, conn: Any, fb: Feedback, *, reflected: bool) -> None:
        """Insert or replace one feedback item (inside a transaction).

        Invalid feedback raises `InvalidFeedbackError` before anything is written.
        """

    @abstractmethod
    def set_reflected(self, conn: Any, ids: Iterable[str], reflected: bool) -> None:
        """Mark feedback as distilled (or pending distillation)."""

    @abstractmethod
    def delete_feedback(self, conn: Any, ids: Iterable[str]) -> None:
        """Delete feedback and its episodes (unknown ids are ignored)."""

    # -- episodes ------------------------------------------------------------------

    @abstractmethod
    def episode_keys(self, feedback_ids: Iterable[str]) -> dict[str, tuple[int, str]]:
        """Map feedback ids to (episode id, hash of the embedded text)."""

    @abstractmethod
    def put_episode(
        self, conn: Any, feedback_id: str, text_hash: str, vector: np.ndarray
    ) -> tuple[int, int | None]:
        """Store an episode's vector; return (new episode id, replaced id or None).

        Every call gives a fresh id, greater than every id given before (ids
        are never reused), so an index can drop the old id rather than edit it.
        """

    @abstractmethod
    def episode_vectors(self, feedback_ids: Iterable[str]) -> dict[str, np.ndarray]:
        """The stored vectors of some episodes, by feedback id (no embedding call)."""

    @abstractmethod
    def all_vectors(self) -> tuple[list[int], np.ndarray | None]:
        """Every episode's id and vector (a row each), or ([], None) without episodes."""

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
    def episode_rowids(self) -> list[int]:
        """Every episode's id, ascending."""

    @abstractmethod
    def episode_dim(self) -> int | None:
        """The dimension of the stored episode vectors (None without episodes)."""

    @abstractmethod
    def episodes_by_rowid(self, rowids: list[int], as_of: int | None = None) -> dict[int, Feedback]:
        """The feedback behind episode ids, as of version `as_of` (default: the newest).

        A reader at an older version never gets what a later commit wrote: an
        episode changed or removed since is returned as that version had it,
        or left out, as the backend can (see each backend).
        """

    # -- guidelines ----------------------------------------------------------------

    @abstractmethod
    def load_guidelines(self) -> tuple[list[Guideline], np.ndarray | None]:
        """All guidelines in order (position, then first insertion), and their vectors.

        The vectors come back (a row per guideline) only if every guideline has one.
        """

    @abstractmethod
    def put_guideline(
        self, conn: Any, g: Guideline, vector: np.ndarray | None, position: int
    ) -> None:
        """Insert or replace a guideline with its provenance (inside a transaction).

        Replacing keeps the stored vector when `vector` is None, and the
        guideline's position. A text over `limits.MAX_GUIDELINE_CHARS` raises
        `ValueError`.
        """

    @abstractmethod
    def delete_guidelines(self, conn: Any, ids: Iterable[str]) -> None:
        """Delete guidelines and their provenance."""

    @abstractmethod
    def next_position(self) -> int:
        """Position after the last guideline (0 without guidelines)."""

    # -- history -------------------------------------------------------------------

    @abstractmethod
    def log(
        self, conn: Any, action: str, feedback_ids: Iterable[str], guideline_ids: Iterable[str] = ()
    ) -> None:
        """Record a change and the feedback that caused it (ids only, never text)."""

    @abstractmethod
    def history(self) -> list[dict[str, Any]]:
        """Every recorded change, oldest first.

        Each entry: `seq` (increasing; a new memory's first change is 1), `at`
        (ISO time), `action`, and the sorted, distinct `feedback_ids` and
        `guideline_ids`.
        """

    # -- the agreement series ------------------------------------------------------

    @abstractmethod
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

    @abstractmethod
    def mark_align(self, conn: Any, learned: int) -> None:
        """Mark an align at the end of the series: it learned `learned` items."""

    @abstractmethod
    def prequential(self, feedback_ids: Iterable[str] | None = None) -> list[SeriesRow]:
        """The agreement series (or its reviews of `feedback_ids`), oldest first."""

    # -- copies --------------------------------------------------------------------

    @abstractmethod
    def dump(self) -> MemoryDump:
        """Every row of this memory, read at one version."""

    @abstractmethod
    def replace_with(self, d: MemoryDump, check: Callable[[], None] | None = None) -> None:
        """Make this memory a copy of `d`, in one transaction (one new version).

        The memory id comes from `d` (when it has one); the version number
        goes on from this memory's, so readers never see it go back. `check`
        runs first inside that transaction, once it holds the memory's write
        lock, and may raise to replace nothing: what it reads cannot change
        before the replacement (`save`'s check of what it replaces).
        """

    @abstractmethod
    def backup_to(self, folder: Path, *, exclusive: bool = False) -> None:
        """Write this memory into `folder` as a SQLite memory, atomically.

        Episode ids are kept, so an index built from either copy has the same ids.
        `exclusive`: only if `folder` holds no memory file, checked as the file is
        put in place (`FileExistsError` otherwise, with nothing written).
        """
