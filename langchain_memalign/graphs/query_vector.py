"""A `query_vector` handed to the judge graph: checked before anything uses it.

The judge graph embeds each case itself; a caller that runs the graph inside
a graph of its own (`judge.graph` as a subgraph) may put a precomputed vector
in the state instead. Such a vector reaches FAISS and numpy as it is, where a
wrong length, a string or a NaN would fail deep inside a search (or, worse,
succeed with meaningless neighbours), so `check_query_vector` refuses it
first with `InvalidJudgeInputError`. `MemAlignJudge.invoke` takes no vector
at all (`graphs.cases`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Real
from typing import Any

import numpy as np

from langchain_memalign.errors import InvalidJudgeInputError

_FLOAT32_MAX = float(np.finfo(np.float32).max)
# Far above any embedding model's (a few thousand): a bound on what is checked.
MAX_DIMENSION = 65_536


def check_query_vector(vector: Any, dimension: int | None) -> None:
    """Raise `InvalidJudgeInputError` unless `vector` is a usable query vector.

    Usable: a flat list, tuple or 1-d numpy array of finite real numbers (not
    booleans, not strings), not empty, with `dimension` entries when the
    memory knows its dimension (it holds vectors), at most `MAX_DIMENSION`.
    """
    if isinstance(vector, np.ndarray):
        if (
            vector.ndim != 1
            or not np.issubdtype(vector.dtype, np.number)
            or np.issubdtype(vector.dtype, np.complexfloating)
        ):
            raise InvalidJudgeInputError(
                f"query_vector must be a flat vector of real numbers, got an array of shape "
                f"{vector.shape} and dtype {vector.dtype}"
            )
        values: Sequence[Any] = vector.tolist()
    elif isinstance(vector, list | tuple):
        values = vector
    else:
        raise InvalidJudgeInputError(
            f"query_vector must be a list of numbers, got {type(vector).__name__}"
        )
    n = len(values)
    if n == 0 or n > MAX_DIMENSION:
        raise InvalidJudgeInputError(
            f"query_vector has {n} numbers; a vector has 1 to {MAX_DIMENSION:,}"
        )
    if dimension is not None and n != dimension:
        raise InvalidJudgeInputError(
            f"query_vector has {n} numbers, but this memory's vectors have {dimension}"
        )
    if _all_finite_reals(values):
        return
    for i, v in enumerate(values):  # which entry is wrong, for the message
        if not _finite_real(v):
            raise InvalidJudgeInputError(
                f"query_vector[{i}] is {v!r:.40}; every entry must be a finite number "
                "(within float32's range)"
            )


def _all_finite_reals(values: Sequence[Any]) -> bool:
    """Whether every entry is a finite real within float32's range, checked at once.

    The common case, a vector of floats the judge itself computed, costs one numpy
    pass; anything numpy does not read as plain numbers (booleans, strings, objects,
    ints past 64 bits) is left to the entry-by-entry check.
    """
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError, OverflowError):
        return False
    if arr.ndim != 1 or arr.dtype.kind not in "fiu":
        return False
    return bool(np.all(np.abs(arr.astype(np.float64)) <= _FLOAT32_MAX))


def _finite_real(v: Any) -> bool:
    # bool is an int, and numpy's bool is not a Real: both refused. The vector is
    # searched as float32: a finite float64 past its range would become infinite.
    if isinstance(v, bool) or not isinstance(v, Real):
        return False
    try:
        x = float(v)
    except (OverflowError, ValueError, TypeError):
        return False
    return math.isfinite(x) and abs(x) <= _FLOAT32_MAX
