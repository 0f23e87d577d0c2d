"""What the LangSmith commands check before their first call, and the errors they read.

With no API key the SDK's client still calls the hosted service, and the user sees a
`LangSmithConnectionError` (or an auth error) naming `api.smith.langchain.com`, not the
missing key; a project name with a typo surfaces as a bare "not found". These turn both
into a `CLIError` that says what to fix.
"""

from __future__ import annotations

import os

from langchain_memalign.cli.judge_file import EXIT_USAGE, CLIError

HOSTED = "https://api.smith.langchain.com"


def endpoint() -> str:
    """The LangSmith endpoint the client will call (the hosted one unless set)."""
    for name in ("LANGSMITH_ENDPOINT", "LANGCHAIN_ENDPOINT"):
        value = (os.environ.get(name) or "").strip()
        if value:
            return value.rstrip("/")
    return HOSTED


def require_api_key() -> None:
    """Refuse (exit 2) when no LangSmith API key is set, before any call is made.

    Read from the environment directly: the SDK caches its reading of it.
    """
    for name in ("LANGSMITH_API_KEY", "LANGCHAIN_API_KEY"):
        if (os.environ.get(name) or "").strip():
            return
    raise CLIError(
        "no LangSmith API key: set LANGSMITH_API_KEY (and LANGSMITH_ENDPOINT for a "
        f"self-hosted LangSmith; the client would call {endpoint()})",
        EXIT_USAGE,
    )


def unknown_project(name: str) -> CLIError:
    """The error for a project LangSmith does not know (exit 2)."""
    return CLIError(
        f"LangSmith has no project named {name!r} at {endpoint()} (check the name, and "
        "that LANGSMITH_API_KEY belongs to the project's workspace)",
        EXIT_USAGE,
    )
