"""Checks of a judge configuration read from, or about to be saved to, a memory.

A memory folder is untrusted input, so the configuration stored in it is
checked before use: its numbers must lie within `CONFIG_BOUNDS`
(`check_config_bounds`), it must be a valid `JudgeConfig` (`_stored_config`; a
configuration stored flat by earlier versions is read nested, `upgrade_stored_config`),
and reopening a memory must not change what it is, its judge's name, scale
and embeddings (`_check_identity`). Each failure is a `MemoryFormatError`
naming the folder, or a `ValueError` for a new judge's arguments.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ValidationError

from langchain_memalign.config import JudgeConfig, upgrade_stored_config
from langchain_memalign.errors import MemoryFormatError

# Bounds on the numbers of a judge configuration, by their place in it. A folder is
# untrusted input: `max_retries: 1e9` read from one would spend a billion model calls on
# one judgment, so a folder outside these bounds is refused (not clamped: a silently
# different judge is worse than a clear error), and a new judge cannot be created outside
# them either, so every saved judge reopens.
CONFIG_BOUNDS: dict[str, tuple[float, float]] = {
    "k": (0, 1_000),
    "options.max_retries": (0, 10),
    "options.retrieval.min_similarity": (-1.0, 1.0),
    "options.retrieval.min_similarity_with_rationale": (-1.0, 1.0),
    "options.retrieval.episode_max_chars": (100, 200_000),
    "options.retrieval.embed_max_chars": (50, 200_000),
    "options.retrieval.hnsw_threshold": (1, 1_000_000_000),
    "options.retrieval.hnsw_ef_search": (1, 100_000),
    "options.reflection.batch_size": (1, 1_000),
    "options.reflection.contrast": (0, 32),
    "options.reflection.source_support": (-1.0, 1.0),
    "options.reflection.guideline_token_budget": (50, 200_000),
    "options.validation.max_calls": (0, 10_000),
    "options.calibration.max_calls": (0, 10_000),
    "options.checks.min_agreement": (0.0, 1.0),
    "options.checks.test_cases": (0, 1_000),
    "options.checks.max_per_judgment": (0, 64),
    "options.checks.case_max_chars": (100, 200_000),
}

# Options whose `None` means "off" rather than a number out of bounds.
OPTIONAL = frozenset(
    {
        "options.reflection.source_support",
        "options.retrieval.min_similarity",
        "options.retrieval.min_similarity_with_rationale",
    }
)

# What a stored memory is: changing these would make its guidelines or its
# vectors mean something else, so they cannot change on reopening.
_IDENTITY = ("name", "scale", "options.retrieval.embed", "options.retrieval.embed_max_chars")

_MISSING = object()


def _at(values: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(values, BaseModel):
            values = getattr(values, part, _MISSING)
        elif isinstance(values, dict):
            values = values.get(part, _MISSING)
        else:
            return _MISSING
    return values


def _check_identity(old: JudgeConfig, new: JudgeConfig, folder: Any) -> None:
    changed = [f.removeprefix("options.") for f in _IDENTITY if _at(old, f) != _at(new, f)]
    if changed:
        raise MemoryFormatError(
            f"{folder}: holds the memory of judge {old.name!r} ({old.scale.kind} scale); "
            f"it cannot be reopened with a different {', '.join(changed)}. Open it with "
            "MemAlignJudge.load, or use another folder."
        )


def check_config_bounds(values: Any, *, where: Any) -> None:
    """Refuse a configuration whose numbers are outside `CONFIG_BOUNDS`.

    A configuration stored flat by earlier versions is checked as it is read, nested.
    With `where` (a folder) the error is `MemoryFormatError`; without, a
    `ValueError` about the arguments.
    """
    if not isinstance(values, dict):
        raise MemoryFormatError(f"{where}: meta.config is not an object")
    values = upgrade_stored_config(values)
    for field, (low, high) in CONFIG_BOUNDS.items():
        v = _at(values, field)
        if v is _MISSING or (v is None and field in OPTIONAL):
            continue
        ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        if ok and low <= v <= high:
            continue
        message = f"{field} = {v!r} is outside the accepted bounds ({low:g} to {high:g})"
        if where is None:
            raise ValueError(message)
        raise MemoryFormatError(f"{where}: meta.config.{message}")


def _stored_config(stored: Any, folder: Any) -> JudgeConfig:
    check_config_bounds(stored, where=folder)
    try:
        return JudgeConfig.model_validate(upgrade_stored_config(stored))
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'config'}: {err['msg']}"
            for err in e.errors()[:5]
        )
        raise MemoryFormatError(f"{folder}: meta.config is invalid ({problems})") from e
