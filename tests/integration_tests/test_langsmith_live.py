"""The LangSmith integration against a real LangSmith (skipped without LANGSMITH_API_KEY).

    LANGSMITH_API_KEY=... pytest tests/integration_tests/test_langsmith_live.py

Only LangSmith is live: the judge runs on scripted models. Everything is created
under unique names (project, dataset, queue, feedback key) and deleted at the end.
Ingestion in LangSmith is asynchronous, so reads are polled for a while.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytestmark = [
    pytest.mark.skipif(
        not os.environ.get("LANGSMITH_API_KEY"), reason="needs LANGSMITH_API_KEY (live LangSmith)"
    ),
    pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning"),
]

_TESTS_DIR = str(Path(__file__).resolve().parents[1])
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

import langsmith  # noqa: E402
from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel  # noqa: E402
from langsmith import Client  # noqa: E402

from langchain_memalign import MemAlignJudge  # noqa: E402
from langchain_memalign.langsmith import (  # noqa: E402
    JudgeAnnotationQueue,
    JudgeRunEvaluator,
    LangSmithFeedbackSource,
    judge_evaluator,
    write_verdicts,
)

T = TypeVar("T")
SUFFIX = uuid.uuid4().hex[:8]
PROJECT = f"memalign-live-{SUFFIX}"
KEY = f"memalign_live_{SUFFIX}"


def eventually(fn: Callable[[], T], ok: Callable[[T], bool], timeout: float = 90.0) -> T:
    """Call `fn` until `ok(result)`, for LangSmith's asynchronous ingestion."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = fn()
        except langsmith.utils.LangSmithNotFoundError:
            if time.monotonic() > deadline:
                raise
        else:
            if ok(result) or time.monotonic() > deadline:
                return result
        time.sleep(3)


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    c = Client()
    yield c
    for cleanup in (
        lambda: c.delete_project(project_name=PROJECT),
        lambda: c.delete_dataset(dataset_name=f"memalign-live-{SUFFIX}"),
        lambda: [
            c.delete_annotation_queue(q.id) for q in c.list_annotation_queues(name=f"{KEY} review")
        ],
        lambda: c.delete_feedback_config(feedback_key=KEY),
    ):
        with contextlib.suppress(Exception):  # best effort: it may never have been created
            cleanup()
    c.close()


@pytest.fixture(scope="module")
def run(client: Client) -> dict[str, Any]:
    project = client.create_project(PROJECT)
    run_id = uuid.uuid4()
    client.create_run(
        "support_bot",
        {"question": "I was charged twice and I'm frustrated!"},
        "chain",
        id=run_id,
        project_name=PROJECT,
        outputs={"answer": "Duplicate charges are refunded in 5-7 days."},
    )
    client.flush()
    return {"id": str(run_id), "project_id": str(project.id)}


def make_judge() -> MemAlignJudge:
    return MemAlignJudge(
        KEY, "Helpful?\n{inputs}\n{outputs}", ScriptedChatModel(responder=RoleResponder()),
        HashEmbeddings(),
    )  # fmt: skip


def test_feedback_sync_queue_and_verdicts_live(client: Client, run: dict[str, Any]) -> None:
    judge = make_judge()
    review = client.create_feedback(
        run["id"],
        KEY,
        score=0,
        comment="Correct but cold: acknowledge the frustration first.",
        session_id=run["project_id"],
    )
    source = LangSmithFeedbackSource(client, project=PROJECT)
    report = eventually(lambda: source.sync(judge), lambda r: bool(r.aligned))
    assert report.aligned == [f"langsmith:{review.id}"]
    fb = judge.get_feedback(f"langsmith:{review.id}")
    assert fb.value is False
    assert fb.inputs == {"question": "I was charged twice and I'm frustrated!"}
    assert source.sync(judge).aligned == []

    # verdicts out, as model feedback linked to the judge's traced run
    [verdict] = write_verdicts(judge, client, runs=[run["id"]])
    assert verdict.feedback_id and verdict.judge_run_id
    written = eventually(
        lambda: client.read_feedback(verdict.feedback_id),  # type: ignore[arg-type]
        lambda f: f is not None,
    )
    assert written.feedback_source is not None and written.feedback_source.type == "model"

    # annotation queue: the judge's rubric, a run sent, completed, pulled
    queue = JudgeAnnotationQueue(judge, client)
    details = client.read_annotation_queue(queue.queue_id)
    assert any(i.get("feedback_key") == KEY for i in details.rubric_items or [])
    sent = queue.send(runs=[run["id"]], skip_reviewed=False)
    assert sent.run_ids == [run["id"]]
    queue.complete([run["id"]])
    pulled = eventually(queue.pull, lambda r: r.listed > 0)
    assert pulled.listed >= 1


def test_evaluate_without_upload_live(client: Client) -> None:
    dataset = client.create_dataset(f"memalign-live-{SUFFIX}")
    client.create_examples(
        dataset_id=dataset.id,
        examples=[
            {"inputs": {"question": "Store hours?"}, "reference_outputs": {"answer": "9 to 5."}}
        ],
    )
    judge = make_judge()
    results = langsmith.evaluate(
        lambda inputs: {"answer": "We are open 9 to 5."},
        data=dataset.name,
        evaluators=[JudgeRunEvaluator(judge), judge_evaluator(judge)],
        upload_results=False,
        client=client,
    )
    rows = list(results)
    assert len(rows) == 1
    found = rows[0]["evaluation_results"]["results"]
    assert [r.key for r in found] == [KEY, KEY] and all(r.score is True for r in found)
