"""LangSmithFeedbackSource against the real langsmith.Client and the local LangSmith server."""

from __future__ import annotations

import logging
import sys
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_TESTS_DIR = str(Path(__file__).resolve().parents[2])
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel  # noqa: E402
from langsmith import Client  # noqa: E402
from langsmith import utils as ls_utils  # noqa: E402
from langsmith_server import LangSmithTestServer  # noqa: E402
from urllib3.util.retry import Retry  # noqa: E402

from langchain_memalign import MemAlignJudge  # noqa: E402
from langchain_memalign.langsmith import (  # noqa: E402
    FeedbackMapping,
    LangSmithFeedbackSource,
)

pytest_plugins = ["langsmith_fixtures"]
pytestmark = pytest.mark.usefixtures("langsmith_env")

KEY = "helpfulness"


@pytest.fixture
def server() -> Iterator[LangSmithTestServer]:
    with LangSmithTestServer(runs_page_size=2) as srv:
        yield srv


def make_client(server: LangSmithTestServer, **kwargs: Any) -> Client:
    return Client(api_url=server.url, api_key="test", auto_batch_tracing=False, **kwargs)


@pytest.fixture
def model() -> ScriptedChatModel:
    return ScriptedChatModel(responder=RoleResponder())


@pytest.fixture
def judge(model: ScriptedChatModel) -> MemAlignJudge:
    return MemAlignJudge(
        KEY, "Is it helpful?\n{inputs}\n{outputs}", model, HashEmbeddings(), scale=bool, k=3
    )


def human(server: LangSmithTestServer, run: dict[str, Any], score: Any, who: str, **kw: Any) -> str:
    kw.setdefault("feedback_source", {"type": "app", "user_name": who})
    return str(server.add_feedback(run["id"], KEY, score=score, **kw)["id"])


@pytest.fixture
def project(server: LangSmithTestServer) -> dict[str, Any]:
    return server.add_project("prod")


def add_run(server: LangSmithTestServer, project: dict[str, Any], i: int) -> dict[str, Any]:
    return server.add_run(
        session_id=project["id"],
        name="bot",
        inputs={"question": f"question {i}"},
        outputs={"answer": f"answer {i}"},
    )


def fid(langsmith_id: str) -> str:
    return f"langsmith:{langsmith_id}"


# -- feedback in --------------------------------------------------------------------------------


def test_sync_aligns_human_reviews_with_the_runs_resolved(
    server: LangSmithTestServer,
    client: Client,
    project: dict[str, Any],
    judge: MemAlignJudge,
) -> None:
    runs = [add_run(server, project, i) for i in range(3)]
    cold = human(server, runs[0], 0, "alice", comment="Correct but cold.")
    good = human(
        server, runs[1], 1, "bob", feedback_source={"type": "api", "metadata": {"annotator": "bob"}}
    )
    server.add_feedback(runs[2]["id"], KEY, score=1, feedback_source={"type": "model"})
    server.add_feedback(runs[2]["id"], "other_key", score=0, feedback_source={"type": "app"})
    other = server.add_project("other")
    human(server, add_run(server, other, 9), 0, "zed")

    report = LangSmithFeedbackSource(client, project="prod").sync(judge)

    assert sorted(report.aligned) == sorted([fid(cold), fid(good)])
    assert report.added == report.aligned and report.listed == 2 and report.runs_fetched == 2
    fb = judge.get_feedback(fid(cold))
    assert fb.inputs == {"question": "question 0"} and fb.outputs == {"answer": "answer 0"}
    assert (fb.value, fb.rationale, fb.annotator) == (False, "Correct but cold.", "alice")
    assert fb.metadata["langsmith"]["run_id"] == runs[0]["id"]
    assert fb.metadata["langsmith"]["source_type"] == "app"
    assert judge.get_feedback(fid(good)).annotator == "bob"
    assert any("Correct but cold" in g.text for g in judge.guidelines)
    # plain strings for the source types: the enum would be sent as "FeedbackSourceType.API"
    listing = server.requests_to("/feedback", "GET")[0]
    assert listing.query["source"] == ["api", "app", "auto_eval", "model"]
    assert listing.query["key"] == [KEY] and listing.query["session"] == [project["id"]]
    # runs are read with the current API (v2 query with the run keys)
    queries = server.requests_to("/v2/runs/query", "POST")
    assert len(queries) == 1 and queries[0].json["project_ids"] == [project["id"]]
    assert not server.requests_to("/runs/query")


def test_second_sync_fetches_no_run_and_adds_nothing(
    server: LangSmithTestServer,
    client: Client,
    project: dict[str, Any],
    judge: MemAlignJudge,
    model: ScriptedChatModel,
) -> None:
    runs = [add_run(server, project, i) for i in range(3)]
    for i, run in enumerate(runs):
        human(server, run, i % 2, "alice", comment=f"reason {i}")
    source = LangSmithFeedbackSource(client, project="prod")
    first = source.sync(judge)
    assert len(first.aligned) == 3

    def run_reads() -> int:  # v2 queries that read runs (not the changed-runs query)
        return sum("ids" in q.json for q in server.requests_to("/v2/runs/query"))

    calls, reads = len(model.calls), run_reads()

    again = LangSmithFeedbackSource(client, project="prod").sync(judge)  # a fresh source object
    assert again.aligned == [] and again.align is None and again.runs_fetched == 0
    assert len(model.calls) == calls and run_reads() == reads
    assert len(judge.feedback_ids) == 3
    state = judge.memory.store.get_meta(source.state_key(judge))
    assert state["version"] == 1 and len(state["items"]) == 3 and state["cursor"]

    # a new review is the only thing fetched next time
    new = human(server, add_run(server, project, 7), 0, "bob", comment="new")
    third = source.sync(judge)
    assert third.aligned == [fid(new)] and third.runs_fetched == 1

    # without its state, a sync reads everything again, and aligning it costs nothing
    source.forget(judge)
    calls = len(model.calls)
    fourth = source.sync(judge)
    assert len(fourth.aligned) == 4 and fourth.align is not None
    assert len(fourth.align.unchanged) == 4 and len(model.calls) == calls


def test_modified_review_replaces_its_episode(
    server: LangSmithTestServer,
    client: Client,
    project: dict[str, Any],
    judge: MemAlignJudge,
) -> None:
    run = add_run(server, project, 0)
    lsid = human(server, run, 1, "alice", comment="Looks fine.")
    source = LangSmithFeedbackSource(client, project="prod")
    source.sync(judge)
    client.update_feedback(lsid, score=0, comment="Actually it ignores the question.")
    report = source.sync(judge)
    assert report.updated == [fid(lsid)] and report.added == []
    fb = judge.get_feedback(fid(lsid))
    assert (fb.value, fb.rationale) == (False, "Actually it ignores the question.")
    assert judge.feedback_ids == [fid(lsid)]


def test_correction_of_model_feedback_is_the_label(
    server: LangSmithTestServer,
    client: Client,
    project: dict[str, Any],
    judge: MemAlignJudge,
) -> None:
    runs = [add_run(server, project, i) for i in range(3)]
    model_source = {"type": "model"}
    explained = server.add_feedback(
        runs[0]["id"], KEY, score=1, comment="judge: helpful", feedback_source=model_source
    )["id"]
    commented = server.add_feedback(
        runs[1]["id"], KEY, score=1, comment="judge: fine", feedback_source=model_source
    )["id"]
    untouched = server.add_feedback(runs[2]["id"], KEY, score=1, feedback_source=model_source)
    source = LangSmithFeedbackSource(client, project="prod")
    assert source.sync(judge).listed == 0  # the judge's own verdicts teach nothing

    client.update_feedback(explained, correction={"score": 0, "explanation": "Too cold."})
    client.update_feedback(commented, correction={"score": 0}, comment="Ignores the refund.")
    report = source.sync(judge)

    assert sorted(report.aligned) == sorted([fid(explained), fid(commented)])
    a, b = judge.get_feedback(fid(explained)), judge.get_feedback(fid(commented))
    assert (a.value, a.rationale) == (False, "Too cold.")
    assert (b.value, b.rationale) == (False, "Ignores the refund.")
    assert a.metadata["langsmith"]["kind"] == "correction"
    assert fid(untouched["id"]) not in judge.feedback_ids

    # corrections can be turned off
    off = LangSmithFeedbackSource(client, project="prod", corrections=False, sync_id="off")
    assert off.sync(judge).listed == 0


@pytest.mark.parametrize("corrections", [True, False])
def test_a_sync_records_the_judges_verdict_on_the_run_before_learning(
    server: LangSmithTestServer,
    client: Client,
    project: dict[str, Any],
    judge: MemAlignJudge,
    model: ScriptedChatModel,
    corrections: bool,
) -> None:
    runs = [add_run(server, project, i) for i in range(3)]
    model_source = {"type": "model"}
    # The judge's verdicts on two runs (an older one, then the latest); none on the third.
    server.add_feedback(runs[0]["id"], KEY, score=0, feedback_source=model_source)
    server.add_feedback(runs[0]["id"], KEY, score=1, feedback_source=model_source)
    server.add_feedback(runs[1]["id"], KEY, score=1, feedback_source=model_source)
    reviews = [human(server, run, 0, f"r{i}") for i, run in enumerate(runs)]
    judged = model.responder.roles.count("judge")
    source = LangSmithFeedbackSource(client, project="prod", corrections=corrections)
    report = source.sync(judge)
    assert sorted(report.aligned) == sorted(fid(r) for r in reviews)
    assert model.responder.roles.count("judge") == judged  # read, not judged again
    # With corrections the listing already held the verdicts; without, one more listing.
    verdict_listings = [
        r for r in server.requests_to("/feedback", "GET") if r.query.get("source") == ["model"]
    ]
    assert len(verdict_listings) == (0 if corrections else 1)
    points = judge.agreement_history().points
    assert sorted((p.feedback_id, p.judge, p.expert, p.source) for p in points) == sorted(
        [(fid(reviews[0]), True, False, "langsmith"), (fid(reviews[1]), True, False, "langsmith")]
    )
    assert report.align is not None and len(report.align.agreement_recorded) == 2


def agreement_records(server: LangSmithTestServer) -> list[dict[str, Any]]:
    """The judge's agreement records the server stored (project-level feedback)."""
    return [f for f in server.feedback.values() if f["key"] == f"{KEY}_agreement"]


@pytest.mark.parametrize("scope", ["project", "experiment"])
def test_a_sync_writes_its_agreement_before_learning_to_the_project(
    server: LangSmithTestServer,
    client: Client,
    project: dict[str, Any],
    judge: MemAlignJudge,
    model: ScriptedChatModel,
    scope: str,
) -> None:
    runs = [add_run(server, project, i) for i in range(4)]
    verdict = {"type": "model"}
    server.add_feedback(runs[0]["id"], KEY, score=1, feedback_source=verdict)
    server.add_feedback(runs[1]["id"], KEY, score=0, feedback_source=verdict)
    wrong = human(server, runs[0], 0, "ann")  # the judge had said True
    human(server, runs[1], 0, "bob")  # the judge had said False too
    human(server, runs[2], 1, "cy")  # no verdict on the run: no test of the judge
    source = LangSmithFeedbackSource(client, **{scope: "prod"})
    first = source.sync(judge)

    # One project-level record on the project (an experiment is a project too).
    (record,) = agreement_records(server)
    assert first.agreement_feedback_ids == {project["id"]: record["id"]}
    assert (record["run_id"], record["session_id"], record["score"]) == (None, project["id"], 0.5)
    assert record["value"] == {"agreed": 1, "reviews": 2, "previous": None}
    assert first.accuracy == 0.5
    assert record["feedback_source"]["type"] == "model"
    assert sorted((a.run_id, a.agrees) for a in first.agreement) == sorted(
        [(runs[0]["id"], False), (runs[1]["id"], True)]
    )
    # The misaligned case, to open: its run (with a link), the judge's verdict, the review.
    (case,) = record["feedback_source"]["metadata"]["misaligned"]
    assert (case["run_id"], case["feedback_id"], case["judge"], case["expert"]) == (
        runs[0]["id"], fid(wrong), True, False,
    )  # fmt: skip
    assert case["url"].endswith(f"/projects/p/{project['id']}/r/{runs[0]['id']}")

    # Nothing new: no record. A new review: a record of its own, beside the earlier level.
    assert source.sync(judge).agreement_feedback_ids == {}
    server.add_feedback(runs[3]["id"], KEY, score=1, feedback_source=verdict)
    human(server, runs[3], 1, "dee")
    second = source.sync(judge)
    records = {r["id"]: r for r in agreement_records(server)}
    assert len(records) == 2 and set(second.agreement_feedback_ids) == {project["id"]}
    latest = records[second.agreement_feedback_ids[project["id"]]]
    assert latest["score"] == 1.0
    assert latest["value"] == {"agreed": 1, "reviews": 1, "previous": {"agreed": 1, "reviews": 2}}
    assert latest["feedback_source"]["metadata"]["misaligned"] == []


def test_a_second_sync_of_the_same_reviews_writes_no_second_record(
    server: LangSmithTestServer,
    client: Client,
    project: dict[str, Any],
    judge: MemAlignJudge,
    model: ScriptedChatModel,
) -> None:
    run = add_run(server, project, 0)
    server.add_feedback(run["id"], KEY, score=1, feedback_source={"type": "model"})
    human(server, run, 0, "ann")
    first = LangSmithFeedbackSource(client, project="prod").sync(judge)
    # The same reviews learned again from scratch (a replica, a memory restored from a
    # backup): the record's id comes from them, so the write finds the first one.
    twin = MemAlignJudge(
        KEY, "Is it helpful?\n{inputs}\n{outputs}", model, HashEmbeddings(), scale=bool, k=3
    )
    again = LangSmithFeedbackSource(client, project="prod").sync(twin)
    (record,) = agreement_records(server)
    assert (
        first.agreement_feedback_ids
        == again.agreement_feedback_ids
        == {project["id"]: record["id"]}
    )


def test_a_refused_agreement_record_leaves_the_align_committed(
    server: LangSmithTestServer,
    client: Client,
    project: dict[str, Any],
    judge: MemAlignJudge,
    model: ScriptedChatModel,
    caplog: pytest.LogCaptureFixture,
) -> None:
    run = add_run(server, project, 0)
    server.add_feedback(run["id"], KEY, score=1, feedback_source={"type": "model"})
    review = human(server, run, 0, "ann")
    server.inject_failure("/feedback", status=403, method="POST")  # the only write: the record
    source = LangSmithFeedbackSource(client, project="prod")
    with caplog.at_level(logging.WARNING):
        report = source.sync(judge)
    assert report.aligned == [fid(review)] and judge.feedback_ids == [fid(review)]
    assert [a.agrees for a in report.agreement] == [False]
    assert report.agreement_feedback_ids == {project["id"]: None}  # the record is missing
    assert not agreement_records(server) and "agreement could not be written" in caplog.text
    assert server.requests_to("/feedback", "POST")[-1].injected
    # The align stays: the memory's series holds the point, the next sync learns nothing.
    assert [p.agrees for p in judge.agreement_history().points] == [False]
    calls = len(model.calls)
    assert source.sync(judge).aligned == [] and len(model.calls) == calls


def test_the_agreement_record_can_be_turned_off(
    server: LangSmithTestServer, client: Client, project: dict[str, Any], judge: MemAlignJudge
) -> None:
    run = add_run(server, project, 0)
    server.add_feedback(run["id"], KEY, score=1, feedback_source={"type": "model"})
    human(server, run, 0, "ann")
    report = LangSmithFeedbackSource(client, project="prod", log_agreement=False).sync(judge)
    assert [a.agrees for a in report.agreement] == [False]
    assert report.agreement_feedback_ids == {} and not agreement_records(server)
    assert not server.requests_to("/feedback", "POST")


def test_the_record_is_linked_from_the_projects_page_or_the_experiments_comparison(
    server: LangSmithTestServer, client: Client
) -> None:
    from langchain_memalign.langsmith._agreement_log import session_url

    project = client.read_project(project_name=server.add_project("prod")["name"])
    host = f"http://localhost/o/{server.tenant_id}"
    assert session_url(project) == f"{host}/projects/p/{project.id}"
    dataset = client.create_dataset("qa")
    made = client.create_project("qa-run-1", reference_dataset_id=dataset.id)
    experiment = client.read_project(project_id=made.id)
    assert session_url(experiment) == (
        f"{host}/datasets/{dataset.id}/compare?selectedSessions={experiment.id}"
    )


def test_categorical_labels_and_invalid_values(
    server: LangSmithTestServer, client: Client, project: dict[str, Any], model: ScriptedChatModel
) -> None:
    judge = MemAlignJudge(
        "tone",
        "Tone? {inputs} {outputs}",
        model,
        HashEmbeddings(),
        scale=["Warm", "Neutral", "Cold"],
    )
    runs = [add_run(server, project, i) for i in range(4)]
    by_value = server.add_feedback(runs[0]["id"], "tone", score=2, value="cold", comment="x")
    by_score = server.add_feedback(runs[1]["id"], "tone", score=0)  # a UI pick: the index
    bad = server.add_feedback(runs[2]["id"], "tone", score=7)
    corrected = server.add_feedback(
        runs[3]["id"],
        "tone",
        value="Warm",
        feedback_source={"type": "model"},
        correction={"value": "Neutral", "explanation": "Just informative."},
    )
    report = LangSmithFeedbackSource(client, project="prod").sync(judge)
    assert judge.get_feedback(fid(by_value["id"])).value == "Cold"
    assert judge.get_feedback(fid(by_score["id"])).value == "Warm"
    assert judge.get_feedback(fid(corrected["id"])).value == "Neutral"
    assert "score=7" in report.skipped[bad["id"]] and "categorical" in report.skipped[bad["id"]]
    assert len(report.aligned) == 3


# -- several reviewers --------------------------------------------------------------------------


def _three_reviewers(server: LangSmithTestServer, run: dict[str, Any]) -> dict[str, str]:
    return {
        "alice": human(server, run, 0, "alice", comment="cold", created_at="2024-01-01T00:00:00Z",
                       modified_at="2024-01-01T00:00:00Z"),
        "carol": human(server, run, 0, "carol", comment="no empathy",
                       created_at="2024-01-02T00:00:00Z", modified_at="2024-01-02T00:00:00Z"),
        "bob": human(server, run, 1, "bob", comment="answers it",
                     created_at="2024-01-03T00:00:00Z", modified_at="2024-01-03T00:00:00Z"),
    }  # fmt: skip


@pytest.mark.parametrize(
    ("policy", "kept", "resolution"),
    [
        ("keep_all", {"alice", "bob", "carol"}, None),
        ("majority", {"alice", "carol"}, False),
        ("latest", {"bob"}, True),
    ],
)
def test_conflicting_reviewers(
    server: LangSmithTestServer,
    client: Client,
    project: dict[str, Any],
    judge: MemAlignJudge,
    policy: Any,
    kept: set[str],
    resolution: Any,
) -> None:
    run = add_run(server, project, 0)
    ids = _three_reviewers(server, run)
    report = LangSmithFeedbackSource(client, project="prod", conflicts=policy).sync(judge)
    assert set(judge.feedback_ids) == {fid(ids[who]) for who in kept}
    assert {judge.get_feedback(i).annotator for i in judge.feedback_ids} == kept
    [conflict] = report.conflicts
    assert conflict.run_id == run["id"] and conflict.resolution == resolution
    assert {v.annotator: v.label for v in conflict.votes} == {
        "alice": False,
        "carol": False,
        "bob": True,
    }
    assert set(conflict.kept) == {fid(ids[who]) for who in kept}


def test_policy_change_unaligns_dropped_reviews_and_corrections_win(
    server: LangSmithTestServer, client: Client, project: dict[str, Any], judge: MemAlignJudge
) -> None:
    run = add_run(server, project, 0)
    ids = _three_reviewers(server, run)
    LangSmithFeedbackSource(client, project="prod", sync_id="s").sync(judge)
    assert len(judge.feedback_ids) == 3

    latest = LangSmithFeedbackSource(client, project="prod", sync_id="s", conflicts="latest")
    report = latest.sync(judge)
    assert sorted(report.removed) == sorted([fid(ids["alice"]), fid(ids["carol"])])
    assert judge.feedback_ids == [fid(ids["bob"])]

    # a correction of the judge's verdict outranks the latest plain review
    corr = server.add_feedback(
        run["id"],
        KEY,
        score=1,
        feedback_source={"type": "model"},
        correction={"score": 0, "explanation": "Cold."},
        created_at="2023-06-01T00:00:00Z",
        modified_at="2023-06-01T00:00:00Z",
    )["id"]
    report = latest.sync(judge)
    assert report.conflicts[0].resolution is False
    assert set(judge.feedback_ids) == {fid(ids["alice"]), fid(ids["carol"]), fid(corr)}
    assert report.removed == [fid(ids["bob"])]


def test_same_reviewer_twice_keeps_their_latest_review(
    server: LangSmithTestServer, client: Client, project: dict[str, Any], judge: MemAlignJudge
) -> None:
    run = add_run(server, project, 0)
    old = human(server, run, 1, "alice", created_at="2024-01-01T00:00:00Z",
                modified_at="2024-01-01T00:00:00Z")  # fmt: skip
    new = human(server, run, 0, "alice", comment="changed my mind")
    report = LangSmithFeedbackSource(client, project="prod").sync(judge)
    assert judge.feedback_ids == [fid(new)] and not report.conflicts
    assert fid(old) not in judge.feedback_ids


# -- deletions ------------------------------------------------------------------------------------


def test_deleted_feedback_is_unaligned(
    server: LangSmithTestServer, client: Client, project: dict[str, Any], judge: MemAlignJudge
) -> None:
    runs = [add_run(server, project, i) for i in range(2)]
    keep = human(server, runs[0], 1, "alice", comment="Direct answer.")
    gone = human(server, runs[1], 0, "bob", comment="Too cold to the customer.")
    source = LangSmithFeedbackSource(client, project="prod")
    source.sync(judge)
    assert any(fid(gone) in g.source_ids for g in judge.guidelines)

    client.delete_feedback(gone)
    # an incremental sync reads only the runs whose feedback changed: a deletion on
    # another run waits for the next full sync
    assert source.sync(judge).removed == []
    report = source.sync(judge, full=True)
    assert report.removed == [fid(gone)] and report.unalign is not None
    assert judge.feedback_ids == [fid(keep)]
    assert all(fid(gone) not in g.source_ids for g in judge.guidelines)
    assert source.sync(judge).removed == []


def test_feedback_missing_from_a_listing_is_only_unaligned_once_the_server_says_it_is_gone(
    server: LangSmithTestServer,
    client: Client,
    project: dict[str, Any],
    judge: MemAlignJudge,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs = [add_run(server, project, i) for i in range(2)]
    ids = [human(server, run, 1, "alice", comment="Direct answer.") for run in runs]
    source = LangSmithFeedbackSource(client, project="prod", reconcile_every=1)  # all full
    source.sync(judge)

    # A short listing (a page lost, offsets shifted by a concurrent delete) proves nothing
    monkeypatch.setattr(source.api, "list_feedback", lambda **kw: iter(()))
    report = source.sync(judge)
    assert report.removed == [] and sorted(judge.feedback_ids) == sorted(map(fid, ids))

    monkeypatch.undo()
    client.delete_feedback(ids[1])
    monkeypatch.setattr(source.api, "list_feedback", lambda **kw: iter(()))
    assert source.sync(judge).removed == [fid(ids[1])]  # confirmed gone: unaligned
    assert judge.feedback_ids == [fid(ids[0])]


def test_a_record_listed_twice_counts_once(
    server: LangSmithTestServer,
    client: Client,
    project: dict[str, Any],
    judge: MemAlignJudge,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = add_run(server, project, 0)
    bob = human(server, run, 0, "bob", comment="Too curt.")
    alice = human(server, run, 1, "alice", comment="Direct answer.")  # the latest
    source = LangSmithFeedbackSource(client, project="prod", conflicts="majority")
    listing = source.api.list_feedback

    def overlapping_pages(**kw: Any) -> Iterator[Any]:
        for fb in listing(**kw):
            yield fb
            if str(fb.id) == bob:  # offset pages overlapped on bob's review
                yield fb

    monkeypatch.setattr(source.api, "list_feedback", overlapping_pages)
    report = source.sync(judge)  # no "appears twice in one align call"
    assert report.listed == 2
    # one vote each: the tie goes to the latest review, not to bob counted twice
    assert judge.feedback_ids == [fid(alice)]
    assert report.conflicts[0].resolution is True


def test_a_failed_reflection_is_retried_by_the_next_sync(
    server: LangSmithTestServer, client: Client, project: dict[str, Any]
) -> None:
    responder = RoleResponder()
    judge = MemAlignJudge(
        KEY,
        "Is it helpful?\n{inputs}\n{outputs}",
        ScriptedChatModel(responder=responder),
        HashEmbeddings(),
        options={"max_retries": 0},
    )
    lsid = human(server, add_run(server, project, 0), 0, "bob", comment="Too cold.")
    source = LangSmithFeedbackSource(client, project="prod")
    responder.fail_reflect = True
    first = source.sync(judge)
    assert first.failed == [fid(lsid)] and first.aligned == [] and judge.guidelines == []

    responder.fail_reflect = False
    second = source.sync(judge)  # nothing new in LangSmith
    assert second.runs_fetched == 0 and second.failed == []
    assert [list(g.source_ids) for g in judge.guidelines] == [[fid(lsid)]]


def test_an_item_failed_in_one_batch_and_retried_in_the_next_is_not_failed(
    server: LangSmithTestServer, client: Client, project: dict[str, Any]
) -> None:
    responder = RoleResponder()
    judge = MemAlignJudge(
        KEY,
        "Is it helpful?\n{inputs}\n{outputs}",
        ScriptedChatModel(responder=responder),
        HashEmbeddings(),
        options={"max_retries": 0},
    )
    first = human(server, add_run(server, project, 0), 0, "bob", comment="Too cold.")
    second = human(server, add_run(server, project, 1), 1, "ann", comment="Clear.")
    source = LangSmithFeedbackSource(client, project="prod", batch_size=1)
    responder.fail_next_reflections = 1  # batch 1 fails; batch 2 retries it and succeeds
    report = source.sync(judge)
    assert report.align is not None
    assert report.failed == [] and report.align.failed == []
    assert sorted(report.aligned) == sorted([fid(first), fid(second)])
    assert any("reflect" in e for e in report.align.errors)  # the failure happened
    assert sorted(i for g in judge.guidelines for i in g.source_ids) == sorted(
        [fid(first), fid(second)]
    )


def test_run_extra_can_be_mapped_on_the_newer_run_api(
    server: LangSmithTestServer, client: Client, project: dict[str, Any], judge: MemAlignJudge
) -> None:
    run = server.add_run(
        session_id=project["id"],
        inputs={"messages": []},
        outputs={"answer": "9 to 5."},
        extra={"metadata": {"question": "store hours?"}},
    )
    lsid = human(server, run, 1, "alice")
    mapping = FeedbackMapping(inputs="run.extra.metadata.question")
    LangSmithFeedbackSource(client, project="prod", mapping=mapping).sync(judge)
    assert judge.get_feedback(fid(lsid)).inputs == "store hours?"
    assert server.requests_to("/v2/runs/query")  # read through the newer API


def test_deleted_feedback_can_be_kept(
    server: LangSmithTestServer, client: Client, project: dict[str, Any], judge: MemAlignJudge
) -> None:
    gone = human(server, add_run(server, project, 0), 0, "bob")
    source = LangSmithFeedbackSource(client, project="prod", unalign_deleted=False)
    source.sync(judge)
    client.delete_feedback(gone)
    assert source.sync(judge).removed == []
    assert judge.feedback_ids == [fid(gone)]


# -- pagination, runs and experiments ----------------------------------------------------------


def test_many_pages_of_feedback_and_runs(judge: MemAlignJudge) -> None:
    with LangSmithTestServer(runs_page_size=40) as server:
        client = make_client(server)
        _many_pages(server, client, judge)
        client.close(timeout=5)


def _many_pages(server: LangSmithTestServer, client: Client, judge: MemAlignJudge) -> None:
    project = server.add_project("prod")
    runs = [add_run(server, project, i) for i in range(105)]
    ids = [human(server, run, i % 2, f"r{i}") for i, run in enumerate(runs)]
    ids += [human(server, run, 1, f"s{i}") for i, run in enumerate(runs[:100])]
    source = LangSmithFeedbackSource(client, project="prod", batch_size=80)
    report = source.sync(judge)
    pages = server.requests_to("/feedback", "GET")
    assert [p.query["offset"] for p in pages] == [["0"], ["100"], ["200"]]
    assert sorted(report.aligned) == sorted(fid(i) for i in ids)
    assert len(judge.feedback_ids) == 205
    # v2 run queries: chunks of at most 100 ids, each paged by the server (40 runs a page)
    queries = server.requests_to("/v2/runs/query", "POST")
    assert all(len(q.json["ids"]) <= 100 for q in queries)
    assert [q.json.get("cursor") for q in queries][:3] == [None, "40", None]


def test_source_over_runs_and_experiment_reference_outputs(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    dataset = client.create_dataset("golden")
    [example] = client.create_examples(
        dataset_id=dataset.id,
        examples=[{"inputs": {"question": "q"}, "reference_outputs": {"answer": "reference"}}],
    )["example_ids"]
    experiment = server.add_project("exp-1", reference_dataset_id=str(dataset.id))
    run = server.add_run(
        session_id=experiment["id"],
        inputs={"question": "q"},
        outputs={"answer": "mine"},
        reference_example_id=str(example),
    )
    lsid = human(server, run, 0, "alice", comment="Differs from the reference.")
    other = add_run(server, experiment, 1)
    human(server, other, 1, "bob")

    LangSmithFeedbackSource(client, experiment="exp-1").sync(judge)
    assert judge.get_feedback(fid(lsid)).reference_outputs == {"answer": "reference"}

    fresh = MemAlignJudge(KEY, "{inputs} {outputs}", judge.model, HashEmbeddings())
    LangSmithFeedbackSource(client, runs=[run["id"]]).sync(fresh)
    assert fresh.feedback_ids == [fid(lsid)]
    runs_query = server.requests_to("/feedback", "GET")[-1].query
    assert runs_query["run"] == [run["id"]]


def test_iterating_the_source_feeds_align(
    server: LangSmithTestServer, client: Client, project: dict[str, Any], judge: MemAlignJudge
) -> None:
    run = add_run(server, project, 0)
    lsid = human(server, run, None, "alice", value="fail", comment="Rude.")
    source = LangSmithFeedbackSource.for_judge(
        judge,
        client,
        project=project["id"],
        mapping=FeedbackMapping(inputs="run.inputs.question", outputs="run.outputs.answer"),
    )
    report = judge.align(source)
    assert report.added == [fid(lsid)]
    fb = judge.get_feedback(fid(lsid))
    assert (fb.inputs, fb.outputs, fb.value) == ("question 0", "answer 0", False)
    with pytest.raises(ValueError, match="needs its key"):
        list(LangSmithFeedbackSource(client, project="prod"))


# -- server errors and fallbacks ----------------------------------------------------------------


def test_429_and_500_are_retried(
    server: LangSmithTestServer, client: Client, project: dict[str, Any], judge: MemAlignJudge
) -> None:
    lsid = human(server, add_run(server, project, 0), 0, "alice")
    server.inject_failure("/feedback", status=429, method="GET")
    server.inject_failure("/v2/runs/query", status=500)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ls_utils.LangSmithWarning)
        report = LangSmithFeedbackSource(client, project="prod").sync(judge)
    assert report.aligned == [fid(lsid)]
    assert [r.status for r in server.requests_to("/feedback", "GET")] == [429, 200]
    assert [r.status for r in server.requests_to("/v2/runs/query")] == [500, 200]


def test_failed_sync_resumes_without_duplicates(
    monkeypatch: pytest.MonkeyPatch, judge: MemAlignJudge
) -> None:
    with LangSmithTestServer(runs_v2=False) as server:
        client = make_client(
            server,
            retry_config=Retry(total=1, status_forcelist=[500], allowed_methods=None,
                               raise_on_status=False),
        )  # fmt: skip
        project = server.add_project("prod")
        ids = [human(server, add_run(server, project, i), i % 2, f"r{i}") for i in range(5)]
        source = LangSmithFeedbackSource(client, project="prod", batch_size=2)
        server.inject_failure("/runs/query", status=500, times=10, after=1)
        with pytest.raises(ls_utils.LangSmithError):
            source.sync(judge)
        assert len(judge.feedback_ids) == 2  # the first batch is kept

        server.clear_faults()
        report = source.sync(judge)
        assert len(report.aligned) == 3 and report.runs_fetched == 3
        assert sorted(judge.feedback_ids) == sorted(fid(i) for i in ids)
        assert source.sync(judge).aligned == []
        client.close(timeout=5)


@pytest.mark.parametrize("version", ["0.16.14", "0.15.3"])
def test_older_servers_use_the_older_run_api(version: str, judge: MemAlignJudge) -> None:
    with LangSmithTestServer(runs_v2=False, version=version) as server:
        client = make_client(server)
        project = server.add_project("prod")
        lsid = human(server, add_run(server, project, 0), 0, "alice")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            report = LangSmithFeedbackSource(client, project="prod").sync(judge)
            human(server, add_run(server, project, 1), 1, "bob")
            LangSmithFeedbackSource(client, project="prod").sync(judge)
        assert report.aligned == [fid(lsid)] and len(judge.feedback_ids) == 2
        # no query flags in /info (an older server): ClickHouse, read through v1 as the
        # SDK does, whatever the version says
        assert not server.requests_to("/v2/runs/query")
        assert len(server.requests_to("/runs/query")) == 2
        assert not [w for w in caught if issubclass(w.category, DeprecationWarning)]
        client.close(timeout=5)


def test_missing_run_is_retried_on_the_next_sync(
    server: LangSmithTestServer, client: Client, project: dict[str, Any], judge: MemAlignJudge
) -> None:
    run_id = str(uuid.uuid4())
    lsid = str(server.add_feedback(run_id, KEY, score=0, session_id=project["id"],
                                   feedback_source={"type": "app"})["id"])  # fmt: skip
    source = LangSmithFeedbackSource(client, project="prod")
    report = source.sync(judge)
    assert "was not found" in report.skipped[lsid] and judge.feedback_ids == []
    assert source.sync(judge).skipped == report.skipped  # still not there: tried again
    long_ago = "2020-01-01T00:00:00+00:00"  # before the cursors: only the retry finds it
    server.feedback[lsid].update(created_at=long_ago, modified_at=long_ago)
    server.add_run(id=run_id, session_id=project["id"], inputs={"q": "late"}, outputs={"a": "x"})
    assert source.sync(judge).aligned == [fid(lsid)]


def test_arguments_are_checked(client: Client) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        LangSmithFeedbackSource(client)
    with pytest.raises(ValueError, match="exactly one"):
        LangSmithFeedbackSource(client, project="p", runs=[])
    with pytest.raises(ValueError, match="conflicts"):
        LangSmithFeedbackSource(client, project="p", conflicts="vote")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a run id"):
        LangSmithFeedbackSource(client, runs=["nope"])


async def test_async_sync(
    server: LangSmithTestServer, client: Client, project: dict[str, Any], judge: MemAlignJudge
) -> None:
    lsid = human(server, add_run(server, project, 0), 1, "alice")
    report = await LangSmithFeedbackSource(client, project="prod").async_sync(judge)
    assert report.aligned == [fid(lsid)]


def test_reviews_replaced_by_a_later_one_of_the_same_annotator_are_reported(
    server: LangSmithTestServer,
    client: Client,
    project: dict[str, Any],
    judge: MemAlignJudge,
) -> None:
    run = add_run(server, project, 0)
    # A script posting two reviewers' verdicts through one API key: the service stamps
    # both with that key's user, so they are one annotator's review and its revision.
    first = client.create_feedback(run["id"], KEY, score=0, comment="Too cold.")
    second = client.create_feedback(run["id"], KEY, score=1, comment="Fine by me.")
    report = LangSmithFeedbackSource(client, project="prod").sync(judge)
    assert report.added == [fid(str(second.id))]
    assert "replaced by a later review of" in report.skipped[str(first.id)]
    assert str(second.id) in report.skipped[str(first.id)]


def _short_pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Rate-limit pauses of 0.01 s, and every sleep recorded instead of slept."""
    from langchain_memalign.langsmith import _api_base

    waits: list[float] = []
    monkeypatch.setattr(_api_base, "RATE_LIMIT_PAUSE", 0.01)
    monkeypatch.setattr("time.sleep", lambda s: waits.append(s))
    return waits


def test_a_rate_limit_that_outlasts_the_clients_retries_is_waited_out(
    server: LangSmithTestServer,
    client: Client,
    project: dict[str, Any],
    judge: MemAlignJudge,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waits = _short_pauses(monkeypatch)
    review = human(server, add_run(server, project, 0), 0, "alice", comment="Cold.")
    # More 429s in a row than the client retries: the first listing fails outright.
    server.inject_failure("/feedback", status=429, method="GET", times=8)
    report = LangSmithFeedbackSource(client, project="prod").sync(judge)
    assert report.added == [fid(review)]
    assert 0.01 in waits
    # A rate limit that never ends is the caller's error, after the last pause.
    server.inject_failure("/feedback", status=429, method="GET", times=1000)
    with pytest.raises(ls_utils.LangSmithRateLimitError):
        LangSmithFeedbackSource(client, project="prod").sync(judge, full=True)


def test_a_rate_limit_of_the_v2_run_query_is_waited_out_as_v1s_is(
    server: LangSmithTestServer,
    client: Client,
    project: dict[str, Any],
    judge: MemAlignJudge,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waits = _short_pauses(monkeypatch)
    review = human(server, add_run(server, project, 0), 0, "alice", comment="Cold.")
    # More 429s in a row than the v2 resource retries (three requests a call).
    server.inject_failure("/v2/runs/query", status=429, times=4)
    report = LangSmithFeedbackSource(client, project="prod").sync(judge)
    assert report.added == [fid(review)]
    assert 0.01 in waits and [r.status for r in server.requests_to("/v2/runs/query")][-1] == 200
    # A rate limit that never ends is the caller's error, the same one as v1's.
    later = human(server, add_run(server, project, 1), 1, "alice", comment="Fine.")
    server.inject_failure("/v2/runs/query", status=429, times=1000)
    with pytest.raises(ls_utils.LangSmithRateLimitError):
        LangSmithFeedbackSource(client, project="prod").sync(judge)
    server.clear_faults()
    assert fid(later) in LangSmithFeedbackSource(client, project="prod").sync(judge).added
