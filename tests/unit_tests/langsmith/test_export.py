"""Exporting a judge as a LangSmith online evaluator, against the local LangSmith server.

The server validates every request of the export against the SDK's own request types
and every answer against the SDK models the client parses (tests/langsmith_platform.py).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_TESTS_DIR = str(Path(__file__).resolve().parents[2])
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

import langsmith  # noqa: E402
from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel  # noqa: E402
from langsmith import Client  # noqa: E402
from langsmith_server import LangSmithTestServer  # noqa: E402

from langchain_memalign import Feedback, MemAlignJudge  # noqa: E402
from langchain_memalign.langsmith import (  # noqa: E402
    EvaluatorExport,
    LangSmithFeedbackSource,
    export_evaluator,
)

pytest_plugins = ["langsmith_fixtures"]
pytestmark = pytest.mark.usefixtures("langsmith_env")

KEY = "helpfulness"
WRITES = ("POST", "PATCH", "PUT", "DELETE")


@pytest.fixture
def server() -> Iterator[LangSmithTestServer]:
    with LangSmithTestServer() as srv:
        srv.add_project("prod")
        yield srv


@pytest.fixture
def judge() -> MemAlignJudge:
    judge = MemAlignJudge(
        KEY,
        "Is the answer helpful?\nQuestion: {inputs}\nAnswer: {outputs}",
        ScriptedChatModel(responder=RoleResponder()),
        HashEmbeddings(),
        k=3,
    )
    judge.align(
        [
            Feedback(id="e1", inputs="reset my password", outputs="Click 'Forgot password'.",
                     value=True, rationale="Gives the exact step."),
            Feedback(id="e2", inputs="cancel my plan", outputs="lol no", value=False,
                     rationale="Rude and refuses."),
            Feedback(id="e3", inputs="hours?", outputs="9-5", value=True),
        ]
    )  # fmt: skip
    rule = judge.rules.add("Replies must not mock the customer.", author="dana")
    judge.rules.set_check(
        rule.id, broken="Does the reply mock the customer?", consequence=False, author="dana"
    )
    return judge


def writes(server: LangSmithTestServer, since: int) -> list[str]:
    """The writing requests the server answered since the `since`-th request."""
    return [f"{r.method} {r.path}" for r in server.requests[since:] if r.method in WRITES]


def dataset_examples(server: LangSmithTestServer, dataset_id: str) -> list[dict[str, Any]]:
    return [e for e in server.examples.values() if e["dataset_id"] == dataset_id]


def test_an_export_creates_the_evaluator_its_rule_and_a_corrections_dataset_of_every_episode(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    export = judge.to_langsmith_evaluator(
        project="prod", client=client, sampling_rate=0.25, filter="eq(is_root, true)"
    )

    assert isinstance(export, EvaluatorExport)
    assert export.created == ["prompt", "evaluator", "rule"] and export.updated == []
    assert (export.rules, export.checks, export.episodes) == (len(judge.rules.list()), 1, 3)
    ev = server.platform.evaluators[export.evaluator_id]
    assert ev["type"] == "llm" and ev["name"] == "memalign-helpfulness"
    llm = ev["llm_evaluator"]
    assert llm["prompt_repo_handle"] == "memalign-helpfulness"
    assert llm["variable_mapping"] == {"inputs": "input", "outputs": "output"}
    # The evaluator's feedback key is the judge's, read from the prompt's output schema.
    assert client.evaluators  # the SDK's accessor exists on this server version
    read = server.platform._evaluator_out(ev)
    assert read["feedback_keys"] == [KEY]

    # The prompt: instructions as the case, rules as prose, the check as its question,
    # the few-shot slot LangSmith fills, mustache variables for the case.
    kwargs = server.platform.manifest("memalign-helpfulness", llm["commit_hash_or_tag"])["kwargs"]
    assert kwargs["schema_"]["properties"][KEY]["type"] == "boolean"
    system, human = (m["kwargs"]["prompt"]["kwargs"]["template"] for m in kwargs["messages"])
    for rule in judge.rules.list():
        assert rule.text in system
    assert "Does the reply mock the customer?" in system
    assert "{{Few-shot examples}}" in system
    assert "Question: {{inputs}}" in human and "Answer: {{outputs}}" in human

    rule = server.platform.rules[export.rule_id]
    assert rule["session_id"] == export.project_id == server.add_project("prod")["id"]
    assert (rule["sampling_rate"], rule["filter"]) == (0.25, "eq(is_root, true)")
    assert rule["use_corrections_dataset"] and rule["num_few_shot_examples"] == 5
    assert rule["corrections_dataset_id"] == export.dataset_id

    examples = {e["metadata"]["memalign_episode_id"]: e
                for e in dataset_examples(server, export.dataset_id)}  # fmt: skip
    assert sorted(examples) == ["e1", "e2", "e3"]
    assert examples["e2"]["inputs"] == {"inputs": "cancel my plan", "outputs": "lol no"}
    assert examples["e2"]["outputs"] == {KEY: False, "few_shot_explanation": "Rude and refuses."}
    assert export.changed and "3 episodes" in export.summary()
    # The judge's key reads on its scale in the workspace.
    assert server.feedback_configs[KEY]["feedback_config"]["type"] == "categorical"


def test_a_second_export_changes_nothing(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    first = export_evaluator(judge, project="prod", client=client)
    since = len(server.requests)

    again = export_evaluator(judge, project="prod", client=client)

    assert writes(server, since) == []
    assert not again.changed and again.summary().endswith("nothing changed")
    assert (again.evaluator_id, again.rule_id, again.dataset_id, again.prompt) == (
        first.evaluator_id, first.rule_id, first.dataset_id, first.prompt,
    )  # fmt: skip
    assert len(server.platform.evaluators) == len(server.platform.rules) == 1
    assert len(server.platform.commits["memalign-helpfulness"]) == 1
    assert len(dataset_examples(server, first.dataset_id)) == 3


def test_a_re_export_follows_the_memory_and_the_settings(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    first = export_evaluator(judge, project="prod", client=client)
    judge.unalign(["e2"])
    judge.align([
        Feedback(id="e1", inputs="reset my password", outputs="Click 'Forgot password'.",
                 value=True, rationale="Gives the one step to take."),
        Feedback(id="e4", inputs="refund?", outputs="Done, 3-5 days.", value=True,
                 rationale="States the delay."),
    ])  # fmt: skip
    judge.rules.add("Replies must state how long things take.", author="dana")

    again = export_evaluator(judge, project="prod", client=client, sampling_rate=0.5)

    assert again.created == [] and sorted(again.updated) == ["evaluator", "prompt", "rule"]
    assert (again.examples_added, again.examples_removed, again.examples_updated) == (1, 1, 1)
    ids = sorted(e["metadata"]["memalign_episode_id"]
                 for e in dataset_examples(server, first.dataset_id))  # fmt: skip
    assert ids == ["e1", "e3", "e4"]
    (e1,) = (e for e in dataset_examples(server, first.dataset_id)
             if e["metadata"]["memalign_episode_id"] == "e1")  # fmt: skip
    assert e1["outputs"]["few_shot_explanation"] == "Gives the one step to take."
    assert again.evaluator_id == first.evaluator_id and again.rule_id == first.rule_id
    assert server.platform.rules[again.rule_id]["sampling_rate"] == 0.5
    commit = server.platform.evaluators[again.evaluator_id]["llm_evaluator"]["commit_hash_or_tag"]
    assert again.prompt == f"memalign-helpfulness:{commit}" != first.prompt
    assert "how long things take" in str(server.platform.manifest("memalign-helpfulness"))


def test_a_correction_of_the_exported_evaluators_verdict_comes_back_as_expert_feedback(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    export = export_evaluator(judge, project="prod", client=client)
    project = server.add_project("prod")
    run = server.add_run(session_id=project["id"], inputs={"q": "where is my order"},
                         outputs={"a": "Figure it out."})  # fmt: skip
    # LangSmith runs the evaluator on the run, then a reviewer corrects its verdict.
    verdict = server.platform.run_evaluator(
        export.rule_id, run["id"], score=1, comment="Answers the question."
    )
    client.update_feedback(
        verdict["id"], correction={"score": 0, "explanation": "Dismissive: no order status."}
    )

    report = LangSmithFeedbackSource(client, project="prod").sync(judge)

    fid = f"langsmith:{verdict['id']}"
    assert report.added == [fid]
    learned = judge.get_feedback(fid)
    assert learned.value is False and learned.rationale == "Dismissive: no order status."
    assert learned.inputs == {"q": "where is my order"}
    assert learned.metadata["langsmith"]["kind"] == "correction"

    # LangSmith put the corrected case in the dataset itself: the next export leaves it.
    again = export_evaluator(judge, project="prod", client=client)
    assert again.left_to_langsmith == 1 and again.episodes == 4
    assert again.examples_added == 0
    assert len(dataset_examples(server, export.dataset_id)) == 4


def test_an_uncorrected_verdict_of_the_evaluator_teaches_nothing(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    export = export_evaluator(judge, project="prod", client=client)
    run = server.add_run(session_id=server.add_project("prod")["id"], inputs={"q": "hi"})
    server.platform.run_evaluator(export.rule_id, run["id"], score=1, comment="Fine.")

    report = LangSmithFeedbackSource(client, project="prod").sync(judge)

    assert report.added == [] and report.listed == 0


def test_the_server_refuses_what_the_sdk_types_refuse(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    api = client._get_langsmith_api_sync()
    with pytest.raises(langsmith.UnprocessableEntityError, match="unknown fields"):
        api.online_evaluators.create(
            type="llm", name="x", llm_evaluator={"prompt_repo_handle": "p"},
            extra_body={"sampling_rate": 0.5},
        )  # fmt: skip
    with pytest.raises(langsmith.UnprocessableEntityError, match="use_corrections"):
        # Corrections are a run rule's setting (and the update's), not the create's.
        api.online_evaluators.create(
            type="llm", name="x",
            llm_evaluator={"prompt_repo_handle": "p", "use_corrections_dataset": True},  # type: ignore[typeddict-unknown-key]
        )  # fmt: skip
    with pytest.raises(langsmith.NotFoundError):
        api.online_evaluators.create(
            type="llm", name="x", llm_evaluator={"prompt_repo_handle": "p"}
        )
    assert server.platform.evaluators == {}


def test_bad_settings_are_refused_before_anything_is_written(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    since = len(server.requests)
    with pytest.raises(ValueError, match="sampling_rate"):
        export_evaluator(judge, project="prod", client=client, sampling_rate=1.5)
    with pytest.raises(ValueError, match="few_shot"):
        export_evaluator(judge, project="prod", client=client, num_few_shot_examples=-1)
    assert writes(server, since) == []
