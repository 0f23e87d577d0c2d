"""Fixtures shared by every unit test; the folders mirror the package's.

A test of one subpackage lives in the folder of that name (`memory/`, `graphs/`,
`prompting/`, `langsmith/`, `cli/`, `evaluation/`); tests of the judge as a whole and of
top-level modules stay here; `robustness/` holds the fault, fuzz and crash tests. The
folders are not packages (no `__init__.py`: a `langsmith` package here would shadow the
library), so every test module needs a basename unique across `tests/`. The helpers in
`tests/` (`fakes`, `pg_server`, `langsmith_server`, `openai_server`) are importable
because this file puts `tests/` on `sys.path`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel
from pg_server import TempPostgres, find_bindir

from langchain_memalign import Feedback, MemAlignJudge
from langchain_memalign.config import merge_options, options_mapping

INSTRUCTIONS = "Is the support reply helpful?\nUser: {inputs}\nReply: {outputs}"


@pytest.fixture(autouse=True)
def _no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGSMITH_API_KEY"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[TempPostgres]:
    """A PostgreSQL server for the whole session (skips where no server binaries exist)."""
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (apt-get install postgresql)")
    server = TempPostgres(bindir).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def responder() -> RoleResponder:
    return RoleResponder()


@pytest.fixture
def model(responder: RoleResponder) -> ScriptedChatModel:
    return ScriptedChatModel(responder=responder)


@pytest.fixture
def embeddings() -> HashEmbeddings:
    return HashEmbeddings()


# What the unit tests' judges set unless a test says otherwise.
TEST_OPTIONS: dict[str, Any] = {
    # Validation spends judge calls after each align; the tests that count calls
    # elsewhere turn it off, and test_validate.py tests it.
    "validation": {"mode": "off"},
    # Bag-of-words fake embeddings do not measure support; test_provenance.py
    # tests the check with vectors made for it.
    # Bag-of-words fake embeddings put related cases far below the default floor
    # of 0.9; test_judge_graph.py tests the floor.
    "retrieval": {"min_similarity": None, "min_similarity_with_rationale": None},
    # The tests of alignment's bookkeeping script one proposal per feedback item, as
    # batch reflection asks; graphs/test_pairs.py tests the default, pairs.
    "reflection": {"source_support": None, "mode": "batch"},
    # Checks ask the model about each case after every align and before every judgment;
    # the tests that count calls elsewhere would count them. graphs/test_checks.py tests
    # them, and the CLI, example and LangSmith tests run them at the package's default.
    "checks": {"mode": "off"},
}


@pytest.fixture
def make_judge(model: ScriptedChatModel, embeddings: HashEmbeddings) -> Any:
    """A judge on the fake models: `make_judge(k=2, options={"validation": {"mode": "all"}})`.

    Takes the constructor's keywords; `options` go over `TEST_OPTIONS`, group by group.
    """

    def make(**kwargs: Any) -> MemAlignJudge:
        args: dict[str, Any] = {
            "name": "helpfulness",
            "instructions": INSTRUCTIONS,
            "model": model,
            "embeddings": embeddings,
            "scale": bool,
            "k": 3,
        }
        options = merge_options(TEST_OPTIONS, options_mapping(kwargs.pop("options", None)))
        args.update(kwargs, options=options)
        return MemAlignJudge(**args)

    return make


def fb(
    fid: str, inputs: str, outputs: str, value: Any, rationale: str | None = None, **kw: Any
) -> Feedback:
    return Feedback(id=fid, inputs=inputs, outputs=outputs, value=value, rationale=rationale, **kw)


SWEATER = fb(
    "sweater",
    "The sweater I got looks different from the website. I'm disappointed.",
    "Product colors can vary due to monitor settings. Returns are accepted within 30 days.",
    False,
    "Factually correct but cold: acknowledge the customer's disappointment first.",
)
HOURS = fb(
    "hours",
    "What are your store hours?",
    "We are open 9am to 6pm, Monday to Saturday.",
    True,
    "Direct and complete answer.",
)
RUDE = fb(
    "rude",
    "How do I reset my password?",
    "Figure it out yourself.",
    False,
    "Dismissive and unhelpful.",
)
