"""The stored form of a memory's values, the same in every backend.

Feedback is stored as JSON (`encode_feedback`), vectors as raw float32
bytes, times as ISO 8601 text in UTC, and guidelines as rows with their
sources listed apart (`guidelines_from_rows`). Both the SQLite and the
PostgreSQL store write and read them here, so a memory copied between
backends keeps every value as it was.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import numpy as np

from langchain_memalign import limits
from langchain_memalign.errors import InvalidFeedbackError
from langchain_memalign.feedback import Feedback, storable_problem
from langchain_memalign.memory.semantic import Guideline


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _vec_blob(v: np.ndarray) -> bytes:
    return np.asarray(v, dtype=np.float32).tobytes()


def _vector(blob: Any) -> np.ndarray:
    if not isinstance(blob, bytes) or not blob or len(blob) % 4:
        raise ValueError(f"a stored vector is not float32 bytes ({type(blob).__name__})")
    return np.frombuffer(blob, dtype=np.float32).copy()


def _matrix(rows: list[tuple[Any, ...]]) -> tuple[list[int], np.ndarray | None]:
    """Ids and vectors of (id, float32 bytes) rows, as one matrix (one copy of the bytes)."""
    if not rows:
        return [], None
    ids = [int(r[0]) for r in rows]
    lengths = {len(r[1]) for r in rows}
    if len(lengths) != 1:
        raise ValueError("episode vectors of different dimensions")
    (length,) = lengths
    if not length or length % 4:
        raise ValueError(f"a stored vector is not float32 bytes ({length} bytes)")
    # Read-only view of the joined bytes: the index copies (and normalizes) it anyway.
    mat = np.frombuffer(b"".join(bytes(r[1]) for r in rows), dtype=np.float32)
    mat = mat.reshape(len(rows), length // 4)
    if not np.isfinite(mat).all():
        raise ValueError("non-finite numbers in episode vectors")
    return ids, mat


def encode_feedback(fb: Feedback) -> str:
    """The JSON stored for a feedback item; `InvalidFeedbackError` if it cannot round-trip.

    JSON has no NaN or Infinity (pydantic would write them as `null`, silently
    changing the feedback) and the databases store text as UTF-8 (a lone
    surrogate cannot be encoded), so both are refused here, before anything
    is written.
    """
    limits.check_feedback(fb)  # LimitExceededError: nothing is written
    try:
        problem = storable_problem(fb.model_dump())
        if problem:
            raise ValueError(problem)
        text = json.dumps(fb.model_dump(mode="json"), ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")
    except (ValueError, TypeError, UnicodeError, RecursionError) as e:
        raise InvalidFeedbackError(
            f"feedback {fb.id!r} cannot be stored: {type(e).__name__}: {e}", feedback_id=fb.id
        ) from e
    return text


def guidelines_from_rows(
    rows: Iterable[tuple[Any, ...]], sources: Iterable[tuple[str, str]]
) -> tuple[list[Guideline], np.ndarray | None]:
    """Guidelines from `(id, text, vector, created_at)` rows and `(guideline, feedback)` pairs.

    The stored form is the same in the folder and the database backend, so both
    read it here. Vectors come back only if every guideline has one.
    """
    rows = list(rows)
    src: dict[str, list[str]] = {}
    for gid, fid in sources:
        src.setdefault(gid, []).append(fid)
    guidelines = [
        Guideline(
            id=gid, text=text, source_ids=tuple(src.get(gid, ())),
            created_at=datetime.fromisoformat(created),
        )
        for gid, text, _, created in rows
    ]  # fmt: skip
    if rows and all(r[2] is not None for r in rows):
        vectors = [_vector(bytes(r[2])) for r in rows]  # bytes(): PostgreSQL gives memoryview
        if len({v.shape[0] for v in vectors}) != 1:
            raise ValueError("guideline vectors of different dimensions")
        return guidelines, np.stack(vectors)
    return guidelines, None
