"""JudgeAnnotationQueue against the real langsmith.Client and the local LangSmith server."""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_TESTS_DIR = str(Path(__file__).resolve().parents[2])
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel  # noqa: E402
from langsmith import Client  # noqa: E402
from langsmith_fixtures import RUN_ORDERS, ordered_server  # noqa: E402
from langsmith_server import LangSmithTestServer  # noqa: E402

from langchain_memalign import Feedback, MemAlignJudge  # noqa: E402
from langchain_memalign.langsmith import JudgeAnnotationQueue  # noqa: E402

pytest_plugins = ["langsmith_fixtures"]
pytestmark = pytest.mark.usefixtures("langsmith_env")

KEY = "helpfulness"


def rule(case: str, memory: str) -> dict[str, Any]:
    if "rude" in case.lower():
        return {"rationale": "Rude.", "score": False}
    return {"rationale": "Fine.", "score": True}


@pytest.fixture
def server() -> Iterator[LangSmithTestServer]:
    with LangSmithTestServer(runs_page_size=3) as srv:
        yield srv


@pytest.fixture
def model() -> ScriptedChatModel:
    return ScriptedChatModel(responder=RoleResponder(rule))


@pytest.fixture
def judge(model: ScriptedChatModel) -> MemAlignJudge:
    return MemAlignJudge(KEY, "Helpful?\n{inputs}\n{outputs}", model, HashEmbeddings(), k=3)


@pytest.fixture
def runs(server: LangSmithTestServer) -> list[dict[str, Any]]:
    project = server.add_project("prod")
    texts = [
        "polite answer about hours",
        "rude answer about refunds",
        "polite answer on shipping",
        "rude reply on passwords",
        "polite note about returns",
        "polite words on sizes",
    ]
    return [
        server.add_run(
            session_id=project["id"], inputs={"q": f"q{i}"}, outputs={"a": text}, end_time=_now()
        )
        for i, text in enumerate(texts)
    ]


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


def queued(server: LangSmithTestServer, queue: JudgeAnnotationQueue) -> list[str]:
    return [i["run_id"] for i in server.queue_items[queue.queue_id]]


def test_queue_is_created_with_the_judge_rubric_and_reused(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    queue = JudgeAnnotationQueue(judge, client)
    stored = server.annotation_queues[queue.queue_id]
    assert stored["name"] == "helpfulness review"
    [item] = stored["rubric_items"]
    assert item["feedback_key"] == KEY and "true if the output meets" in item["description"]
    config = server.feedback_configs[KEY]["feedback_config"]
    assert config["type"] == "categorical"
    assert {c["label"]: c["value"] for c in config["categories"]} == {"fail": 0, "pass": 1}
    read = client.read_annotation_queue(queue.queue_id)
    assert read.rubric_items and read.rubric_items[0]["feedback_config"] is not None
    assert read.rubric_items[0]["feedback_config"].feedback_config == config

    again = JudgeAnnotationQueue(judge, client)
    assert again.queue_id == queue.queue_id and len(server.annotation_queues) == 1


def test_rubric_follows_the_scale(
    server: LangSmithTestServer, client: Client, model: ScriptedChatModel
) -> None:
    numeric = MemAlignJudge("quality", "{inputs}", model, HashEmbeddings(), scale=(1, 5))
    JudgeAnnotationQueue(numeric, client).ensure()
    assert server.feedback_configs["quality"]["feedback_config"] == {
        "type": "continuous",
        "min": 1,
        "max": 5,
    }
    tone = MemAlignJudge("tone", "{inputs}", model, HashEmbeddings(), scale=["Warm", "Cold"])
    queue = JudgeAnnotationQueue(tone, client, name="tone queue")
    [item] = server.annotation_queues[queue.queue_id]["rubric_items"]
    assert item["value_descriptions"] == {"Warm": "Warm", "Cold": "Cold"}
    # an existing queue without the judge's key gets it added to its rubric
    other = client.create_annotation_queue(name="shared")
    JudgeAnnotationQueue(tone, client, name="shared").ensure()
    keys = [i["feedback_key"] for i in server.annotation_queues[str(other.id)]["rubric_items"]]
    assert keys == ["tone"]


def test_send_all_sample_and_skip_queued_or_reviewed(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge, runs: list[dict[str, Any]]
) -> None:
    model_calls = len(judge.model.calls)  # type: ignore[attr-defined]
    server.add_feedback(runs[0]["id"], KEY, score=1, feedback_source={"type": "app"})
    queue = JudgeAnnotationQueue(judge, client)
    sent = queue.send(project="prod", limit=2)
    newest_first = [r["id"] for r in reversed(runs)]
    assert sent.run_ids == newest_first[:2] and queued(server, queue) == newest_first[:2]
    assert sent.considered == 5 and sent.skipped == 1  # runs[0] has a human review
    assert len(judge.model.calls) == model_calls  # type: ignore[attr-defined]
    # items are added through the current API, with their run keys
    [create] = server.requests_to("/platform/annotation-queues", "POST")
    assert create.json["items"][0]["project_id"] == runs[0]["session_id"]

    sample = queue.send(project="prod", select="sample", limit=2, seed=1)
    again = queue.send(project="prod", select="sample", limit=2, seed=1)
    assert len(sample.run_ids) == 2 and not set(sample.run_ids) & set(sent.run_ids)
    assert sample.skipped == 3 and again.run_ids != sample.run_ids  # never re-queued
    rest = queue.send(runs=[r["id"] for r in runs])
    assert rest.considered == 0 and rest.run_ids == []


def test_send_the_runs_the_judge_is_least_sure_about(
    server: LangSmithTestServer, client: Client, model: ScriptedChatModel
) -> None:
    judge = MemAlignJudge(KEY, "Helpful?\n{inputs}\n{outputs}", model, HashEmbeddings(), k=1)
    judge.align(
        [
            Feedback(id="p", inputs="hours", outputs="polite answer about store hours",
                     value=True),
            Feedback(id="r", inputs="refund", outputs="rude answer about a late refund",
                     value=False),
        ]
    )  # fmt: skip
    project = server.add_project("prod")
    texts = {
        "sure-ok": ("hours", "polite answer about store hours today"),  # like "p", judged ok
        "sure-bad": ("refund", "rude answer about a late refund again"),  # like "r", judged bad
        "unsure": ("hours", "rude answer about store hours"),  # judged bad, like "p" (good)
    }
    ids = {
        name: server.add_run(session_id=project["id"], inputs=i, outputs=o, end_time=_now())["id"]
        for name, (i, o) in texts.items()
    }
    queue = JudgeAnnotationQueue(judge, client)
    sent = queue.send(project="prod", select="uncertain", limit=1)
    assert sent.run_ids == [ids["unsure"]]
    assert sent.priority == {ids["sure-ok"]: 0.0, ids["sure-bad"]: 0.0, ids["unsure"]: 1.0}
    by_run = {v.run_id: v for v in sent.verdicts}
    assert by_run[ids["unsure"]].score is False and by_run[ids["unsure"]].episode_ids == ["p"]


def test_send_where_the_judge_disagrees_with_other_signals(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge, runs: list[dict[str, Any]]
) -> None:
    thumbs = {"type": "api"}
    server.add_feedback(runs[2]["id"], "user_thumbs", score=0, feedback_source=thumbs)  # judge: ok
    server.add_feedback(runs[4]["id"], "user_thumbs", score=1, feedback_source=thumbs)  # agrees
    server.add_feedback(runs[3]["id"], "user_thumbs", score=1, feedback_source=thumbs)  # judge: no
    queue = JudgeAnnotationQueue(judge, client)
    sent = queue.send(project="prod", select="disagreement", signal_keys=["user_thumbs"])
    assert set(sent.run_ids) == {runs[2]["id"], runs[3]["id"]}
    assert sent.priority[runs[4]["id"]] == 0.0
    with pytest.raises(ValueError, match="signal_keys"):
        queue.send(project="prod", select="disagreement")
    with pytest.raises(ValueError, match="limit"):
        queue.send(project="prod", select="sample")


def test_cycle_pulls_completed_reviews_aligns_and_sends_more(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge, runs: list[dict[str, Any]]
) -> None:
    queue = JudgeAnnotationQueue(judge, client)
    first = queue.cycle(project="prod", select="all", limit=3, write_verdicts=True)
    assert first.pulled.listed == 0 and len(first.sent.run_ids) == 3
    reviewed, waiting = first.sent.run_ids[:2], first.sent.run_ids[2]
    by_run = {v.run_id: v for v in first.sent.verdicts}
    for v in first.sent.verdicts:  # the verdicts of sent runs are next to them, for reviewers
        assert (v.feedback_id in server.feedback) == (v.run_id in first.sent.run_ids)
    # One reviewer corrects the judge; another adds their own review. Only the first two
    # items are marked done; the third review is not finished yet.
    client.update_feedback(
        by_run[reviewed[0]].feedback_id,
        correction={"score": 0, "explanation": "Too terse for a customer."},
    )
    for run_id in (reviewed[1], waiting):
        server.add_feedback(run_id, KEY, score=1, comment="Clear.",
                            feedback_source={"type": "app", "user_name": "bob"})  # fmt: skip
    queue.complete(reviewed)
    assert {i["run_id"] for i in server.queue_items[queue.queue_id]
            if i["status"] == "completed"} == set(reviewed)  # fmt: skip

    second = queue.cycle(project="prod", select="all", limit=3)
    assert second.pulled.listed == 2 and len(second.pulled.added) == 2
    lesson = judge.get_feedback(f"langsmith:{by_run[reviewed[0]].feedback_id}")
    assert (lesson.value, lesson.rationale) == (False, "Too terse for a customer.")
    assert len(judge.feedback_ids) == 2  # the unfinished review waits for its item
    assert len(second.sent.run_ids) == 3 and not set(second.sent.run_ids) & set(reviewed)

    assert queue.pull().aligned == []  # nothing new
    queue.complete([waiting])
    assert len(queue.pull().added) == 1


def agreement_records(server: LangSmithTestServer) -> list[dict[str, Any]]:
    return [f for f in server.feedback.values() if f["key"] == f"{KEY}_agreement"]


def test_a_pull_writes_the_agreement_on_each_project_it_learned_reviews_of(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge, runs: list[dict[str, Any]]
) -> None:
    staging = server.add_project("staging")
    other = server.add_run(
        session_id=staging["id"], inputs={"q": "q9"}, outputs={"a": "polite reply"}, end_time=_now()
    )
    queue = JudgeAnnotationQueue(judge, client)
    sent = queue.send([runs[0]["id"], runs[1]["id"], other["id"]], write_verdicts=True)
    by_run = {v.run_id: v for v in sent.verdicts}
    assert [by_run[r].score for r in (runs[0]["id"], runs[1]["id"], other["id"])] == [
        True, False, True,
    ]  # fmt: skip
    # On "prod" a reviewer corrects one verdict and confirms the other; on "staging" one
    # confirms the judge's.
    client.update_feedback(by_run[runs[0]["id"]].feedback_id, correction={"score": 0})
    for run_id, score in ((runs[1]["id"], 0), (other["id"], 1)):
        server.add_feedback(run_id, KEY, score=score,
                            feedback_source={"type": "app", "user_name": "bob"})  # fmt: skip
    queue.complete([runs[0]["id"], runs[1]["id"], other["id"]])
    pulled = queue.pull()
    assert len(pulled.added) == 3

    # A queue is no LangSmith project: each record goes to the project of the runs it scores.
    records = {f["session_id"]: f for f in agreement_records(server)}
    prod = next(p["id"] for p in server.sessions.values() if p["name"] == "prod")
    assert pulled.agreement_feedback_ids == {p: r["id"] for p, r in records.items()}
    assert set(records) == {prod, staging["id"]}
    scored = [records[prod], records[staging["id"]]]
    assert [(r["score"], r["value"]["reviews"]) for r in scored] == [(0.5, 2), (1.0, 1)]
    (case,) = records[prod]["feedback_source"]["metadata"]["misaligned"]
    assert (case["run_id"], case["judge"], case["expert"]) == (runs[0]["id"], True, False)
    assert records[staging["id"]]["feedback_source"]["metadata"]["misaligned"] == []
    # Nothing new: no record.
    assert queue.pull().agreement_feedback_ids == {} and len(agreement_records(server)) == 2


def test_a_queue_can_keep_its_agreement_off_langsmith(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge, runs: list[dict[str, Any]]
) -> None:
    queue = JudgeAnnotationQueue(judge, client, log_agreement=False)
    (verdict,) = queue.send([runs[0]["id"]], write_verdicts=True).verdicts
    client.update_feedback(verdict.feedback_id, correction={"score": 0})
    queue.complete([runs[0]["id"]])
    pulled = queue.pull()
    assert [a.agrees for a in pulled.agreement] == [False]
    assert pulled.agreement_feedback_ids == {} and not agreement_records(server)


def test_older_servers_use_the_older_queue_api(judge: MemAlignJudge) -> None:
    with LangSmithTestServer(version="0.16.0") as server:
        client = Client(api_url=server.url, api_key="test", auto_batch_tracing=False)
        project = server.add_project("prod")
        run = server.add_run(session_id=project["id"], inputs={"q": "x"}, outputs={"a": "y"})
        queue = JudgeAnnotationQueue(judge, client)
        with pytest.warns(UserWarning, match="cannot extend their trace retention"):
            assert queue.send(project="prod").run_ids == [run["id"]]
        assert server.requests_to("/annotation-queues/", "POST")[-1].path.endswith("/runs/by-key")
        server.add_feedback(run["id"], KEY, score=0, comment="Wrong.",
                            feedback_source={"type": "app"})  # fmt: skip
        queue.complete([run["id"]])
        assert len(queue.pull().added) == 1
        assert not server.requests_to("/platform")
        client.close(timeout=5)


def test_a_fallback_midway_queues_no_run_twice(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    project = server.add_project("big")
    ids = [
        server.add_run(session_id=project["id"], inputs={"q": i}, outputs={"a": i})["id"]
        for i in range(150)
    ]
    queue = JudgeAnnotationQueue(judge, client)
    # the newer items API takes the first chunk of 100, then answers "not found"
    server.inject_failure("/platform/annotation-queues", status=404, method="POST", after=1)
    with pytest.warns(UserWarning, match="cannot extend"):
        queue.send(ids)
    assert sorted(queued(server, queue)) == sorted(ids)
    legacy = server.requests_to("/annotation-queues/", "POST")[-1]
    assert legacy.path.endswith("/runs/by-key")
    assert len(legacy.json) == 50  # only the runs the newer API did not take


async def test_async_twins(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge, runs: list[dict[str, Any]]
) -> None:
    queue = JudgeAnnotationQueue(judge, client)
    sent = await queue.asend(runs=[runs[0]["id"]])
    server.add_feedback(runs[0]["id"], KEY, score=1, feedback_source={"type": "app"})
    queue.complete(sent.run_ids)
    pulled = await queue.apull()
    assert len(pulled.added) == 1
    cycle = await queue.acycle(project="prod", select="all", limit=1)
    assert len(cycle.sent.run_ids) == 1


def test_a_disputed_review_waits_for_the_teams_final_answer(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge, runs: list[dict[str, Any]]
) -> None:
    queue = JudgeAnnotationQueue(judge, client)
    disputed, agreed = runs[0]["id"], runs[1]["id"]
    queue.send([disputed, agreed])
    for run_id, annotator, score, why in [
        (disputed, "bob", 1, "Clear and correct."),
        (disputed, "ana", 0, "Too terse for a customer."),
        (agreed, "bob", 0, "Rude."),
        (agreed, "ana", 0, "Rude, and wrong."),
    ]:
        server.add_feedback(run_id, KEY, score=score, comment=why,
                            feedback_source={"type": "app", "user_name": annotator})  # fmt: skip
    queue.complete([disputed, agreed])

    # Under the default policy both sides of a dispute would be learned; while the team
    # has not decided, neither is.
    first = queue.pull()
    assert len(first.added) == 2 and len(judge.feedback_ids) == 2
    assert {judge.get_feedback(i).rationale for i in judge.feedback_ids} == {
        "Rude.", "Rude, and wrong.",
    }  # fmt: skip
    [conflict] = first.conflicts
    assert conflict.run_id == disputed and conflict.kept == []

    # The team sets the final answer: only the review that gave it is learned.
    queue.set_final(disputed, False)
    [item] = [i for i in server.queue_items[queue.queue_id] if i["run_id"] == disputed]
    assert item["finals"] == {KEY: {"score": 0}}
    second = queue.pull()
    assert len(second.added) == 1
    assert judge.get_feedback(second.added[0]).rationale == "Too terse for a customer."
    assert (judge.get_feedback(second.added[0]).value, len(judge.feedback_ids)) == (False, 3)
    with pytest.raises(ValueError, match="is not in the queue"):
        queue.set_final(runs[5]["id"], True)


def test_a_judging_send_leaves_out_running_errored_and_failed_runs(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge, model: ScriptedChatModel
) -> None:
    def garbled(case: str, memory: str) -> Any:
        if "garbled" in case:
            return "not json at all"  # an unusable answer, every time this case is asked
        return rule(case, memory)

    model.responder.judge_rule = garbled
    project = server.add_project("prod")["id"]

    def run(text: str, **fields: Any) -> str:
        fields = {"outputs": {"a": text}, "end_time": _now(), **fields}
        return str(server.add_run(session_id=project, inputs={"q": text}, **fields)["id"])

    good = [run("polite hours"), run("rude refunds")]
    bad = run("garbled sizes")
    running = run("polite shipping", end_time=None, outputs=None)
    errored = run("polite returns", error="TimeoutError: upstream", outputs=None)
    queue = JudgeAnnotationQueue(judge, client)
    sent = queue.send(project="prod", select="all", write_verdicts=True)
    # The failed judgment is named and its run not sent; the others are, with verdicts.
    assert sorted(sent.run_ids) == sorted(good) and sorted(queued(server, queue)) == sorted(good)
    assert list(sent.failed) == [bad] and "MalformedOutputError" in sent.failed[bad]
    assert sorted(v.run_id for v in sent.verdicts) == sorted(good)
    verdict_runs = [f["run_id"] for f in server.feedback.values() if f["key"] == KEY]
    assert sorted(verdict_runs) == sorted(good)
    # A running run waits for a later send; an errored one is never judged. Both are named
    # (the errored one though the project's query for runs to judge leaves it out).
    assert list(sent.not_judged) == [running, errored]
    assert "still running" in sent.not_judged[running]
    assert sent.not_judged[errored] == "ended with an error (TimeoutError: upstream)"
    assert errored not in queued(server, queue)
    model.responder.judge_rule = rule
    again = queue.send(project="prod", select="uncertain", write_verdicts=True)
    assert again.run_ids == [bad] and again.failed == {}
    assert list(again.not_judged) == [running, errored]


def test_a_leads_own_final_is_learned_as_the_teams_and_multi_select_finals_are_read(
    server: LangSmithTestServer, client: Client, model: ScriptedChatModel
) -> None:
    judge = MemAlignJudge("quality", "Rate\n{inputs}\n{outputs}", model, HashEmbeddings(),
                          scale=(1, 5))  # fmt: skip
    project = server.add_project("prod")["id"]
    run = server.add_run(session_id=project, inputs={"q": "hours"}, outputs={"a": "9-5"},
                         end_time=_now())["id"]  # fmt: skip
    queue = JudgeAnnotationQueue(judge, client)
    queue.send([run])
    for annotator, score in (("bob", 2), ("ana", 5)):
        server.add_feedback(run, "quality", score=score, comment=f"{annotator}'s reason",
                            feedback_source={"type": "app", "user_name": annotator})  # fmt: skip
    queue.complete([run])
    assert queue.pull().added == []  # disputed, no final yet: nothing learned

    team = f"langsmith:final:{run}"
    # The lead settles on 3, which no reviewer gave: the team's answer is learned.
    queue.set_final(run, 3)
    pulled = queue.pull()
    assert pulled.added == [team] and judge.feedback_ids == [team]
    assert judge.get_feedback(team).value == 3 and judge.get_feedback(team).rationale is None
    [conflict] = pulled.conflicts
    assert conflict.resolution == 3 and conflict.kept == [team]
    # The lead changes it to 4: the team's answer is replaced.
    queue.set_final(run, 4)
    assert queue.pull().updated == [team] and judge.get_feedback(team).value == 4
    # A final one reviewer gave: that review is learned, the team's own answer is dropped.
    queue.set_final(run, 2)
    pulled = queue.pull()
    [learned] = judge.feedback_ids
    assert learned != team and judge.get_feedback(learned).value == 2
    assert judge.get_feedback(learned).rationale == "bob's reason" and team in pulled.removed

    # Finals set on a multi-select key come as lists: one label is read...
    [item] = server.queue_items[queue.queue_id]
    item["finals"] = {"quality": {"scores": [4]}}
    queue.pull()
    assert judge.feedback_ids == [team] and judge.get_feedback(team).value == 4
    # ...several are no single label on the judge's scale: the dispute stays open.
    item["finals"] = {"quality": {"scores": [2, 5]}}
    queue.pull()
    assert judge.feedback_ids == []


# -- a project's latest runs (issue 46) ------------------------------------------------------


@pytest.mark.parametrize("order", RUN_ORDERS)
def test_send_scans_a_projects_latest_runs_whatever_order_the_run_query_lists(
    order: str, judge: MemAlignJudge
) -> None:
    # The v2 run query documents no order: the latest runs are chosen by their start time,
    # not taken as the first the query lists. (v1 is asked for newest first.)
    with ordered_server(order) as (server, client):
        newest = server.add_timed_runs(10, step=dt.timedelta(seconds=1))[::-1]
        queue = JudgeAnnotationQueue(judge, client)
        sent = queue.send(project="prod", scan=4)
        assert sent.run_ids == newest[:4] and queued(server, queue) == newest[:4]
        assert sent.considered == 4 and sent.skipped == 0
        # The next send scans the same 4 latest: all queued already, none sent again.
        again = queue.send(project="prod", scan=4, select="uncertain", limit=2)
        assert (again.considered, again.skipped, again.run_ids) == (0, 4, [])
        wider = queue.send(project="prod", scan=6, limit=1)
        assert wider.run_ids == newest[4:5] and wider.skipped == 4


@pytest.mark.parametrize("order", RUN_ORDERS)
def test_a_judging_send_names_the_errored_runs_it_leaves_out_of_its_scan(
    order: str, judge: MemAlignJudge
) -> None:
    with ordered_server(order) as (server, client):
        newest = server.add_timed_runs(6, step=dt.timedelta(seconds=1))[::-1]
        project = next(iter(server.sessions.values()))["id"]

        def errored(after: str) -> str:  # an errored run started just after `after`
            at = dt.datetime.fromisoformat(server.runs[after]["start_time"].replace("Z", "+00:00"))
            at += dt.timedelta(milliseconds=500)
            run = server.add_run(session_id=project, inputs={"q": "x"}, error="Boom",
                                 start_time=at.isoformat(), end_time=_now())  # fmt: skip
            return str(run["id"])

        # Among the 3 latest runs, and before them: the scan is of the 3 latest judgeable
        # runs, and names the errored ones among them, not those before.
        among = [errored(newest[0]), errored(newest[2])]
        errored(newest[3])
        queue = JudgeAnnotationQueue(judge, client)
        sent = queue.send(project="prod", scan=3, select="uncertain", limit=3)
        assert sorted(sent.run_ids) == sorted(newest[:3]) and sent.considered == 3
        assert sent.not_judged == dict.fromkeys(among, "ended with an error (Boom)")
        assert sorted(queued(server, queue)) == sorted(newest[:3])


@pytest.mark.parametrize("order", ["oldest", "unordered", "newest"])
def test_a_project_too_long_to_list_whole_is_narrowed_to_its_latest_runs(
    order: str, judge: MemAlignJudge, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_memalign.langsmith import _api_runs

    # Past `limit` and this slack, the v2 listing's window is narrowed (as in a project with
    # more than a thousand runs past the scan).
    monkeypatch.setattr(_api_runs, "_LATEST_SLACK", 2)
    with ordered_server(order, runs_page_size=4) as (server, client):
        ids = server.add_timed_runs(30, step=dt.timedelta(seconds=1))
        # Five runs traced at once, the latest: the ties are ordered by id.
        project = next(iter(server.sessions.values()))
        last = server.runs[ids[-1]]["start_time"]
        at = dt.datetime.fromisoformat(last.replace("Z", "+00:00")) + dt.timedelta(seconds=1)
        batch = [
            server.add_run(session_id=project["id"], inputs={"q": f"b{i}"},
                           outputs={"a": "polite"}, start_time=at.isoformat(),
                           end_time=_now())["id"]
            for i in range(5)
        ]  # fmt: skip
        queue = JudgeAnnotationQueue(judge, client)
        sent = queue.send(project="prod", scan=7)
        assert sent.run_ids == sorted(batch, reverse=True) + ids[::-1][:2]
        listings = [
            r.json
            for r in server.requests_to("/v2/runs/query", "POST")
            if r.json.get("selects") == ["ID", "START_TIME"]
        ]
        assert len({r["min_start_time"] for r in listings}) > 1  # it was narrowed
        # Only the runs chosen are read in full (in pages, each asking for them all).
        full = [r.json for r in server.requests_to("/v2/runs/query", "POST")
                if "INPUTS" in (r.json.get("selects") or [])]  # fmt: skip
        assert {i for r in full for i in r["ids"]} == set(sent.run_ids)
