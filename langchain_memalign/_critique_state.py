"""The agent's state as the self-critique node reads and writes it.

`CritiqueState` is what the critique node writes under its state key; the
functions here are the node's defaults and hooks: `default_case` and
`case_from_messages` map an agent's state to the judge's input,
`default_passed` is the pass rule of a judge's scale, `default_note` the
revision note, and `note_as_message` an `on_revise` hook that sends the
note as a human message named `NOTE_MESSAGE_NAME`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict

from langchain_core.messages import BaseMessage, HumanMessage

from langchain_memalign.result import label_of
from langchain_memalign.scale import Scale

NOTE_MESSAGE_NAME = "critique"
"""The `name` of revision-note messages added by `note_as_message`."""

_CASE_KEYS = ("inputs", "outputs", "reference_outputs")


class CritiqueState(TypedDict, total=False):
    """What the critique node writes under its state key (`"critique"` by default).

    Add a key of this type to the agent's state. Each critique replaces it; a
    new chain of rounds starts once a chain has ended (`final`), so a
    multi-turn agent with a checkpointer gets fresh rounds for every answer.
    """

    case: dict[str, Any]
    """What the judge saw: `inputs`, `outputs`, `reference_outputs`."""
    result: dict[str, Any]
    """The judge's `JudgeResult`: `{"key", "score", "comment", "metadata"}` (and `"value"`)."""
    passed: bool
    """Whether the draft passed."""
    round: int
    """1 for the first critique of an answer, 2 after one revision, and so on."""
    final: bool
    """True when the draft passed or no revision round is left."""
    note: str | None
    """The revision note for the agent when the draft failed, else None."""
    history: list[dict[str, Any]]
    """Results of the earlier rounds of this answer, oldest first."""


def default_passed(scale: Scale) -> Callable[[dict[str, Any]], bool]:
    """The default pass rule for a judge's scale.

    - `bool`: the score is `True`.
    - numeric `(low, high)`: the score is at least the midpoint `(low + high) / 2`
      (3 on a 1–5 scale).
    - categorical: the label (`result["value"]`) is the first category; list categories best first,
      e.g. `["Excellent", "Acceptable", "Bad"]`, or pass `passed=` to accept more.
    - pairwise: no default (a single draft is not a pair); raises `ValueError`.
    """
    if scale.kind == "bool":
        return lambda result: result.get("score") is True
    if scale.kind == "numeric":
        assert scale.low is not None and scale.high is not None
        midpoint = (scale.low + scale.high) / 2
        return lambda result: _number(result.get("score")) >= midpoint
    if scale.kind == "categorical":
        best = scale.choices[0]
        return lambda result: label_of(result) == best
    raise ValueError(
        "a pairwise judge has no default pass rule for self-critique; pass "
        "`passed=lambda result: ...`"
    )


def _number(x: Any) -> float:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else float("-inf")


def default_note(result: Mapping[str, Any]) -> str:
    """The revision note sent back to the agent: the judge's rationale and score."""
    comment = str(result.get("comment") or "").strip() or "No rationale given."
    return (
        f"A reviewer ({result.get('key', 'judge')}) scored your draft {label_of(result)!r}: "
        f"{comment}\nRevise the draft to address this."
    )


def _get(state: Any, key: str) -> Any:
    if isinstance(state, Mapping):
        return state.get(key)
    return getattr(state, key, None)


def _text(message: Any) -> str:
    content = message.content if isinstance(message, BaseMessage) else message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks
        return "".join(
            b if isinstance(b, str) else str(b.get("text", "")) if isinstance(b, dict) else ""
            for b in content
        )
    return str(content)


def _role(message: Any) -> str:
    if isinstance(message, BaseMessage):
        return message.type
    return str(message.get("role") or message.get("type") or "")


def case_from_messages(state: Any) -> dict[str, Any]:
    """Judge input from a messages-based state (`state["messages"]`).

    `outputs` is the last AI message; `inputs` is the last human message before
    it that is not a revision note (see `note_as_message`).
    """
    messages: Sequence[Any] = _get(state, "messages") or []
    last_ai = next(
        (i for i in range(len(messages) - 1, -1, -1) if _role(messages[i]) in ("ai", "assistant")),
        None,
    )
    if last_ai is None:
        raise ValueError("self-critique: the state has no AI message to judge")
    inputs = next(
        (
            _text(m)
            for m in reversed(messages[:last_ai])
            if _role(m) in ("human", "user") and _name(m) != NOTE_MESSAGE_NAME
        ),
        None,
    )
    return {"inputs": inputs, "outputs": _text(messages[last_ai]), "reference_outputs": None}


def _name(message: Any) -> Any:
    return message.name if isinstance(message, BaseMessage) else message.get("name")


def default_case(state: Any) -> dict[str, Any]:
    """Judge input from the state's `inputs`/`outputs`/`reference_outputs` keys, or messages.

    Raises:
        TypeError: the state has neither an `outputs` key nor `messages`; pass `to_case`.
    """
    if _get(state, "outputs") is not None:
        return {k: _get(state, k) for k in _CASE_KEYS}
    if _get(state, "messages") is not None:
        return case_from_messages(state)
    raise TypeError(
        "self-critique cannot find the draft in the agent's state: give the state "
        "`inputs` and `outputs` keys or `messages`, or pass "
        "`to_case=lambda state: {'inputs': ..., 'outputs': ...}`"
    )


def note_as_message(state: Any, critique: CritiqueState) -> dict[str, Any]:
    """An `on_revise` hook for messages-based agents: the note as a human message.

    The message is named `"critique"` so that `case_from_messages` does not
    mistake it for the user's question.
    """
    return {"messages": [HumanMessage(content=critique.get("note") or "", name=NOTE_MESSAGE_NAME)]}
