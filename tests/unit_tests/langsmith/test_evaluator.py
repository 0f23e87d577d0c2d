"""The judge's verdicts out to LangSmith: evaluate/aevaluate, and model feedback on runs."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from typing import Any

import pytest

_TESTS_DIR = str(Path(__file__).resolve().parents[2])
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

import langsmith  # noqa: E402
from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel  # noqa: E402
from langsmith import Client  # noqa: E402
from langsmith.evaluation import EvaluationResult  # noqa: E402
from langsmith_fixtures import RUN_ORDERS, ordered_server  # noqa: E402
from langsmith_server import LangSmithTestServer  # noqa: E402
from langsmith_tracing import trace_to  # noqa: E402

from langchain_memalign import Feedback, MemAlignJudge  # noqa: E402
from langchain_memalign.errors import FeedbackConfigMismatchError  # noqa: E402
from langchain_memalign.langsmith import (  # noqa: E402
    JudgeRunEvaluator,
    LangSmithFeedbackSource,
    ajudge_evaluator,
    comparative_evaluator,
    invoke_and_log,
    judge_evaluator,
    write_verdicts,
)
from langchain_memalign.langsmith._fields import comment_digest  # noqa: E402
from langchain_memalign.langsmith.types import awrite_verdicts  # noqa: E402
from langchain_memalign.result import label_of  # noqa: E402

pytest_plugins = ["langsmith_fixtures"]
pytestmark = pytest.mark.usefixtures("langsmith_env")

KEY = "helpfulness"


def rule(case: str, memory: str) -> dict[str, Any]:
    if "yourself" in case.lower():
        return {"rationale": "Dismissive.", "score": False}
    return {"rationale": "Answers the question.", "score": True}


@pytest.fixture
def model() -> ScriptedChatModel:
    return ScriptedChatModel(responder=RoleResponder(rule))


@pytest.fixture
def judge(model: ScriptedChatModel) -> MemAlignJudge:
    # No similarity floors: bag-of-words fake embeddings put the seed case far below
    # the default floor, and every judgment here should see it.
    judge = MemAlignJudge(
        KEY, "Helpful?\n{inputs}\n{outputs}", model, HashEmbeddings(), k=2,
        options={"retrieval": {"min_similarity": None, "min_similarity_with_rationale": None}},
    )  # fmt: skip
    judge.align(
        [
            Feedback(id="seed", inputs="reset my password", outputs="Figure it out yourself.",
                     value=False, rationale="Dismissive."),
        ]
    )  # fmt: skip
    return judge


@pytest.fixture
def dataset(client: Client) -> str:
    ds = client.create_dataset("support")
    client.create_examples(
        dataset_id=ds.id,
        examples=[
            {"inputs": {"question": q}, "reference_outputs": {"answer": "reference"}}
            for q in ("store hours?", "reset my password", "track my order")
        ],
    )
    return ds.name


def target(inputs: dict[str, Any]) -> dict[str, Any]:
    q = inputs["question"]
    return {"answer": "Figure it out yourself." if "password" in q else f"Sure: {q}"}


def _results(rows: list[Any]) -> dict[str, list[EvaluationResult]]:
    return {r["example"].inputs["question"]: r["evaluation_results"]["results"] for r in rows}


def _check(results: dict[str, list[EvaluationResult]], n: int, judge: MemAlignJudge) -> None:
    assert set(results) == {"store hours?", "reset my password", "track my order"}
    for question, found in results.items():
        assert len(found) == n and {r.key for r in found} == {KEY}
        for r in found:
            assert r.score is ("password" not in question)
            assert r.comment in ("Dismissive.", "Answers the question.")
            assert r.metadata is not None and r.metadata["judge"] == KEY
            assert r.metadata["episode_ids"] == ["seed"]
            assert r.metadata["guideline_ids"] == [g.id for g in judge.guidelines]


def test_evaluate_end_to_end_without_upload(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge, dataset: str
) -> None:
    evaluator = JudgeRunEvaluator(judge)
    assert evaluator.feedback_keys == [KEY]
    before = len(server.requests)
    results = langsmith.evaluate(
        target,
        data=dataset,
        evaluators=[evaluator, judge_evaluator(judge)],
        upload_results=False,
        client=client,
    )
    rows = list(results)
    _check(_results(rows), 2, judge)
    assert {r.method for r in server.requests[before:]} == {"GET"}  # nothing uploaded
    assert not server.feedback


async def test_aevaluate_end_to_end_without_upload(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge, dataset: str
) -> None:
    async def atarget(inputs: dict[str, Any]) -> dict[str, Any]:
        return target(inputs)

    before = len(server.requests)
    results = await langsmith.aevaluate(
        atarget,
        data=dataset,
        evaluators=[JudgeRunEvaluator(judge), ajudge_evaluator(judge)],
        upload_results=False,
        client=client,
    )
    rows = [row async for row in results]
    _check(_results(rows), 2, judge)
    # The judge uploads nothing: no feedback, no judge run. (aevaluate itself uploaded
    # the target's runs without upload_results in langsmith 0.15.0, and not in 0.15.1:
    # either is fine here.)
    assert not server.feedback and not server.requests_to("/feedback")
    assert {r["name"] for r in server.runs.values()} <= {"AsyncTarget"}
    assert len(server.requests) > before  # it read the dataset


def test_categorical_verdicts_are_values(model: ScriptedChatModel) -> None:
    def tone(case: str, memory: str) -> dict[str, Any]:
        return {"rationale": "Curt.", "score": "Cold"}

    judge = MemAlignJudge(
        "tone",
        "Tone? {inputs} {outputs}",
        ScriptedChatModel(responder=RoleResponder(tone)),
        HashEmbeddings(),
        scale=["Warm", "Neutral", "Cold"],
    )
    out = judge_evaluator(judge)({"q": "hi"}, {"a": "What."})
    assert out == {
        "key": "tone",
        "value": "Cold",
        "score": 2,
        "comment": "Curt.",
        "metadata": {"judge": "tone", "guideline_ids": [], "episode_ids": []},
        # LangSmith keeps this with the feedback (it drops `metadata`)
        "evaluator_info": {
            "memalign_judge": "tone",
            "memalign_comment": comment_digest("Curt."),
            "guideline_ids": [],
            "episode_ids": [],
        },
    }
    run = langsmith.schemas.Run(
        id="00000000-0000-4000-8000-000000000009",
        name="t",
        run_type="chain",
        start_time="2024-01-01T00:00:00Z",
        inputs={"q": "hi"},
        outputs={"a": "What."},
        trace_id="00000000-0000-4000-8000-000000000009",
    )
    result = JudgeRunEvaluator(judge).evaluate_run(run)
    assert (result.value, result.score, result.comment) == ("Cold", 2, "Curt.")


def _labelled_judge(name: str, scale: Any, label: str) -> MemAlignJudge:
    def rule(case: str, memory: str) -> dict[str, Any]:
        return {"rationale": f"Rated {label}.", "score": label}

    return MemAlignJudge(
        name,
        "Rate. {inputs} {outputs}",
        ScriptedChatModel(responder=RoleResponder(rule)),
        HashEmbeddings(),
        scale=scale,
    )


@pytest.mark.parametrize(
    ("scale", "label", "score"),
    [(["Warm", "Neutral", "Cold"], "Neutral", 1), ("pairwise", "B", 2), ("pairwise", "tie", 0)],
)
def test_the_judge_itself_is_an_evaluator_for_every_scale(
    server: LangSmithTestServer,
    client: Client,
    dataset: str,
    scale: Any,
    label: str,
    score: int,
) -> None:
    judge = _labelled_judge("rating", scale, label)
    results = langsmith.evaluate(
        target, data=dataset, evaluators=[judge], upload_results=False, client=client
    )
    found = [r for row in results for r in row["evaluation_results"]["results"]]
    assert len(found) == 3
    for r in found:
        assert (r.key, r.value, r.score, r.comment) == ("rating", label, score, f"Rated {label}.")
    assert not server.feedback


def test_results_have_one_shape_on_every_scale() -> None:
    cases = [
        (bool, True, True, None),
        ((1, 5), 4, 4, None),
        (["Good", "Bad"], "Bad", 1, "Bad"),
        ("pairwise", "A", 1, "A"),
    ]
    for scale, label, score, value in cases:
        judge = _labelled_judge("k", scale, label)
        result = judge(inputs="q", outputs="a")
        assert result == judge.invoke({"inputs": "q", "outputs": "a"})
        assert result["score"] == score and type(result["score"]) is type(score)
        assert result.get("value") == value
        assert label_of(result) == label
        # valid as is for LangSmith
        assert EvaluationResult(**result).score == score


def test_invoke_and_log_outside_a_langsmith_test_just_judges(
    judge: MemAlignJudge, server: LangSmithTestServer
) -> None:
    case = {"inputs": "hours?", "outputs": "9 to 5"}
    assert invoke_and_log(judge, case) == judge.invoke(case)
    assert not server.requests


# -- verdicts on production runs --------------------------------------------------------------


def _production(server: LangSmithTestServer) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    project = server.add_project("prod")
    runs = [
        server.add_run(session_id=project["id"], inputs={"q": q}, outputs={"a": a}, end_time=_now())
        for q, a in (("hours?", "9 to 5."), ("password?", "Figure it out yourself."))
    ]
    return project, runs


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


def _verdict_runs(server: LangSmithTestServer) -> list[str]:
    return [
        f["run_id"]
        for f in server.feedback.values()
        if f["key"] == KEY and f["feedback_source"]["type"] == "model"
    ]


def _garbled(case: str, memory: str) -> Any:
    if "garbled" in case:
        return "not json at all"  # an unusable answer, every time this case is asked
    return rule(case, memory)


def test_write_verdicts_judges_ended_runs_without_error_each_on_its_own(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge, model: ScriptedChatModel
) -> None:
    model.responder.judge_rule = _garbled
    project = server.add_project("prod")["id"]

    def run(q: str, **fields: Any) -> str:
        fields = {"outputs": {"a": f"answer to {q}"}, "end_time": _now(), **fields}
        return str(server.add_run(session_id=project, inputs={"q": q}, **fields)["id"])

    good = [run("hours?"), run("sizes?")]
    bad = run("garbled refunds?")
    running = run("shipping?", end_time=None, outputs=None)
    errored = run("returns?", error="TimeoutError: upstream", outputs=None)
    verdicts = write_verdicts(judge, client, project="prod")
    # The good runs' verdicts are written; the failed judgment is named, not raised...
    assert sorted(v.run_id for v in verdicts) == sorted(good)
    assert sorted(_verdict_runs(server)) == sorted(good)
    assert list(verdicts.failed) == [bad] and "MalformedOutputError" in verdicts.failed[bad]
    # ...a running run is not judged on its missing outputs, an errored one not at all:
    # both are named, though the project's query for runs to judge leaves errored runs out.
    assert list(verdicts.skipped) == [running, errored]
    assert "still running" in verdicts.skipped[running]
    assert verdicts.skipped[errored] == "ended with an error (TimeoutError: upstream)"
    given = write_verdicts(judge, client, runs=[errored, running, good[0]])
    assert [v.run_id for v in given] == [good[0]] and given.failed == {}
    assert "ended with an error (TimeoutError: upstream)" in given.skipped[errored]
    assert list(given.skipped) == [errored, running]
    assert sorted(_verdict_runs(server)) == sorted(good)


@pytest.mark.parametrize("order", RUN_ORDERS)
def test_write_verdicts_judges_a_projects_latest_runs_whatever_order_the_query_lists(
    order: str, judge: MemAlignJudge
) -> None:
    # The v2 run query documents no order: `limit` keeps the runs that started last, not
    # the first the query lists. (v1 is asked for newest first.)
    with ordered_server(order) as (server, client):
        ids = server.add_timed_runs(8, step=dt.timedelta(seconds=1))
        project = server.add_project("prod")["id"]

        def errored(at: dt.datetime, error: str) -> str:
            run = server.add_run(session_id=project, inputs={"q": "x"}, error=error,
                                 start_time=at.isoformat(), end_time=at.isoformat())  # fmt: skip
            return str(run["id"])

        # Errored runs take no place among them: the latest of all, and one among the three
        # latest judged, are reported as skipped; one older than those three is not.
        third = dt.datetime.fromisoformat(server.runs[ids[-3]]["start_time"].replace("Z", "+00:00"))
        late = errored(dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1), "Boom")
        among = errored(third + dt.timedelta(milliseconds=500), "ValueError: no answer")
        errored(third - dt.timedelta(milliseconds=500), "Older")
        before = len(server.requests)
        verdicts = write_verdicts(judge, client, project="prod", limit=3)
        assert [v.run_id for v in verdicts] == ids[::-1][:3]  # newest first
        assert sorted(_verdict_runs(server)) == sorted(ids[-3:])
        assert verdicts.failed == {} and verdicts.skipped == {
            late: "ended with an error (Boom)",
            among: "ended with an error (ValueError: no answer)",
        }
        # One more run query did it: the errored runs since the oldest of those judged.
        asked = [r.json for r in server.requests[before:] if r.path.endswith("runs/query")]
        assert len([q for q in asked if q.get("has_error") or q.get("error")]) == 1


def test_write_verdicts_reports_so_many_errored_runs_only_up_to_a_bound(
    server: LangSmithTestServer,
    client: Client,
    judge: MemAlignJudge,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from langchain_memalign.langsmith import _verdicts

    monkeypatch.setattr(_verdicts, "ERRORED_REPORTED", 2)
    project = server.add_project("prod")["id"]
    good = server.add_run(session_id=project, inputs={"q": "hours?"}, outputs={"a": "9-5"},
                          end_time=_now())["id"]  # fmt: skip
    for i in range(3):
        server.add_run(session_id=project, inputs={"q": f"q{i}"}, error="Boom", end_time=_now())
    with caplog.at_level("WARNING", logger=_verdicts.__name__):
        verdicts = write_verdicts(judge, client, project="prod")
    assert [v.run_id for v in verdicts] == [good] and len(verdicts.skipped) == 2
    assert set(verdicts.skipped.values()) == {"ended with an error (Boom)"}
    assert "project prod: more than 2 runs ended with an error; 2 are named" in caplog.text


def test_write_verdicts_writes_each_verdict_once_known_so_a_kill_loses_none(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge, model: ScriptedChatModel
) -> None:
    project = server.add_project("prod")["id"]
    others = [
        server.add_run(session_id=project, inputs={"q": f"q{i}"}, outputs={"a": "fine"},
                       end_time=_now())["id"]
        for i in range(3)
    ]  # fmt: skip
    server.add_run(session_id=project, inputs={"q": "doomed"}, outputs={"a": "x"}, end_time=_now())

    def killed_while_judging(case: str, memory: str) -> Any:
        if "doomed" in case:
            # The process dies during this judgment once the others have ended (waiting
            # for their verdicts to be written, or for a minute if they never are).
            server.wait_for(lambda: len(_verdict_runs(server)) == len(others), timeout=60)
            raise KeyboardInterrupt
        return rule(case, memory)

    model.responder.judge_rule = killed_while_judging
    with pytest.raises(KeyboardInterrupt):
        write_verdicts(judge, client, project="prod")
    assert sorted(_verdict_runs(server)) == sorted(others)


def test_verdicts_written_as_model_feedback_linked_to_the_judge_run(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    _, runs = _production(server)
    verdicts = write_verdicts(judge, client, project="prod")
    client.flush()
    assert {v.run_id: v.score for v in verdicts} == {runs[0]["id"]: True, runs[1]["id"]: False}
    for v in verdicts:
        assert v.feedback_id is not None and v.judge_run_id is not None
        fb = server.feedback[v.feedback_id]
        assert (fb["run_id"], fb["key"], fb["comment"]) == (v.run_id, KEY, v.comment)
        assert fb["score"] == (1 if v.score else 0)
        source = fb["feedback_source"]
        assert source["type"] == "model"
        assert source["metadata"]["__run"]["run_id"] == v.judge_run_id
        assert source["metadata"]["memalign_judge"] == KEY
        assert source["metadata"]["episode_ids"] == v.episode_ids
        judge_run = server.runs[v.judge_run_id]  # the judge's own traced run
        assert server.sessions[judge_run["session_id"]]["name"] == "evaluators"
        assert judge_run["name"] == KEY

    # The judge's own verdicts teach it nothing...
    source = LangSmithFeedbackSource(client, project="prod")
    assert source.sync(judge).listed == 0
    # ...until a reviewer corrects one in the UI
    wrong, right = verdicts
    client.update_feedback(wrong.feedback_id, correction={"score": 0})  # no explanation
    client.update_feedback(
        right.feedback_id, correction={"score": 1, "explanation": "Rude, but it is a joke shop."}
    )
    report = source.sync(judge)
    corrected = judge.get_feedback(f"langsmith:{wrong.feedback_id}")
    assert corrected.value is False and corrected.rationale is None  # never the judge's own words
    explained = judge.get_feedback(f"langsmith:{right.feedback_id}")
    assert (explained.value, explained.rationale) == (True, "Rude, but it is a joke shop.")
    assert len(report.aligned) == 2

    # Writing again replaces verdicts nobody corrected and leaves corrected ones alone
    server.add_feedback(runs[0]["id"], KEY, score=1, feedback_source={"type": "app"})
    client.update_feedback(wrong.feedback_id, correction=None)
    again = write_verdicts(judge, client, runs=[r["id"] for r in runs])
    by_run = {v.run_id: v for v in again}
    assert by_run[right.run_id].kept_correction
    assert not by_run[wrong.run_id].kept_correction
    assert by_run[wrong.run_id].feedback_id == wrong.feedback_id
    assert server.feedback[right.feedback_id]["correction"]["score"] == 1


def test_uploaded_verdicts_carry_the_judge_mark_so_bare_corrections_keep_no_judge_words(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge, dataset: str
) -> None:
    results = langsmith.evaluate(
        target, data=dataset, evaluators=[JudgeRunEvaluator(judge)], client=client
    )
    client.flush()
    (fb,) = [f for f in server.feedback.values() if f["comment"] == "Dismissive."]
    meta = fb["feedback_source"]["metadata"]  # LangSmith keeps this, not the metadata
    assert meta["memalign_judge"] == KEY and meta["episode_ids"] == ["seed"]
    assert meta["guideline_ids"] == [g.id for g in judge.guidelines]

    client.update_feedback(fb["id"], correction={"score": 1})  # no explanation
    LangSmithFeedbackSource(client, experiment=results.experiment_name).sync(judge)
    corrected = judge.get_feedback(f"langsmith:{fb['id']}")
    assert corrected.value is True
    assert corrected.rationale is None  # not "Dismissive.", the judge's own words


async def test_awrite_verdicts(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    _, runs = _production(server)
    verdicts = await awrite_verdicts(judge, client, runs=[runs[1]["id"]])
    assert [v.score for v in verdicts] == [False]
    assert verdicts[0].feedback_id in server.feedback


def test_write_verdicts_checks_arguments(client: Client, judge: MemAlignJudge) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        write_verdicts(judge, client)


@pytest.mark.parametrize("tracing", [None, "false", "true"])
@pytest.mark.parametrize("form", ["the judge", "judge_evaluator", "JudgeRunEvaluator"])
def test_evaluate_without_upload_stores_none_of_the_judges_runs(
    monkeypatch: pytest.MonkeyPatch,
    server: LangSmithTestServer,
    client: Client,
    dataset: str,
    judge: MemAlignJudge,
    form: str,
    tracing: str | None,
) -> None:
    # The judge's own LangChain runs go through the process's default client.
    flush = trace_to(monkeypatch, server, tracing)
    evaluator: Any = {
        "the judge": judge,
        "judge_evaluator": judge_evaluator(judge),
        "JudgeRunEvaluator": JudgeRunEvaluator(judge),
    }[form]
    results = langsmith.evaluate(
        target, data=dataset, evaluators=[evaluator], upload_results=False, client=client
    )
    assert len([r for row in results for r in row["evaluation_results"]["results"]]) == 3
    flush()
    assert server.runs == {}
    assert not server.feedback


def _rate_alone(case: str, memory: str) -> dict[str, Any]:
    """Rates one output at a time: 8 for a polite answer, 3 for a curt one."""
    return {"rationale": "Rated alone.", "score": 8 if "please" in case.lower() else 3}


def test_a_pairwise_judge_compares_two_experiments(
    server: LangSmithTestServer, client: Client, dataset: str
) -> None:
    def polite(inputs: dict[str, Any]) -> dict[str, Any]:
        return {"answer": f"Please see our help page about {inputs['question']}"}

    def curt(inputs: dict[str, Any]) -> dict[str, Any]:
        return {"answer": "No."}

    first = langsmith.evaluate(curt, data=dataset, client=client)
    second = langsmith.evaluate(polite, data=dataset, client=client)
    judge = MemAlignJudge(
        "preference", "Which reply is better?\n{inputs}\n{outputs}",
        ScriptedChatModel(responder=RoleResponder(_rate_alone)), HashEmbeddings(),
        scale="pairwise",
    )  # fmt: skip
    evaluator = comparative_evaluator(judge)
    results = langsmith.evaluate(
        (first.experiment_name, second.experiment_name), evaluators=[evaluator], client=client
    )
    rows = list(results)
    assert len(rows) == 3
    for row in rows:
        verdict = row["evaluation_results"]["feedback.preference"]
        assert sorted(verdict.scores.values()) == [0.0, 1.0]
    polite_runs = {
        str(r.id) for r in client.list_runs(project_name=second.experiment_name, is_root=True)
    }
    [comparison] = server.comparative.values()
    stored = [f for f in server.feedback.values() if f["key"] == "preference"]
    assert len(stored) == 6  # each example: one score for each of the two runs
    for fb in stored:
        assert fb["comparative_experiment_id"] == comparison["id"]
        assert fb["score"] == (1.0 if fb["run_id"] in polite_runs else 0.0)
        assert fb["comment"].startswith("First output, ")


def test_comparative_evaluator_refuses_a_judge_that_is_not_pairwise(
    judge: MemAlignJudge,
) -> None:
    with pytest.raises(ValueError, match="needs a pairwise judge; 'helpfulness' grades on a bool"):
        comparative_evaluator(judge)
    pairwise = MemAlignJudge(
        "p", "Which?\n{inputs}\n{outputs}",
        ScriptedChatModel(responder=RoleResponder(_rate_alone)), HashEmbeddings(),
        scale="pairwise",
    )  # fmt: skip
    with pytest.raises(ValueError, match="compares two runs; got 1"):
        comparative_evaluator(pairwise)([object()], None)  # type: ignore[list-item]


def test_write_verdicts_gives_the_key_the_judges_config_first(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    _production(server)
    write_verdicts(judge, client, project="prod")
    config = server.feedback_configs[KEY]["feedback_config"]
    assert {c["label"]: c["value"] for c in config["categories"]} == {"fail": 0, "pass": 1}


def test_write_verdicts_refuses_a_key_read_on_another_scale(
    server: LangSmithTestServer, client: Client, judge: MemAlignJudge
) -> None:
    _production(server)
    client.create_feedback_config(KEY, feedback_config={"type": "continuous", "min": 1, "max": 5})
    with pytest.raises(FeedbackConfigMismatchError, match="continuous"):
        write_verdicts(judge, client, project="prod")
    assert not server.feedback


def test_servers_without_include_all_configs_still_check_the_config(
    judge: MemAlignJudge,
) -> None:
    with LangSmithTestServer(include_all_configs=False) as server:
        client = Client(api_url=server.url, api_key="test", auto_batch_tracing=False)
        _production(server)
        assert len(write_verdicts(judge, client, project="prod")) == 2
        assert server.feedback_configs[KEY]["feedback_config"]["type"] == "categorical"
        client.close(timeout=5)
