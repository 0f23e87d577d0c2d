"""How a judge's scale is written to, and read from, LangSmith feedback.

LangSmith feedback carries a numeric `score` and a display `value`;
categorical feedback configs give every category a number and a label (a
reviewer's pick is stored as `score=<number>, value=<label>`). A judge's
verdicts are written the same way, so labels round-trip:

- bool: score 1/0 (categories "pass"/"fail");
- numeric: the score, on a continuous config with the scale's bounds;
- categorical and pairwise: value = the category, score = its index.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from langsmith import schemas as ls_schemas

from langchain_memalign.errors import InvalidFeedbackError
from langchain_memalign.scale import Scale

MISSING = object()


def feedback_config(scale: Scale) -> ls_schemas.FeedbackConfig:
    """The LangSmith feedback config that matches a judge's scale."""
    if scale.kind == "numeric":
        return {"type": "continuous", "min": scale.low, "max": scale.high}
    if scale.kind == "bool":
        return {
            "type": "categorical",
            "categories": [{"value": 0, "label": "fail"}, {"value": 1, "label": "pass"}],
        }
    return {
        "type": "categorical",
        "categories": [{"value": i, "label": c} for i, c in enumerate(scale.choices)],
    }


def score_fields(scale: Scale, score: Any) -> dict[str, Any]:
    """`score`/`value` keyword arguments for a verdict on the judge's scale."""
    if scale.kind == "bool":
        return {"score": 1 if score else 0}
    if scale.kind == "numeric":
        return {"score": score}
    label = str(score)
    return {"value": label, "score": scale.choices.index(label)}


def comment_digest(comment: str | None) -> str:
    """A short digest of a verdict's comment, to recognize it later unedited."""
    return hashlib.sha256((comment or "").encode("utf-8")).hexdigest()[:16]


def get_path(root: Mapping[str, Any], path: str) -> Any:
    """`root["a"]["b"]` for `"a.b"`, or `MISSING` when any step is absent or None."""
    node: Any = root
    for part in path.split("."):
        if isinstance(node, Mapping) and part in node and node[part] is not None:
            node = node[part]
        else:
            return MISSING
    return node


def read_label(scale: Scale | None, root: Mapping[str, Any], paths: Sequence[str]) -> Any:
    """The first field among `paths` that is a valid label on `scale`, or `MISSING`.

    A numeric `score` on a categorical or pairwise scale is read as the index of
    the category, as LangSmith stores a reviewer's pick. Without a scale, the
    first present value is returned as is.
    """
    for path in paths:
        raw = get_path(root, path)
        if raw is MISSING or isinstance(raw, Mapping | list):
            continue
        if scale is None:
            return raw
        if (
            path.rsplit(".", 1)[-1] == "score"
            and scale.kind in ("categorical", "pairwise")
            and isinstance(raw, int | float)
            and not isinstance(raw, bool)
            and float(raw).is_integer()
            and 0 <= int(raw) < len(scale.choices)
        ):
            return scale.choices[int(raw)]
        try:
            return scale.validate_value(raw)
        except InvalidFeedbackError:
            continue
    return MISSING


def read_text(root: Mapping[str, Any], paths: Sequence[str]) -> str | None:
    """The first non-blank string among `paths`."""
    for path in paths:
        raw = get_path(root, path)
        if isinstance(raw, str) and raw.strip():
            return raw
    return None


def distance(scale: Scale, a: Any, b: Any) -> float:
    """How far apart two labels are, from 0 (same) to 1 (opposite ends)."""
    if scale.kind == "numeric":
        assert scale.low is not None and scale.high is not None
        try:
            return min(1.0, abs(float(a) - float(b)) / (scale.high - scale.low))
        except (TypeError, ValueError):
            return 1.0
    return 0.0 if a == b else 1.0
