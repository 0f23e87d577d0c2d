"""People's preferences between two runs, read into a pairwise judge.

From a comparative experiment (`read_preferences`) and from a pairwise annotation queue
(`read_queue_preferences`).

Against the real `langsmith.Client` over HTTP and the local test server.
"""

from __future__ import annotations

import datetime as dt
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
from langsmith_fixtures import connect  # noqa: E402
from langsmith_server import LangSmithTestServer  # noqa: E402

from langchain_memalign import MemAlignJudge  # noqa: E402
from langchain_memalign.langsmith import comparative_evaluator  # noqa: E402
from langchain_memalign.langsmith.pairwise import (  # noqa: E402
    read_preferences,
    read_queue_preferences,
)

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


def _polite_judge() -> MemAlignJudge:
    """A pairwise judge that prefers the reply that says "please"."""
    return MemAlignJudge(
        KEY, "Which reply is better?\n{inputs}\n{outputs}",
        ScriptedChatModel(responder=RoleResponder(lambda case, memory: {
            "rationale": "Rated alone.", "score": 8 if "please" in case.lower() else 3})),
        HashEmbeddings(), scale="pairwise",
    )  # fmt: skip


def test_model_feedback_is_left_out(comparison: Comparison, client: Client) -> None:
    judge = _polite_judge()
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


def test_a_comparative_evaluators_verdicts_are_no_review(
    comparison: Comparison, client: Client
) -> None:
    done = langsmith.evaluate(
        (comparison.first.name, comparison.second.name),
        evaluators=[comparative_evaluator(_polite_judge())], client=client,
    )  # fmt: skip
    compared = done.comparative_experiment
    assert compared is not None
    # The SDK writes the judge's verdicts as "api" feedback naming the evaluator's run.
    read = read_preferences(client, compared, key=KEY)
    assert read.items == [] and read.skipped == [] and read.model_feedback == 6
    # A reviewer's preference in the same comparison is read beside the judge's verdict.
    curt, polite = comparison.runs["store hours?"]
    group = uuid.uuid4()
    for run, score in ((curt, 1.0), (polite, 0.0)):
        client.create_feedback(
            run.id, KEY, score=score, comparative_experiment_id=compared.id,
            feedback_group_id=group, session_id=run.session_id,
        )  # fmt: skip
    read = read_preferences(client, compared, key=KEY)
    [item] = read.items
    assert item.id == f"langsmith-pair:{group}" and item.value == "A"
    assert read.verdicts == {item.id: "B"} and read.model_feedback == 6


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


# -- pairwise annotation queues -----------------------------------------------------------


class PairQueue:
    """A pairwise annotation queue made in the UI from the comparison's two experiments.

    The experiments are handed to it newest first: which one is A must not depend on it.
    """

    def __init__(self, comparison: Comparison) -> None:
        self.comparison = comparison
        self.server = comparison.server
        experiments = [str(comparison.second.id), str(comparison.first.id)]
        self.queue = self.server.add_pairwise_queue(
            "curt-vs-polite", experiments, rubric_items=[{"feedback_key": KEY}]
        )
        self.id = self.queue["id"]

    def review(
        self, question: str, choice: str, *, reviewer: str = "ana", comment: str | None = None
    ) -> None:
        """A reviewer's choice ("A", "B" or "equal") seeing the curt run as A."""
        first, second = self.comparison.runs[question]
        self.server.review_pair(
            self.id, (first.id, second.id), choice, key=KEY, reviewer=reviewer, comment=comment
        )

    def user(self, name: str) -> str:
        return str(self.server.user_named(name)["id"])


@pytest.fixture
def paq(comparison: Comparison) -> PairQueue:
    return PairQueue(comparison)


def test_queue_reviews_become_a_b_and_tie_items_in_comparative_order(
    paq: PairQueue, comparison: Comparison, client: Client, server: LangSmithTestServer
) -> None:
    paq.review("store hours?", "A", comment="Short and right.")
    paq.review("reset my password", "B", comment="The curt one refuses.")
    paq.review("track my order", "equal")  # the UI scores both runs 1
    for run in comparison.runs["track my order"]:  # both 0: judged alike all the same
        server.add_feedback(str(run.id), KEY, user="bo", score=0.0, feedback_source={"type": "app"})
    read = read_queue_preferences(client, paq.id, key=KEY)
    assert read.skipped == [] and read.model_feedback == 0
    ana, bo = paq.user("ana"), paq.user("bo")
    assert sorted((i.inputs["question"], i.annotator, i.value) for i in read.items) == sorted(
        [
            ("store hours?", ana, "A"),
            ("reset my password", ana, "B"),
            ("track my order", ana, "tie"),
            ("track my order", bo, "tie"),
        ]
    )
    [item] = [i for i in read.items if i.inputs == {"question": "reset my password"}]
    first, second = comparison.runs["reset my password"]
    # comparative_evaluator's case: the first experiment's run is output A
    assert item.outputs == [first.outputs, second.outputs]
    assert item.outputs[0] == {"answer": "No."}
    assert item.reference_outputs == {"answer": "reference"}
    assert item.rationale == "The curt one refuses."
    assert item.annotator == ana
    assert item.id.startswith("langsmith-paq:") and len({i.id for i in read.items}) == 4
    meta = item.metadata["langsmith"]
    assert meta["annotation_queue_id"] == paq.id
    assert meta["reviewer"] == ana
    assert meta["experiment_ids"] == [str(comparison.first.id), str(comparison.second.id)]
    assert meta["run_ids"] == [str(first.id), str(second.id)]
    assert meta["example_id"] == str(first.reference_example_id)
    # Neither the order the queue lists its items in nor the API listing them matters.
    server.queue_items[paq.id].reverse()
    server.version = "0.16.0"  # before the items API: the legacy listing of runs
    with connect(server) as legacy:
        again = read_queue_preferences(legacy, paq.id, key=KEY)
    assert sorted((i.id, i.value) for i in again.items) == sorted(
        (i.id, i.value) for i in read.items
    )


def test_a_is_the_experiment_created_first_unless_experiments_are_given(
    paq: PairQueue, comparison: Comparison, client: Client
) -> None:
    paq.review("store hours?", "A")
    [item] = read_queue_preferences(client, paq.id, key=KEY).items
    assert item.value == "A" and item.outputs[0] == {"answer": "No."}
    swapped = read_queue_preferences(
        client, paq.id, key=KEY, experiments=(comparison.second.id, comparison.first.id)
    )
    [flipped] = swapped.items
    assert flipped.value == "B" and flipped.outputs[1] == {"answer": "No."}
    assert flipped.id == item.id  # the same review, shown the other way round
    # The queue by name, or as the SDK reads it, reads the same.
    by_name = read_queue_preferences(client, "curt-vs-polite", key=KEY).items
    read_back = client.read_annotation_queue(paq.id)
    as_object = read_queue_preferences(client, read_back, key=KEY).items
    assert [(i.id, i.value) for i in by_name + as_object] == [(item.id, "A")] * 2


@pytest.mark.parametrize("how", ["in_place", "new_records"])
def test_a_changed_mind_keeps_the_item_id_with_the_new_value(
    how: str, paq: PairQueue, comparison: Comparison, client: Client, server: LangSmithTestServer
) -> None:
    paq.review("reset my password", "B", comment="Polite wins.")
    paq.review("store hours?", "equal")
    judge = _judge()
    before = read_queue_preferences(client, paq.id, key=KEY)
    assert len(judge.align(before.items).added) == 2
    [changed] = [i.id for i in before.items if i.inputs == {"question": "reset my password"}]
    if how == "in_place":
        paq.review("reset my password", "A", comment="Curt is right.")
    else:
        # Whether the UI updates a reviewer's records or writes new ones is not
        # documented: a reviewer's latest record on a run counts.
        for run, score in zip(comparison.runs["reset my password"], (1.0, 0.0), strict=True):
            server.add_feedback(
                str(run.id), KEY, user="ana", score=score, comment="Curt is right.",
                feedback_source={"type": "app"},
            )  # fmt: skip
    again = read_queue_preferences(client, paq.id, key=KEY)
    assert sorted(i.id for i in again.items) == sorted(i.id for i in before.items)
    report = judge.align(again.items)
    assert report.added == [] and report.updated == [changed]
    stored = judge.get_feedback(changed)
    assert stored.value == "A" and stored.rationale == "Curt is right."
    replaced = [s.reason for s in again.skipped]
    if how == "in_place":
        assert replaced == []
    else:
        assert len(replaced) == 2
        assert all(
            r.startswith(f"replaced by a later review of {paq.user('ana')}") for r in replaced
        )


def test_one_sided_unattributed_and_model_feedback_is_left_out_with_reasons(
    paq: PairQueue, comparison: Comparison, client: Client, server: LangSmithTestServer
) -> None:
    # Two reviewers who disagree: each one's choice is an item.
    paq.review("reset my password", "A", reviewer="ana")
    paq.review("reset my password", "B", reviewer="cy")
    # bo scored only the curt run of a pair.
    first, second = comparison.runs["store hours?"]
    one = server.add_feedback(
        str(first.id), KEY, user="bo", score=1.0, feedback_source={"type": "app"}
    )
    # Two records on each run of a pair name no reviewer: whose go together is unknown.
    curt, polite = comparison.runs["track my order"]
    unnamed = [
        server.add_feedback(str(run.id), KEY, score=score, feedback_source={"type": "app"})
        for run, score in ((curt, 1.0), (curt, 0.0), (polite, 0.0), (polite, 1.0))
    ]
    # A model's scores of a pair are no review.
    for run, score in zip(comparison.runs["store hours?"], (0.0, 1.0), strict=True):
        client.create_feedback(run.id, KEY, score=score, feedback_source_type="model")
    read = read_queue_preferences(client, paq.id, key=KEY)
    assert sorted((i.annotator, i.value) for i in read.items) == sorted(
        [(paq.user("ana"), "A"), (paq.user("cy"), "B")]
    )
    assert read.model_feedback == 2
    reasons = {s.feedback_ids: s.reason for s in read.skipped}
    assert reasons == {
        (one["id"],): f"incomplete: {paq.user('bo')} scored run {first.id} but not run "
        f"{second.id} of the pair",
        tuple(sorted(f["id"] for f in unnamed)): "4 scores of the pair of runs "
        f"{curt.id} and {polite.id} name no reviewer: which go together is unknown",
    }


def test_a_queue_of_more_experiments_is_read_two_at_a_time(
    paq: PairQueue, comparison: Comparison, client: Client, server: LangSmithTestServer
) -> None:
    # The curt experiment is sent to the queue again, with a third one.
    third = client.read_project(
        project_name=langsmith.evaluate(_polite, data="support", client=client).experiment_name
    )
    api = client._get_langsmith_api_sync()
    api.annotation_queues.populate(
        queue_id=paq.id, session_ids=[str(comparison.first.id), str(third.id)]
    )
    with pytest.raises(ValueError, match="runs of 3 experiments.*experiments=") as error:
        read_queue_preferences(client, paq.id, key=KEY)
    assert str(third.id) in str(error.value)
    curt, polite = comparison.runs["store hours?"]
    thirds = {str(r.id) for r in client.list_runs(project_id=third.id)}
    [other_run] = [b for a, b in server.queue_pairs(paq.id) if a == str(curt.id) and b in thirds]
    server.review_pair(paq.id, (curt.id, other_run), "B", key=KEY, reviewer="ana")
    # Read as the curt and polite experiments' queue: the third's run is not theirs.
    read = read_queue_preferences(
        client, paq.id, key=KEY, experiments=(comparison.first.id, comparison.second.id)
    )
    assert read.items == []
    reasons = sorted(s.reason for s in read.skipped)
    assert reasons == [
        f"incomplete: {paq.user('ana')} scored run {curt.id} but not run {polite.id} of the pair",
        f"run {other_run} is in neither experiment read",
    ]
    # Read as the curt and third experiments' queue: the review is theirs.
    [item] = read_queue_preferences(
        client, paq.id, key=KEY, experiments=(comparison.first.id, third.id)
    ).items
    assert item.value == "B" and item.metadata["langsmith"]["run_ids"] == [str(curt.id), other_run]


def test_runs_are_paired_by_example_in_chronological_order_or_skipped(
    paq: PairQueue, comparison: Comparison, client: Client, server: LangSmithTestServer
) -> None:
    first, second = comparison.first, comparison.second
    # Both experiments ran "track my order" again: sent again, the queue gets that pair.
    curt, polite = comparison.runs["track my order"]
    later = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
    again = [
        server.add_run(
            session_id=str(experiment.id), reference_example_id=str(curt.reference_example_id),
            inputs=curt.inputs, outputs={"answer": f"again {n}"},
            start_time=(later + dt.timedelta(seconds=n)).isoformat(),
        )["id"]
        for n, experiment in enumerate((first, second))
    ]  # fmt: skip
    api = client._get_langsmith_api_sync()
    api.annotation_queues.populate(queue_id=paq.id, session_ids=[str(first.id), str(second.id)])
    assert (again[0], again[1]) in server.queue_pairs(paq.id)
    paq.review("track my order", "A")
    server.review_pair(paq.id, (again[0], again[1]), "B", key=KEY, reviewer="ana")
    # Queued one by one: a second run of the curt experiment on "store hours?" (which of
    # the two is compared with the polite run is unknown) and a run on no example.
    store, _ = comparison.runs["store hours?"]
    extra = server.add_run(
        session_id=str(first.id), reference_example_id=str(store.reference_example_id),
        inputs=store.inputs, outputs={"answer": "Nine to five."},
    )["id"]  # fmt: skip
    loose = server.add_run(session_id=str(first.id), inputs={"question": "hi"})["id"]
    client.add_runs_to_annotation_queue(paq.id, run_ids=[extra, loose])
    for run_id in (str(store.id), extra, loose):
        server.add_feedback(run_id, KEY, user="ana", score=1.0, feedback_source={"type": "app"})
    read = read_queue_preferences(client, paq.id, key=KEY)
    assert sorted((i.metadata["langsmith"]["run_ids"], i.value) for i in read.items) == sorted(
        [([str(curt.id), str(polite.id)], "A"), (again, "B")]
    )
    unknown = (
        f"the queue holds 2 run(s) of experiment {first.id} and 1 of {second.id} on example "
        f"{store.reference_example_id}: which are paired is unknown"
    )
    assert sorted(s.reason for s in read.skipped) == sorted(
        [unknown, unknown, f"run {loose} is on no dataset example"]
    )


def test_a_queue_that_is_not_pairwise_or_not_of_two_experiments_is_refused(
    paq: PairQueue, comparison: Comparison, client: Client, server: LangSmithTestServer
) -> None:
    single = client.create_annotation_queue(name="single")
    with pytest.raises(ValueError, match="is not a pairwise annotation queue"):
        read_queue_preferences(client, single.id, key=KEY)
    with pytest.raises(ValueError, match="no annotation queue is named 'nope'"):
        read_queue_preferences(client, "nope", key=KEY)
    first, second = comparison.first.id, comparison.second.id
    with pytest.raises(ValueError, match="compares two experiments"):
        read_queue_preferences(client, paq.id, key=KEY, experiments=(first, first))
    elsewhere = uuid.uuid4()
    with pytest.raises(ValueError, match=f"experiment {elsewhere} has no runs in"):
        read_queue_preferences(client, paq.id, key=KEY, experiments=(first, elsewhere))
    # A queue left with one experiment's runs compares nothing.
    items = server.queue_items[paq.id]
    items[:] = [i for i in items if i["project_id"] == str(first)]
    with pytest.raises(ValueError, match="runs of 1 experiment"):
        read_queue_preferences(client, paq.id, key=KEY)
    assert second


def test_a_pairwise_judge_learns_from_the_queue_beside_its_prior_verdicts(
    paq: PairQueue, comparison: Comparison, client: Client
) -> None:
    judge = _polite_judge()
    # The judge compared the two experiments before anyone reviewed them.
    langsmith.evaluate(
        (comparison.first.name, comparison.second.name),
        evaluators=[comparative_evaluator(judge)], client=client,
    )  # fmt: skip
    paq.review("store hours?", "A", comment="Short and right.")
    paq.review("reset my password", "B", comment="The curt one refuses.")
    read = read_queue_preferences(client, paq.id, key=KEY)
    assert read.model_feedback == 6 and read.skipped == []
    ids = {i.inputs["question"]: i.id for i in read.items}
    # The judge's verdicts on the reviewed pairs: it prefers the polite reply (B).
    assert read.verdicts == {ids["store hours?"]: "B", ids["reset my password"]: "B"}
    fresh = _judge()
    report = fresh.align(read.items, prior_verdicts=read.verdicts, prior_source="langsmith")
    assert sorted(report.added) == sorted(ids.values())
    points = fresh.agreement_history().points
    assert sorted((p.judge, p.expert, p.source) for p in points) == [
        ("B", "A", "langsmith"),
        ("B", "B", "langsmith"),
    ]
    learned = fresh.get_feedback(ids["store hours?"])
    assert learned.value == "A" and learned.rationale == "Short and right."
    assert learned.outputs[0] == {"answer": "No."}
