"""Structured model output that works with hosted and local OpenAI-compatible servers.

OpenAI-style models get `json_schema` structured output (local servers such as
llama.cpp enforce it with a grammar but ignore forced tool calls); other chat
models use their own `with_structured_output`; models without one are asked
for JSON in text. Whatever the route, unusable output is sent back to the
model with the validation error and retried, then raised as
`MalformedOutputError`. Usage (calls and tokens) is counted on every attempt.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from langchain_core.exceptions import OutputParserException
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.rate_limiters import BaseRateLimiter
from langchain_core.runnables import (
    Runnable,
    RunnableConfig,
    RunnableParallel,
    RunnableSequence,
    RunnableWithFallbacks,
)
from langchain_core.runnables.passthrough import RunnableAssign
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, ValidationError

from langchain_memalign import limits
from langchain_memalign._text import extract_json, truncate
from langchain_memalign.errors import MalformedOutputError
from langchain_memalign.reports import Usage

T = TypeVar("T", bound=BaseModel)
logger = logging.getLogger(__name__)


def _supports_json_schema(model: BaseChatModel) -> bool:
    """OpenAI-compatible models that take `response_format={"type": "json_schema"}`."""
    if "langchain_openai" not in sys.modules:
        # Not imported, so the model cannot be one of its classes; importing it
        # would only add seconds to the first judge of a process.
        return False
    try:
        from langchain_openai.chat_models.base import BaseChatOpenAI
    except ImportError:  # pragma: no cover - langchain-openai is a dependency
        return False
    if not isinstance(model, BaseChatOpenAI):
        return False
    name = model.model_name or ""
    # The models OpenAI lists as lacking structured outputs (as langchain-openai does).
    return not (name.startswith(("gpt-3", "gpt-4-")) or name == "gpt-4")


def _response_format(schema: type[BaseModel]) -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {
            "name": schema.__name__,
            "description": (schema.__doc__ or "").strip(),
            "schema": schema.model_json_schema(),
            "strict": False,
        },
    }


class StructuredCaller(Generic[T]):
    """Calls a chat model for one pydantic schema, with validation and retries.

    `check` may raise `ValueError` to reject a schema-valid but unusable answer
    (a guideline citing no feedback, say); the model then gets another try.
    """

    def __init__(
        self,
        model: BaseChatModel,
        schema: type[T],
        *,
        what: str,
        retries: int = 2,
        check: Callable[[T], None] | None = None,
        rate_limiter: BaseRateLimiter | None = None,
        budgeted: bool = True,
    ) -> None:
        self.schema = schema
        # Alignment prompts (reflection, re-derivation, narrowing, consolidation) are
        # kept within `limits.PROMPT_TOKEN_BUDGET`; a judgment shows its case whole.
        self.budgeted = budgeted
        self.rate_limiter = rate_limiter
        self.what = what
        self.retries = retries
        self.check = check
        # "json_schema": the reply's text is the JSON (bound directly rather than
        # through with_structured_output, whose include_raw map costs a thread
        # hop per call); "structured": the model's own with_structured_output;
        # "text": JSON asked for in the prompt.
        self._mode: str
        self._runnable: Runnable[Any, Any]
        # (model, parser) of a standard `include_raw` composition, run one after the
        # other by `_call`; None: the runnable is called as it is.
        self._steps: tuple[Runnable[Any, Any], Runnable[Any, Any]] | None = None
        if _supports_json_schema(model):
            self._mode = "json_schema"
            self._runnable = model.bind(
                response_format=_response_format(schema),
                ls_structured_output_format={
                    "kwargs": {"method": "json_schema", "strict": False},
                    "schema": convert_to_openai_tool(schema),
                },
            )
        else:
            try:
                self._runnable = model.with_structured_output(schema, include_raw=True)
                self._mode = "structured"
                self._steps = _include_raw_steps(self._runnable)
            except NotImplementedError:
                logger.info(
                    "%s: %s has no structured output; asking for JSON in the text",
                    what,
                    type(model).__name__,
                )
                self._mode = "text"
                self._runnable = model

    def _prepare(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        msgs = limits.fit_prompt(list(messages)) if self.budgeted else list(messages)
        if self._mode == "text":
            schema = json.dumps(self.schema.model_json_schema())
            msgs.append(
                SystemMessage(
                    content="Reply with only a JSON object that matches this JSON schema:\n"
                    + schema
                )
            )
        return msgs

    def _parse(self, result: Any) -> tuple[T | None, AIMessage | None, str | None]:
        """Return (parsed, raw message, error)."""
        if self._mode != "structured":
            raw = result if isinstance(result, AIMessage) else None
            parsed = None
            error: str | None = None
        else:
            raw = result.get("raw")
            parsed = result.get("parsed")
            err = result.get("parsing_error")
            error = str(err) if err else None
        if isinstance(parsed, self.schema):
            return self._checked(parsed, raw)
        if parsed is not None:
            try:
                return self._checked(self.schema.model_validate(parsed), raw)
            except ValidationError as e:
                return None, raw, _short(e)
        if raw is None:
            return None, None, error or "the model returned nothing"
        # Structured output came back empty: many servers still put the JSON in
        # a tool call or in the text, so salvage it before spending a retry.
        candidates: list[Any] = [tc.get("args") for tc in raw.tool_calls]
        if isinstance(raw.content, str) and raw.content.strip():
            try:
                candidates.append(extract_json(raw.content))
            except ValueError as e:
                error = error or f"no JSON in the reply ({e})"
        for cand in candidates:
            try:
                parsed_cand = self.schema.model_validate(cand)
                logger.debug("%s: structured output empty, JSON salvaged from the reply", self.what)
                return self._checked(parsed_cand, raw)
            except ValidationError as e:
                error = _short(e)
        return None, raw, error or "the reply did not contain the expected fields"

    @staticmethod
    def _parser_failure(e: OutputParserException) -> tuple[None, AIMessage | None, str]:
        """A model's own structured output that raised instead of reporting the failure.

        Some `with_structured_output` implementations raise `OutputParserException`
        even with `include_raw=True`: it is unusable output like any other, so it is
        retried with the error and ends as `MalformedOutputError`.
        """
        text = e.llm_output if isinstance(e.llm_output, str) else None
        raw = AIMessage(content=text) if text else None
        return None, raw, f"the model's structured output could not be parsed ({e})"

    def _checked(
        self, parsed: T, raw: AIMessage | None
    ) -> tuple[T | None, AIMessage | None, str | None]:
        if self.check is not None:
            try:
                self.check(parsed)
            except ValueError as e:
                return None, raw, str(e)
        return parsed, raw, None

    def _retry_messages(
        self, msgs: list[BaseMessage], raw: AIMessage | None, error: str
    ) -> list[BaseMessage]:
        shown = _raw_text(raw)
        return [
            *msgs,
            AIMessage(content=truncate(shown, 2000) or "(empty reply)"),
            HumanMessage(
                content=f"That reply could not be used: {error}. Reply again with only the "
                f"JSON object, with the fields {list(self.schema.model_fields)}."
            ),
        ]

    def _fail(self, raw: AIMessage | None, error: str | None, usage: Usage) -> MalformedOutputError:
        err = MalformedOutputError(
            f"{self.what}: the model returned unusable output {self.retries + 1} time(s); "
            f"last error: {error}; last output: {truncate(_raw_text(raw), 300)!r}",
            raw_output=_raw_text(raw),
        )
        err.usage = usage
        return err

    def _call(self, msgs: list[BaseMessage], config: RunnableConfig | None) -> Any:
        """The runnable's reply; a standard `include_raw` composition without its maps.

        `with_structured_output(include_raw=True)` is `{"raw": model} | assign(parsed=...)
        .with_fallbacks(parsed=None)`: two one-branch maps, each starting a thread pool
        and a thread on every sync call (about 2 ms a judgment). The same steps run
        here in a row give the same `{"raw", "parsed", "parsing_error"}`.
        """
        if self._steps is None:
            return self._runnable.invoke(msgs, config)
        model, parse = self._steps
        raw = model.invoke(msgs, config)
        try:
            parsed = parse.invoke({"raw": raw}, config)
        except Exception as e:  # as the composition's fallback: any parser error
            return {"raw": raw, "parsed": None, "parsing_error": e}
        return {"raw": raw, "parsed": parsed, "parsing_error": None}

    async def _acall(self, msgs: list[BaseMessage], config: RunnableConfig | None) -> Any:
        """Async twin of `_call`."""
        if self._steps is None:
            return await self._runnable.ainvoke(msgs, config)
        model, parse = self._steps
        raw = await model.ainvoke(msgs, config)
        try:
            parsed = await parse.ainvoke({"raw": raw}, config)
        except Exception as e:  # as the composition's fallback: any parser error
            return {"raw": raw, "parsed": None, "parsing_error": e}
        return {"raw": raw, "parsed": parsed, "parsing_error": None}

    def invoke(
        self, messages: Sequence[BaseMessage], config: RunnableConfig | None = None
    ) -> tuple[T, Usage]:
        """Call the model; return the parsed answer and the usage of all attempts."""
        usage = Usage()
        msgs = self._prepare(messages)
        raw: AIMessage | None = None
        error: str | None = None
        for _ in range(self.retries + 1):
            if self.rate_limiter is not None:
                self.rate_limiter.acquire(blocking=True)
            try:
                result = self._call(msgs, config)
            except OutputParserException as e:
                parsed, raw, error = self._parser_failure(e)
            else:
                parsed, raw, error = self._parse(result)
            usage = usage + _usage_of(raw)
            if parsed is not None:
                return parsed, usage
            logger.info("%s: unusable model output (%s); retrying", self.what, error)
            msgs = self._retry_messages(msgs, raw, error or "invalid output")
        raise self._fail(raw, error, usage)

    async def ainvoke(
        self, messages: Sequence[BaseMessage], config: RunnableConfig | None = None
    ) -> tuple[T, Usage]:
        """Async twin of `invoke`."""
        usage = Usage()
        msgs = self._prepare(messages)
        raw: AIMessage | None = None
        error: str | None = None
        for _ in range(self.retries + 1):
            if self.rate_limiter is not None:
                await self.rate_limiter.aacquire(blocking=True)
            try:
                result = await self._acall(msgs, config)
            except OutputParserException as e:
                parsed, raw, error = self._parser_failure(e)
            else:
                parsed, raw, error = self._parse(result)
            usage = usage + _usage_of(raw)
            if parsed is not None:
                return parsed, usage
            logger.info("%s: unusable model output (%s); retrying", self.what, error)
            msgs = self._retry_messages(msgs, raw, error or "invalid output")
        raise self._fail(raw, error, usage)


def _include_raw_steps(
    runnable: Runnable[Any, Any],
) -> tuple[Runnable[Any, Any], Runnable[Any, Any]] | None:
    """The model and the parser of LangChain's `include_raw=True` composition, or None.

    The composition (`BaseChatModel.with_structured_output` and the providers that
    copy it) is `RunnableParallel(raw=model) | RunnableAssign(parsed=parser,
    parsing_error=...).with_fallbacks([RunnableAssign(parsed=None)],
    exception_key="parsing_error")`. Anything else (a provider's own) returns None
    and is called whole.
    """
    if not isinstance(runnable, RunnableSequence) or len(runnable.steps) != 2:
        return None
    first, last = runnable.steps
    if not isinstance(first, RunnableParallel) or set(first.steps__) != {"raw"}:
        return None
    if (
        not isinstance(last, RunnableWithFallbacks)
        or last.exception_key != "parsing_error"
        or tuple(last.exceptions_to_handle) != (Exception,)
        or not isinstance(last.runnable, RunnableAssign)
        or set(last.runnable.mapper.steps__) != {"parsed", "parsing_error"}
    ):
        return None
    return first.steps__["raw"], last.runnable.mapper.steps__["parsed"]


def _usage_of(raw: AIMessage | None) -> Usage:
    if raw is None:
        return Usage(llm_calls=1)
    meta: dict[str, Any] = dict(raw.usage_metadata or {})
    return Usage(
        llm_calls=1,
        input_tokens=int(meta.get("input_tokens", 0) or 0),
        output_tokens=int(meta.get("output_tokens", 0) or 0),
    )


def _raw_text(raw: AIMessage | None) -> str:
    if raw is None:
        return ""
    if raw.tool_calls:
        return json.dumps([tc.get("args") for tc in raw.tool_calls], default=str)
    return raw.content if isinstance(raw.content, str) else json.dumps(raw.content, default=str)


def _short(e: ValidationError) -> str:
    parts = []
    for err in e.errors()[:3]:
        loc = ".".join(str(x) for x in err.get("loc", ()))
        parts.append(f"{loc}: {err.get('msg')}" if loc else str(err.get("msg")))
    return "; ".join(parts)
