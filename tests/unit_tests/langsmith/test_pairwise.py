"""People's preferences on a comparative experiment, read into a pairwise judge.

Against the real `langsmith.Client` over HTTP and the local test server.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

_TESTS_DIR = str(Path(__file__).resolve().parents[2])
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

import langsmith  # noqa: E402
from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel  # noqa: E402
from langsmith import Client  # noqa: E402
from langsmith import schemas as ls_schemas  # noqa: E402
from langsmith_server import LangSmithTestServer  # noqa: E402

from langchain_memalign import MemAlignJudge  # noqa: E402
from langchain_memalign.langsmith import comparative_evaluator  # noqa: E402
from langchain_memalign.langsmith.pairwise import read_preferences  # noqa: E402

pytest_plugins = ["langsmith_fixtures"]
pytestmark = pytest.mark.usefixtures("langsmith_env")

KEY = "preference"
QUESTIONS = ("store hours?", "reset my password", "track my order")


def _curt(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"answer": "No."}


def _polite(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"answer": f"Please see our help page about {inputs['question']}"}


class Comparison:
    """Two experiments on one dataset, compared; the curt one is shown first."""

    def __init__(self, client: Client, server: LangSmithTestServer) -> None:
        self.server = server
        ds = client.create_dataset("support")
        client.create_examples(
            dataset_id=ds.id,
            examples=[
                {"inputs": {"question": q}, "reference_outputs": {"answer": "reference"}}
                for q in QUESTIONS
            ],
        )
        self.client = client
        first = langsmith.evaluate(_curt, data=ds.name, client=client)
        second = langsmith.evaluate(_polite, data=ds.name, client=client)
        self.first = client.read_project(project_name=first.experiment_name)
        self.second = client.read_project(project_name=second.experiment_name)
        self.experiment = client.create_comparative_experiment(
            "curt-vs-polite", experiments=[self.first.id, self.second.id], reference_dataset=ds.id
        )
        # question -> (run of the first experiment, run of the second)
        self.runs: dict[str, tuple[ls_schemas.Run, ls_schemas.Run]] = {}
        firsts = {r.inputs["question"]: r for r in client.list_runs(project_id=self.first.id)}
        for run in client.list_runs(project_id=self.second.id):
            q = run.inputs["question"]
            self.runs[q] = (firsts[q], run)

    def prefer(
        self,
        question: str,
        scores: tuple[float | None, float | None],
        *,
        comment: str | None = None,
        source_type: str = "api",
    ) -> uuid.UUID:
        """One reviewer's scores for the two runs of `question` (None: that run unscored).

        "api" and "model" go through the client; "app" is a reviewer in the comparison
        view, which the client cannot write as: it is seeded into the server.
        """
        group = uuid.uuid4()
        for run, score in zip(self.runs[question], scores, strict=True):
            if score is None:
                continue
            if source_type == "app":
                self.server.add_feedback(
                    str(run.id), KEY, user="ana", score=score, comment=comment,
                    feedback_source={"type": "app"}, session_id=str(run.session_id),
                    comparative_experiment_id=str(self.experiment.id),
                    feedback_group_id=str(group),
                )  # fmt: skip
                continue
            self.client.create_feedback(
                run.id, KEY, score=score, comment=comment,
                comparative_experiment_id=self.experiment.id, feedback_group_id=group,
                feedback_source_type=source_type, session_id=run.session_id,
                start_time=run.start_time,
            )  # fmt: skip
        return group


@pytest.fixture
def comparison(client: Client, server: LangSmithTestServer) -> Comparison:
    return Comparison(client, server)


def _judge() -> MemAlignJudge:
    return MemAlignJudge(
        KEY, "Which reply is better?\n{inputs}\n{outputs}",
        ScriptedChatModel(responder=RoleResponder()), HashEmbeddings(), scale="pairwise",
    )  # fmt: skip


def test_a_reviewers_preference_becomes_a_pairwise_item_in_experiment_order(
    comparison: Comparison, client: Client
) -> None:
    group = comparison.prefer(
        "reset my password", (0.0, 1.0), comment="The curt one refuses.", source_type="app"
    )
    read = read_preferences(client, comparison.experiment, key=KEY)
    assert read.skipped == [] and read.model_feedback == 0
    [item] = read.items
    first, second = comparison.runs["reset my password"]
    assert item.id == f"langsmith-pair:{group}"
    assert item.value == "B"
    assert item.inputs == {"question": "reset my password"}
    assert item.outputs == [first.outputs, second.outputs]
    assert item.outputs[0] == {"answer": "No."}
    assert item.reference_outputs == {"answer": "reference"}
    assert item.rationale == "The curt one refuses."
    assert item.annotator == comparison.server.user_named("ana")["id"]
    meta = item.metadata["langsmith"]
    assert meta["comparative_experiment_id"] == str(comparison.experiment.id)
    assert meta["run_ids"] == [str(first.id), str(second.id)]
    assert meta["experiment_ids"] == [str(comparison.first.id), str(comparison.second.id)]


def test_the_order_given_wins_and_a_bare_id_needs_one(
    comparison: Comparison, client: Client
) -> None:
    comparison.prefer("store hours?", (1.0, 0.0))
    swapped = read_preferences(
        client, comparison.experiment.id, key=KEY,
        experiments=[comparison.second.id, comparison.first.id],
    )  # fmt: skip
    [item] = swapped.items
    assert item.value == "B"  # the first experiment's run, now shown second
    assert item.outputs[1] == {"answer": "No."}
    with pytest.raises(ValueError, match="needs the order"):
        read_preferences(client, comparison.experiment.id, key=KEY)
    with pytest.raises(ValueError, match="must be an id"):
        read_preferences(client, "not-an-id", key=KEY, experiments=["a", "b"])


def test_the_judge_learns_preferences_and_a_changed_mind_updates_the_item(
    comparison: Comparison, client: Client
) -> None:
    group = comparison.prefer("reset my password", (0.0, 1.0), comment="Polite wins.")
    tied = comparison.prefer("store hours?", (0.5, 0.5), comment="Both are fine.")
    judge = _judge()
    report = judge.align(read_preferences(client, comparison.experiment, key=KEY).items)
    assert sorted(report.added) == sorted(f"langsmith-pair:{g}" for g in (group, tied))
    tie = next(
        i for i in read_preferences(client, comparison.experiment, key=KEY).items
        if i.inputs == {"question": "store hours?"}
    )  # fmt: skip
    assert tie.value == "tie"
    # The reviewer changes their mind: the first run is better after all.
    for fb in client.list_feedback(feedback_key=[KEY]):
        if fb.feedback_group_id == group:
            client.update_feedback(fb.id, score=1.0 - (fb.score or 0.0), comment="Curt is right.")
    again = read_preferences(client, comparison.experiment, key=KEY)
    assert len(again.items) == 2
    report = judge.align(again.items)
    assert report.added == [] and report.updated == [f"langsmith-pair:{group}"]
    stored = judge.get_feedback(f"langsmith-pair:{group}")
    assert stored.value == "A" and stored.rationale == "Curt is right."


def test_model_feedback_is_left_out(comparison: Comparison, client: Client) -> None:
    judge = MemAlignJudge(
        KEY, "Which reply is better?\n{inputs}\n{outputs}",
        ScriptedChatModel(responder=RoleResponder(lambda case, memory: {
            "rationale": "Rated alone.", "score": 8 if "please" in case.lower() else 3})),
        HashEmbeddings(), scale="pairwise",
    )  # fmt: skip
    langsmith.evaluate(
        (comparison.first.name, comparison.second.name),
        evaluators=[comparative_evaluator(judge)], client=client,
    )  # fmt: skip
    comparison.prefer("track my order", (1.0, 0.0), source_type="api")
    read = read_preferences(client, comparison.experiment, key=KEY)
    assert read.model_feedback == 0  # evaluate made a comparative experiment of its own
    [item] = read.items
    assert item.value == "A"
    # The model's verdicts filed under this comparison are left out too, and kept
    # beside the people's preference on the same pair as the judge's prior verdict.
    comparison.prefer("store hours?", (0.0, 1.0), source_type="model")
    comparison.prefer("track my order", (1.0, 0.0), source_type="model")
    comparison.prefer("track my order", (0.0, 1.0), source_type="model")  # the latest
    read = read_preferences(client, comparison.experiment, key=KEY)
    assert read.model_feedback == 6 and len(read.items) == 1 and read.skipped == []
    assert read.verdicts == {item.id: "B"}
    fresh = _judge()
    fresh.align(read.items, prior_verdicts=read.verdicts, prior_source="langsmith")
    [point] = fresh.agreement_history().points
    assert (point.judge, point.expert, point.source) == ("B", "A", "langsmith")


def test_incomplete_and_scoreless_groups_are_skipped_and_reported(
    comparison: Comparison, client: Client
) -> None:
    half = comparison.prefer("store hours?", (1.0, None))
    blank = comparison.prefer("track my order", (None, None))
    assert blank  # nothing written: no group at all
    empty = uuid.uuid4()
    for run in comparison.runs["reset my password"]:
        client.create_feedback(
            run.id, KEY, value="meh", comparative_experiment_id=comparison.experiment.id,
            feedback_group_id=empty, session_id=run.session_id,
        )  # fmt: skip
    # A run that is gone, and a run of an experiment outside the comparison.
    gone, stray = uuid.uuid4(), uuid.uuid4()
    first, _ = comparison.runs["reset my password"]
    ghost = str(uuid.uuid4())
    third = langsmith.evaluate(_polite, data="support", client=client)
    [other] = [
        r for r in client.list_runs(project_name=third.experiment_name)
        if r.inputs["question"] == "reset my password"
    ]  # fmt: skip
    for group, run_id in ((gone, ghost), (gone, str(first.id)), (stray, str(other.id))):
        comparison.server.add_feedback(
            run_id, KEY, user="ana", score=1.0, feedback_source={"type": "app"},
            comparative_experiment_id=str(comparison.experiment.id), feedback_group_id=str(group),
        )  # fmt: skip
    read = read_preferences(client, comparison.experiment, key=KEY)
    assert read.items == []
    reasons = {s.feedback_group_id: s.reason for s in read.skipped}
    assert reasons == {
        str(half): "incomplete: 1 of the 2 runs scored",
        str(empty): "the scores state no preference",
        str(gone): f"run {ghost} was not found",
        str(stray): f"run {other.id} is in neither experiment of the comparison",
    }
