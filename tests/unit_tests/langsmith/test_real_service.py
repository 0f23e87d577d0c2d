"""The integration works against LangSmith as the real service behaves.

Each test drives the real ``langsmith.Client`` against the strict local server: it
stamps ``feedback_source.user_id`` from the API key, returns only stored feedback
fields, keeps per-reviewer queue statuses with review requirements, keeps several
feedback configs per key, reports its query backend in ``/info`` and expires runs on
the base retention tier.
"""

from __future__ import annotations

import datetime as dt
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

_TESTS_DIR = str(Path(__file__).resolve().parents[2])
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

import langsmith  # noqa: E402
from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel  # noqa: E402
from langsmith import Client  # noqa: E402
from langsmith_fixtures import connect  # noqa: E402
from langsmith_server import LangSmithTestServer  # noqa: E402

from langchain_memalign import MemAlignJudge  # noqa: E402
from langchain_memalign.errors import FeedbackConfigMismatchError  # noqa: E402
from langchain_memalign.langsmith import (  # noqa: E402
    FeedbackMapping,
    JudgeAnnotationQueue,
    LangSmithFeedbackSource,
    write_verdicts,
)
from langchain_memalign.langsmith._fields import (  # noqa: E402
    feedback_config,
    read_label,
    score_fields,
)
from langchain_memalign.scale import Scale  # noqa: E402

pytest_plugins = ["langsmith_fixtures"]
pytestmark = pytest.mark.usefixtures("langsmith_env")

KEY = "helpfulness"
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def judge() -> MemAlignJudge:
    model = ScriptedChatModel(responder=RoleResponder())
    return MemAlignJudge(KEY, "Helpful?\n{inputs}\n{outputs}", model, HashEmbeddings(), k=3)


def add_run(server: LangSmithTestServer, project: dict[str, Any], i: int) -> dict[str, Any]:
    """A root run that has ended (only ended runs are judged)."""
    return server.add_run(
        session_id=project["id"],
        inputs={"q": f"question {i}"},
        outputs={"a": f"answer {i}"},
        end_time=dt.datetime.now(dt.UTC).isoformat(),
    )


# -- 1. feedback configs ----------------------------------------------------------------------


def test_a_workspace_config_on_another_scale_stops_the_queue(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    server.add_feedback_config(KEY, {"type": "continuous", "min": 0, "max": 10})
    queue = JudgeAnnotationQueue(judge, client)
    with pytest.raises(FeedbackConfigMismatchError, match=r"helpfulness.*continuous 0–10"):
        queue.ensure()
    assert server.annotation_queues == {}  # no queue whose reviews the judge cannot read


def test_an_enforced_config_on_another_scale_is_refused(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    server.enforced_feedback_configs = True
    server.add_feedback_config(KEY, {"type": "continuous", "min": 0, "max": 10}, is_enforced=True)
    with pytest.raises(FeedbackConfigMismatchError, match="enforced"):
        JudgeAnnotationQueue(judge, client).ensure()
    assert server.annotation_queues == {}


def test_the_rubric_pins_the_judge_config_where_a_key_has_several(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    server.enforced_feedback_configs = True  # a second config is added, not refused
    server.add_feedback_config(KEY, {"type": "continuous", "min": 0, "max": 10})
    queue = JudgeAnnotationQueue(judge, client)
    queue.ensure()
    configs = server.feedback_config_sets[KEY]
    assert len(configs) == 2 and configs[1]["feedback_config"] == feedback_config(judge.scale)
    [item] = server.annotation_queues[queue.queue_id]["rubric_items"]
    assert item["feedback_config_id"] == configs[1]["id"]
    read = client.read_annotation_queue(queue.queue_id)
    assert read.rubric_items is not None
    used = read.rubric_items[0]["feedback_config"]
    assert used is not None and used.feedback_config == feedback_config(judge.scale)


def test_an_existing_queue_grading_the_key_on_another_config_is_refused(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    server.enforced_feedback_configs = True
    other = server.add_feedback_config(KEY, {"type": "continuous", "min": 0, "max": 10})
    client.create_annotation_queue(
        name="helpfulness review",
        rubric_items=[{"feedback_key": KEY, "feedback_config_id": other["id"]}],
    )
    with pytest.raises(FeedbackConfigMismatchError, match="helpfulness review"):
        JudgeAnnotationQueue(judge, client).ensure()


# -- 2. who reviewed ----------------------------------------------------------------------------


def test_reviewers_are_named_by_their_user_names(
    server: LangSmithTestServer, judge: MemAlignJudge
) -> None:
    server.add_user("alice-key", "Alice Martin")
    server.add_user("bob-key", "Bob Chen")
    project = server.add_project("prod")
    run = add_run(server, project, 0)
    for key, score in (("alice-key", 0), ("bob-key", 1)):
        with connect(server, key) as reviewer:
            reviewer.create_feedback(
                run["id"], KEY, score=score, comment=f"by {key}", session_id=project["id"]
            )
    with connect(server) as client:
        report = LangSmithFeedbackSource(client, project="prod").sync(judge)
    assert {judge.get_feedback(i).annotator for i in report.aligned} == {"Alice Martin", "Bob Chen"}
    listing = server.requests_to("/feedback", "GET")[0]
    assert listing.query["include_user_names"] == ["true"]


def test_two_reviewers_through_one_key_stay_two(
    server: LangSmithTestServer, judge: MemAlignJudge
) -> None:
    server.add_user("tool-key", "Labelling Tool")  # one key, one user id, one user name
    project = server.add_project("prod")
    run = add_run(server, project, 0)
    with connect(server, "tool-key") as tool:
        for who, score in (("alice", 0), ("bob", 1)):
            tool.create_feedback(
                run["id"],
                KEY,
                score=score,
                comment=f"{who}'s view",
                session_id=project["id"],
                source_info={"annotator": who},
            )
    stamped = {f["feedback_source"]["user_id"] for f in server.feedback.values()}
    assert stamped == {server.users["tool-key"]["id"]}  # the service stamps the key's user
    with connect(server) as client:
        report = LangSmithFeedbackSource(client, project="prod", conflicts="keep_all").sync(judge)
    assert len(report.aligned) == 2
    assert {judge.get_feedback(i).annotator for i in report.aligned} == {"alice", "bob"}
    assert {v.annotator for v in report.conflicts[0].votes} == {"alice", "bob"}


def test_the_annotator_mapping_reads_no_field_the_sdk_drops() -> None:
    assert all("ls_user_id" not in p for p in FeedbackMapping().annotator)


# -- 3. the langsmith versions the package works with ------------------------------------------


def test_the_declared_langsmith_range_is_the_one_that_works() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [spec] = [d for d in deps if d.startswith("langsmith")]
    assert spec.replace(" ", "") == "langsmith>=0.15.1,<0.16"
    major, minor = (int(x) for x in langsmith.__version__.split(".")[:2])
    assert (major, minor) == (0, 15)


# -- 4. run reads as the SDK chooses them -------------------------------------------------------


def test_a_smithdb_only_deployment_is_read_through_v2_without_start_times(
    judge: MemAlignJudge,
) -> None:
    with LangSmithTestServer(query_backend="smithdb_only") as server:
        project = server.add_project("prod")
        runs = [add_run(server, project, i) for i in range(3)]
        for i, run in enumerate(runs):  # as stored by the UI: no run start time
            server.add_feedback(run["id"], KEY, score=i % 2, user=f"r{i}", comment=f"c{i}",
                                feedback_source={"type": "app"})  # fmt: skip
        assert all(f["start_time"] is None for f in server.feedback.values())
        with connect(server) as client:
            report = LangSmithFeedbackSource(client, project="prod").sync(judge)
        assert len(report.aligned) == 3 and report.skipped == {}
        assert not server.requests_to("/runs/query") and not server.requests_to("/runs/")
        [query] = server.requests_to("/v2/runs/query")
        assert query.json["project_ids"] == [project["id"]]
        # no start time known: the window is the project's lifetime, not the last day
        assert query.json["min_start_time"] < project["start_time"]


def test_bare_run_ids_are_refused_where_runs_are_read_by_project_only(
    judge: MemAlignJudge,
) -> None:
    with LangSmithTestServer(query_backend="smithdb_only") as server:
        project = server.add_project("prod")
        run = add_run(server, project, 0)
        with connect(server) as client:
            with pytest.raises(ValueError, match="project"):
                write_verdicts(judge, client, runs=[run["id"]])
            [verdict] = write_verdicts(judge, client, project="prod")  # through the project
        assert verdict.run_id == run["id"]


def test_a_clickhouse_only_deployment_is_read_through_v1(judge: MemAlignJudge) -> None:
    with LangSmithTestServer(query_backend="clickhouse_only") as server:
        project = server.add_project("prod")
        run = add_run(server, project, 0)
        # even with the run's full key known, v1 is what the SDK reads there
        server.add_feedback(run["id"], KEY, score=0, user="alice", start_time=run["start_time"],
                            feedback_source={"type": "app"})  # fmt: skip
        with connect(server) as client:
            report = LangSmithFeedbackSource(client, project="prod").sync(judge)
        assert len(report.aligned) == 1
        assert server.requests_to("/runs/query") and not server.requests_to("/v2/runs/query")


def test_metadata_is_requested_as_its_own_select_on_v2(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    project = server.add_project("prod")
    run = server.add_run(session_id=project["id"], inputs={}, outputs={"a": "9 to 5."},
                         extra={"metadata": {"question": "store hours?"}})  # fmt: skip
    lsid = server.add_feedback(run["id"], KEY, score=1, user="alice",
                               feedback_source={"type": "app"})["id"]  # fmt: skip
    mapping = FeedbackMapping(inputs="run.extra.metadata.question")
    LangSmithFeedbackSource(client, project="prod", mapping=mapping).sync(judge)
    assert judge.get_feedback(f"langsmith:{lsid}").inputs == "store hours?"
    assert "METADATA" in server.requests_to("/v2/runs/query")[0].json["selects"]


# -- 6. retention ------------------------------------------------------------------------------


def test_queued_runs_outlive_the_base_retention(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    project = server.add_project("prod")
    runs = [add_run(server, project, i) for i in range(3)]
    queue = JudgeAnnotationQueue(judge, client)
    queue.send(runs=[r["id"] for r in runs[:2]])
    [create] = server.requests_to("/platform/annotation-queues", "POST")
    assert create.query["extend_trace_retention"] == ["true"]
    assert server.expire_base_runs() == [runs[2]["id"]]  # only the run nobody queued


# -- 7. review requirements ----------------------------------------------------------------------


def test_complete_says_which_runs_still_wait_for_other_reviewers(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    project = server.add_project("prod")
    runs = [add_run(server, project, i) for i in range(2)]
    queue = JudgeAnnotationQueue(judge, client)
    server.annotation_queues[queue.queue_id]["num_reviewers_per_item"] = 2
    queue.send(runs=[r["id"] for r in runs])
    for run in runs:
        server.add_feedback(run["id"], KEY, score=0, comment="Cold.", user="alice",
                            feedback_source={"type": "app"})  # fmt: skip

    done = queue.complete([r["id"] for r in runs])
    assert done.waiting == [r["id"] for r in runs] and done.archived == []
    assert queue.pull().listed == 0  # nothing archived yet: nothing to learn

    server.mark_queue_item(queue.queue_id, runs[0]["id"], reviewer="carol")  # the second review
    pulled = queue.pull()
    assert pulled.added == [f"langsmith:{f['id']}" for f in server.feedback.values()
                            if f["run_id"] == runs[0]["id"]]  # fmt: skip
    again = queue.complete([runs[1]["id"], "00000000-0000-4000-8000-00000000abcd"])
    assert again.waiting == [runs[1]["id"]]
    assert again.missing == ["00000000-0000-4000-8000-00000000abcd"]


def test_a_queue_completed_by_one_reviewer_is_pulled_at_once(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    project = server.add_project("prod")
    run = add_run(server, project, 0)
    queue = JudgeAnnotationQueue(judge, client)
    queue.send(runs=[run["id"]])
    server.add_feedback(run["id"], KEY, score=1, user="alice", feedback_source={"type": "app"})
    assert queue.complete([run["id"]]).archived == [run["id"]]
    assert len(queue.pull().added) == 1


# -- 8. verdict rewrites, pairwise numbers --------------------------------------------------------


def test_a_verdict_is_rewritten_in_place(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    project = server.add_project("prod")
    run = add_run(server, project, 0)
    [first] = write_verdicts(judge, client, project="prod")
    created = server.feedback[first.feedback_id]["created_at"]
    [again] = write_verdicts(judge, client, project="prod")
    assert again.feedback_id == first.feedback_id
    assert not server.requests_to("/feedback/", "DELETE")
    assert server.requests_to(f"/feedback/{first.feedback_id}", "PATCH")
    assert server.feedback[first.feedback_id]["created_at"] == created
    assert server.feedback[first.feedback_id]["run_id"] == run["id"]


@pytest.mark.parametrize("label", ["A", "B", "tie"])
def test_pairwise_numbers_mean_the_same_everywhere(label: str) -> None:
    scale = Scale.of("pairwise")
    written = score_fields(scale, label)
    config = feedback_config(scale)
    by_number = {c["value"]: c["label"] for c in config["categories"] or []}
    assert by_number[written["score"]] == label  # the config we write
    assert scale.validate_value(written["score"]) == label  # the scale's own reading
    assert scale.validate_value(str(written["score"])) == label
    assert read_label(scale, {"score": written["score"]}, ["score"]) == label  # a UI pick


# -- 5. sync cost follows what changed ---------------------------------------------------------


def test_an_incremental_sync_reads_only_the_runs_whose_feedback_changed(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    project = server.add_project("prod")
    runs = [add_run(server, project, i) for i in range(250)]
    two_days_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=2)
    at = [(two_days_ago + dt.timedelta(minutes=i)).isoformat() for i in range(250)]
    old = [
        server.add_feedback(run["id"], KEY, score=i % 2, user=f"r{i}", created_at=at[i],
                            modified_at=at[i], feedback_source={"type": "app"})["id"]
        for i, run in enumerate(runs)
    ]  # fmt: skip
    source = LangSmithFeedbackSource(client, project="prod", reconcile_every=3)
    assert len(source.sync(judge).aligned) == 250
    first = len(server.requests_to("/feedback", "GET"))
    assert first == 3  # a full listing: three pages of 100

    new_run = add_run(server, project, 999)
    new = server.add_feedback(new_run["id"], KEY, score=0, user="zoe", comment="Curt.",
                              feedback_source={"type": "app"})["id"]  # fmt: skip
    client.update_feedback(old[7], score=0, comment="Changed my mind.")  # an edit

    report = source.sync(judge)
    assert sorted(report.aligned) == sorted([f"langsmith:{new}", f"langsmith:{old[7]}"])
    listings = server.requests_to("/feedback", "GET")[first:]
    assert len(listings) == 2  # what was created since, then the changed runs' reviews
    assert "min_created_at" in listings[0].query
    # the changed runs, plus those modified just before the last sync (the cursor's
    # overlap, for writers' clocks and ingestion lag): 11 of the 250
    changed = set(listings[1].query["run"])
    assert {new_run["id"], runs[7]["id"]} <= changed and len(changed) == 2 + 11
    [edited] = [q for q in server.requests_to("/v2/runs/query") if "filter" in q.json]
    assert edited.json["filter"] == f'eq(feedback_key, "{KEY}")'

    client.delete_feedback(old[3])  # deletions on untouched runs wait for a full sync
    assert source.sync(judge).removed == []  # the 2nd incremental sync
    assert source.sync(judge).removed == [f"langsmith:{old[3]}"]  # the 3rd: full


def test_a_pull_reads_the_feedback_of_new_and_changed_items_only(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    project = server.add_project("prod")
    runs = [add_run(server, project, i) for i in range(120)]
    queue = JudgeAnnotationQueue(judge, client)
    queue.send(runs=[r["id"] for r in runs])
    two_days_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=2)
    for i, run in enumerate(runs):
        at = (two_days_ago + dt.timedelta(minutes=i)).isoformat()
        server.add_feedback(run["id"], KEY, score=i % 2, user=f"r{i}", created_at=at,
                            modified_at=at, feedback_source={"type": "app"})  # fmt: skip
        server.mark_queue_item(queue.queue_id, run["id"], reviewer=f"r{i}")

    def by_run(since: int) -> list[Any]:
        return [q for q in server.requests_to("/feedback", "GET")[since:] if "run" in q.query]

    mark = len(server.requests_to("/feedback", "GET"))
    assert len(queue.pull().added) == 120
    assert len(by_run(mark)) == 3  # a first pull reads every archived run's feedback

    late = add_run(server, project, 500)
    queue.send(runs=[late["id"]])
    server.add_feedback(late["id"], KEY, score=0, user="zoe", feedback_source={"type": "app"})
    server.mark_queue_item(queue.queue_id, late["id"], reviewer="zoe")
    mark = len(server.requests_to("/feedback", "GET"))
    pulled = queue.pull()
    assert len(pulled.added) == 1
    [listing] = by_run(mark)  # not the 120 runs archived before
    assert late["id"] in listing.query["run"]
    assert len(listing.query["run"]) <= 1 + 11  # the new run, and the cursor's overlap
