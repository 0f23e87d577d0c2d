"""Reading JSONL input files and printing results."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator, Sequence
from typing import IO, Any, TextIO

from pydantic import ValidationError

from langchain_memalign.cli.judge_file import CLIError
from langchain_memalign.errors import (
    InvalidFeedbackError,
)
from langchain_memalign.feedback import Feedback
from langchain_memalign.reports import Usage
from langchain_memalign.scale import Scale

# -- input files -------------------------------------------------------------------------------


def open_text(path: str) -> IO[str]:
    """Open a text file for reading (`-`: stdin); the caller closes it."""
    if path == "-":
        return sys.stdin
    try:
        return open(path, encoding="utf-8")  # closed by the caller
    except OSError as e:
        raise CLIError(f"cannot read {path}: {e.strerror or e}") from None


def _rows(path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    fh = open_text(path)
    try:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise CLIError(f"{path}:{n}: not valid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise CLIError(f"{path}:{n}: expected a JSON object, got {type(row).__name__}")
            yield n, row
    finally:
        if fh is not sys.stdin:
            fh.close()


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(x) for x in err["loc"])
    return f"{where}: {err['msg']}" if where else str(err["msg"])


def read_feedback(path: str, scale: Scale) -> list[Feedback]:
    """Feedback from a JSONL file, with file:line in every error.

    A line is `Feedback` JSON (`id`, `inputs`, `outputs`, `reference_outputs`,
    `value`, `rationale`, `annotator`, `metadata`). Values are checked against
    the judge's scale; ids must be unique.
    """
    items: list[Feedback] = []
    seen: dict[str, int] = {}
    for n, row in _rows(path):
        try:
            if "value" in row:
                fb = Feedback.model_validate(row)
                value = scale.validate_value(fb.value, feedback_id=fb.id)
                fb = fb.model_copy(update={"value": value})
            else:
                raise CLIError(
                    f"{path}:{n}: no 'value' (the human score); a feedback line needs "
                    "at least id, inputs and value"
                )
        except ValidationError as e:
            raise CLIError(f"{path}:{n}: invalid feedback: {_first_error(e)}") from None
        except InvalidFeedbackError as e:
            raise CLIError(f"{path}:{n}: {e}") from None
        if fb.id in seen:
            raise CLIError(f"{path}:{n}: feedback id {fb.id!r} already used on line {seen[fb.id]}")
        seen[fb.id] = n
        items.append(fb)
    return items


def read_cases(path: str) -> list[tuple[str, dict[str, Any]]]:
    """Cases to judge from a JSONL file: `(id, {"inputs", "outputs", "reference_outputs"})`.

    `reference` is accepted for `reference_outputs`; other keys (labels,
    rationales) are ignored, so a feedback file can be judged as is. Cases
    without an `id` are named by their line number.
    """
    cases = []
    for n, row in _rows(path):
        if "inputs" not in row:
            raise CLIError(f"{path}:{n}: a case needs 'inputs' (and usually 'outputs')")
        ref = row.get("reference_outputs", row.get("reference"))
        case = {"inputs": row["inputs"], "outputs": row.get("outputs"), "reference_outputs": ref}
        cases.append((str(row.get("id", f"line-{n}")), case))
    return cases


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    """`items` in slices of `size`."""
    for i in range(0, len(items), max(size, 1)):
        yield items[i : i + size]


# -- output helpers ----------------------------------------------------------------------------


def echo(*parts: Any, file: TextIO | None = None) -> None:
    """Print to stdout (or `file`), looked up at call time so tests can capture it."""
    print(*parts, file=file or sys.stdout)


def to_json(value: Any) -> str:
    """One-line JSON, non-ASCII kept, unknown types as strings."""
    return json.dumps(value, ensure_ascii=False, default=str)


def fmt_number(x: Any, pct: bool = False) -> str:
    """A metric for display: `n/a` for missing, 3 decimals or a percentage."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if pct:
        return f"{100 * x:.1f}%"
    return f"{x:.3f}" if isinstance(x, float) else str(x)


def usage_line(usage: Usage, seconds: float) -> str:
    """The cost line printed after a command."""
    return (
        f"{usage.llm_calls} LLM call(s), {usage.total_tokens} tokens, "
        f"{usage.embedding_calls} embedding call(s); {seconds:.1f}s"
    )


def shorten(text: str, n: int = 160) -> str:
    """`text` on one line, cut to `n` characters."""
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


def parse_json_arg(value: str, option: str) -> Any:
    """Parse an option's value as JSON, or raise a `CLIError` naming the option."""
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise CLIError(f"{option}: not valid JSON ({e.msg}); drop --json-values for text") from None
