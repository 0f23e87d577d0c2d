"""JudgeMonitor against the real langsmith.Client and the local LangSmith server."""

from __future__ import annotations

import datetime as dt
import logging
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
from langsmith import utils as ls_utils  # noqa: E402
from langsmith_fixtures import connect  # noqa: E402
from langsmith_server import LangSmithTestServer  # noqa: E402
from langsmith_tracing import trace_to  # noqa: E402

from langchain_memalign import MemAlignJudge  # noqa: E402
from langchain_memalign.langsmith import JudgeMonitor  # noqa: E402

pytest_plugins = ["langsmith_fixtures"]
pytestmark = pytest.mark.usefixtures("langsmith_env")

KEY = "helpfulness"


def rule(case: str, memory: str) -> dict[str, Any]:
    if "rude" in case.lower():
        return {"rationale": "Rude.", "score": False}
    return {"rationale": "Fine.", "score": True}


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[LangSmithTestServer]:
    # runs_v2=False (indirect parameter): a server without the v2 run query, read via v1.
    with LangSmithTestServer(runs_page_size=3, runs_v2=getattr(request, "param", True)) as srv:
        yield srv


@pytest.fixture
def model() -> ScriptedChatModel:
    return ScriptedChatModel(responder=RoleResponder(rule))


@pytest.fixture
def judge(model: ScriptedChatModel) -> MemAlignJudge:
    return MemAlignJudge(KEY, "Helpful?\n{inputs}\n{outputs}", model, HashEmbeddings(), k=3)


def add_runs(
    server: LangSmithTestServer, texts: list[str], *, ended: bool = True, **fields: Any
) -> list[str]:
    """Root runs of the "prod" project, ended unless `ended=False` (still streaming)."""
    project = next(
        (p for p in server.sessions.values() if p["name"] == "prod"), None
    ) or server.add_project("prod")
    end = {"end_time": dt.datetime.now(dt.UTC).isoformat()} if ended else {}
    return [
        server.add_run(
            session_id=project["id"], inputs={"q": t}, **({"outputs": {"a": t}} | end | fields)
        )["id"]
        for t in texts
    ]


def verdict_runs(server: LangSmithTestServer) -> list[str]:
    return [
        f["run_id"]
        for f in server.feedback.values()
        if f["key"] == KEY and f["feedback_source"]["type"] == "model"
    ]


def queued(server: LangSmithTestServer, monitor: JudgeMonitor) -> list[str]:
    """The runs in the monitor's review queue, as the server stores them."""
    return [i["run_id"] for i in server.queue_items.get(monitor.queue.queue_id, [])]


def item_posts(server: LangSmithTestServer) -> list[str]:
    """Each run in each queue-item request the server took (twice if sent twice)."""
    return [
        item["run_id"]
        for r in server.requests_to("/platform/annotation-queues", "POST")
        if r.path.endswith("/items") and r.status == 200
        for item in r.json["items"]
    ]


def test_a_cycle_judges_new_runs_once_and_queues_the_least_sure(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge, model: ScriptedChatModel
) -> None:
    ids = add_runs(server, ["polite hours", "rude refunds", "polite shipping", "rude passwords"])
    monitor = JudgeMonitor(judge, client, project="prod", review_limit=2)
    first = monitor.run_once()
    assert sorted(v.run_id for v in first.verdicts) == sorted(ids)
    assert sorted(verdict_runs(server)) == sorted(ids)
    assert {v.run_id: v.score for v in first.verdicts}[ids[1]] is False
    assert len(first.sent) == 2 and set(first.sent) <= set(ids)
    assert "4 of 4 runs judged" in first.summary() and "2 sent for review" in first.summary()

    # A restart (a new monitor) reads on from where the last cycle stopped (the cursor is
    # kept in the judge's memory): only what is new, nothing twice.
    calls = len(model.calls)
    new = add_runs(server, ["polite sizes"])
    again = JudgeMonitor(judge, client, project="prod", review_limit=2).run_once()
    assert [v.run_id for v in again.verdicts] == new
    assert (again.considered, again.already_judged) == (1, 0) and len(model.calls) == calls + 1
    assert sorted(verdict_runs(server)) == sorted(ids + new)


def test_sampling_is_decided_by_the_run_and_holds_across_restarts(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge, model: ScriptedChatModel
) -> None:
    ids = add_runs(server, [f"polite answer {i}" for i in range(12)])
    first = JudgeMonitor(judge, client, project="prod", sampling_rate=0.5, seed=3).run_once()
    judged = {v.run_id for v in first.verdicts}
    assert 0 < len(judged) < 12 and first.sampled_out == 12 - len(judged)
    # A restart reads on from its cursor: the runs left out are not read again.
    second = JudgeMonitor(judge, client, project="prod", sampling_rate=0.5, seed=3).run_once()
    assert second.verdicts == [] and second.considered == 0

    def afresh() -> MemAlignJudge:  # the same judge with a memory that holds no cursor
        return MemAlignJudge(KEY, "Helpful?\n{inputs}\n{outputs}", model, HashEmbeddings())

    # Read again from the start, they are left out again: decided by the run, not a draw.
    third = JudgeMonitor(afresh(), client, project="prod", sampling_rate=0.5, seed=3).run_once()
    assert third.verdicts == [] and third.sampled_out == 12 - len(judged)
    assert third.already_judged == len(judged) and set(verdict_runs(server)) == judged
    # `where` narrows what is judged; the sampled-out runs come back when sampling is off.
    only = JudgeMonitor(
        afresh(), client, project="prod", where=lambda r: r.inputs == {"q": "polite answer 3"}
    ).run_once()
    remaining = [i for i in ids if i not in judged]
    expected = [ids[3]] if ids[3] in remaining else []
    assert [v.run_id for v in only.verdicts] == expected
    assert only.filtered_out == len(remaining) - len(expected) and only.sampled_out == 0


def test_reviews_are_scored_against_the_earlier_verdict_then_learned(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge, model: ScriptedChatModel
) -> None:
    add_runs(server, ["polite but wrong hours", "rude refunds"])
    monitor = JudgeMonitor(judge, client, project="prod", review_limit=2)
    first = monitor.run_once()
    by_run = {v.run_id: v for v in first.verdicts}
    wrong, right = sorted(by_run, key=lambda r: by_run[r].score is False)
    # A reviewer corrects one verdict and confirms the other.
    client.update_feedback(
        by_run[wrong].feedback_id, correction={"score": 0, "explanation": "Wrong hours."}
    )
    review = server.add_feedback(right, KEY, score=0, comment="Rude indeed.",
                                 feedback_source={"type": "app", "user_name": "bob"})  # fmt: skip
    monitor.queue.complete([wrong, right])

    roles: list[str] = model.responder.roles
    judged = roles.count("judge")
    second = monitor.run_once()
    assert len(second.pulled.added) == 2 and len(judge.feedback_ids) == 2
    # The verdicts written on the runs were read back: no judge call, before learning.
    assert roles.count("judge") == judged
    history = judge.agreement_history()
    assert sorted((p.judge, p.expert, p.source) for p in history.points) == [
        (False, False, "langsmith"),
        (True, False, "langsmith"),
    ]
    assert [(a.after, a.learned) for a in history.aligns] == [(2, 2)]
    agreement = {a.run_id: a for a in second.agreement}
    assert (agreement[wrong].judge, agreement[wrong].expert, agreement[wrong].agrees) == (
        True, False, False,
    )  # fmt: skip
    assert agreement[right].agrees and second.accuracy == 0.5
    assert "2 reviews learned (judge agreed with 50% before learning)" in second.summary()
    # The agreement is in LangSmith too: one project-level record on the watched project.
    project = next(p for p in server.sessions.values() if p["name"] == "prod")
    logged = [f for f in server.feedback.values() if f["key"] == f"{KEY}_agreement"]
    assert [(f["id"], f["run_id"], f["session_id"], f["score"]) for f in logged] == [
        (second.agreement_feedback_id, None, project["id"], 0.5)
    ]
    assert logged[0]["value"] == {"agreed": 1, "reviews": 2, "previous": None}
    # With the case to open: the run the judge got wrong, its verdict and the review.
    (case,) = logged[0]["feedback_source"]["metadata"]["misaligned"]
    assert (case["run_id"], case["judge"], case["expert"]) == (wrong, True, False)
    assert case["url"].endswith(f"/projects/p/{project['id']}/r/{wrong}")
    # Written once, by the watch on its project: its queue's pull wrote none of its own.
    assert second.pulled.agreement_feedback_ids == {}
    # A cycle that learns nothing writes none.
    assert monitor.run_once().agreement_feedback_id is None
    assert len([f for f in server.feedback.values() if f["key"] == f"{KEY}_agreement"]) == 1
    # Nor does one that learns an edited review again: it scored the judge once, before
    # the judge first learned it (its score is not counted a second time).
    client.update_feedback(review["id"], comment="Rude: it blames the customer.")
    edited = monitor.run_once()
    assert edited.pulled.updated == [f"langsmith:{review['id']}"]
    assert edited.agreement == [] and edited.agreement_feedback_id is None
    assert len([f for f in server.feedback.values() if f["key"] == f"{KEY}_agreement"]) == 1


def _reviewed_cycle(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge, **kw: Any
) -> JudgeMonitor:
    """A monitor whose next cycle learns one review of a verdict it wrote."""
    (run,) = add_runs(server, ["rude refunds"])
    monitor = JudgeMonitor(judge, client, project="prod", review_limit=1, **kw)
    (verdict,) = monitor.run_once().verdicts
    client.update_feedback(verdict.feedback_id, correction={"score": 1})
    monitor.queue.complete([run])
    return monitor


def test_the_agreement_is_not_written_when_turned_off(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    monitor = _reviewed_cycle(server, client, judge, log_agreement=False)
    cycle = monitor.run_once()
    assert cycle.accuracy == 0.0 and cycle.agreement_feedback_id is None
    assert not [f for f in server.feedback.values() if f["key"] == f"{KEY}_agreement"]


def test_a_refused_agreement_record_does_not_stop_the_cycle(
    server: LangSmithTestServer,
    client: Client,
    judge: MemAlignJudge,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monitor = _reviewed_cycle(server, client, judge)
    add_runs(server, ["polite answer"])
    server.inject_failure("/feedback", status=403, method="POST")
    with caplog.at_level(logging.WARNING):
        cycle = monitor.run_once()
    assert cycle.accuracy == 0.0 and cycle.agreement_feedback_id is None
    assert "agreement could not be written" in caplog.text
    assert len(cycle.verdicts) == 1 and cycle.clean  # the new run was judged all the same


def test_a_rate_limit_cuts_the_cycle_short_and_keeps_what_was_written(
    server: LangSmithTestServer,
    client: Client,
    judge: MemAlignJudge,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    add_runs(server, ["polite a", "polite b"])
    monitor = JudgeMonitor(judge, client, project="prod")

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ls_utils.LangSmithRateLimitError("429 Too Many Requests")

    monkeypatch.setattr(monitor.queue, "send", refuse)
    cycle = monitor.run_once()
    assert cycle.rate_limited and len(cycle.verdicts) == 2 and "cut short" in cycle.summary()
    assert len(verdict_runs(server)) == 2


def test_bad_settings_are_refused(judge: MemAlignJudge, client: Client) -> None:
    with pytest.raises(ValueError, match="sampling_rate must be within 0 and 1, got 1.5"):
        JudgeMonitor(judge, client, project="prod", sampling_rate=1.5)
    with pytest.raises(ValueError, match="review_sample"):
        JudgeMonitor(judge, client, project="prod", review_sample=-0.1)


def test_a_watch_killed_mid_cycle_resumes_without_judging_a_run_twice(
    server: LangSmithTestServer,
    client: Client,
    judge: MemAlignJudge,
    model: ScriptedChatModel,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from langchain_memalign.langsmith import monitor as monitor_module

    ids = add_runs(server, [f"polite answer {i}" for i in range(5)])
    real_write = monitor_module._write_verdict
    written: list[str] = []

    def write_then_die(*args: Any) -> Any:
        if len(written) == 2:
            raise KeyboardInterrupt  # the process is killed after two verdicts landed
        verdict = real_write(*args)
        written.append(verdict.run_id)
        return verdict

    monkeypatch.setattr(monitor_module, "_write_verdict", write_then_die)
    with pytest.raises(KeyboardInterrupt):
        JudgeMonitor(judge, client, project="prod").run_once()
    assert sorted(verdict_runs(server)) == sorted(written)
    monkeypatch.setattr(monitor_module, "_write_verdict", real_write)
    calls = len(model.calls)
    resumed = JudgeMonitor(judge, client, project="prod").run_once()
    assert sorted(v.run_id for v in resumed.verdicts) == sorted(set(ids) - set(written))
    assert resumed.already_judged == 2 and len(model.calls) == calls + 3
    assert sorted(verdict_runs(server)) == sorted(ids)


@pytest.mark.parametrize(
    ("cut", "scan"),
    [("kill", 100), ("429", 100), ("kill", 2)],
    ids=["kill", "429", "kill, restart with a smaller scan"],
)
def test_verdicts_written_by_a_cycle_cut_short_while_judging_still_go_to_review(
    server: LangSmithTestServer,
    client: Client,
    judge: MemAlignJudge,
    monkeypatch: pytest.MonkeyPatch,
    no_backoff: None,
    cut: str,
    scan: int,
) -> None:
    from langchain_memalign.langsmith import monitor as monitor_module

    ids = add_runs(server, [f"polite answer {i}" for i in range(5)])
    real_write = monitor_module._write_verdict
    written: list[str] = []

    def write_then_stop(*args: Any) -> Any:
        if len(written) == 2:
            if cut == "kill":
                raise KeyboardInterrupt  # the process is killed after two verdicts landed
            server.inject_failure("/feedback", status=429, times=1000, method="POST")
        verdict = real_write(*args)
        written.append(verdict.run_id)
        return verdict

    # Every run judged qualifies for review (review_limit covers them all): the two whose
    # verdicts landed before the cut must reach the queue too, though no later cycle
    # judges them again.
    monkeypatch.setattr(monitor_module, "_write_verdict", write_then_stop)
    if cut == "kill":
        with pytest.raises(KeyboardInterrupt):
            JudgeMonitor(judge, client, project="prod", review_limit=5).run_once()
    else:
        assert JudgeMonitor(judge, client, project="prod", review_limit=5).run_once().rate_limited
        server.clear_faults()
    monkeypatch.setattr(monitor_module, "_write_verdict", real_write)
    assert sorted(verdict_runs(server)) == sorted(written) and len(written) == 2
    # (A restart that reads fewer runs a cycle reads the cut cycle's runs all the same.)
    monitor = JudgeMonitor(judge, client, project="prod", review_limit=5, scan=scan)
    resumed = monitor.run_once()
    assert sorted(v.run_id for v in resumed.verdicts) == sorted(set(ids) - set(written))
    assert resumed.already_judged == 2 and sorted(resumed.sent) == sorted(ids)
    assert sorted(queued(server, monitor)) == sorted(ids)
    while (later := monitor.run_once()).considered:  # the cursor reads them again: no more
        assert later.verdicts == [] and later.sent == []
    assert sorted(item_posts(server)) == sorted(ids) and sorted(verdict_runs(server)) == sorted(ids)


def test_a_verdict_read_back_from_langsmith_is_the_verdict_written(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    from langchain_memalign.langsmith._verdicts import _written_verdict

    # A review the judge learns, then a run just like it (whose verdict recalls it: sure)
    # and another (recalling nothing: unsure).
    (reviewed,) = add_runs(server, ["rude refunds"])
    monitor = JudgeMonitor(judge, client, project="prod", trace=True)
    monitor.run_once()
    server.add_feedback(reviewed, KEY, score=0, comment="Rude indeed.",
                        feedback_source={"type": "app", "user_name": "bob"})  # fmt: skip
    monitor.queue.complete([reviewed])
    assert len(monitor.run_once().pulled.added) == 1
    add_runs(server, ["rude refunds", "polite hours"])
    cycle = monitor.run_once()
    assert len(cycle.verdicts) == 2 and None not in {v.judge_run_id for v in cycle.verdicts}
    assert sorted(v.uncertainty for v in cycle.verdicts) == [0.0, 1.0]
    listed = client.list_feedback(run_ids=[v.run_id for v in cycle.verdicts], feedback_key=[KEY])
    read = {v.run_id: v for fb in listed if (v := _written_verdict(judge, fb)) is not None}
    assert read == {v.run_id: v for v in cycle.verdicts}


# -- production safety (issue 46) -------------------------------------------------------------


def garbled(case: str, memory: str) -> Any:
    if "garbled" in case:
        return "not json at all"  # an unusable answer, every time this case is asked
    return rule(case, memory)


def test_a_failed_judgment_names_its_run_and_spares_the_others_then_is_retried_and_given_up(
    server: LangSmithTestServer,
    client: Client,
    judge: MemAlignJudge,
    model: ScriptedChatModel,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from langchain_memalign.langsmith import monitor as monitor_module

    model.responder.judge_rule = garbled
    roles: list[str] = model.responder.roles
    ids = add_runs(server, ["polite hours", "garbled refunds", "rude shipping", "polite sizes"])
    bad, good = ids[1], [ids[0], *ids[2:]]
    monitor = JudgeMonitor(judge, client, project="prod", review_limit=1)
    with caplog.at_level(logging.WARNING, logger=monitor_module.__name__):
        first = monitor.run_once()
    assert sorted(v.run_id for v in first.verdicts) == sorted(good)
    assert sorted(verdict_runs(server)) == sorted(good) and len(first.sent) == 1
    assert list(first.failed) == [bad] and "MalformedOutputError" in first.failed[bad]
    assert [r.levelname for r in caplog.records if bad in r.getMessage()] == ["WARNING"]
    assert "3 of 4 runs judged" in first.summary() and "; 1 failed; " in first.summary()

    # The next cycles judge it again, a restart too (the tries are kept in the judge's
    # memory: cron's --once counts them as well)...
    judged = roles.count("judge")
    second = JudgeMonitor(judge, client, project="prod").run_once()
    assert second.verdicts == [] and list(second.failed) == [bad]
    assert (second.considered, second.already_judged) == (1, 0)  # only the run to retry
    assert roles.count("judge") > judged
    third = monitor.run_once()
    assert list(third.failed) == [bad] and third.given_up == []
    # ... MAX_ATTEMPTS times in all: then it is given up, and reported as such.
    assert monitor_module.MAX_ATTEMPTS == 3
    judged = roles.count("judge")
    fourth = monitor.run_once()
    assert fourth.failed == {} and fourth.given_up == [bad] and roles.count("judge") == judged
    assert "; 1 given up; " in fourth.summary()
    assert bad not in verdict_runs(server)


def test_a_judgment_that_fails_once_is_written_by_the_next_cycle(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge, model: ScriptedChatModel
) -> None:
    from langchain_memalign.langsmith import monitor as monitor_module

    model.responder.judge_rule = garbled
    ids = add_runs(server, ["polite hours", "garbled refunds"])
    monitor = JudgeMonitor(judge, client, project="prod")
    assert list(monitor.run_once().failed) == [ids[1]]
    model.responder.judge_rule = rule  # the model answers properly now
    second = monitor.run_once()
    assert [v.run_id for v in second.verdicts] == [ids[1]] and second.failed == {}
    assert sorted(verdict_runs(server)) == sorted(ids)
    # Its failure is forgotten with its verdict: the watch keeps no run aside any more.
    project = server.add_project("prod")["id"]
    state = judge.memory.store.get_meta(f"{monitor_module.STATE_PREFIX}{KEY}:{project}")
    assert state["held"] == {}


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """No waiting after a 429: the watch's rate-limit pause, the SDK's and v2's backoff."""
    from langchain_memalign.langsmith import _api_base

    monkeypatch.setattr(_api_base, "RATE_LIMIT_PAUSE", 0.0)
    monkeypatch.setattr("time.sleep", lambda s: None)


@pytest.mark.parametrize(
    ("path", "method"),
    [("/v2/runs/query", None), ("/platform/annotation-queues", "GET")],
    ids=["v2 run query", "queue items"],
)
def test_a_lasting_rate_limit_on_the_v2_run_query_or_the_queue_items_cuts_the_cycle_short(
    server: LangSmithTestServer,
    client: Client,
    judge: MemAlignJudge,
    no_backoff: None,
    path: str,
    method: str | None,
) -> None:
    ids = add_runs(server, ["polite a", "polite b"])
    monitor = JudgeMonitor(judge, client, project="prod")
    # The project's runs are read through the v2 query, the queue's archived items (the
    # reviews to learn) through the items API: the one refuses for good.
    server.inject_failure(path, status=429, times=1000, method=method)
    cycle = monitor.run_once()
    assert cycle.rate_limited and cycle.verdicts == [] and "cut short" in cycle.summary()
    refused = server.requests_to(path, method)
    assert len(refused) > 1 and {r.status for r in refused} == {429}
    server.clear_faults()
    assert sorted(v.run_id for v in monitor.run_once().verdicts) == sorted(ids)


@pytest.mark.parametrize(
    ("path", "method"),
    [
        ("/sessions", "GET"),  # the project
        ("/v2/runs/query", None),  # its new runs, then the runs themselves
        ("/feedback", "GET"),  # the verdicts already written, the reviews to learn
        ("/feedback", "POST"),  # the verdicts, the agreement record
        ("/platform/annotation-queues", "GET"),  # the queue's completed items
        ("/platform/annotation-queues", "POST"),  # the runs sent for review
    ],
    ids=["project", "run query", "read feedback", "write feedback", "queue items", "send"],
)
def test_a_lasting_rate_limit_on_any_call_of_a_cycle_ends_it_and_the_next_resumes(
    server: LangSmithTestServer,
    client: Client,
    judge: MemAlignJudge,
    no_backoff: None,
    path: str,
    method: str | None,
) -> None:
    monitor = _reviewed_cycle(server, client, judge)  # a review to learn next cycle
    ids = add_runs(server, ["polite a", "rude b"])
    fault = server.inject_failure(path, status=429, times=1000, method=method)
    cycle = monitor.run_once()  # returns: no rate-limit error escapes the cycle
    assert fault.hits > 0 and cycle.rate_limited and not cycle.clean
    assert "cut short" in cycle.summary()
    server.clear_faults()
    after = monitor.run_once()
    assert after.clean and set(ids) <= set(verdict_runs(server))
    assert len(judge.feedback_ids) == 1  # the review learned, once
    # The run picked for review among the new ones is in the queue (when the send was
    # refused: picked by the cycle cut short, sent by the next), and no run went twice.
    assert len(set(queued(server, monitor)) & set(ids)) == 1
    assert sorted(item_posts(server)) == sorted(set(item_posts(server)))


def test_runs_picked_for_review_in_a_cycle_the_queue_refused_are_sent_by_the_next(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge, no_backoff: None
) -> None:
    monitor = JudgeMonitor(judge, client, project="prod", review_limit=2)
    monitor.queue.ensure()
    ids = add_runs(server, ["polite a", "rude b"])
    # The queue refuses every item for longer than the SDK retries: the verdicts are
    # written and the cursor moves past the runs, but the two picked are not in the queue.
    fault = server.inject_failure(
        "/platform/annotation-queues", status=429, times=1000, method="POST"
    )
    cut = monitor.run_once()
    assert fault.hits > 0 and cut.rate_limited and cut.sent == []
    assert sorted(verdict_runs(server)) == sorted(ids) and queued(server, monitor) == []
    server.clear_faults()
    # The next cycle (a restart: the runs to send are kept with the cursor) sends them.
    after = JudgeMonitor(judge, client, project="prod", review_limit=2).run_once()
    assert after.clean and after.considered == 0 and sorted(after.sent) == sorted(ids)
    assert sorted(queued(server, monitor)) == sorted(ids)
    # Once each: the cycle after sends nothing again.
    assert monitor.run_once().sent == []
    assert sorted(item_posts(server)) == sorted(ids)


@pytest.mark.parametrize("landed", [False, True], ids=["before the send", "after it"])
def test_a_watch_killed_around_its_send_neither_loses_nor_repeats_a_run_for_review(
    server: LangSmithTestServer,
    client: Client,
    judge: MemAlignJudge,
    monkeypatch: pytest.MonkeyPatch,
    landed: bool,
) -> None:
    from langchain_memalign.langsmith._api import LangSmithAPI

    ids = add_runs(server, ["polite a", "rude b"])
    real_add = LangSmithAPI.add_to_queue

    def add_then_die(self: LangSmithAPI, *args: Any) -> None:
        # The process dies once the cycle has stored its cursor: before its items reach
        # the queue, or once they have, before it could note that they did.
        if landed:
            real_add(self, *args)
        raise KeyboardInterrupt

    monkeypatch.setattr(LangSmithAPI, "add_to_queue", add_then_die)
    with pytest.raises(KeyboardInterrupt):
        JudgeMonitor(judge, client, project="prod", review_limit=2).run_once()
    monkeypatch.setattr(LangSmithAPI, "add_to_queue", real_add)
    assert sorted(verdict_runs(server)) == sorted(ids)
    restarted = JudgeMonitor(judge, client, project="prod", review_limit=2)
    after = restarted.run_once()
    assert after.considered == 0  # the cursor had passed them: nothing judged again
    # Sent by the restart if the kill came first; found in the queue (not sent again) if not.
    assert sorted(after.sent) == ([] if landed else sorted(ids))
    assert sorted(queued(server, restarted)) == sorted(ids)
    assert restarted.run_once().sent == []
    assert sorted(item_posts(server)) == sorted(ids)


@pytest.mark.parametrize("server", [True, False], ids=["v2", "v1"], indirect=True)
def test_only_ended_runs_without_error_are_judged_and_a_running_one_by_a_later_cycle(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge, model: ScriptedChatModel
) -> None:
    ended = add_runs(server, ["polite hours"])
    running = add_runs(server, ["polite refunds"], ended=False, outputs=None)
    errored = add_runs(server, ["polite shipping"], error="TimeoutError: upstream", outputs=None)
    monitor = JudgeMonitor(judge, client, project="prod")
    first = monitor.run_once()
    assert [v.run_id for v in first.verdicts] == ended and verdict_runs(server) == ended
    assert (first.considered, first.pending) == (2, 1) and "1 running" in first.summary()
    # The errored run is not judged, but the cycle names it (rather than dropping it).
    assert first.errored == errored and "1 errored (skipped)" in first.summary()
    # The running run ends (its tracer patches it): the next cycle judges it, on its outputs.
    client.update_run(
        running[0], end_time=dt.datetime.now(dt.UTC), outputs={"a": "Refunds take 5 days."}
    )
    second = monitor.run_once()
    assert [v.run_id for v in second.verdicts] == running and second.pending == 0
    assert any("Refunds take 5 days." in str(call) for call in model.calls)
    # The errored run is never judged, and reported once (the cursor has passed it).
    assert sorted(verdict_runs(server)) == sorted(ended + running) and second.errored == []
    third = monitor.run_once()
    assert (third.considered, third.verdicts, third.errored) == (0, [], [])


def test_each_verdict_is_written_once_known_so_a_kill_while_judging_loses_none(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge, model: ScriptedChatModel
) -> None:
    others = add_runs(server, [f"polite answer {i}" for i in range(4)])
    doomed = add_runs(server, ["doomed answer"])
    kill = [True]

    def killed_while_judging(case: str, memory: str) -> Any:
        if "doomed" in case and kill[0]:
            # The process dies during this judgment, once the others have ended (waiting
            # for their verdicts to be written, or for a minute if they never are).
            server.wait_for(lambda: len(verdict_runs(server)) == len(others), timeout=60)
            raise KeyboardInterrupt
        return rule(case, memory)

    model.responder.judge_rule = killed_while_judging
    with pytest.raises(KeyboardInterrupt):
        JudgeMonitor(judge, client, project="prod").run_once()
    # The verdicts known before the kill were written: the restart judges only the rest.
    assert sorted(verdict_runs(server)) == sorted(others)
    kill[0] = False
    roles: list[str] = model.responder.roles
    judged = roles.count("judge")
    resumed = JudgeMonitor(judge, client, project="prod").run_once()
    assert [v.run_id for v in resumed.verdicts] == doomed and resumed.already_judged == 4
    assert roles.count("judge") == judged + 1


@pytest.mark.parametrize("tracing", [None, "true"])
def test_the_judges_own_calls_are_traced_only_when_asked(
    monkeypatch: pytest.MonkeyPatch,
    server: LangSmithTestServer,
    client: Client,
    judge: MemAlignJudge,
    tracing: str | None,
) -> None:
    flush = trace_to(monkeypatch, server, tracing)

    def uploaded() -> set[str]:
        flush()
        client.flush()
        return set(server.runs)

    ids = add_runs(server, ["polite hours", "rude refunds"])
    cycle = JudgeMonitor(judge, client, project="prod").run_once()
    assert len(cycle.verdicts) == 2 and {v.judge_run_id for v in cycle.verdicts} == {None}
    assert uploaded() == set(ids)  # none of the judge's own runs
    # Asked for, each judgment is traced to "evaluators" and its verdict links to it.
    more = add_runs(server, ["polite sizes"])
    traced = JudgeMonitor(judge, client, project="prod", trace=True).run_once()
    [verdict] = traced.verdicts
    own = uploaded() - set(ids + more)
    assert verdict.judge_run_id in own
    assert {server.sessions[server.runs[r]["session_id"]]["name"] for r in own} == {"evaluators"}


def test_a_model_outage_gives_no_run_up_but_a_run_that_cannot_be_judged_is(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge, model: ScriptedChatModel
) -> None:
    import httpx
    import openai

    from langchain_memalign.langsmith import monitor as monitor_module

    down = [True]

    def provider(case: str, memory: str) -> Any:
        if down[0]:  # the provider is unreachable: every judgment fails, whatever the run
            raise openai.APIConnectionError(request=httpx.Request("POST", "http://model/v1"))
        return garbled(case, memory)

    model.responder.judge_rule = provider
    ids = add_runs(server, ["polite hours", "garbled refunds"])
    monitor = JudgeMonitor(judge, client, project="prod")
    for _ in range(monitor_module.MAX_ATTEMPTS + 1):  # longer than the runs' tries
        cycle = monitor.run_once()
        assert sorted(cycle.failed) == sorted(ids) and cycle.given_up == []
        assert cycle.outage is not None and "APIConnectionError" in cycle.outage
        assert "model outage (not counted against the runs)" in cycle.summary()
        assert not cycle.clean
    # The provider is back: the good run is judged; the run whose own output cannot be
    # judged fails alone, is tried MAX_ATTEMPTS times, then given up and reported.
    down[0] = False
    back = monitor.run_once()
    assert [v.run_id for v in back.verdicts] == [ids[0]] and list(back.failed) == [ids[1]]
    assert back.outage is None
    for _ in range(monitor_module.MAX_ATTEMPTS - 1):
        assert list(monitor.run_once().failed) == [ids[1]]
    last = monitor.run_once()
    assert last.failed == {} and last.given_up == [ids[1]] and last.outage is None


@pytest.mark.parametrize(
    ("error", "outage"),
    [
        (ConnectionError("refused"), True),
        (TimeoutError("read timed out"), True),
        (ls_utils.LangSmithRateLimitError("429"), True),
        (type("InternalServerError", (Exception,), {})("boom"), True),
        (type("APIStatusError", (Exception,), {"status_code": 503})("unavailable"), True),
        (type("APIStatusError", (Exception,), {"status_code": 400})("bad request"), False),
        (ValueError("no JSON in the reply"), False),
    ],
)
def test_which_errors_are_a_provider_outage(error: Exception, outage: bool) -> None:
    from langchain_memalign.errors import MalformedOutputError
    from langchain_memalign.langsmith.monitor import _is_outage

    assert _is_outage(error) is outage
    try:  # the judge may wrap the provider's error in its own
        raise MalformedOutputError("judge 'helpfulness': the call failed") from error
    except MalformedOutputError as wrapped:
        assert _is_outage(wrapped) is outage


@pytest.mark.parametrize("server", [True, False], ids=["v2", "v1"], indirect=True)
def test_runs_started_before_their_project_are_read(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    from langchain_memalign.langsmith import write_verdicts

    # A project created by its first batch of runs (or a client with its own clock) can
    # start after some of its runs.
    project = server.add_project("prod")
    started = dt.datetime.fromisoformat(project["start_time"].replace("Z", "+00:00"))
    before = (started - dt.timedelta(hours=1)).isoformat()
    early = add_runs(server, ["polite hours", "rude refunds"], start_time=before)
    monitor = JudgeMonitor(judge, client, project="prod", review_limit=1)
    cycle = monitor.run_once()
    assert sorted(v.run_id for v in cycle.verdicts) == sorted(early) and cycle.considered == 2
    late = add_runs(server, ["polite sizes"], start_time=before)
    # (write_verdicts rewrites the verdicts it finds: the early runs' too)
    written = write_verdicts(judge, client, project="prod")
    assert sorted(v.run_id for v in written) == sorted(early + late)
    sent = monitor.queue.send(project="prod")
    assert set(late) <= set(sent.run_ids) and set(sent.run_ids) <= set(early + late)


# -- a persistent cursor (issue 46, R4) ------------------------------------------------------


@pytest.fixture
def busy_server(request: pytest.FixtureRequest) -> Iterator[LangSmithTestServer]:
    """A server whose v2 run query answers in no time order (it documents none), or v1."""
    v2 = getattr(request, "param", True)
    with LangSmithTestServer(runs_page_size=50, runs_v2=v2, v2_run_order="unordered") as srv:
        yield srv


@pytest.fixture
def busy_client(busy_server: LangSmithTestServer) -> Iterator[Client]:
    with connect(busy_server) as c:
        yield c


@pytest.mark.parametrize("busy_server", [True, False], ids=["v2", "v1"], indirect=True)
def test_every_new_run_is_judged_exactly_once_however_many_arrive(
    busy_server: LangSmithTestServer, busy_client: Client, judge: MemAlignJudge
) -> None:
    server, client = busy_server, busy_client
    roles: list[str] = judge.model.responder.roles  # type: ignore[attr-defined]
    ids = server.add_timed_runs(500)
    first = JudgeMonitor(judge, client, project="prod", scan=100).run_once()
    # Oldest first, from where the watch starts: the 100 earliest, the rest left and said so.
    assert [v.run_id for v in first.verdicts] == ids[:100]
    assert (first.considered, first.left) == (100, 400)
    assert "100 of 100 runs judged" in first.summary()
    assert "400 left for the next cycle" in first.summary()
    judged = [v.run_id for v in first.verdicts]
    for cycle in range(4):
        # A restart (a new monitor, as cron's --once) reads on from where the last stopped.
        monitor = JudgeMonitor(judge, client, project="prod", scan=100)
        report = monitor.run_once()
        assert report.clean and len(report.verdicts) == 100 and report.already_judged == 0
        assert report.left == 300 - 100 * cycle
        judged += [v.run_id for v in report.verdicts]
    assert judged == ids  # each once, in the order they started
    assert sorted(verdict_runs(server)) == sorted(ids) and roles.count("judge") == 500
    last = monitor.run_once()
    assert (last.considered, last.left, last.verdicts) == (0, 0, [])
    assert "left for the next cycle" not in last.summary()


@pytest.mark.parametrize("busy_server", [True, False], ids=["v2", "v1"], indirect=True)
def test_a_backlog_too_long_to_count_is_read_in_order_all_the_same(
    busy_server: LangSmithTestServer,
    busy_client: Client,
    judge: MemAlignJudge,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from langchain_memalign.langsmith import monitor as monitor_module

    # Runs past the first `scan` are counted up to LEFT_COUNT; past that, the v2 query's
    # window is narrowed (it has no order to rely on) and v1 stops listing.
    monkeypatch.setattr(monitor_module, "LEFT_COUNT", 5)
    server, client = busy_server, busy_client
    ids = server.add_timed_runs(20)
    monitor = JudgeMonitor(judge, client, project="prod", scan=3)
    first = monitor.run_once()
    assert [v.run_id for v in first.verdicts] == ids[:3]
    assert (first.left, first.left_capped) == (5, True)
    assert "over 5 left for the next cycle" in first.summary()
    judged = [v.run_id for v in first.verdicts]
    while len(judged) < len(ids):
        cycle = monitor.run_once()
        assert cycle.verdicts, "a cycle made no progress"
        judged += [v.run_id for v in cycle.verdicts]
    assert judged == ids and cycle.left == 0 and not cycle.left_capped


@pytest.mark.parametrize("busy_server", [True, False], ids=["v2", "v1"], indirect=True)
def test_runs_started_at_the_same_time_are_each_judged_once(
    busy_server: LangSmithTestServer, busy_client: Client, judge: MemAlignJudge
) -> None:
    # Many runs can share a start time (a batch traced at once): the cursor orders them by
    # id, so a cycle that stops among them goes on with the next one.
    ids = busy_server.add_timed_runs(7, step=dt.timedelta(0))
    monitor = JudgeMonitor(judge, busy_client, project="prod", scan=3)
    judged = [[v.run_id for v in monitor.run_once().verdicts] for _ in range(4)]
    assert [len(j) for j in judged] == [3, 3, 1, 0]
    assert sorted(r for j in judged for r in j) == sorted(ids) == sorted(verdict_runs(busy_server))


@pytest.mark.parametrize("server", [True, False], ids=["v2", "v1"], indirect=True)
def test_a_running_run_does_not_hold_the_cursor_and_is_judged_once_it_ends(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    early = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    running = add_runs(server, ["polite stream"], ended=False, outputs=None,
                       start_time=early.isoformat())  # fmt: skip
    ended = server.add_timed_runs(4)
    monitor = JudgeMonitor(judge, client, project="prod", scan=2)
    first = monitor.run_once()
    assert (first.pending, first.left) == (1, 3) and first.verdicts[0].run_id == ended[0]
    # The cursor passed the running run: the next cycles read the others, and it again.
    second = monitor.run_once()
    assert [v.run_id for v in second.verdicts] == ended[1:3] and second.pending == 1
    client.update_run(running[0], end_time=dt.datetime.now(dt.UTC), outputs={"a": "Done."})
    third = monitor.run_once()
    assert sorted(v.run_id for v in third.verdicts) == sorted([ended[3], *running])
    assert third.pending == 0 and monitor.run_once().considered == 0
    assert sorted(verdict_runs(server)) == sorted(ended + running)


@pytest.mark.parametrize("server", [True, False], ids=["v2", "v1"], indirect=True)
def test_a_run_kept_aside_that_ends_with_an_error_is_reported_as_skipped(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    running = add_runs(server, ["polite stream", "polite chat"], ended=False, outputs=None)
    monitor = JudgeMonitor(judge, client, project="prod")
    first = monitor.run_once()
    assert first.pending == 2 and first.errored == [] and "errored" not in first.summary()
    # Both end while kept aside, one with an error: it is not judged, and the cycle says so
    # (its id in the report) rather than dropping it silently.
    now = dt.datetime.now(dt.UTC)
    client.update_run(running[0], end_time=now, error="TimeoutError: upstream")
    client.update_run(running[1], end_time=now, outputs={"a": "Done."})
    second = monitor.run_once()
    assert [v.run_id for v in second.verdicts] == running[1:] and second.pending == 0
    assert second.errored == running[:1] and second.considered == 1
    assert "1 errored (skipped)" in second.summary()
    assert second.model_dump(mode="json")["errored"] == running[:1]
    # Reported once: it is no longer read.
    third = monitor.run_once()
    assert (third.considered, third.errored) == (0, [])
    assert verdict_runs(server) == running[1:]


def test_a_run_still_running_a_day_after_it_started_is_given_up(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    long_ago = (dt.datetime.now(dt.UTC) - dt.timedelta(days=2)).isoformat()
    [stuck] = add_runs(server, ["polite stream"], ended=False, outputs=None,
                       start_time=long_ago)  # fmt: skip
    monitor = JudgeMonitor(judge, client, project="prod", since=dt.timedelta(days=3))
    cycle = monitor.run_once()
    assert cycle.given_up == [stuck] and cycle.pending == 0 and "1 given up" in cycle.summary()
    assert monitor.run_once().considered == 0  # no longer read


def test_a_run_that_becomes_readable_late_is_read_within_the_settle_margin(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    first = add_runs(server, ["polite hours"])
    monitor = JudgeMonitor(judge, client, project="prod")
    assert [v.run_id for v in monitor.run_once().verdicts] == first
    # A run that started before the one judged reaches LangSmith only now (uploads are
    # batched; the query service indexes with a delay): the cursor has not passed it.
    started = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=2)).isoformat()
    late = add_runs(server, ["polite refunds"], start_time=started)
    again = monitor.run_once()
    assert [v.run_id for v in again.verdicts] == late and again.considered == 1


def test_since_sets_where_the_cursor_starts_and_a_new_since_restarts_it(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    from langchain_memalign.langsmith import monitor as monitor_module

    days_ago = (dt.datetime.now(dt.UTC) - dt.timedelta(days=3)).isoformat()
    old = add_runs(server, ["polite archive"], start_time=days_ago)
    new = add_runs(server, ["polite hours"])
    # By default a watch starts a day back (SINCE): older runs are not read.
    assert dt.timedelta(days=1) == monitor_module.SINCE
    cycle = JudgeMonitor(judge, client, project="prod").run_once()
    assert [v.run_id for v in cycle.verdicts] == new
    # A backfill: a `since` the cursor did not start from restarts it there, once.
    week = dt.datetime.now(dt.UTC) - dt.timedelta(days=7)
    backfill = JudgeMonitor(judge, client, project="prod", since=week).run_once()
    assert [v.run_id for v in backfill.verdicts] == old and backfill.already_judged == 1
    again = JudgeMonitor(judge, client, project="prod", since=week).run_once()
    assert again.considered == 0
    # Left out, the stored cursor is kept.
    assert JudgeMonitor(judge, client, project="prod").run_once().considered == 0
    with pytest.raises(ValueError, match="since must be a time or a time span back"):
        JudgeMonitor(judge, client, project="prod", since=-dt.timedelta(hours=1))


def test_a_watch_state_from_before_the_cursor_keeps_its_failure_counts() -> None:
    from langchain_memalign.langsmith.monitor import SINCE, _WatchState

    now = dt.datetime.now(dt.UTC)
    state = _WatchState.load({"failed": {"run-1": 2}}, None, now)
    assert state.cursor == (now - SINCE, "") and state.held == {
        "run-1": {"start_time": None, "failed": 2}
    }
