"""The stored form of the agreement series, the same in every backend.

A row of the series is a review (`kind` "review": the judge's earlier verdict
and the expert's, JSON text, for one feedback id) or an align (`kind` "align":
how many feedback items it learned). Both stores read their rows into
`SeriesRow` dicts here, so a series copied between backends reads the same.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Literal, TypedDict

__all__ = ["SeriesRow", "encode_value", "series_rows"]

_KINDS = ("review", "align")


class SeriesRow(TypedDict):
    """One stored row of the agreement series."""

    seq: int
    """Increasing in the order the rows were recorded."""
    at: str
    """When it was recorded (ISO 8601, UTC)."""
    kind: Literal["review", "align"]
    feedback_id: str | None
    """The review's feedback id (None for an align)."""
    judge: Any
    """The judge's verdict from before it learned the review (None for an align)."""
    expert: Any
    """The expert's verdict (None for an align)."""
    source: str | None
    """Where the judge's verdict came from: "langsmith", "score_first", "self_critique"
    or "given"."""
    learned: int | None
    """For an align: how many new or changed feedback items it learned."""


def encode_value(value: Any) -> str:
    """A verdict as stored: JSON text (a bool, a number or a label)."""
    return json.dumps(value, allow_nan=False)


def series_rows(rows: Iterable[Sequence[Any]]) -> list[SeriesRow]:
    """Stored rows `(seq, at, kind, feedback_id, judge, expert, source, learned)` as dicts.

    Raises `ValueError` (the stores' readers turn it into `MemoryFormatError`) on
    a row no version of this package writes.
    """
    out: list[SeriesRow] = []
    for seq, at, kind, fid, judge, expert, source, learned in rows:
        if kind not in _KINDS or not isinstance(at, str):
            raise ValueError(f"a row of the agreement series is of kind {kind!r}")
        review = kind == "review"
        if review and (not isinstance(fid, str) or judge is None or expert is None):
            raise ValueError(f"review row {seq} lacks its feedback id or verdicts")
        out.append(
            SeriesRow(
                seq=int(seq),
                at=at,
                kind=kind,
                feedback_id=fid if review else None,
                judge=json.loads(judge) if review else None,
                expert=json.loads(expert) if review else None,
                source=source if review else None,
                learned=None if review or learned is None else int(learned),
            )
        )
    return out
