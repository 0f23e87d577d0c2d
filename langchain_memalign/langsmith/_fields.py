"""How a judge's scale is written to, and read from, LangSmith feedback.

LangSmith feedback carries a numeric `score` and a display `value`;
categorical feedback configs give every category a number and a label (a
reviewer's pick is stored as `score=<number>, value=<label>`). A judge's
verdicts are written the same way, so labels round-trip:

- bool: score 1/0 (categories "pass"/"fail");
- numeric: the score, on a continuous config with the scale's bounds;
- categorical: value = the category, score = its index;
- pairwise: value = "A", "B" or "tie", score = 1, 2 or 0, the numbers
  `Scale.validate_value` reads ("1" is the first response, "0" a tie), so a
  reviewer's pick and a label typed as a number mean the same thing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from langsmith import schemas as ls_schemas

from langchain_memalign.errors import InvalidFeedbackError
from langchain_memalign.scale import Scale

MISSING = object()


def category_numbers(scale: Scale) -> dict[str, int]:
    """The number LangSmith stores for each label of a categorical, pairwise or bool scale."""
    if scale.kind == "bool":
        return {"fail": 0, "pass": 1}
    # One mapping for the whole package (the JudgeResult's score uses it too).
    return scale.label_numbers()


def feedback_config(scale: Scale) -> ls_schemas.FeedbackConfig:
    """The LangSmith feedback config that matches a judge's scale."""
    if scale.kind == "numeric":
        return {"type": "continuous", "min": scale.low, "max": scale.high}
    numbers = category_numbers(scale)
    return {
        "type": "categorical",
        "categories": [{"value": n, "label": label} for label, n in numbers.items()],
    }


def same_config(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two feedback configs interpret feedback the same way."""
    if a.get("type") != b.get("type"):
        return False
    if a.get("type") == "continuous":
        return all(_num(a.get(k)) == _num(b.get(k)) for k in ("min", "max"))
    if a.get("type") == "categorical":

        def cats(c: Mapping[str, Any]) -> set[tuple[float | None, Any]]:
            return {(_num(x.get("value")), x.get("label")) for x in c.get("categories") or []}

        return cats(a) == cats(b) and bool(a.get("allows_multiple_categories")) == bool(
            b.get("allows_multiple_categories")
        )
    return True


def describe_config(config: Mapping[str, Any]) -> str:
    """A feedback config in a few words, for error messages."""
    if config.get("type") == "continuous":
        return f"continuous {_show(config.get('min'))}–{_show(config.get('max'))}"
    if config.get("type") == "categorical":
        cats = ", ".join(
            f"{_show(c.get('value'))}={c.get('label')}" for c in config.get("categories") or []
        )
        return f"categorical ({cats})"
    return str(config.get("type"))


def _show(x: Any) -> str:
    return f"{x:g}" if isinstance(x, int | float) and not isinstance(x, bool) else str(x)


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def score_fields(scale: Scale, score: Any) -> dict[str, Any]:
    """`score`/`value` keyword arguments for a verdict on the judge's scale."""
    if scale.kind == "bool":
        return {"score": 1 if score else 0}
    if scale.kind == "numeric":
        return {"score": score}
    label = str(score)
    return {"value": label, "score": category_numbers(scale)[label]}


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

    A numeric `score` on a categorical or pairwise scale is read as the number
    of the category in the config we write (`category_numbers`), as LangSmith
    stores a reviewer's pick. Without a scale, the
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
        ):
            by_number = {n: label for label, n in category_numbers(scale).items()}
            if int(raw) in by_number:
                return by_number[int(raw)]
            continue
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
