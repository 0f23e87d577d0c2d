"""StructuredCaller: a verdict by tool call, salvaged from JSON in text, or in text mode;
unusable output (off the schema, or refused by a check) is retried with the error, and
gives a clear MalformedOutputError once the retries are spent; the async twin."""

from __future__ import annotations

import pytest
from fakes import ScriptedChatModel
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage

from langchain_memalign import MalformedOutputError, Scale
from langchain_memalign.prompting.structured import StructuredCaller

SCHEMA = Scale.of((1, 5)).verdict_schema()
MSGS = [HumanMessage(content="grade this")]


def test_tool_call_route() -> None:
    model = ScriptedChatModel(responder=lambda m: {"rationale": "fine", "score": 4})
    out, usage = StructuredCaller(model, SCHEMA, what="t").invoke(MSGS)
    assert (out.rationale, out.score) == ("fine", 4)
    assert usage.llm_calls == 1 and usage.input_tokens > 0


def test_json_in_text_is_salvaged_when_no_tool_call() -> None:
    model = ScriptedChatModel(
        responder=lambda m: '```json\n{"rationale": "ok", "score": 2}\n```', use_tools=False
    )
    out, usage = StructuredCaller(model, SCHEMA, what="t").invoke(MSGS)
    assert out.score == 2 and usage.llm_calls == 1


def test_model_without_structured_output_uses_text_mode() -> None:
    model = FakeListChatModel(responses=['Sure: {"rationale": "r", "score": 5}'])
    out, _ = StructuredCaller(model, SCHEMA, what="t").invoke(MSGS)
    assert out.score == 5


def test_malformed_output_is_retried_with_the_error(caplog: pytest.LogCaptureFixture) -> None:
    replies = iter([{"rationale": "r", "score": 9}, {"rationale": "r", "score": 3}])
    model = ScriptedChatModel(responder=lambda m: next(replies))
    with caplog.at_level("INFO", logger="langchain_memalign"):
        out, usage = StructuredCaller(model, SCHEMA, what="t", retries=2).invoke(MSGS)
    assert out.score == 3 and usage.llm_calls == 2
    assert "t: unusable model output" in caplog.text and "retrying" in caplog.text
    retry_prompt = model.calls[1][-1].content
    assert "could not be used" in retry_prompt and "score" in retry_prompt


def test_garbage_raises_clear_error_after_retries() -> None:
    model = ScriptedChatModel(responder=lambda m: AIMessage(content="I refuse."))
    caller = StructuredCaller(model, SCHEMA, what="judge 'x'", retries=1)
    with pytest.raises(MalformedOutputError, match="judge 'x'.*2 time.*I refuse") as exc:
        caller.invoke(MSGS)
    assert exc.value.usage.llm_calls == 2
    assert len(model.calls) == 2


def test_check_rejects_schema_valid_answers() -> None:
    replies = iter([{"rationale": "", "score": 1}, {"rationale": "why", "score": 1}])
    model = ScriptedChatModel(responder=lambda m: next(replies))

    def check(v: object) -> None:
        if not v.rationale:  # type: ignore[attr-defined]
            raise ValueError("empty rationale")

    out, usage = StructuredCaller(model, SCHEMA, what="t", check=check).invoke(MSGS)
    assert out.rationale == "why" and usage.llm_calls == 2


async def test_async_twin() -> None:
    model = ScriptedChatModel(responder=lambda m: {"rationale": "a", "score": 1})
    out, usage = await StructuredCaller(model, SCHEMA, what="t").ainvoke(MSGS)
    assert out.score == 1 and usage.llm_calls == 1
