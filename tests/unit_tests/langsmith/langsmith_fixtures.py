"""The local LangSmith server and a real `langsmith.Client` of it, for the tests here.

A test module takes these fixtures by naming this module in its ``pytest_plugins``::

    pytest_plugins = ["langsmith_fixtures"]
    pytestmark = pytest.mark.usefixtures("langsmith_env")  # if its tests want it

Why ``pytest_plugins`` and not a ``conftest.py`` here: test modules import the conftest
of ``tests/unit_tests`` as ``conftest`` (the folders are no packages), and pytest drops
that module from ``sys.modules`` when it loads another conftest. Why not
``from langsmith_fixtures import server, client``: ruff reads an imported fixture as
unused (F401) and each test that takes it as redefining it (F811).

pytest registers a plugin for the whole session, but no fixture here is autouse, so only
a test that asks for one by name gets it: ``langsmith_env`` applies where a module asks
for it, and a module that needs a differently configured server defines its own
``server`` fixture, which overrides the one here and which ``client`` then connects to.
pytest's default (prepend) import mode puts this folder on ``sys.path`` for its test
modules, so the plugin name resolves; ``langsmith_server`` is found in ``tests/``, which
tests/unit_tests/conftest.py puts on ``sys.path``.

PYTEST_DONT_REWRITE: modules that import helpers from here (``connect``,
``ordered_server``) have imported it before pytest loads it as a plugin, too late for
assertion rewriting, which it needs none of (it asserts nothing), and pytest warns then.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from langsmith import Client
from langsmith_server import LangSmithTestServer

# The orders a run query may list a project's runs in: the v2 query documents none (the
# test server answers "oldest", "unordered" or "newest" first); "v1" is a server without
# the v2 query, whose v1 listing is asked for the newest first.
RUN_ORDERS = ["oldest", "unordered", "newest", "v1"]


@pytest.fixture
def langsmith_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No endpoint or workspace from the environment; runs uploaded uncompressed."""
    for name in ("LANGSMITH_RUNS_ENDPOINTS", "LANGCHAIN_ENDPOINT", "LANGSMITH_WORKSPACE_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANGSMITH_DISABLE_RUN_COMPRESSION", "true")


@pytest.fixture
def server() -> Iterator[LangSmithTestServer]:
    with LangSmithTestServer() as srv:
        yield srv


@contextlib.contextmanager
def connect(server: LangSmithTestServer, api_key: str = "test") -> Iterator[Client]:
    """A client of `server` that sends each run itself (no background batching)."""
    c = Client(api_url=server.url, api_key=api_key, auto_batch_tracing=False)
    try:
        yield c
    finally:
        c.close(timeout=5)


@pytest.fixture
def client(server: LangSmithTestServer) -> Iterator[Client]:
    with connect(server) as c:
        yield c


@contextlib.contextmanager
def ordered_server(
    order: str, *, runs_page_size: int = 3
) -> Iterator[tuple[LangSmithTestServer, Client]]:
    """A server whose run query lists runs in `order` (one of RUN_ORDERS), and a client."""
    v2 = order != "v1"
    with (
        LangSmithTestServer(
            runs_page_size=runs_page_size,
            runs_v2=v2,
            v2_run_order=order if v2 else "newest",
        ) as server,
        connect(server) as client,
    ):
        yield server, client
