"""Inside a `@pytest.mark.langsmith` test the judge logs its verdict as feedback.

The LangSmith pytest plugin runs in a child pytest process pointed at the local
LangSmith server; its test suite, experiment, test runs and feedback land there.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

_TESTS_DIR = str(Path(__file__).resolve().parents[2])
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

from langsmith_server import LangSmithTestServer  # noqa: E402

pytest_plugins = ["langsmith_fixtures"]

CHILD_TESTS = """
import sys

import pytest

sys.path.insert(0, {tests_dir!r})

from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel

from langchain_memalign import MemAlignJudge
from langchain_memalign.langsmith import invoke_and_log, judge_evaluator


def rule(case, memory):
    if "yourself" in case.lower():
        return {{"rationale": "Dismissive.", "score": False}}
    return {{"rationale": "Answers the question.", "score": True}}


def make_judge():
    model = ScriptedChatModel(responder=RoleResponder(rule))
    return MemAlignJudge("helpfulness", "Helpful? {{inputs}} {{outputs}}", model, HashEmbeddings())


@pytest.mark.langsmith
def test_hours_reply():
    result = judge_evaluator(make_judge())(
        inputs={{"q": "store hours?"}}, outputs={{"a": "9 to 5."}}
    )
    assert result["score"] is True


@pytest.mark.langsmith
def test_password_reply():
    result = invoke_and_log(
        make_judge(), {{"inputs": "reset password?", "outputs": "Figure it out yourself."}}
    )
    assert result["score"] is False


def test_unmarked_logs_nothing():
    assert judge_evaluator(make_judge())(inputs="hi", outputs="hello")["score"] is True
"""


def test_verdicts_are_logged_as_test_feedback(server: LangSmithTestServer, tmp_path: Path) -> None:
    (tmp_path / "test_child.py").write_text(
        textwrap.dedent(CHILD_TESTS.format(tests_dir=_TESTS_DIR))
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
    env.update(
        LANGSMITH_ENDPOINT=server.url,
        LANGSMITH_API_KEY="test",
        LANGSMITH_TRACING="true",
        LANGSMITH_TEST_SUITE="memalign-pytest",
        LANGSMITH_DISABLE_RUN_COMPRESSION="true",
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_child.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout

    feedback = [f for f in server.feedback.values() if f["key"] == "helpfulness"]
    assert sorted((f["score"], f["comment"]) for f in feedback) == [
        (0, "Dismissive."),
        (1, "Answers the question."),
    ]
    test_runs = {r["id"]: r for r in server.runs.values() if r["name"].startswith("test_")}
    for f in feedback:
        assert f["run_id"] in test_runs  # on the test's own run, in the experiment
        meta = f["feedback_source"]["metadata"]
        assert meta["memalign_judge"] == "helpfulness"
        # linked to the judgment, traced as the test's feedback run
        judgment = server.runs[meta["__run"]["run_id"]]
        assert judgment["name"] == "helpfulness"
        assert server.sessions[judgment["session_id"]]["name"] == "evaluators"
    suite = [d for d in server.datasets.values() if d["name"] == "memalign-pytest"]
    assert len(suite) == 1
