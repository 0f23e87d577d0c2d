"""Drive the real ``langsmith.Client`` against the in-process fake LangSmith server.

Import note: ``langsmith_server`` lives in ``tests/`` (no ``__init__.py``), so this
module puts ``tests/`` on ``sys.path`` itself; a conftest that already does so makes
the insert a no-op. Everything is offline: every client gets ``api_url=server.url``.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

_TESTS_DIR = str(Path(__file__).resolve().parents[2])
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

import langsmith  # noqa: E402
from langsmith import Client, schemas, traceable  # noqa: E402
from langsmith import utils as ls_utils  # noqa: E402
from langsmith_fixtures import connect  # noqa: E402
from langsmith_server import HTTPError, LangSmithTestServer  # noqa: E402
from urllib3.util.retry import Retry  # noqa: E402

pytest_plugins = ["langsmith_fixtures"]
pytestmark = pytest.mark.filterwarnings(
    # the legacy sync run / queue methods are deprecated in langsmith 0.15
    "ignore::langsmith._internal._beta_decorator.LangSmithDeprecationWarning",
    "ignore::langsmith._internal._beta_decorator.LangSmithBetaWarning",
)


@pytest.fixture
def server(langsmith_env: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[LangSmithTestServer]:
    monkeypatch.setenv("LANGSMITH_TRACING", "false")
    with LangSmithTestServer(runs_page_size=2) as srv:
        # any Client built from the environment also lands on the fake server
        monkeypatch.setenv("LANGSMITH_ENDPOINT", srv.url)
        monkeypatch.setenv("LANGSMITH_API_KEY", "test")
        yield srv


def _make_client(server: LangSmithTestServer, **kwargs: object) -> Client:
    return Client(api_url=server.url, api_key="test", **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def client(server: LangSmithTestServer) -> Iterator[Client]:
    """Default client: background batching on (runs go through /runs/multipart)."""
    c = _make_client(server)
    yield c
    c.close(timeout=5)


@pytest.fixture
def sync_client(server: LangSmithTestServer) -> Iterator[Client]:
    """Client without the background thread: create_run/update_run POST/PATCH directly."""
    c = _make_client(server, auto_batch_tracing=False)
    yield c
    c.close(timeout=5)


# -- projects -----------------------------------------------------------------


def test_projects(sync_client: Client, server: LangSmithTestServer) -> None:
    project = sync_client.create_project("proj", description="d", metadata={"a": 1})
    assert sync_client.read_project(project_name="proj").id == project.id
    by_id = sync_client.read_project(project_id=str(project.id))
    assert by_id.name == "proj"
    assert by_id.metadata == {"a": 1}
    assert [p.id for p in sync_client.list_projects(name="proj")] == [project.id]
    assert sync_client.has_project("proj")
    assert not sync_client.has_project("nope")
    with pytest.raises(ls_utils.LangSmithConflictError):
        sync_client.create_project("proj")
    assert sync_client.create_project("proj", upsert=True).id == project.id
    assert str(project.id) in server.sessions


# -- runs ---------------------------------------------------------------------


def test_runs_direct_create_update_read_and_cursor_pages(
    sync_client: Client, server: LangSmithTestServer
) -> None:
    project = sync_client.create_project("runs")
    ids = [uuid.uuid4() for _ in range(5)]
    for i, run_id in enumerate(ids):
        sync_client.create_run(
            f"run-{i}", {"i": i}, "chain", id=run_id, project_name="runs", tags=["t"]
        )
    sync_client.update_run(ids[0], outputs={"answer": 42}, error=None)
    assert len(server.requests_to("/runs", "POST")) == 5  # plain POST /runs, no batching

    run = sync_client.read_run(ids[0])
    assert run.outputs == {"answer": 42}
    assert run.session_id == project.id
    assert run.status == "success"

    before = len(server.requests_to("/runs/query"))
    listed = list(sync_client.list_runs(project_name="runs"))
    assert {r.id for r in listed} == set(ids)
    assert len(server.requests_to("/runs/query")) - before == 3  # page size 2 -> 3 pages
    cursors = [r.json.get("cursor") for r in server.requests_to("/runs/query")[before:]]
    assert cursors == [None, "2", "4"]

    only_two = list(sync_client.list_runs(run_ids=ids[:2]))
    assert {r.id for r in only_two} == set(ids[:2])
    filtered = list(sync_client.list_runs(project_id=project.id, filter='eq(name, "run-3")'))
    assert [r.id for r in filtered] == [ids[3]]


def test_run_queries_order_and_select_as_documented(server: LangSmithTestServer) -> None:
    import datetime as dt

    project = server.add_project("ordered")
    start = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    ids = [
        server.add_run(
            session_id=project["id"], start_time=(start + dt.timedelta(seconds=i)).isoformat()
        )["id"]
        for i in range(6)
    ]
    c = _make_client(server)
    # v1: newest first unless order="asc" (the SDK's read_thread passes it); only what is
    # selected comes back.
    assert [str(r.id) for r in c.list_runs(project_id=project["id"])] == ids[::-1]
    asc = list(c.list_runs(project_id=project["id"], order="asc",
                           select=["id", "name", "run_type", "start_time"]))  # fmt: skip
    assert [str(r.id) for r in asc] == ids and asc[0].outputs is None and asc[0].inputs == {}
    with pytest.raises(Exception, match="422 Client Error"):
        list(c.list_runs(project_id=project["id"], order="up"))
    # v2: no order parameter; "oldest" serves the opposite of what the service is seen to
    # do, "unordered" one unrelated to time, stable over pages.
    api = c._get_langsmith_api_sync()
    window = {"min_start_time": start, "max_start_time": start + dt.timedelta(minutes=1)}

    def v2() -> list[str]:
        return [str(r.id) for r in api.runs.query_v2(project_ids=[project["id"]], **window)]

    assert v2() == ids[::-1]
    server.v2_run_order = "oldest"
    assert v2() == ids
    server.v2_run_order = "unordered"
    assert sorted(v2()) == sorted(ids) and v2() not in (ids, ids[::-1]) and v2() == v2()
    with pytest.raises(Exception, match="page_size must be between 1 and 1000"):
        list(api.runs.query_v2(project_ids=[project["id"]], page_size=5000, **window))
    with pytest.raises(ValueError, match="unknown v2_run_order"):
        LangSmithTestServer(v2_run_order="random")


def test_traced_runs_go_through_multipart_after_flush(
    client: Client, server: LangSmithTestServer
) -> None:
    @traceable(name="child")
    def child(x: int) -> int:
        return x * 2

    @traceable(name="parent")
    def parent(x: int) -> int:
        return child(x) + 1

    with langsmith.tracing_context(enabled=True, client=client, project_name="traced"):
        assert parent(3) == 7
    client.flush()

    assert server.requests_to("/runs/multipart", "POST")
    by_name = {r["name"]: r for r in server.runs.values()}
    assert set(by_name) == {"parent", "child"}
    assert by_name["child"]["parent_run_id"] == by_name["parent"]["id"]
    assert by_name["parent"]["outputs"] == {"output": 7}
    assert server.sessions[by_name["parent"]["session_id"]]["name"] == "traced"
    root = next(iter(client.list_runs(project_name="traced", is_root=True)))
    assert root.name == "parent"


def test_batch_endpoint_when_multipart_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGSMITH_DISABLE_RUN_COMPRESSION", "true")
    with LangSmithTestServer(use_multipart_endpoint=False) as server:
        c = _make_client(server)
        run_id = uuid.uuid4()
        c.batch_ingest_runs(
            create=[
                {
                    "id": run_id,
                    "trace_id": run_id,
                    "dotted_order": f"20240101T000000000000Z{run_id}",
                    "name": "batched",
                    "run_type": "chain",
                    "inputs": {"x": 1},
                    "session_name": "b",
                }
            ]
        )
        c.close(timeout=5)
        assert server.requests_to("/runs/batch", "POST")
        assert server.runs[str(run_id)]["name"] == "batched"


# -- feedback -----------------------------------------------------------------


def test_feedback_create_read_update_delete(
    sync_client: Client, server: LangSmithTestServer
) -> None:
    project = sync_client.create_project("fb")
    run_id = uuid.uuid4()
    sync_client.create_run("r", {"q": 1}, "llm", id=run_id, project_name="fb")
    created = sync_client.create_feedback(
        run_id,
        "quality",
        score=0.5,
        value="ok",
        comment="meh",
        correction={"better": "answer"},
        session_id=project.id,
        source_info={"judge": "human"},
    )
    stored = sync_client.read_feedback(created.id)
    assert stored.run_id == run_id
    # only what was stored: the project (filed under it), no start time or trace id
    assert stored.trace_id is None and stored.start_time is None
    assert stored.session_id == project.id
    assert (stored.key, stored.score, stored.value, stored.comment) == (
        "quality",
        0.5,
        "ok",
        "meh",
    )
    assert stored.correction == {"better": "answer"}
    assert stored.feedback_source is not None
    assert stored.feedback_source.type == "api"
    assert stored.feedback_source.metadata == {"judge": "human"}
    assert stored.created_at is not None and stored.modified_at is not None

    sync_client.update_feedback(created.id, score=1.0, comment=None)
    updated = sync_client.read_feedback(created.id)
    assert updated.score == 1.0
    assert updated.comment is None
    assert updated.value == "ok"  # untouched
    assert updated.modified_at >= stored.modified_at

    sync_client.delete_feedback(created.id)
    assert str(created.id) not in server.feedback
    with pytest.raises(ls_utils.LangSmithNotFoundError):
        sync_client.read_feedback(created.id)


def test_list_feedback_paginates_and_filters(
    sync_client: Client, server: LangSmithTestServer
) -> None:
    project = server.add_project("many")
    run = server.add_run(session_id=project["id"], name="target")
    other = server.add_run(session_id=project["id"], name="other")
    for i in range(230):
        server.add_feedback(run["id"], "k" if i % 2 else "j", score=i % 3)
    server.add_feedback(run["id"], "judge", score=1, feedback_source={"type": "model"})
    server.add_feedback(other["id"], "k", score=1)

    before = len(server.requests_to("/feedback", "GET"))
    everything = list(sync_client.list_feedback(run_ids=[run["id"]]))
    pages = server.requests_to("/feedback", "GET")[before:]
    assert len(everything) == 231
    assert [p.query["offset"] for p in pages] == [["0"], ["100"], ["200"]]
    assert len({f.id for f in everything}) == 231
    # newest first, like the API
    assert everything[0].key == "judge"

    only_k = list(sync_client.list_feedback(run_ids=[run["id"]], feedback_key=["k"]))
    assert len(only_k) == 115 and {f.key for f in only_k} == {"k"}

    # the enum is sent as "FeedbackSourceType.MODEL" in the query string
    model = list(sync_client.list_feedback(feedback_source_type=[schemas.FeedbackSourceType.MODEL]))
    assert [f.key for f in model] == ["judge"]
    assert server.requests[-1].query["source"] == ["FeedbackSourceType.MODEL"]

    by_session = list(sync_client.list_feedback(session=[project["id"]], limit=5))
    assert len(by_session) == 5


def test_feedback_with_trace_id_is_queued_until_flush(
    client: Client, server: LangSmithTestServer
) -> None:
    project = client.create_project("queued")
    run = server.add_run(session_id=str(project.id))
    fb = client.create_feedback(
        run["id"], "late", score=1, trace_id=run["id"], session_id=project.id
    )
    client.flush()
    assert str(fb.id) in server.feedback
    assert server.requests_to("/runs/multipart", "POST")
    assert not server.requests_to("/feedback", "POST")


# -- annotation queues ---------------------------------------------------------


def test_annotation_queue_flow(sync_client: Client, server: LangSmithTestServer) -> None:
    project = server.add_project("aq")
    runs = [server.add_run(session_id=project["id"], name=f"r{i}") for i in range(3)]
    queue = sync_client.create_annotation_queue(
        name="review",
        description="human review",
        rubric_instructions="Grade it",
        rubric_items=[{"feedback_key": "correct", "description": "Is it right?"}],
    )
    read = sync_client.read_annotation_queue(queue.id)
    assert read.rubric_instructions == "Grade it"
    assert read.rubric_items is not None
    assert read.rubric_items[0]["feedback_key"] == "correct"
    assert [q.id for q in sync_client.list_annotation_queues(name="review")] == [queue.id]

    sync_client.add_runs_to_annotation_queue(queue.id, run_ids=[r["id"] for r in runs[:2]])
    sync_client.add_runs_to_annotation_queue(
        queue.id,
        runs=[
            {
                "run_id": runs[2]["id"],
                "session_id": project["id"],
                "start_time": runs[2]["start_time"],
            }
        ],
    )
    queued = list(sync_client.list_runs_from_annotation_queue(queue.id))
    assert [str(r.id) for r in queued] == [r["id"] for r in runs]
    assert all(r.added_at is not None for r in queued)
    first = sync_client.get_run_from_annotation_queue(queue.id, index=0)
    assert str(first.id) == runs[0]["id"]

    server.mark_queue_item(queue.id, runs[0]["id"], "completed")
    done = list(sync_client.list_runs_from_annotation_queue(queue.id, status="completed"))
    assert [str(r.id) for r in done] == [runs[0]["id"]]
    todo = list(sync_client.list_runs_from_annotation_queue(queue.id, status="needs_my_review"))
    assert [str(r.id) for r in todo] == [r["id"] for r in runs[1:]]

    sync_client.delete_run_from_annotation_queue(queue.id, run_id=runs[1]["id"])
    assert [i["run_id"] for i in server.queue_items[str(queue.id)]] == [
        runs[0]["id"],
        runs[2]["id"],
    ]
    sync_client.delete_annotation_queue(queue.id)
    assert str(queue.id) not in server.annotation_queues


def test_annotation_queue_items_api(sync_client: Client, server: LangSmithTestServer) -> None:
    run = server.add_run(session_name="items")
    queue = sync_client.create_annotation_queue(name="items-q")

    async def flow() -> list[str]:
        # client.annotation_queues is the generated *async* OpenAPI resource; its httpx
        # client is cached on the Client and Client.close() does not close it.
        try:
            items_api = sync_client.annotation_queues.items
            await items_api.create(
                str(queue.id),
                items=[{"run_id": run["id"], "project_id": run["session_id"]}],
            )
            listing = await items_api.list(str(queue.id), status="needs_my_review")
            pending = [i async for i in listing]
            await items_api.create_status(str(pending[0].id), status="completed")
            archived = await items_api.list(str(queue.id), status="archived")
            return [str(i.run_id) async for i in archived]
        finally:
            await sync_client._get_langsmith_api().close()

    assert asyncio.run(flow()) == [run["id"]]
    assert server.queue_items[str(queue.id)][0]["status"] == "completed"


def _experiments_on_one_dataset(
    server: LangSmithTestServer, names: tuple[str, ...], questions: int = 2
) -> tuple[list[dict[str, object]], list[list[dict[str, object]]]]:
    """Experiments on one dataset, each with one root run per example (oldest first)."""
    dataset = str(uuid.uuid4())
    server.datasets[dataset] = {"id": dataset, "name": f"ds-{dataset[:8]}"}
    examples = [str(uuid.uuid4()) for _ in range(questions)]
    sessions, runs = [], []
    for name in names:
        session = server.add_project(name, reference_dataset_id=dataset)
        sessions.append(session)
        runs.append(
            [
                server.add_run(
                    session_id=session["id"], reference_example_id=e, outputs={"n": name}
                )
                for e in examples
            ]
        )
    return sessions, runs


def test_pairwise_queue_pairs_two_experiments_runs_by_example(
    sync_client: Client, server: LangSmithTestServer
) -> None:
    (a, b, c), (runs_a, runs_b, runs_c) = _experiments_on_one_dataset(server, ("a", "b", "c"))
    queue = server.add_pairwise_queue(
        "a-vs-b", [a["id"], b["id"]], rubric_items=[{"feedback_key": "pref"}]
    )
    # The queue type is in the REST answer (the SDK's AnnotationQueue schema drops it).
    read = sync_client.request_with_retries("GET", f"/annotation-queues/{queue['id']}").json()
    assert read["queue_type"] == "pairwise" and read["default_dataset"] is None
    single = sync_client.create_annotation_queue(name="single", queue_id=uuid.uuid4())
    assert (
        sync_client.request_with_retries("GET", f"/annotation-queues/{single.id}").json()[
            "queue_type"
        ]
        == "single"
    )
    pairs = [(runs_a[i]["id"], runs_b[i]["id"]) for i in range(2)]
    assert server.queue_pairs(queue["id"]) == pairs
    listed = [str(r.id) for r in sync_client.list_runs_from_annotation_queue(queue["id"])]
    assert sorted(listed) == sorted(r for pair in pairs for r in pair)  # one item per run

    # Sending two experiments again appends their new pairs (the SDK's populate call).
    api = sync_client._get_langsmith_api_sync()
    api.annotation_queues.populate(queue_id=queue["id"], session_ids=[a["id"], c["id"]])
    assert server.queue_pairs(queue["id"]) == pairs + [
        (runs_a[i]["id"], runs_c[i]["id"]) for i in range(2)
    ]
    # Strict: two experiments on one dataset; a project is no experiment.
    plain = server.add_project("plain")
    (d,), _ = _experiments_on_one_dataset(server, ("d",))
    for sessions, detail in (
        ([a["id"]], "exactly two experiments"),
        ([a["id"], a["id"]], "exactly two experiments"),
        ([a["id"], b["id"], c["id"]], "exactly two experiments"),
        ([a["id"], d["id"]], "on one dataset"),
        ([a["id"], plain["id"]], "is not an experiment on a dataset"),
    ):
        with pytest.raises(langsmith.UnprocessableEntityError, match=detail):
            api.annotation_queues.populate(queue_id=queue["id"], session_ids=sessions)
    # A single-run queue takes an experiment's runs one by one.
    api.annotation_queues.populate(queue_id=str(single.id), session_ids=[a["id"]])
    assert [i["run_id"] for i in server.queue_items[str(single.id)]] == [r["id"] for r in runs_a]


def test_a_pairwise_review_records_binary_feedback_on_both_runs(
    server: LangSmithTestServer,
) -> None:
    (a, b), (runs_a, runs_b) = _experiments_on_one_dataset(server, ("a", "b"))
    queue = server.add_pairwise_queue(
        "a-vs-b", [a["id"], b["id"]], rubric_items=[{"feedback_key": "pref"}]
    )
    pair = (runs_a[0]["id"], runs_b[0]["id"])
    scores = {}
    for choice in ("A", "B", "equal"):
        records = server.review_pair(queue["id"], pair, choice, key="pref", reviewer="ana")
        scores[choice] = tuple(r["score"] for r in records)
        assert {r["feedback_source"]["type"] for r in records} == {"app"}
    assert scores == {"A": (1.0, 0.0), "B": (0.0, 1.0), "equal": (1.0, 1.0)}
    assert len(server.feedback) == 2  # choosing again updates the reviewer's records
    server.review_pair(queue["id"], pair, "A", key="pref", reviewer="bo")
    assert len(server.feedback) == 4
    with pytest.raises(HTTPError, match="not a pair"):
        server.review_pair(
            queue["id"], (runs_a[0]["id"], runs_b[1]["id"]), "A", key="pref", reviewer="ana"
        )
    with pytest.raises(HTTPError, match="not a rubric key"):
        server.review_pair(queue["id"], pair, "A", key="other", reviewer="ana")
    with pytest.raises(HTTPError, match="exactly two experiments"):
        server.add_pairwise_queue("lonely", [a["id"]])


# -- strict like the real service ------------------------------------------------


def test_feedback_user_is_stamped_from_the_api_key(server: LangSmithTestServer) -> None:
    server.add_user("alice-key", "Alice")
    run = server.add_run(session_name="users")
    with connect(server, "alice-key") as alice:
        made = alice.create_feedback(
            run["id"], "k", score=1, session_id=run["session_id"], source_info={"a": 1}
        )
    stored = server.feedback[str(made.id)]["feedback_source"]
    assert stored["user_id"] == server.users["alice-key"]["id"]
    with connect(server) as other:
        [plain] = other.list_feedback(run_ids=[run["id"]])
        [named] = other.list_feedback(run_ids=[run["id"]], include_user_names="true")
    assert plain.feedback_source is not None and plain.feedback_source.user_name is None
    assert named.feedback_source is not None and named.feedback_source.user_name == "Alice"


def test_a_key_keeps_its_config_unless_configs_are_enforced(server: LangSmithTestServer) -> None:
    with connect(server) as c:
        c.create_feedback_config("k", feedback_config={"type": "continuous", "min": 0, "max": 1})
        with pytest.raises(ls_utils.LangSmithError, match="400"):
            c.create_feedback_config(
                "k", feedback_config={"type": "continuous", "min": 0, "max": 5}
            )
        server.enforced_feedback_configs = True
        second = c.create_feedback_config(
            "k", feedback_config={"type": "continuous", "min": 0, "max": 5}
        )
        listed = list(c.list_feedback_configs(feedback_key=["k"], include_all_configs=True))
        assert [x.id for x in listed][1] == second.id and not second.is_first
        assert len(list(c.list_feedback_configs(feedback_key=["k"]))) == 1  # one per key


def test_queue_status_is_per_reviewer_and_takes_item_ids_only(
    sync_client: Client, server: LangSmithTestServer
) -> None:
    run = server.add_run(session_name="review")
    queue = sync_client.create_annotation_queue(name="two-reviewers")
    server.annotation_queues[str(queue.id)]["num_reviewers_per_item"] = 2
    items = sync_client._get_langsmith_api_sync().annotation_queues.items
    items.create(str(queue.id), items=[{"run_id": run["id"], "project_id": run["session_id"]}])
    with pytest.raises(Exception, match="404|not found"):
        items.create_status(run["id"], status="completed")  # a run id is not an item id
    [item] = items.list(str(queue.id), status="needs_my_review")
    assert items.create_status(str(item.id), status="completed").is_archived is False
    assert [i.id for i in items.list(str(queue.id), status="needs_others_review")] == [item.id]
    server.mark_queue_item(queue.id, run["id"], reviewer="carol")  # the second reviewer
    assert [i.run_id for i in items.list(str(queue.id), status="archived")] == [run["id"]]


def test_smithdb_only_flags_and_v1_reads(server: LangSmithTestServer) -> None:
    with LangSmithTestServer(query_backend="smithdb_only") as strict, connect(strict) as c:
        flags = c.info.instance_flags or {}
        assert (flags["ch_query_enabled"], flags["sdb_query_enabled"]) == (False, True)
        project = c.create_project("smithdb")
        with pytest.raises(ls_utils.LangSmithError, match="400"):
            list(c.list_runs(project_id=project.id))


# -- retries ------------------------------------------------------------------


def test_429_then_success(sync_client: Client, server: LangSmithTestServer) -> None:
    run = server.add_run(session_name="rl")
    rule = server.inject_failure("/feedback", status=429, times=1, method="POST")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ls_utils.LangSmithWarning)
        fb = sync_client.create_feedback(run["id"], "k", score=1)
    posts = server.requests_to("/feedback", "POST")
    assert [(p.status, p.injected) for p in posts] == [(429, True), (200, False)]
    assert rule.hits == 1 and rule.remaining == 0
    assert str(fb.id) in server.feedback


def test_500_then_success(sync_client: Client, server: LangSmithTestServer) -> None:
    server.add_project("flaky")
    server.inject_failure("/sessions", status=500, times=1)
    assert sync_client.read_project(project_name="flaky").name == "flaky"
    assert [r.status for r in server.requests_to("/sessions")] == [500, 200]


def test_500_exhausting_retries_raises(server: LangSmithTestServer) -> None:
    c = _make_client(
        server,
        auto_batch_tracing=False,
        retry_config=Retry(
            total=1, status_forcelist=[500], allowed_methods=None, raise_on_status=False
        ),
    )
    server.inject_failure("/datasets", status=500, times=5)
    with pytest.raises(ls_utils.LangSmithAPIError):
        c.read_dataset(dataset_name="x")
    assert len(server.requests_to("/datasets")) == 2
    c.close(timeout=5)


def test_multipart_ingest_retried_after_500(client: Client, server: LangSmithTestServer) -> None:
    server.inject_failure("/runs/multipart", status=500, times=1)

    @traceable(name="retried")
    def fn() -> str:
        return "ok"

    with langsmith.tracing_context(enabled=True, client=client, project_name="retry"):
        fn()
    client.flush()
    statuses = [r.status for r in server.requests_to("/runs/multipart")]
    assert statuses[0] == 500 and statuses[-1] == 202
    assert [r["name"] for r in server.runs.values()] == ["retried"]


# -- datasets & evaluate ---------------------------------------------------------


def test_evaluate_over_stored_dataset_without_upload(
    sync_client: Client, server: LangSmithTestServer
) -> None:
    dataset = sync_client.create_dataset("adder")
    sync_client.create_examples(
        dataset_id=dataset.id,
        examples=[{"inputs": {"x": i}, "reference_outputs": {"y": i + 1}} for i in range(4)],
    )
    assert [e.outputs for e in sync_client.list_examples(dataset_name="adder")] == [
        {"y": i + 1} for i in range(4)
    ]

    def target(inputs: dict) -> dict:
        return {"y": inputs["x"] + 1 if inputs["x"] != 3 else 0}

    def exact(outputs: dict, reference_outputs: dict) -> dict:
        return {"key": "exact", "score": outputs["y"] == reference_outputs["y"]}

    before = len(server.requests)
    results = langsmith.evaluate(
        target, data="adder", evaluators=[exact], upload_results=False, client=sync_client
    )
    rows = list(results)
    scores = sorted(r["evaluation_results"]["results"][0].score for r in rows)
    assert scores == [False, True, True, True]
    during = server.requests[before:]
    assert {r.method for r in during} == {"GET"}  # nothing uploaded
    assert not server.runs and not server.feedback
