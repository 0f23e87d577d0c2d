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
LOOP_PROJECT = f"memalign-live-loop-{SUFFIX}"
KEY = f"memalign_live_{SUFFIX}"
LOOP_KEY = f"memalign_loop_{SUFFIX}"


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
        lambda: c.delete_project(project_name=LOOP_PROJECT),
        lambda: c.delete_dataset(dataset_name=f"memalign-live-loop-{SUFFIX}"),
        lambda: [
            c.delete_annotation_queue(q.id)
            for q in c.list_annotation_queues(name=f"{LOOP_KEY} review")
        ],
        lambda: c.delete_feedback_config(feedback_key=LOOP_KEY),
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


def make_judge(key: str = KEY) -> MemAlignJudge:
    return MemAlignJudge(
        key, "Helpful?\n{inputs}\n{outputs}", ScriptedChatModel(responder=RoleResponder()),
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


def test_the_whole_loop_live(client: Client) -> None:
    """Queue -> reviews (a correction, two reviewers through one key) -> sync -> evaluate."""
    project = client.create_project(LOOP_PROJECT)
    cases = {
        "cold": ({"question": "I was charged twice!"}, {"answer": "Refunds take 5-7 days."}),
        "warm": ({"question": "Store hours?"}, {"answer": "Happy to help: 9 to 5 daily!"}),
    }
    ids = {name: uuid.uuid4() for name in cases}
    for name, (inputs, outputs) in cases.items():
        client.create_run(name, inputs, "chain", id=ids[name], project_name=LOOP_PROJECT,
                          outputs=outputs)  # fmt: skip
    client.flush()
    judge = make_judge(LOOP_KEY)

    # 1. the queue: the judge's config pinned on its rubric, runs sent with its verdicts
    queue = JudgeAnnotationQueue(judge, client)
    [item] = [
        i
        for i in client.read_annotation_queue(queue.queue_id).rubric_items or []
        if i.get("feedback_key") == LOOP_KEY
    ]
    assert item.get("feedback_config_id") is not None
    sent = eventually(
        lambda: queue.send(project=LOOP_PROJECT, select="all", write_verdicts=True),
        lambda r: len(r.run_ids) == 2,
    )
    verdicts = {v.run_id: v for v in sent.verdicts}

    # 2. reviews: a correction of the judge's verdict, and two reviewers writing
    # through this one API key (a labelling tool), named in source_info
    cold, warm = str(ids["cold"]), str(ids["warm"])
    correction = verdicts[cold].feedback_id
    assert correction is not None
    client.update_feedback(
        correction, correction={"score": 0, "explanation": "Correct but cold: apologize first."}
    )
    for who, score in (("alice", 1), ("bob", 0)):
        client.create_feedback(warm, LOOP_KEY, score=score, comment=f"{who}'s review",
                               session_id=project.id, source_info={"annotator": who})  # fmt: skip
    done = queue.complete([cold, warm])
    assert sorted(done.archived + done.waiting) == sorted([cold, warm])

    # 3. sync: the correction and both reviewers arrive, each reviewer kept
    pulled = eventually(queue.pull, lambda r: len(r.aligned) >= 3)
    assert f"langsmith:{correction}" in pulled.aligned
    lesson = judge.get_feedback(f"langsmith:{correction}")
    assert (lesson.value, lesson.rationale) == (False, "Correct but cold: apologize first.")
    reviewers = {judge.get_feedback(i).annotator for i in pulled.aligned} - {None}
    assert {"alice", "bob"} <= reviewers
    source = LangSmithFeedbackSource(client, project=LOOP_PROJECT, key=LOOP_KEY)
    synced = eventually(lambda: source.sync(judge), lambda r: r.listed >= 3)
    assert synced.listed >= 3

    # 4. evaluate with the aligned judge
    dataset = client.create_dataset(f"memalign-live-loop-{SUFFIX}")
    client.create_examples(
        dataset_id=dataset.id, examples=[{"inputs": cases["cold"][0]}, {"inputs": cases["warm"][0]}]
    )
    results = langsmith.evaluate(
        lambda inputs: {"answer": "Sorry about that! Refunds take 5-7 days."},
        data=dataset.name,
        evaluators=[JudgeRunEvaluator(judge)],
        upload_results=False,
        client=client,
    )
    rows = list(results)
    assert len(rows) == 2
    assert all(r["evaluation_results"]["results"][0].key == LOOP_KEY for r in rows)
