"""Keep the judge's runs off LangSmith when tracing is "local"."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from langsmith import run_helpers as rh


@contextlib.contextmanager
def no_upload_when_local() -> Iterator[None]:
    """Run the block untraced when LangSmith's tracing context is "local".

    `langsmith.evaluate(..., upload_runs=False)` runs its evaluators with tracing
    "local" (trace, never upload), which LangChain's tracer takes for "on" and would
    upload; every judgment therefore runs untraced in that mode, whoever calls it.
    """
    if rh.get_tracing_context().get("enabled") == "local":
        with rh.tracing_context(enabled=False):
            yield
    else:
        yield
