"""Route the process's default LangSmith client to a test server, to count what is traced."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from langsmith_server import LangSmithTestServer

# Every variable that turns LangSmith tracing on: cleared, so only the test's value counts.
TRACING_VARS = ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGSMITH_TRACING_V2")


def trace_to(
    monkeypatch: pytest.MonkeyPatch, server: LangSmithTestServer, tracing: str | None
) -> Callable[[], None]:
    """Send runs traced from the environment to `server`, `LANGSMITH_TRACING=tracing`.

    Runs traced from the environment go through the process's default client, not the
    test's: pointed at the test server, anything uploaded lands where a test can count
    it. Returns a flush that waits for every tracer and the default client.
    """
    import langsmith.run_trees as rt
    from langchain_core.tracers.langchain import wait_for_all_tracers

    monkeypatch.setenv("LANGSMITH_ENDPOINT", server.url)
    monkeypatch.setenv("LANGSMITH_API_KEY", "test")
    for name in TRACING_VARS:
        monkeypatch.delenv(name, raising=False)
    if tracing is not None:
        monkeypatch.setenv("LANGSMITH_TRACING", tracing)
    monkeypatch.setattr(rt, "_CLIENT", None)

    def flush() -> None:
        wait_for_all_tracers()
        if rt._CLIENT is not None:
            rt._CLIENT.flush()

    return flush
