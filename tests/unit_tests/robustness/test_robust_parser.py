"""A model whose own `with_structured_output` raises is retried."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import ScriptedChatModel
from langchain_core.exceptions import OutputParserException
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableLambda

from langchain_memalign import MalformedOutputError, Scale
from langchain_memalign.prompting.structured import StructuredCaller

SCHEMA = Scale.of((1, 5)).verdict_schema()
MSGS = [HumanMessage(content="grade this")]


class RaisingStructuredModel(ScriptedChatModel):
    """A provider whose structured output raises on unparsable replies, `include_raw` or not."""

    def with_structured_output(self, schema: Any, **kwargs: Any) -> Any:
        def call(messages: Any) -> Any:
            reply = self.invoke(messages)
            if reply.content == "garbage":
                raise OutputParserException("Invalid json output: garbage", llm_output="garbage")
            return {"raw": reply, "parsed": SCHEMA.model_validate_json(str(reply.content))}

        return RunnableLambda(call)


def test_raised_output_parser_exception_is_retried_then_malformed_output_error() -> None:
    model = RaisingStructuredModel(responder=lambda m: "garbage", use_tools=False)
    caller = StructuredCaller(model, SCHEMA, what="judge 'x'", retries=2)
    with pytest.raises(MalformedOutputError, match="judge 'x'.*3 time.*garbage") as err:
        caller.invoke(MSGS)
    assert len(model.calls) == 3 and err.value.usage.llm_calls == 3
    assert err.value.raw_output == "garbage"
    # The retry showed the model its reply and the parser's complaint.
    assert "could not be parsed" in str(model.calls[1][-1].content)


async def test_raised_output_parser_exception_is_retried_async() -> None:
    model = RaisingStructuredModel(responder=lambda m: "garbage", use_tools=False)
    with pytest.raises(MalformedOutputError):
        await StructuredCaller(model, SCHEMA, what="t", retries=1).ainvoke(MSGS)
    assert len(model.calls) == 2


def test_a_retry_after_a_raised_parser_error_can_succeed() -> None:
    replies = iter(["garbage", '{"rationale": "fine", "score": 4}'])
    model = RaisingStructuredModel(responder=lambda m: next(replies), use_tools=False)
    out, usage = StructuredCaller(model, SCHEMA, what="t", retries=2).invoke(MSGS)
    assert out.score == 4 and usage.llm_calls == 2
