"""The `memalign` command, run in process with scripted models."""

from __future__ import annotations

import datetime as dt
import io
import json
import re
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel

from langchain_memalign.cli import main
from langchain_memalign.cli.judge_file import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    TEMPLATE,
    CLIError,
    JudgeFile,
    Models,
    default_models,
)
from langchain_memalign.cli.parser import build_parser
from langchain_memalign.cli.progress import Progress, ascii_curve
from langchain_memalign.cli.show import memory_summary

ROOT = Path(__file__).resolve().parents[3]

BASE_CONFIG = '''\
name = "helpfulness"
scale = "bool"
instructions = """Is this support reply helpful?
Customer: {inputs}
Reply: {outputs}"""
model = "openai:gpt-4.1-mini"
embeddings = "openai:text-embedding-3-small"
memory = "mem"
k = 3
'''
# One guideline per feedback item, each checked on seen cases: what these tests read back.
# (Dotted keys, so that a test may append top-level keys.)
CONFIG = BASE_CONFIG + 'options.reflection.mode = "batch"\noptions.validation.mode = "sources"\n'


def empathy_rule(case: str, memory: str) -> dict[str, Any]:
    rude = any(w in case.lower() for w in ("yourself", "whatever", "don't care"))
    upset = any(w in case.lower() for w in ("frustrated", "disappointed"))
    if rude or ("acknowledge" in memory.lower() and upset and "sorry" not in case.lower()):
        return {"rationale": "Unhelpful.", "score": False}
    return {"rationale": "Helpful.", "score": True}


FEEDBACK = [
    {
        "id": "hours",
        "inputs": "What are your store hours?",
        "outputs": "9am to 6pm, Monday to Saturday.",
        "value": True,
        "rationale": "Direct and complete.",
    },
    {
        "id": "rude",
        "inputs": "How do I reset my password?",
        "outputs": "Figure it out yourself.",
        "value": False,
        "rationale": "Dismissive.",
        "annotator": "ana",
    },
    {
        "id": "sweater",
        "inputs": "The sweater looks different from the website. I'm disappointed.",
        "outputs": "Colors vary by monitor. Returns within 30 days.",
        "value": False,
        "rationale": "Correct but cold: acknowledge the customer's disappointment first.",
    },
]

TEST = [
    {"id": "t1", "inputs": "Do you gift wrap?", "outputs": "Yes, for $5.", "value": True},
    {"id": "t2", "inputs": "My package is late.", "outputs": "Whatever.", "value": False},
    {
        "id": "t3",
        "inputs": "I was charged twice and I'm frustrated!",
        "outputs": "Refunds take 5-7 days.",
        "value": False,
        "rationale": "Cold.",
    },
    {
        "id": "t4",
        "inputs": "I'm disappointed with the fit.",
        "outputs": "I'm so sorry! Exchanges are free.",
        "value": True,
    },
]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


class Env:
    """A judge file in a temporary folder and a runner with scripted models."""

    def __init__(self, tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.tmp = tmp
        self.capsys = capsys
        self.config = tmp / "judge.toml"
        self.config.write_text(CONFIG)
        self.responder = RoleResponder(empathy_rule)
        self.model = ScriptedChatModel(responder=self.responder)
        self.embeddings = HashEmbeddings()
        self.built: list[JudgeFile] = []
        self.feedback = write_jsonl(tmp / "feedback.jsonl", FEEDBACK)
        self.test = write_jsonl(tmp / "test.jsonl", TEST)

    def factory(self, cfg: JudgeFile) -> Models:
        self.built.append(cfg)
        return Models(self.model, self.embeddings)

    def run(self, *argv: str, models: Any = "scripted") -> tuple[int, str, str]:
        self.capsys.readouterr()
        factory = self.factory if models == "scripted" else models
        args = [*argv]
        if "--template" not in argv:
            args += ["-c", str(self.config)]
        code = main(args, models=factory)
        out, err = self.capsys.readouterr()
        return code, out, err

    def created(self) -> Env:
        assert self.run("create")[0] == EXIT_OK
        return self


@pytest.fixture
def env(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Env:
    return Env(tmp_path, capsys)


# -- help --------------------------------------------------------------------------------------


def test_help_teaches_the_workflow(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "Workflow:" in out and "memalign align -c judge.toml train.jsonl" in out
    assert "Feedback files are JSONL" in out and '"value": false' in out  # the format
    for command in ("create", "align", "judge", "evaluate", "unalign", "show", "curve"):
        assert command in out


@pytest.mark.parametrize(
    "command", ["create", "align", "judge", "evaluate", "unalign", "show", "curve"]
)
def test_every_command_has_help_with_an_example(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--help"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "Example" in out and "--config" in out


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == EXIT_USAGE
    assert "Workflow:" in capsys.readouterr().err


def test_bad_arguments_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["align", "--batch-size", "0"]) == EXIT_USAGE
    assert "must be at least 1" in capsys.readouterr().err
    assert main(["curve", "x.jsonl", "--shards", "a,b"]) == EXIT_USAGE


# -- create ------------------------------------------------------------------------------------


def test_template_is_a_valid_judge_file(env: Env, tmp_path: Path) -> None:
    code, out, _ = env.run("create", "--template")
    assert code == EXIT_OK and out == TEMPLATE
    path = tmp_path / "t.toml"
    path.write_text(out)
    cfg = JudgeFile.read(path)
    assert cfg.name == "helpfulness" and cfg.scale.kind == "bool" and "{inputs}" in cfg.prompt()
    assert cfg.memory_path() == tmp_path / "memalign_memory/helpfulness"


def test_create_then_update(env: Env) -> None:
    code, out, _ = env.run("create")
    assert code == EXIT_OK and "Created judge 'helpfulness'" in out
    assert (env.tmp / "mem" / "memory.sqlite").is_file()  # relative to the judge file
    env.config.write_text(CONFIG.replace("k = 3", "k = 4"))
    code, out, _ = env.run("create")
    assert code == EXIT_OK and "Updated the configuration" in out
    assert memory_summary(env.tmp / "mem")["config"]["k"] == 4


def test_create_refuses_a_memory_of_another_judge(env: Env) -> None:
    env.created()
    env.config.write_text(CONFIG.replace('scale = "bool"', "scale = [1, 5]"))
    code, _, err = env.run("create")
    assert code == EXIT_USAGE and "holds the memory of judge 'helpfulness'" in err


def test_commands_need_a_created_memory(env: Env) -> None:
    code, _, err = env.run("align", env.feedback)
    assert code == EXIT_USAGE and "create it first: memalign create" in err


# -- align -------------------------------------------------------------------------------------


def test_align_then_show_guidelines_with_sources(env: Env) -> None:
    env.created()
    code, out, _ = env.run("align", env.feedback)
    assert code == EXIT_OK
    assert "3 added, 0 updated, 0 unchanged" in out and "now 3" in out
    code, out, _ = env.run("show")
    assert code == EXIT_OK
    assert "Rule: Dismissive." in out and "<- rude" in out
    assert "3 feedback, 3 episodes, 3 guidelines" in out
    assert "align: feedback hours, rude, sweater" in out


def test_align_says_what_validation_did_to_each_guideline(env: Env) -> None:
    def misled_by_the_new_rules(case: str, memory: str) -> dict[str, Any]:
        if "Rule: Dismissive." in memory:
            return {"rationale": "Fine.", "score": True}
        return empathy_rule(case, memory)

    env.responder.judge_rule = misled_by_the_new_rules
    env.created()
    code, out, _ = env.run("align", env.feedback)
    # with the new rules the judge passes "rude", which the experts failed, every time
    assert code == EXIT_OK and "now 0" in out
    assert "  dropped (fixed 0, broke 1 of 3 seen): Rule: Dismissive." in out
    code, out, _ = env.run("align", env.feedback, "--json")
    assert json.loads(out)["files"]["validation"] == []  # nothing new: nothing checked

    (env.tmp / "fresh").mkdir()
    fresh = Env(env.tmp / "fresh", env.capsys).created()  # judged by empathy_rule
    code, out, _ = fresh.run("align", fresh.feedback, "--json")
    checks = json.loads(out)["files"]["validation"]
    assert sorted(c["text"] for c in checks) == sorted(f"Rule: {f['rationale']}" for f in FEEDBACK)
    assert {c["action"] for c in checks} == {"kept"}


def test_align_says_what_calibration_learned_on_an_integer_scale(env: Env) -> None:
    env.config.write_text(
        CONFIG.replace('scale = "bool"', "scale = [1, 5]").replace("k = 3", "k = 0")
    )
    env.responder.judge_rule = lambda case, memory: {"rationale": "Fine.", "score": 3}
    rows = [{**f, "value": v} for f, v in zip(FEEDBACK, [2, 2, 2], strict=True)]
    env.created()
    code, out, _ = env.run("align", write_jsonl(env.tmp / "scores.jsonl", rows))
    assert code == EXIT_OK
    assert "calibration: 3 seen case(s) graded as unseen, 3 in all; " in out
    assert "the judge's scores given instead: 3 -> 2" in out


def test_aligning_again_changes_nothing(env: Env) -> None:
    env.created()
    env.run("align", env.feedback)
    calls = len(env.model.calls)
    code, out, _ = env.run("align", env.feedback, "--json")
    report = json.loads(out)["files"]
    assert code == EXIT_OK and sorted(report["unchanged"]) == ["hours", "rude", "sweater"]
    assert len(env.model.calls) == calls


def test_align_in_batches_names_each_step_as_it_runs(env: Env) -> None:
    env.created()
    code, out, err = env.run("align", env.feedback, "--batch-size", "2", "--progress")
    assert code == EXIT_OK and "3 added" in out
    lines = err.splitlines()
    # Each batch's steps start and end in order, with the model calls each made.
    first = [ln for ln in lines if ln.startswith("aligning 1-2 of 3: ")]
    assert first[0] == "aligning 1-2 of 3: reflect..."
    assert "aligning 1-2 of 3: reflect done (1 model call, 0:00)" in first
    assert first.index("aligning 1-2 of 3: merge...") > first.index(
        "aligning 1-2 of 3: reflect done (1 model call, 0:00)"
    )
    assert any(ln.startswith("aligning 1-2 of 3: validate done (") for ln in first)
    assert any(ln.startswith("aligning 3-3 of 3: reflect done (1 model call") for ln in lines)
    # Checks: the step, and a line for each candidate tested with its agreement.
    assert "aligning 3-3 of 3: checks..." in lines
    assert any(
        re.match(r"aligning 3-3 of 3: checks: g-\w+ agrees with the experts on \d+ of", ln)
        for ln in lines
    )
    assert any(ln.startswith("aligning 3-3 of 3: checks done (") for ln in lines)
    code, _, err = env.run("align", env.feedback, "--no-progress")
    assert code == EXIT_OK and "aligning" not in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"id": "a", "inputs": "x", "value": true}\n{not json}\n', "bad.jsonl:2: not valid JSON"),
        ('{"id": "a", "inputs": "x", "value": "maybe"}\n', "bad.jsonl:1: feedback 'a': value"),
        ('{"id": "a", "inputs": "x"}\n', "bad.jsonl:1: no 'value'"),
        ('{"id": "", "inputs": "x", "value": true}\n', "bad.jsonl:1: invalid feedback: id"),
        ("[1, 2]\n", "bad.jsonl:1: expected a JSON object"),
        (
            '{"id": "a", "inputs": "x", "value": true}\n\n{"id": "a", "inputs": "y", "value": 0}\n',
            "bad.jsonl:3: feedback id 'a' already used on line 1",
        ),
    ],
)
def test_bad_feedback_files_name_the_line_and_change_nothing(
    env: Env, content: str, message: str
) -> None:
    env.created()
    (env.tmp / "bad.jsonl").write_text(content)
    code, _, err = env.run("align", str(env.tmp / "bad.jsonl"))
    assert code == EXIT_USAGE and message in err
    assert memory_summary(env.tmp / "mem")["counts"]["feedback"] == 0


def test_align_needs_feedback_and_a_readable_file(env: Env) -> None:
    env.created()
    assert "give feedback" in env.run("align")[2]
    code, _, err = env.run("align", str(env.tmp / "missing.jsonl"))
    assert code == EXIT_USAGE and "cannot read" in err and "missing.jsonl" in err


def test_align_from_stdin(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    env.created()
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(FEEDBACK[0]) + "\n"))
    code, out, _ = env.run("align", "-")
    assert code == EXIT_OK and "1 added" in out


def test_failed_reflection_exits_1_and_is_retried(env: Env) -> None:
    env.created()
    env.responder.fail_reflect = True
    code, _, err = env.run("align", env.feedback)
    assert code == EXIT_FAILED and "Reflection failed for 3 item(s)" in err
    assert "retried by the next align" in err
    env.responder.fail_reflect = False
    code, out, _ = env.run("align", env.feedback)
    assert code == EXIT_OK and "Guidelines: 3 added" in out


def test_an_item_retried_successfully_by_a_later_batch_is_not_failed(env: Env) -> None:
    env.created()
    env.responder.fail_next_reflections = 3  # every attempt (max_retries=2) of batch 1
    code, out, err = env.run("align", env.feedback, "--batch-size", "1", "--json")
    assert code == EXIT_OK, err
    report = json.loads(out)["files"]
    assert report["failed"] == [] and report["errors"]  # batch 1 failed, batch 2 retried it
    assert sorted(report["added"]) == sorted(f["id"] for f in FEEDBACK)


@pytest.fixture
def langsmith(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The fake LangSmith server, with the environment pointing every client at it."""
    from langsmith_server import LangSmithTestServer

    for name in ("LANGSMITH_RUNS_ENDPOINTS", "LANGCHAIN_ENDPOINT", "LANGSMITH_WORKSPACE_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANGSMITH_TRACING", "false")
    monkeypatch.setenv("LANGSMITH_DISABLE_RUN_COMPRESSION", "true")
    with LangSmithTestServer() as server:
        monkeypatch.setenv("LANGSMITH_ENDPOINT", server.url)
        monkeypatch.setenv("LANGSMITH_API_KEY", "test")
        yield server


@pytest.mark.filterwarnings(
    "ignore::langsmith._internal._beta_decorator.LangSmithDeprecationWarning",
    "ignore::langsmith._internal._beta_decorator.LangSmithBetaWarning",
)
def test_align_syncs_human_feedback_from_a_langsmith_project(env: Env, langsmith: Any) -> None:
    from langsmith import Client

    client = Client(api_url=langsmith.url, api_key="test", auto_batch_tracing=False)
    project = client.create_project("support-bot")
    run_id = uuid.uuid4()
    client.create_run(
        "agent",
        {"question": "The sweater looks different. I'm disappointed."},
        "chain",
        id=run_id,
        project_name="support-bot",
        outputs={"answer": "Colors vary by monitor."},
    )
    review = client.create_feedback(
        run_id,
        "helpfulness",
        score=0,
        comment="Cold: acknowledge the disappointment first.",
        session_id=project.id,
    )
    client.create_feedback(run_id, "other", score=1, comment="Not its key.", session_id=project.id)
    env.created()
    code, out, err = env.run("align", "--langsmith-project", "support-bot")
    assert code == EXIT_OK, err
    assert "1 human review(s) and correction(s) found; 1 added" in out
    guidelines = memory_summary(env.tmp / "mem")["guidelines"]
    assert guidelines[0]["source_ids"] == [f"langsmith:{review.id}"]
    # Incremental: nothing new, no model call.
    calls = len(env.model.calls)
    code, out, _ = env.run("align", "--langsmith-project", "support-bot", "--json")
    report = json.loads(out)["langsmith"]
    assert code == EXIT_OK and report["aligned"] == [] and len(env.model.calls) == calls
    # A review deleted in LangSmith is unaligned.
    client.delete_feedback(review.id)
    code, out, _ = env.run("align", "--langsmith-project", "support-bot")
    assert code == EXIT_OK and "1 unaligned" in out
    assert memory_summary(env.tmp / "mem")["counts"]["feedback"] == 0


@pytest.mark.filterwarnings(
    "ignore::langsmith._internal._beta_decorator.LangSmithDeprecationWarning",
    "ignore::langsmith._internal._beta_decorator.LangSmithBetaWarning",
)
def test_align_from_langsmith_writes_the_agreement_and_says_where(env: Env, langsmith: Any) -> None:
    from langsmith import Client

    client = Client(api_url=langsmith.url, api_key="test", auto_batch_tracing=False)
    project = client.create_project("support-bot")

    def reviewed_run(question: str, answer: str) -> None:
        """A run with the judge's verdict (pass) and a reviewer's fail on it."""
        run_id = uuid.uuid4()
        client.create_run("agent", {"question": question}, "chain", id=run_id,
                          project_name="support-bot", outputs={"answer": answer})  # fmt: skip
        client.create_feedback(run_id, "helpfulness", score=1, feedback_source_type="model",
                               session_id=project.id)  # fmt: skip
        client.create_feedback(run_id, "helpfulness", score=0, comment="Cold.",
                               session_id=project.id)  # fmt: skip

    def records() -> list[dict[str, Any]]:
        return [f for f in langsmith.feedback.values() if f["key"] == "helpfulness_agreement"]

    reviewed_run("The sweater looks different. I'm disappointed.", "Colors vary by monitor.")
    env.created()
    code, out, err = env.run("align", "--langsmith-project", "support-bot")
    assert code == EXIT_OK, err
    (record,) = records()
    url = f"http://localhost/o/{langsmith.tenant_id}/projects/p/{project.id}"
    line = next(x for x in out.splitlines() if x.startswith("Agreement"))
    assert "the judge agreed with 0 of 1 review(s) before learning them" in line
    assert url in line and "'helpfulness_agreement'" in line
    # --json carries the record's id.
    reviewed_run("My order is late and I'm frustrated.", "Orders take time.")
    code, out, err = env.run("align", "--langsmith-project", "support-bot", "--json")
    assert code == EXIT_OK, err
    ids = json.loads(out)["langsmith"]["agreement_feedback_ids"]
    assert len(records()) == 2 and list(ids.values()) == [
        r["id"] for r in records() if r["id"] != record["id"]
    ]
    # Refused: the align stands, and the line says the record is missing.
    reviewed_run("Where is my refund?", "Whenever.")
    langsmith.inject_failure("/feedback", status=403, method="POST")
    code, out, err = env.run("align", "--langsmith-project", "support-bot")
    assert code == EXIT_OK, err
    assert "1 added" in out and len(records()) == 2
    line = next(x for x in out.splitlines() if x.startswith("Agreement"))
    assert "not written to LangSmith" in line
    # Turned off: nothing written, and the line says so.
    reviewed_run("Can I pay by card?", "Read the FAQ.")
    code, out, err = env.run("align", "--langsmith-project", "support-bot", "--no-log-agreement")
    assert code == EXIT_OK, err
    assert "1 added" in out and len(records()) == 2
    line = next(x for x in out.splitlines() if x.startswith("Agreement"))
    assert "--no-log-agreement" in line


def test_align_from_an_unknown_langsmith_project(env: Env, langsmith: Any) -> None:
    env.created()
    code, _, err = env.run("align", "--langsmith-project", "nope")
    assert code == EXIT_USAGE and "LangSmith has no project named 'nope'" in err
    code, _, err = env.run("align", "--langsmith-project", "a", "--langsmith-experiment", "b")
    assert code == EXIT_USAGE and "not both" in err


# -- judge -------------------------------------------------------------------------------------


def test_judge_one_case(env: Env) -> None:
    env.created()
    env.run("align", env.feedback)
    code, out, _ = env.run(
        "judge", "--inputs", "I'm frustrated, I was charged twice!", "--outputs", "Wait 5 days."
    )
    result = json.loads(out)
    assert code == EXIT_OK and result["id"] == "case" and result["score"] is False
    assert result["key"] == "helpfulness" and result["metadata"]["guideline_ids"]


def test_judge_json_values(env: Env) -> None:
    env.created()
    code, out, _ = env.run(
        "judge", "--json-values", "--inputs", '{"q": "hi"}', "--outputs", '"hello"'
    )
    assert code == EXIT_OK and json.loads(out)["score"] is True
    code, _, err = env.run("judge", "--json-values", "--inputs", "{oops")
    assert code == EXIT_USAGE and "--inputs: not valid JSON" in err


def test_judge_a_file_to_an_output_file(env: Env) -> None:
    env.created()
    env.run("align", env.feedback)
    out_path = env.tmp / "results.jsonl"
    code, out, err = env.run("judge", env.test, "-o", str(out_path), "--batch-size", "3")
    assert code == EXIT_OK and out == ""
    rows = [json.loads(line) for line in out_path.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["t1", "t2", "t3", "t4"]
    assert [r["score"] for r in rows] == [True, False, False, True]
    assert "Judged 4 case(s)" in err and "True: 2, False: 2" in err


def test_judge_json_is_one_document(env: Env) -> None:
    env.created()
    env.run("align", env.feedback)
    code, out, err = env.run("judge", env.test, "--json")
    assert code == EXIT_OK and err == ""
    doc = json.loads(out)  # one document, not lines
    assert (doc["n"], doc["scores"], doc["failed"]) == (4, {"True": 2, "False": 2}, 0)
    assert [r["id"] for r in doc["results"]] == ["t1", "t2", "t3", "t4"]
    out_path = env.tmp / "results.jsonl"
    code, out, _ = env.run("judge", env.test, "--json", "-o", str(out_path))
    assert json.loads(out)["output"] == str(out_path)
    assert "results" not in json.loads(out) and len(out_path.read_text().splitlines()) == 4


def test_judge_needs_a_case(env: Env) -> None:
    env.created()
    assert "give a case to judge" in env.run("judge")[2]
    assert "not both" in env.run("judge", env.test, "--inputs", "x")[2]
    (env.tmp / "c.jsonl").write_text('{"outputs": "x"}\n')
    assert "c.jsonl:1: a case needs 'inputs'" in env.run("judge", str(env.tmp / "c.jsonl"))[2]


def test_failed_judgments_are_reported_per_case(env: Env) -> None:
    env.created()
    env.responder.judge_rule = lambda case, memory: (
        RuntimeError("model down") if "late" in case else {"rationale": "ok", "score": True}
    )
    code, out, err = env.run("judge", env.test)
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == EXIT_FAILED
    assert rows[1] == {"id": "t2", "error": "RuntimeError: model down"}
    assert rows[0]["score"] is True and "1 judgment(s) failed" in err


def test_a_server_that_cannot_be_reached_is_named(env: Env) -> None:
    import socket

    from langchain_openai import ChatOpenAI

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"

    def offline(cfg: JudgeFile) -> Models:
        return Models(ChatOpenAI(model="m", base_url=url, api_key="k", max_retries=0),
                      env.embeddings)  # fmt: skip

    assert env.run("create", models=offline)[0] == EXIT_OK
    code, out, err = env.run("judge", "--inputs", "hi", "--outputs", "hello", models=offline)
    assert code == EXIT_FAILED
    assert f"chat model at {url}" in json.loads(out)["error"]
    assert f"ConnectionError: Connection error. (chat model at {url}" in err


# -- evaluate ----------------------------------------------------------------------------------


def test_evaluate_before_and_after_alignment(env: Env) -> None:
    env.created()
    code, out, _ = env.run("evaluate", env.test)
    assert code == EXIT_OK and "accuracy        75.0%" in out
    assert "disagreements (1, first 5)" in out and "t3: human False, judge True" in out
    assert "human: Cold." in out
    assert "0 embedding call(s)" in out  # an empty memory: nothing to retrieve, no embedding
    env.run("align", env.feedback)
    code, out, _ = env.run("evaluate", env.test, "--json")
    summary = json.loads(out)
    assert summary["accuracy"] == 1.0 and summary["n"] == 4 and summary["llm_calls"] == 4
    assert summary["embedding_calls"] == 1  # the 4 cases, embedded in one batch call


def test_evaluate_writes_the_full_report(env: Env) -> None:
    env.created()
    path = env.tmp / "report.json"
    code, out, _ = env.run("evaluate", env.test, "--output", str(path), "--progress")
    report = json.loads(path.read_text())
    assert code == EXIT_OK and report["n"] == 4 and len(report["cases"]) == 4
    assert report["confusion"]["labels"] == [False, True]
    assert "confusion (rows: human, columns: judge)" in out


# -- unalign -----------------------------------------------------------------------------------


def test_unalign_removes_feedback_and_its_guidelines(env: Env) -> None:
    env.created()
    env.run("align", env.feedback)
    code, out, err = env.run("unalign", "sweater")
    assert code == EXIT_OK and "Removed 1 feedback item(s)" in out, err
    summary = memory_summary(env.tmp / "mem")
    assert all("sweater" not in g["source_ids"] for g in summary["guidelines"])
    assert summary["counts"]["feedback"] == 2


def test_unalign_ids_from_a_file_and_json(env: Env) -> None:
    env.created()
    env.run("align", env.feedback)
    (env.tmp / "ids.txt").write_text("hours\n\nrude\n")
    code, out, _ = env.run("unalign", "--ids-file", str(env.tmp / "ids.txt"), "--json")
    assert code == EXIT_OK and json.loads(out)["removed"] == ["hours", "rude"]


def test_unalign_unknown_ids_removes_nothing(env: Env) -> None:
    env.created()
    env.run("align", env.feedback)
    code, _, err = env.run("unalign", "sweater", "nope")
    assert code == EXIT_USAGE and "unknown feedback id(s): 'nope'" in err
    assert memory_summary(env.tmp / "mem")["counts"]["feedback"] == 3
    assert "give the feedback ids" in env.run("unalign")[2]


# -- show --------------------------------------------------------------------------------------


def test_show_needs_no_model(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    env.created()
    env.run("align", env.feedback)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    def no_models(cfg: JudgeFile) -> Models:
        raise AssertionError("show must not build models")

    code, out, _ = env.run("show", "--feedback", "--history", "1", models=no_models)
    assert code == EXIT_OK and "History (latest 1 of" in out
    assert "rude: False by ana  Dismissive." in out
    # Only a memory folder, no judge file at all:
    env.capsys.readouterr()
    code = main(["show", "--memory", str(env.tmp / "mem"), "--json", "--history", "-1"])
    info = json.loads(env.capsys.readouterr().out)
    assert code == EXIT_OK and info["config"]["name"] == "helpfulness"
    assert info["counts"] == {"feedback": 3, "episodes": 3, "guidelines": 3, "history": 1}
    assert {g["source_ids"][0] for g in info["guidelines"]} == {"hours", "rude", "sweater"}
    assert info["embeddings"].startswith("fakes.HashEmbeddings")


def test_show_an_empty_or_missing_memory(env: Env) -> None:
    env.created()
    code, out, _ = env.run("show", "--history", "0")
    assert code == EXIT_OK and "(none yet" in out and "History" not in out
    code, _, err = env.run("show", "--memory", str(env.tmp / "nothing"))
    assert code == EXIT_USAGE and "no MemAlign memory here" in err


# -- rules -------------------------------------------------------------------------------------


def test_rules_round_trip(env: Env) -> None:
    env.created()
    env.run("align", env.feedback)
    code, out, _ = env.run(
        "rules", "add", "Queries must read the certified views.", "--author", "dana"
    )
    assert code == EXIT_OK and out.startswith("Added g-")
    added = out.split()[1].rstrip(":")
    info = json.loads(env.run("rules", "list", "--json")[1])
    hours = next(r["id"] for r in info["rules"] if r["source_ids"] == ["hours"])
    code, out, _ = env.run("rules", "edit", hours, "Answer the question asked.", "--author", "ana")
    assert code == EXIT_OK and "Edited" in out
    assert env.run("rules", "pin", added, "--author", "dana")[0] == EXIT_OK
    rude = next(r["id"] for r in info["rules"] if r["source_ids"] == ["rude"])
    code, out, _ = env.run("rules", "reject", rude, "--reason", "too broad", "--author", "dana")
    assert code == EXIT_OK and out.startswith(f"Rejected {rude}")

    def no_models(cfg: JudgeFile) -> Models:
        raise AssertionError("rules list must not build models")

    code, out, _ = env.run("rules", "list", "--rejected", "--history", models=no_models)
    assert code == EXIT_OK
    assert f"{added}  [pinned by dana]\n  Queries must read the certified views.\n" in out
    assert "  stated by dana\n" in out
    assert f"{hours}  [edited by ana]\n  Answer the question asked.\n  from feedback hours" in out
    assert f"{rude}  rejected by dana at " in out and ": too broad" in out
    assert "dana pin " + added in out and "ana edit " + hours in out
    info = json.loads(env.run("rules", "list", "--json")[1])
    assert {r["id"]: r["pinned"] for r in info["rules"]}[added] is True
    assert [r["id"] for r in info["rejected"]] == [rude]


def test_rules_check_is_written_tested_and_listed(env: Env) -> None:
    env.created()
    added = env.run("rules", "add", "Say sorry to upset customers.", "--author", "dana")[1]
    rule = added.split()[1].rstrip(":")
    code, out, err = env.run(
        "rules", "check", rule, "--applies", "Is the customer upset?",
        "--broken", "Does the reply contain the word 'sorry'?", "--broken-when", "no",
        "--consequence", "false", "--author", "dana",
    )  # fmt: skip
    assert code == EXIT_OK, err
    assert out.startswith(f"Checked {rule}: applies if yes to: Is the customer upset?")
    code, _, err = env.run(
        "rules", "check", rule, "--broken", "Q?", "--consequence", "maybe", "--author", "dana"
    )
    assert code == EXIT_USAGE and "not on the judge's scale" in err and "nothing changed" in err
    env.run("align", env.feedback)  # tests the expert's check on the experts' cases
    code, out, _ = env.run("rules", "list")
    assert code == EXIT_OK
    block = out.split(rule, 1)[1].split("\ng-", 1)[0]
    assert "check (written by dana): applies if yes to: Is the customer upset?" in block
    assert "broken if no to: Does the reply contain the word 'sorry'?; then false" in block
    assert "test: agrees with the experts on " in block
    info = json.loads(env.run("rules", "list", "--json")[1])
    check = next(r["check"] for r in info["rules"] if r["id"] == rule)
    assert check["author"] == "dana" and check["test"]["counted"] >= 1
    assert env.run("rules", "uncheck", rule, "--author", "dana")[0] == EXIT_OK
    assert "check (written" not in env.run("rules", "list")[1]


def test_rules_errors_change_nothing(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    env.created()
    monkeypatch.delenv("MEMALIGN_AUTHOR", raising=False)
    code, _, err = env.run("rules", "add", "A rule.")
    assert code == EXIT_USAGE and "--author NAME" in err
    code, _, err = env.run("rules", "pin", "g-nope", "--author", "dana")
    assert code == EXIT_USAGE and "unknown rule id 'g-nope'" in err and "nothing changed" in err
    assert env.run("rules", "reject", "g-nope", "--author", "dana")[0] == EXIT_USAGE  # no reason
    monkeypatch.setenv("MEMALIGN_AUTHOR", "dana")
    assert env.run("rules", "add", "A rule.")[0] == EXIT_OK
    code, _, err = env.run("rules", "add", "a rule")
    assert code == EXIT_USAGE and "already says this" in err
    assert env.run("rules", "list")[1].count("stated by dana") == 1


# -- curve -------------------------------------------------------------------------------------


def test_curve_draws_agreement_as_feedback_grows(env: Env) -> None:
    env.created()
    out_json = env.tmp / "curve.json"
    code, out, err = env.run(
        "curve", env.feedback, "--test-file", env.test, "--shards", "0,3",
        "--output", str(out_json), "--progress", "--no-seen",
    )  # fmt: skip
    assert code == EXIT_OK, err
    assert "learning curve [" in err and "2/2" in err
    lines = out.splitlines()
    assert "accuracy on 4 test case(s)" in lines[0]
    assert re.search(r"^\s+0\s+0\.750\s+#+\.+$", out, re.MULTILINE)
    assert re.search(r"^\s+3\s+1\.000\s+#{40}$", out, re.MULTILINE)
    curve = json.loads(out_json.read_text())
    assert curve["shards"] == [0, 3] and curve["n_test"] == 4
    # The judge's own memory folder is not touched.
    assert memory_summary(env.tmp / "mem")["counts"]["feedback"] == 0


def test_curve_splits_one_file_by_default(env: Env) -> None:
    rows = FEEDBACK + TEST
    path = write_jsonl(env.tmp / "all.jsonl", rows)
    code, out, _ = env.run("curve", path, "--json", "--seeds", "0,1")
    curve = json.loads(out)
    assert code == EXIT_OK and curve["n_train"] == 3 and curve["n_test"] == 4
    assert curve["shards"] == [0, 2, 3] and curve["seeds"] == [0, 1]
    assert len(curve["stages"]) == 6


def test_curve_needs_enough_cases(env: Env) -> None:
    path = write_jsonl(env.tmp / "one.jsonl", FEEDBACK[:1])
    code, _, err = env.run("curve", path)
    assert code == EXIT_USAGE and "too few labelled cases" in err


def test_ascii_curve() -> None:
    text = ascii_curve({0: 0.5, 10: 1.0, 20: float("nan")}, width=10)
    assert text.splitlines() == [
        "  feedback   accuracy",
        "         0      0.500  #####.....",
        "        10      1.000  ##########",
        "        20        n/a",
    ]


def test_the_judge_file_sets_every_judge_option(env: Env) -> None:
    from langchain_memalign import JudgeOptions

    # the file's options are JudgeOptions itself: a new option is settable from the file
    assert JudgeFile.model_fields["options"].annotation is JudgeOptions
    env.config.write_text(
        BASE_CONFIG + '[options.retrieval]\nmin_similarity_with_rationale = 0.5\n'
        "reuse_expert_verdicts = false\n"
        '[options.reflection]\nsource_support = "off"\n'
        '[options.prompt]\nverdict_order = "rationale_first"\n[options.validation]\nmode = "all"\n'
    )  # fmt: skip
    assert env.run("create")[0] == EXIT_OK
    options = memory_summary(env.tmp / "mem")["config"]["options"]
    assert options["reflection"]["source_support"] is None  # "off"
    assert options["retrieval"]["min_similarity_with_rationale"] == 0.5
    assert options["prompt"]["verdict_order"] == "rationale_first"
    assert options["validation"]["mode"] == "all"
    assert options["retrieval"]["reuse_expert_verdicts"] is False
    assert options["retrieval"]["min_similarity"] == 0.9  # unset: the default on every scale
    env.config.write_text(CONFIG.replace('"bool"', "[1, 5]").replace('"mem"', '"mem5"'))
    assert env.run("create")[0] == EXIT_OK
    retrieval = memory_summary(env.tmp / "mem5")["config"]["options"]["retrieval"]
    # unset on a numeric scale: near duplicates only, with or without a rationale
    assert retrieval["min_similarity"] == 0.9
    assert retrieval["min_similarity_with_rationale"] == 0.9
    env.config.write_text(CONFIG.replace('"mem"', '"memb"'))
    assert env.run("create")[0] == EXIT_OK
    # unset on a bool scale: the same floor
    retrieval = memory_summary(env.tmp / "memb")["config"]["options"]["retrieval"]
    assert retrieval["min_similarity_with_rationale"] == 0.9
    env.config.write_text(CONFIG + '[options.prompt]\nverdict_order = "sometimes"\n')
    code, _, err = env.run("create")
    assert code == EXIT_USAGE and "options.prompt.verdict_order" in err
    # the benchmarks' ablations are no options (langchain_memalign/_ablation.py)
    env.config.write_text(CONFIG + '[options.prompt]\nlayout = "checklist"\n')
    code, _, err = env.run("create")
    assert code == EXIT_USAGE and "options.prompt.layout: unknown key" in err
    env.config.write_text(BASE_CONFIG + '[options.validation]\nmde = "all"\n')
    code, _, err = env.run("create")
    assert code == EXIT_USAGE and "options.validation.mde: unknown key" in err
    assert "known keys: mode, max_calls" in err


def test_a_flat_option_key_in_the_judge_file_is_an_error_naming_its_place(env: Env) -> None:
    env.config.write_text(
        CONFIG + 'judge_prompt = "checklist"\nreuse_expert_verdicts = false\nmax_retries = 3\n'
        'reflection = "pairs"\n'
    )
    code, _, err = env.run("create")
    assert code == EXIT_USAGE, err
    assert "judge_prompt: unknown key" in err  # an ablation's flat name: no option now
    assert (
        "reuse_expert_verdicts: unknown option; did you mean "
        "options.retrieval.reuse_expert_verdicts?" in err
    )
    assert "max_retries: unknown option; did you mean options.max_retries?" in err
    assert "reflection: unknown option; did you mean options.reflection.mode?" in err
    assert not (env.tmp / "mem").exists()  # nothing was created
    # in the options table, a flat name is named with its place in that table
    env.config.write_text(BASE_CONFIG + '[options]\nvalidate_guidelines = "all"\n')
    code, _, err = env.run("create")
    assert code == EXIT_USAGE
    assert "options: unknown option 'validate_guidelines'; did you mean validation.mode?" in err


# -- judge files and models --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (CONFIG + "colour = 'red'\n", "colour: unknown key (known keys: name, instructions"),
        (CONFIG.replace('scale = "bool"', 'scale = "sometimes"'), "scale: Value error"),
        (CONFIG.replace("k = 3", "k = -1"), None),
        ('name = "x"\n', "`instructions` (the judge prompt) is required"),
        ("name = \n", "invalid TOML"),
        (CONFIG.replace('name = "helpfulness"\n', ""), "name: Field required"),
    ],
)
def test_judge_file_errors_are_clear(env: Env, content: str, message: str | None) -> None:
    env.config.write_text(content)
    code, _, err = env.run("create")
    assert code == EXIT_USAGE, err
    assert err.startswith("memalign: error: ")
    if message:
        assert message in err


def test_missing_judge_file_says_how_to_start(env: Env) -> None:
    env.capsys.readouterr()
    code = main(["create", "-c", str(env.tmp / "nope.toml")], models=env.factory)
    err = env.capsys.readouterr().err
    assert code == EXIT_USAGE and "memalign create --template" in err


def test_yaml_judge_file_with_instructions_file(env: Env) -> None:
    (env.tmp / "prompt.txt").write_text("Helpful?\n{inputs}\n{outputs}")
    path = env.tmp / "judge.yaml"
    path.write_text(
        "name: tone\nscale: [Excellent, Acceptable, Bad]\ninstructions_file: prompt.txt\n"
        "model: openai:gpt-4.1-mini\nembeddings: openai:text-embedding-3-small\n"
    )
    cfg = JudgeFile.read(path)
    assert cfg.scale.choices == ("Excellent", "Acceptable", "Bad")
    assert (
        cfg.prompt().startswith("Helpful?")
        and cfg.memory_path() == env.tmp / "memalign_memory/tone"
    )
    env.capsys.readouterr()
    assert main(["create", "-c", str(path)], models=env.factory) == EXIT_OK
    assert env.built[-1].name == "tone"
    path.write_text("name: [unclosed\n")
    with pytest.raises(CLIError, match="invalid YAML"):
        JudgeFile.read(path)


def test_json_judge_file_and_both_instruction_sources(tmp_path: Path) -> None:
    path = tmp_path / "judge.json"
    path.write_text(json.dumps({"name": "x", "instructions": "a", "instructions_file": "b"}))
    with pytest.raises(CLIError, match="not both"):
        JudgeFile.read(path).prompt()
    path.write_text(json.dumps({"name": "x", "instructions_file": "missing.txt"}))
    with pytest.raises(CLIError, match="cannot read instructions_file"):
        JudgeFile.read(path).prompt()


def test_default_models_on_an_openai_compatible_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    path = tmp_path / "judge.toml"
    path.write_text(
        CONFIG.replace("openai:gpt-4.1-mini", "local")
        + 'base_url = "http://127.0.0.1:8013/v1"\n'
        + 'embeddings_base_url = "http://127.0.0.1:8012/v1"\n'
        + 'reflection_model = "openai:bigger"\n'
    )
    models = default_models(JudgeFile.read(path))
    assert models.chat.model_name == "local"  # type: ignore[attr-defined]
    assert str(models.chat.openai_api_base) == "http://127.0.0.1:8013/v1"  # type: ignore[attr-defined]
    assert models.embeddings.openai_api_base == "http://127.0.0.1:8012/v1"  # type: ignore[attr-defined]
    assert models.reflection is not None
    assert models.reflection.model_name == "bigger"  # type: ignore[attr-defined]


def test_default_models_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    path = tmp_path / "judge.toml"
    path.write_text(CONFIG)
    with pytest.raises(CLIError, match="Set OPENAI_API_KEY, or base_url"):
        default_models(JudgeFile.read(path))
    path.write_text(CONFIG.replace('model = "openai:gpt-4.1-mini"\n', ""))
    with pytest.raises(CLIError, match="model not set"):
        default_models(JudgeFile.read(path))
    path.write_text(CONFIG + 'base_url = "http://x/v1"\n')
    path.write_text(path.read_text().replace("openai:gpt-4.1-mini", "anthropic:claude"))
    with pytest.raises(CLIError, match="OpenAI-compatible"):
        default_models(JudgeFile.read(path))


def test_models_hook_from_the_command_line(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_models.py").write_text(
        "from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel\n"
        "def build(cfg):\n"
        "    return ScriptedChatModel(responder=RoleResponder()), HashEmbeddings()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    env.capsys.readouterr()
    argv = ["create", "-c", str(env.config), "--models", "my_models:build"]
    assert main(argv) == EXIT_OK
    assert main(["create", "-c", str(env.config), "--models", "my_models:nope"]) == EXIT_USAGE
    assert "cannot import it" in env.capsys.readouterr().err
    monkeypatch.setenv("MEMALIGN_MODELS", "my_models:build")
    assert main(["create", "-c", str(env.config)]) == EXIT_OK


def test_unexpected_errors_are_short_unless_debugging(env: Env) -> None:
    env.created()

    def broken(cfg: JudgeFile) -> Models:
        raise RuntimeError("boom")

    code, _, err = env.run("judge", "--inputs", "x", models=broken)
    assert code == EXIT_FAILED and "RuntimeError: boom" in err and "--debug" in err
    with pytest.raises(RuntimeError, match="boom"):
        main(["judge", "--inputs", "x", "-c", str(env.config), "--debug"], models=broken)


# -- progress ----------------------------------------------------------------------------------


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_draws_on_a_terminal() -> None:
    tty = Tty()
    with Progress(4, "work", stream=tty) as bar:
        bar.advance(2)
        bar.advance(5)  # clamped
    text = tty.getvalue()
    assert "work [###############...............] 2/4 50%" in text
    assert text.endswith("4/4 100% 0:00\n")
    quick = io.StringIO()  # not a terminal, and done within the interval: nothing to say
    with Progress(4, "work", stream=quick) as bar:
        bar.advance()
    assert quick.getvalue() == ""
    off = Tty()
    with Progress(4, "work", stream=off, enabled=False) as bar:
        bar.advance()
    assert off.getvalue() == ""
    empty = Tty()
    Progress(0, "none", stream=empty).close()
    assert "0/0 100%" in empty.getvalue()


def test_progress_in_a_log_is_a_line_now_and_then() -> None:
    log = io.StringIO()
    with Progress(4, "aligning", stream=log, interval=0.05) as bar:
        bar.advance()
        # A long step: the log hears from it meanwhile (waited for, not slept: a loaded
        # machine may wake the ticking thread late).
        deadline = time.monotonic() + 10
        while not log.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
    lines = log.getvalue().splitlines()
    assert len(lines) >= 2 and "\r" not in log.getvalue()
    assert lines[0].startswith("aligning: 1/4 (25%) 0:00")
    assert lines[-1].startswith("aligning: 1/4 (25%)")  # the last word, at close


# -- the docs stay in step with the parser -----------------------------------------------------


def _options(parser: Any) -> tuple[dict[str, set[str]], set[str]]:
    sub = next(a for a in parser._actions if a.dest == "command")
    specific: dict[str, set[str]] = {}
    common: set[str] = set()
    for name, p in sub.choices.items():
        shared = {
            a.dest
            for g in p._action_groups
            if g.title == "common options"
            for a in g._group_actions
        }
        for a in p._actions:
            long = {o for o in a.option_strings if o.startswith("--") and o != "--help"}
            (common if a.dest in shared else specific.setdefault(name, set())).update(long)
    return specific, common


def test_cli_reference_documents_every_command_and_option() -> None:
    doc = (ROOT / "docs" / "cli.md").read_text()
    specific, common = _options(build_parser())

    def section(title: str) -> str:
        parts = doc.split(f"\n## {title}\n")
        assert len(parts) == 2, f"docs/cli.md has no section {title!r}"
        return parts[1].split("\n## ")[0]

    missing = sorted(o for o in common if f"`{o}" not in section("Common options"))
    assert not missing, f"docs/cli.md: common options {missing} are not documented"
    for command, options in specific.items():
        body = section(f"`memalign {command}`")
        missing = sorted(o for o in options if f"`{o}" not in body)
        assert not missing, f"docs/cli.md: {command} does not document {missing}"


def test_show_names_the_embedding_model_in_use() -> None:
    from langchain_memalign.cli.show import embedding_model
    from langchain_memalign.models import embeddings_fingerprint, openai_compatible

    _, emb = openai_compatible("local", "minilm", base_url="http://localhost:8000/v1")
    fingerprint = embeddings_fingerprint(emb)
    assert "text-embedding-ada-002" in fingerprint  # the client's unused default deployment
    assert embedding_model(fingerprint) == "minilm (langchain_openai.OpenAIEmbeddings)"
    assert embedding_model("fakes.HashEmbeddings") == "fakes.HashEmbeddings"
    assert embedding_model(None) is None


@pytest.mark.filterwarnings(
    "ignore::langsmith._internal._beta_decorator.LangSmithDeprecationWarning",
    "ignore::langsmith._internal._beta_decorator.LangSmithBetaWarning",
)
def test_watch_judges_new_runs_once_and_resumes(env: Env, langsmith: Any) -> None:
    from langsmith import Client

    client = Client(api_url=langsmith.url, api_key="test", auto_batch_tracing=False)
    client.create_project("support-bot")

    def ended_run(question: str) -> None:
        client.create_run(
            "agent", {"question": question}, "chain", id=uuid.uuid4(),
            project_name="support-bot", outputs={"answer": "Yes."},
            end_time=dt.datetime.now(dt.UTC),
        )  # fmt: skip

    for question in ("Where is my order?", "Can I return this?", "Do you ship abroad?"):
        ended_run(question)
    env.created()
    code, out, err = env.run(
        "watch", "--langsmith-project", "support-bot", "--once", "--review-limit", "1"
    )
    assert code == EXIT_OK, err
    assert "3 of 3 runs judged (0 already" in out and "1 sent for review" in out
    calls = len(env.model.calls)
    code, out, err = env.run("watch", "--langsmith-project", "support-bot", "--once", "--json")
    cycle = json.loads(out)
    # The next cycle reads on from where the last stopped (its cursor, in the memory).
    assert code == EXIT_OK and cycle["verdicts"] == [] and cycle["considered"] == 0
    assert cycle["left"] == 0 and len(env.model.calls) == calls

    def evaluators() -> bool:
        return any(langsmith.sessions[r["session_id"]]["name"] == "evaluators"
                   for r in langsmith.runs.values())  # fmt: skip

    # The judge's own calls are untraced, unless --trace asks for them.
    assert not evaluators()
    ended_run("Is it gift-wrapped?")
    code, out, err = env.run("watch", "--langsmith-project", "support-bot", "--once", "--trace")
    assert code == EXIT_OK and "1 of 1 runs judged (0 already" in out, err
    assert langsmith.wait_for(evaluators, timeout=30)
    code, _, err = env.run("watch", "--langsmith-project", "support-bot", "--sampling-rate", "2")
    assert code == EXIT_USAGE and "sampling_rate must be within 0 and 1" in err


@pytest.mark.filterwarnings(
    "ignore::langsmith._internal._beta_decorator.LangSmithDeprecationWarning",
    "ignore::langsmith._internal._beta_decorator.LangSmithBetaWarning",
)
def test_watch_since_backfills_from_a_date_or_a_span(env: Env, langsmith: Any) -> None:
    project = langsmith.add_project("support-bot")
    three_days_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=3)
    langsmith.add_run(
        session_id=project["id"], inputs={"question": "Where is my order?"},
        outputs={"answer": "Shipped."}, start_time=three_days_ago.isoformat(),
        end_time=(three_days_ago + dt.timedelta(seconds=2)).isoformat(),
    )  # fmt: skip
    env.created()
    code, out, err = env.run("watch", "--langsmith-project", "support-bot", "--once")
    assert code == EXIT_OK and "0 of 0 runs judged" in out, err  # a day back by default
    code, out, err = env.run("watch", "--langsmith-project", "support-bot", "--once",
                             "--since", "7d")  # fmt: skip
    assert code == EXIT_OK and "1 of 1 runs judged" in out, err
    day = (three_days_ago - dt.timedelta(days=1)).date().isoformat()
    code, out, err = env.run("watch", "--langsmith-project", "support-bot", "--once",
                             "--since", day, "--json")  # fmt: skip
    cycle = json.loads(out)  # a new --since restarts reading there: judged already
    assert code == EXIT_OK and (cycle["considered"], cycle["already_judged"]) == (1, 1)
    code, _, err = env.run("watch", "--langsmith-project", "support-bot", "--since", "soon")
    assert code == EXIT_USAGE and "'soon' is neither a date nor a span" in err


def test_export_langsmith_creates_the_evaluator_once(env: Env, langsmith: Any) -> None:
    langsmith.add_project("support-bot")
    env.created()
    assert env.run("align", env.feedback)[0] == EXIT_OK
    code, out, err = env.run(
        "export", "langsmith", "--langsmith-project", "support-bot", "--sampling-rate", "0.2"
    )
    assert code == EXIT_OK, err
    assert "created prompt, evaluator, rule" in out and f"{len(FEEDBACK)} episodes" in out
    (rule,) = langsmith.platform.rules.values()
    assert rule["sampling_rate"] == 0.2 and rule["display_name"] == "memalign-helpfulness"
    code, out, err = env.run(
        "export", "langsmith", "--langsmith-project", "support-bot", "--sampling-rate", "0.2",
        "--json",
    )  # fmt: skip
    report = json.loads(out)
    assert code == EXIT_OK and report["changed"] is False and report["rule_id"] == rule["id"]
    code, _, err = env.run(
        "export", "langsmith", "--langsmith-project", "support-bot", "--sampling-rate", "2"
    )
    assert code == EXIT_USAGE and "sampling_rate must be from 0 to 1" in err


def test_export_langsmith_says_what_to_fix_without_a_key_or_with_an_unknown_project(
    env: Env, langsmith: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    langsmith.add_project("support-bot")
    env.created()
    before = len(langsmith.requests)
    # A typo in the project's name is the user's to fix (2), named; nothing is written.
    code, _, err = env.run("export", "langsmith", "--langsmith-project", "nope")
    assert code == EXIT_USAGE and "LangSmith has no project named 'nope'" in err, err
    assert not langsmith.platform.rules and not langsmith.datasets
    assert all(r.method == "GET" for r in langsmith.requests[before:])
    # No key: refused before any call, naming the endpoint it would have called.
    for name in ("LANGSMITH_API_KEY", "LANGCHAIN_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    before = len(langsmith.requests)
    code, _, err = env.run("export", "langsmith", "--langsmith-project", "support-bot")
    assert code == EXIT_USAGE and "no LangSmith API key: set LANGSMITH_API_KEY" in err, err
    assert "LangSmithConnectionError" not in err and langsmith.url in err
    # None of this call's: a request of the first call's client may still land (its
    # background thread, on a loaded machine), but it carries that call's key and project.
    late = langsmith.requests[before:]
    assert not any(not r.headers.get("x-api-key") or "support-bot" in str(r.query) for r in late)
    # An endpoint that does not answer is a failed export (1), named.
    monkeypatch.setenv("LANGSMITH_API_KEY", "test")
    monkeypatch.setenv("LANGSMITH_ENDPOINT", "http://127.0.0.1:9")
    code, _, err = env.run("export", "langsmith", "--langsmith-project", "support-bot")
    assert code == EXIT_FAILED and "cannot export to LangSmith project 'support-bot'" in err
    code, out, _ = env.run("export", "langsmith", "--help")
    assert "Exit status:" in out and "no LangSmith API key, an unknown project" in out


@pytest.mark.filterwarnings(
    "ignore::langsmith._internal._beta_decorator.LangSmithDeprecationWarning",
    "ignore::langsmith._internal._beta_decorator.LangSmithBetaWarning",
)
def test_watch_exits_1_when_a_judgment_failed(env: Env, langsmith: Any) -> None:
    from langsmith import Client

    client = Client(api_url=langsmith.url, api_key="test", auto_batch_tracing=False)
    client.create_project("support-bot")
    for question in ("Where is my order?", "garbled question"):
        client.create_run(
            "agent", {"question": question}, "chain", id=uuid.uuid4(),
            project_name="support-bot", outputs={"answer": "Yes."},
            end_time=dt.datetime.now(dt.UTC),
        )  # fmt: skip

    def garbled(case: str, memory: str) -> Any:
        return "not json at all" if "garbled" in case else empathy_rule(case, memory)

    env.responder.judge_rule = garbled
    env.created()
    code, out, err = env.run("watch", "--langsmith-project", "support-bot", "--once")
    # The other run's verdict is written, and the cycle says what failed: cron notices.
    assert code == EXIT_FAILED, err
    assert "1 of 2 runs judged" in out and "; 1 failed; " in out
    code, out, _ = env.run("watch", "--langsmith-project", "support-bot", "--once", "--json")
    assert code == EXIT_FAILED and len(json.loads(out)["failed"]) == 1
    env.responder.judge_rule = empathy_rule  # the model answers properly now
    code, out, err = env.run("watch", "--langsmith-project", "support-bot", "--once")
    assert code == EXIT_OK and "1 of 1 runs judged (0 already" in out, err  # the retried one
    code, out, _ = env.run("watch", "--help")
    assert "Exit status:" in out and "a judgment or a reflection failed" in out


def test_watch_and_align_say_what_to_fix_without_a_key_or_with_an_unknown_project(
    env: Env, langsmith: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.created()
    code, _, err = env.run("watch", "--langsmith-project", "nope", "--once")
    assert code == EXIT_USAGE and "no project named 'nope'" in err, err
    code, _, err = env.run("align", "--langsmith-project", "nope")
    assert code == EXIT_USAGE and "no project named 'nope'" in err, err
    # No key: refused before any call (with the endpoint kept, a call would reach the
    # test server without a key).
    for name in ("LANGSMITH_API_KEY", "LANGCHAIN_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    for argv in (["watch", "--langsmith-project", "support-bot", "--once"],
                 ["align", "--langsmith-project", "support-bot"]):  # fmt: skip
        code, _, err = env.run(*argv)
        assert code == EXIT_USAGE and "no LangSmith API key: set LANGSMITH_API_KEY" in err, err
        assert "LangSmithConnectionError" not in err and langsmith.url in err
    assert all(r.headers.get("x-api-key") for r in langsmith.requests)
    monkeypatch.delenv("LANGSMITH_ENDPOINT")
    code, _, err = env.run("watch", "--langsmith-project", "support-bot", "--once")
    assert code == EXIT_USAGE and "api.smith.langchain.com" in err
