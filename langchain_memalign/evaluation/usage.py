"""Counting the LLM calls and tokens of a run, through LangChain callbacks."""

from __future__ import annotations

import threading
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import ensure_config

from langchain_memalign.reports import Usage

__all__ = ["UsageCallbackHandler", "with_callback"]


class UsageCallbackHandler(BaseCallbackHandler):
    """Counts LLM calls and tokens of everything run with it as a callback.

    Tokens come from the messages' `usage_metadata` (or the provider's
    `token_usage`), so they are what the server reported. Thread-safe; pass it
    in `config={"callbacks": [handler]}`.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self.llm_calls = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.errors = 0

    def on_llm_end(
        self,
        response: LLMResult,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Count one finished call and its tokens."""
        tin = tout = 0
        found = False
        for gens in response.generations:
            for g in gens:
                meta = getattr(getattr(g, "message", None), "usage_metadata", None)
                if meta:
                    found = True
                    tin += int(meta.get("input_tokens", 0))
                    tout += int(meta.get("output_tokens", 0))
        if not found and response.llm_output:
            usage = response.llm_output.get("token_usage") or {}
            tin = int(usage.get("prompt_tokens", 0) or 0)
            tout = int(usage.get("completion_tokens", 0) or 0)
        with self._lock:
            self.llm_calls += 1
            self.input_tokens += tin
            self.output_tokens += tout

    def on_llm_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Count a failed call (it still cost a request)."""
        with self._lock:
            self.llm_calls += 1
            self.errors += 1

    def usage(self) -> Usage:
        """What was counted so far, as a `Usage`."""
        with self._lock:
            return Usage(
                llm_calls=self.llm_calls,
                input_tokens=self.input_tokens,
                output_tokens=self.output_tokens,
            )


def with_callback(config: RunnableConfig | None, handler: BaseCallbackHandler) -> RunnableConfig:
    """A copy of `config` with `handler` added to its callbacks."""
    cfg = ensure_config(config)
    callbacks = cfg.get("callbacks")
    if callbacks is None:
        cfg["callbacks"] = [handler]
    elif isinstance(callbacks, list):
        cfg["callbacks"] = [*callbacks, handler]
    else:  # a callback manager
        manager = callbacks.copy()
        manager.add_handler(handler, inherit=True)
        cfg["callbacks"] = manager
    return cfg
