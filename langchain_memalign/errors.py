"""Exceptions raised by langchain-memalign.

Every error names the thing that was wrong (a feedback id, a file, a model
output) so that a user can fix the input rather than debug the library.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AlignFailedError",
    "EmbeddingMismatchError",
    "FeedbackConfigMismatchError",
    "InvalidFeedbackError",
    "InvalidFeedbackIdError",
    "InvalidJudgeInputError",
    "InvalidRuleError",
    "LimitExceededError",
    "MalformedOutputError",
    "MemAlignError",
    "MemoryBusyError",
    "MemoryFormatError",
    "MemoryFullError",
    "MemoryPermissionError",
    "MemoryReadOnlyError",
    "MemoryUnavailableError",
    "ReflectionError",
    "UnknownFeedbackError",
    "UnknownRuleError",
]


class MemAlignError(Exception):
    """Base class of all langchain-memalign errors."""


class InvalidFeedbackError(MemAlignError, ValueError):
    """A feedback item is malformed or its value is outside the judge's scale.

    Raised by `align` (before any model call) and by the store itself for
    content that cannot be stored unchanged: NaN or Infinity anywhere in the
    values or metadata (JSON would turn them into `null`), text that is not
    valid Unicode (a lone surrogate), nesting deeper than 64 levels,
    objects that cannot be serialized, or a NUL character in the id or the
    rationale (PostgreSQL cannot store it; refused on every memory alike).
    Nothing of the call is stored.
    Constructing a `Feedback` directly with such content raises pydantic's
    `ValidationError` (also a `ValueError`).
    """

    def __init__(self, message: str, *, feedback_id: str | None = None) -> None:
        super().__init__(message)
        self.feedback_id = feedback_id


class UnknownFeedbackError(MemAlignError, KeyError):
    """Ids passed to `unalign` (or a lookup) that the memory does not hold."""

    def __init__(self, ids: list[str]) -> None:
        self.ids = ids
        super().__init__(f"unknown feedback id(s): {', '.join(repr(i) for i in ids)}")

    def __str__(self) -> str:
        # KeyError quotes its argument; keep the message readable.
        return str(self.args[0])


class InvalidFeedbackIdError(UnknownFeedbackError, ValueError):
    """An id no feedback can have, given to `get_feedback`, `unalign` or `calibrate`.

    Not a string, text that is not valid Unicode (a lone surrogate), longer
    than `limits.MAX_ID_CHARS`, or, on a PostgreSQL memory, holding a NUL
    character (PostgreSQL text cannot): `align` never stores such an id, so
    no memory holds it. Raised before the memory is read; nothing changes.
    Also an `UnknownFeedbackError` (code that handles unknown ids handles
    these) and a `ValueError`. `ids` are the offending ids as given, `reasons`
    what is wrong with each.
    """

    def __init__(self, problems: list[tuple[Any, str]]) -> None:
        """`problems`: each offending id with why no feedback can have it."""
        super().__init__([])
        self.ids = [fid for fid, _ in problems]
        self.reasons = [why for _, why in problems]
        shown = "; ".join(f"{_short(fid)}: {why}" for fid, why in problems[:5])
        more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
        self.args = (f"invalid feedback id(s), which no memory holds: {shown}{more}",)


def _short(value: Any) -> str:
    """`repr(value)`, cut to 80 characters: an id may be megabytes long."""
    text = repr(value) if isinstance(value, str) else f"{type(value).__name__} {value!r}"
    return text if len(text) <= 80 else text[:77] + "..."


class InvalidJudgeInputError(MemAlignError, TypeError, ValueError):
    """A judgment's input is not a case the judge takes.

    From `invoke`, `batch`, `judge(...)` and their async twins: an input that
    is not a dict with an `"inputs"` key, or that has a key other than
    `"inputs"`, `"outputs"` and `"reference_outputs"`. The judge graph's own
    state (`query_vector`, `memory_seq`, `guidelines`, `episodes`, `result`)
    is refused there: it is computed by the judge, never taken from a caller.

    From the judge graph itself (`judge.graph`, used as a subgraph of your
    own graph, where the state may carry a precomputed `query_vector`): a
    `query_vector` that is not a flat list (or array) of finite numbers with
    the memory's dimension. Nothing is embedded, retrieved or asked of a model.

    Both a `TypeError` (as earlier versions raised for a malformed input) and
    a `ValueError`.
    """


class MalformedOutputError(MemAlignError, ValueError):
    """The model kept returning output that does not match the expected schema."""

    def __init__(self, message: str, *, raw_output: Any = None) -> None:
        super().__init__(message)
        self.raw_output = raw_output
        self.usage: Any = None  # the calls and tokens spent on the failed attempts


class ReflectionError(MemAlignError):
    """Some reflection batches failed; their feedback is stored and kept pending.

    The feedback of failed batches is stored as episodes and marked as not yet
    reflected, so the next `align` retries the distillation. `report` is the
    report of the alignment that did go through.
    """

    def __init__(self, message: str, *, report: Any = None) -> None:
        super().__init__(message)
        self.report = report


class AlignFailedError(MemAlignError):
    """An `align`, `unalign` or `calibrate` failed part-way and was rolled back: nothing changed.

    Most often a model or embedding provider failed (a connection error, a
    rate limit, a timeout) after the call had started, in any of its steps.
    Every such call is one transaction, so the memory (guidelines, episodes, stored
    feedback and whether it is distilled, calibration pairs) is exactly as it was before the
    call, in the folder or database and in process. The message names the operation and
    the underlying error; `__cause__` is the original exception, for code
    that retries on a provider's own error type. Model output that stays
    unusable after retries is `MalformedOutputError` instead, and failed
    reflections that keep their feedback pending are `ReflectionError`.
    """

    def __init__(self, message: str, *, operation: str = "align") -> None:
        super().__init__(message)
        self.operation = operation


class LimitExceededError(InvalidFeedbackError):
    """Feedback exceeds a size limit of `langchain_memalign.limits`.

    Raised by `align` before any model call, and by the store for anything
    it is asked to write past a limit (nothing of the call is stored).
    `field` names what is too large and `limit` the limit it exceeds; the
    limits are module constants that may be raised for a deployment.
    """

    def __init__(
        self, message: str, *, field: str, limit: int, feedback_id: str | None = None
    ) -> None:
        super().__init__(message, feedback_id=feedback_id)
        self.field = field
        self.limit = limit


class MemoryFormatError(MemAlignError):
    """A memory folder is missing, corrupt, or from an incompatible version.

    Raised when opening a folder (`MemAlignJudge.load`, the constructor with
    `path`, `memalign show`) and by any later read or write of it, instead of
    the raw `sqlite3`, JSON or pydantic error underneath: an unreadable or
    truncated `memory.sqlite`, a missing table or column, another schema
    version, unparsable JSON in the `meta` table (the message names the key),
    a stored configuration that is invalid or has a number outside the
    accepted bounds (the message names the field), a damaged row. It is also
    raised when an existing folder holds another judge (different name, scale
    or embedded text), and by `save` into a folder or database judge that
    holds the memory of a judge of another name or scale (nothing is written;
    `save(..., overwrite=True)` replaces it). A damaged `episodes.faiss` cache never raises: it is
    rebuilt from the stored vectors.

    A memory that is merely busy (`MemoryBusyError`), on a full disk
    (`MemoryFullError`) or read-only (`MemoryReadOnlyError`) raises those
    errors instead: they say nothing of the memory's content.
    """


class MemoryBusyError(MemAlignError, TimeoutError):
    """Another connection was writing the memory and kept it past the wait.

    A memory folder has one writer at a time: while another process (or
    another judge object, or `sqlite3` in a terminal) holds its write
    transaction, a write waits for it (SQLite's busy timeout, 5 s) and then
    raises this error, as does a read that meets the other writer's commit
    for that long. On a `postgresql://` memory it is a statement that waited
    longer than the role's `lock_timeout`, or a call that found every
    connection of the process's pool (`pool_size`) in use for the pool's
    wait (30 s). The memory is not damaged and the
    failed call changed nothing: retry it once the other writer is done.
    Also a `TimeoutError`, so generic retry code handles it.
    """


class MemoryFullError(MemAlignError, OSError):
    """The disk holding the memory is full: the memory could not be written.

    Raised by any write (`align`, `unalign`, rulebook actions, opening a new
    memory) and by `save`, for SQLite's "database or disk is full", a
    temporary file or index cache that cannot be written for want of space
    (`errno` is then the system's, `ENOSPC`), or PostgreSQL's `disk_full`.
    The failed write was rolled back and a failed `save` leaves its target
    folder as it was: nothing changed. Also an `OSError`, which `save`
    raised for a full disk before this error existed.
    """


class MemoryReadOnlyError(MemAlignError, OSError):
    """The memory cannot be written: its file, folder or volume is read-only.

    A judge shipped on a read-only volume, or in a folder its process may not
    write, opens and judges; a write (`align`, `unalign`, rulebook actions,
    the constructor when it must store a changed configuration, `save` into
    such a folder) raises this error instead, and changes nothing. `close`
    does not raise it: the index cache it writes is only a cache. On a
    `postgresql://` memory it is a read-only transaction (a standby server,
    or `default_transaction_read_only`). Also an `OSError` (`errno` is the
    system's when a file operation was refused).
    """


class MemoryPermissionError(MemoryFormatError):
    """PostgreSQL refused the URL's role: authentication failed, or a privilege is missing.

    Only for a `postgresql://` memory. Opening raises it as soon as the server
    refuses to authenticate the URL's role (a wrong password, no `pg_hba.conf`
    entry, no such role: SQLSTATE 28P01 or 28000; the message says
    "authentication failed" and names the role), without retrying until
    `open_timeout`: a wrong password stays wrong. It is also raised by opening, judging, `align`,
    `unalign` or `save` when the role lacks a privilege the action needs (no
    `USAGE` on the URL's schema, `SELECT` only where a write was asked,
    no `CREATE` where the tables or the schema are to be created). The
    message names the role and what PostgreSQL refused. Retrying cannot help,
    so it is not a `ConnectionError`; it is a `MemoryFormatError`, so code
    that handles a memory it cannot use handles it. The refused statement is
    rolled back: nothing of it is stored.
    """


class MemoryUnavailableError(MemAlignError, ConnectionError):
    """The database holding a memory cannot be reached, or dropped the connection.

    Only for a `postgresql://` memory: raised when opening it (after the URL's
    `open_timeout`, 30 s by default), also when the server answers but has no
    connection to spare (SQLSTATE 53300, too many connections: its
    `max_connections`, or the role's or the database's connection limit, is
    reached), and by a judgment or read whose connection fails (the server
    stopped or restarted, the network broke, an administrator ended the
    session). Also a `ConnectionError`, so generic
    retry code handles it; the pool replaces the broken connection and the
    next call reconnects. Inside `align` and `unalign` it is the `__cause__`
    of `AlignFailedError`. A transaction that did not commit is rolled back
    by the server, so nothing of the failed call is stored.
    """


class EmbeddingMismatchError(MemAlignError):
    """A memory is opened with a different embedding model than it was built with.

    Raised on opening when the memory names its embedding model
    (`meta.embeddings`) and the one given is another. A memory that does not
    name it (written by an early version, or by hand) is opened; the first
    embedding whose dimension differs from the stored vectors' (in a judgment
    or an `align`) raises this error, naming both dimensions, before anything
    is retrieved or stored.
    """


class FeedbackConfigMismatchError(MemAlignError, ValueError):
    """The LangSmith workspace interprets the judge's feedback key on another scale.

    Reviews written on that config (e.g. 0–10 for a pass/fail judge) could not
    be read on the judge's scale, so nothing is created until the workspace
    config, the judge's name or its scale is changed.
    """

    def __init__(self, message: str, *, key: str, existing: Any = None, wanted: Any = None) -> None:
        super().__init__(message)
        self.key = key
        self.existing = existing
        self.wanted = wanted


class UnknownRuleError(MemAlignError, KeyError):
    """A rulebook action named a guideline id the memory does not hold."""

    def __init__(self, rule_id: str) -> None:
        self.rule_id = rule_id
        super().__init__(f"unknown rule id {rule_id!r} (see `judge.rules.list()`)")

    def __str__(self) -> str:
        # KeyError quotes its argument; keep the message readable.
        return str(self.args[0])


class InvalidRuleError(MemAlignError, ValueError):
    """A rulebook action was refused: the message says why, and nothing changed.

    Empty text or author, text with a NUL character or a lone surrogate (no
    backend stores it unchanged), a text over `limits.MAX_GUIDELINE_CHARS`, a text that
    another rule already states, an edit that changes nothing, rejecting without
    a reason, rejecting a pinned rule (unpin it first), or a memory already at
    `limits.MAX_GUIDELINES`.
    """

    def __init__(self, message: str, *, rule_id: str | None = None) -> None:
        super().__init__(message)
        self.rule_id = rule_id
