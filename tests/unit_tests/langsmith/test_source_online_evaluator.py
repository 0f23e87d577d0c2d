"""Corrections of an online evaluator's verdicts (`auto_eval` feedback) are expert feedback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_TESTS_DIR = str(Path(__file__).resolve().parents[2])
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel  # noqa: E402
from langsmith import Client  # noqa: E402
from langsmith_server import LangSmithTestServer  # noqa: E402

from langchain_memalign import MemAlignJudge  # noqa: E402
from langchain_memalign.langsmith import LangSmithFeedbackSource  # noqa: E402

pytest_plugins = ["langsmith_fixtures"]
pytestmark = pytest.mark.usefixtures("langsmith_env")

KEY = "helpfulness"


def test_only_the_corrected_verdicts_of_an_online_evaluator_are_learned(
    server: LangSmithTestServer, client: Client
) -> None:
    judge = MemAlignJudge(
        KEY, "Helpful?\n{inputs}\n{outputs}", ScriptedChatModel(responder=RoleResponder()),
        HashEmbeddings(),
    )  # fmt: skip
    project = server.add_project("prod")
    runs = [server.add_run(session_id=project["id"], inputs={"q": q}, outputs={"a": "ok"})
            for q in ("one", "two")]  # fmt: skip
    source = {"type": "auto_eval", "metadata": {"rule_id": "r"}}
    corrected, kept = (
        server.add_feedback(run["id"], KEY, score=1, comment="Fine.", feedback_source=source)
        for run in runs
    )
    client.update_feedback(corrected["id"], correction={"score": 0, "explanation": "Vague."})

    report = LangSmithFeedbackSource(client, project="prod").sync(judge)

    assert report.added == [f"langsmith:{corrected['id']}"] and report.listed == 1
    learned = judge.get_feedback(f"langsmith:{corrected['id']}")
    assert (learned.value, learned.rationale) == (False, "Vague.")
    assert learned.metadata["langsmith"]["source_type"] == "auto_eval"
    assert kept["id"] not in str(judge.feedback_ids)
