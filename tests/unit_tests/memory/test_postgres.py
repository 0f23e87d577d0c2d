"""A judge's memory on a real PostgreSQL server the tests start themselves.

The server (Debian's `postgresql` binaries, see `tests/pg_server.py`; the
`pg_server` fixture of conftest.py) runs in a temporary directory for the
whole test session; each test uses its own judge name or its own database,
so tests do not see each other's rows. What every store must do is tested
on this backend too, by tests/unit_tests/memory/test_store_contract.py.
"""

from __future__ import annotations

import json
import multiprocessing
import socket
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import HOURS, RUDE, SWEATER
from fakes import HashEmbeddings
from open_faults import (
    Fail,
    OpenInterrupted,
    assert_kept_what_another_process_wrote,
    assert_nothing_left_then_created,
    plant_open_fault,
)

from langchain_memalign import AlignFailedError, Feedback, MemAlignJudge, MemoryFormatError
from langchain_memalign.errors import EmbeddingMismatchError, MemoryUnavailableError
from langchain_memalign.memory.backends import memory_exists

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import pg_worker  # noqa: E402
from pg_server import TempPostgres  # noqa: E402

CASE = {"inputs": "I was charged twice and I'm frustrated!", "outputs": "Refunds take 5-7 days."}
SWEATER_CASE = {"inputs": SWEATER.inputs, "outputs": "Colors vary."}
TABLES = [
    "memalign_meta", "memalign_feedback", "memalign_episodes", "memalign_removed_episodes",
    "memalign_guidelines", "memalign_guideline_sources", "memalign_history",
    "memalign_prequential",
]  # fmt: skip


@pytest.fixture
def db(pg_server: TempPostgres) -> str:
    """A fresh database's URL."""
    return pg_server.new_database()


def judge_url(db: str, name: str | None = None) -> str:
    return f"{db}?judge={name or 'j' + uuid.uuid4().hex[:8]}"


def rows(db: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(db, autocommit=True) as conn:
        return list(conn.execute(sql, args).fetchall())


def spawn() -> Any:
    return multiprocessing.get_context("spawn")


def test_the_options_round_trip_through_a_database(
    make_judge: Any, model: Any, db: str, tmp_path: Path
) -> None:
    name = "j" + uuid.uuid4().hex[:8]
    options = {
        "prompt": {"verdict_order": "rationale_first"},
        "validation": {"max_calls": 3},
        "max_retries": 4,
    }
    judge = make_judge(path=judge_url(db, name), options=options)
    judge.align([SWEATER])
    want = judge.config
    judge.close()
    [(raw,)] = rows(db, "SELECT value FROM memalign_meta WHERE judge=%s AND key='config'", name)
    assert json.loads(raw) == want.model_dump(mode="json")  # stored nested
    loaded = MemAlignJudge.load(judge_url(db, name), model=model, embeddings=HashEmbeddings())
    assert loaded.config == want
    assert loaded.config.options.prompt.verdict_order == "rationale_first"
    loaded.save(tmp_path / "copy")  # and into a folder
    loaded.close()
    copy = MemAlignJudge.load(tmp_path / "copy", model=model, embeddings=HashEmbeddings())
    assert copy.config == want
    copy.close()


def test_round_trip_align_judge_unalign(make_judge: Any, model: Any, db: str) -> None:
    url = judge_url(db, "helpfulness")
    judge = make_judge(path=url, k=2)
    judge.align([SWEATER, HOURS, RUDE])
    expected = judge.invoke(CASE)
    assert judge.stats()["episodes"] == 3
    judge.close()

    fresh = HashEmbeddings()
    loaded = MemAlignJudge.load(url, model=model, embeddings=fresh)
    assert fresh.calls == 0  # the index is built from the stored vectors
    assert len(loaded.memory.index) == 3
    assert loaded.config == judge.config
    assert [g.text for g in loaded.guidelines] == [g.text for g in judge.guidelines]
    assert loaded.feedback_ids == ["sweater", "hours", "rude"]
    assert loaded.invoke(CASE) == expected

    loaded.unalign(["sweater"])
    assert "sweater" not in loaded.feedback_ids
    result = loaded.invoke(SWEATER_CASE)
    assert "sweater" not in result["metadata"]["episode_ids"]
    # No row anywhere holds the removed feedback's text.
    needle = "looks different from the website"
    for table, column in [
        ("memalign_feedback", "payload"),
        ("memalign_guidelines", "text"),
        ("memalign_meta", "value"),
        ("memalign_history", "feedback_ids"),
    ]:
        assert not rows(db, f"SELECT 1 FROM {table} WHERE {column} LIKE %s", f"%{needle}%")
    assert not rows(db, "SELECT 1 FROM memalign_feedback WHERE id='sweater'")
    assert not rows(db, "SELECT 1 FROM memalign_episodes WHERE feedback_id='sweater'")
    assert not rows(db, "SELECT 1 FROM memalign_guideline_sources WHERE feedback_id='sweater'")
    loaded.close()


def test_save_copies_folder_to_database_and_back(
    make_judge: Any, model: Any, db: str, tmp_path: Path
) -> None:
    folder_judge = make_judge(path=tmp_path / "a", k=2)
    folder_judge.align([SWEATER, HOURS, RUDE])
    expected = folder_judge.invoke(CASE)
    url = judge_url(db)
    assert folder_judge.save(url) == url

    fresh = HashEmbeddings()
    on_db = MemAlignJudge.load(url, model=model, embeddings=fresh)
    assert fresh.calls == 0
    assert on_db.guidelines == folder_judge.guidelines
    assert on_db.feedback_ids == folder_judge.feedback_ids
    assert on_db.history() == folder_judge.history()
    assert on_db.get_feedback("sweater") == folder_judge.get_feedback("sweater")
    assert on_db.invoke(CASE) == expected

    on_db.unalign(["rude"])
    on_db.save(tmp_path / "b")
    fresh = HashEmbeddings()
    back = MemAlignJudge.load(tmp_path / "b", model=model, embeddings=fresh)
    assert fresh.calls == 0
    assert back.feedback_ids == ["sweater", "hours"]
    assert back.guidelines == on_db.guidelines
    assert back.history() == on_db.history()
    assert back.invoke(CASE) == on_db.invoke(CASE)
    # Saving again over an existing database judge replaces its content.
    folder_judge.save(url)
    again = MemAlignJudge.load(url, model=model, embeddings=HashEmbeddings())
    assert again.feedback_ids == ["sweater", "hours", "rude"]
    for j in (folder_judge, on_db, back, again):
        j.close()


def test_two_judges_in_one_database_are_isolated(make_judge: Any, db: str) -> None:
    a = make_judge(path=judge_url(db, "a"), name="a")
    b = make_judge(path=judge_url(db, "b"), name="b")
    a.align([SWEATER, HOURS])
    b.align([RUDE])
    assert a.feedback_ids == ["sweater", "hours"]
    assert b.feedback_ids == ["rude"]
    b.unalign(["rude"])
    assert a.stats()["feedback"] == 2 and b.stats()["feedback"] == 0
    assert len(a.memory.index) == 2 and len(b.memory.index) == 0
    assert [g.source_ids for g in a.guidelines] and not b.guidelines
    a.close()
    b.close()
    # Deleting a judge's row deletes all of its rows, and only its rows.
    b_rows = {t: rows(db, f"SELECT count(*) FROM {t} WHERE judge='b'")[0][0] for t in TABLES}
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DELETE FROM memalign_judges WHERE name='a'")
    for t in TABLES:
        assert rows(db, f"SELECT count(*) FROM {t} WHERE judge='a'") == [(0,)]
        assert rows(db, f"SELECT count(*) FROM {t} WHERE judge='b'") == [(b_rows[t],)]


def test_another_memory_sees_commits_without_reopening(make_judge: Any, db: str) -> None:
    url = judge_url(db)
    writer = make_judge(path=url, k=2)
    reader = make_judge(path=url, k=2)
    lagging = make_judge(path=url.replace("?", "?staleness=3600&"), k=2)
    lagging.invoke(CASE)  # checks now, then not for an hour
    writer.align([SWEATER, HOURS])
    result = reader.invoke(SWEATER_CASE)
    assert result["metadata"]["episode_ids"][0] == "sweater"
    assert len(reader.guidelines) == len(writer.guidelines) > 0
    assert lagging.invoke(SWEATER_CASE)["metadata"]["episode_ids"] == []
    writer.unalign(["sweater"])
    assert "sweater" not in reader.invoke(SWEATER_CASE)["metadata"]["episode_ids"]
    assert len(reader.memory.index) == 1
    for j in (writer, reader, lagging):
        j.close()


def test_second_process_sees_an_align_without_reopening(make_judge: Any, db: str) -> None:
    url = judge_url(db)
    writer = make_judge(path=url, k=2)
    writer.align([HOURS])
    ctx = spawn()
    ready, go, out = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = ctx.Process(
        target=pg_worker.judge_after_signal, args=(url, SWEATER_CASE, ready, go, out)
    )
    proc.start()
    try:
        assert ready.wait(120)
        writer.align([SWEATER])
        go.set()
        got = out.get(timeout=120)
    finally:
        proc.join(60)
    assert proc.exitcode == 0
    assert got["calls_at_open"] == 0 and got["episodes_at_open"] == 1
    assert got["episode_ids"][0] == "sweater"
    assert sorted(got["guidelines"]) == sorted(g.text for g in writer.guidelines)
    writer.close()


def test_concurrent_aligns_from_two_processes(make_judge: Any, db: str) -> None:
    url = judge_url(db)
    make_judge(path=url).close()
    ctx = spawn()
    go, out = ctx.Event(), ctx.Queue()
    batches = [[SWEATER, HOURS], [SWEATER, RUDE]]
    procs, readies = [], []
    for items in batches:
        ready = ctx.Event()
        payload = [fb.model_dump() for fb in items]
        p = ctx.Process(target=pg_worker.align_after_signal, args=(url, payload, ready, go, out))
        p.start()
        procs.append(p)
        readies.append(ready)
    try:
        assert all(r.wait(120) for r in readies)
        go.set()
        reports = [out.get(timeout=120) for _ in procs]
    finally:
        for p in procs:
            p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    # The shared item was learned once: one process added it, the other found it unchanged
    # (the content hash makes the re-send free).
    assert sorted(len(r["added"]) for r in reports) == [1, 2]
    assert sum("sweater" in r["added"] for r in reports) == 1
    assert sum("sweater" in r["unchanged"] for r in reports) == 1
    judge = make_judge(path=url)
    assert sorted(judge.feedback_ids) == ["hours", "rude", "sweater"]  # no lost update
    texts = [g.text for g in judge.guidelines]
    assert len(texts) == len(set(texts)) == 3  # no duplicate guideline
    assert len(judge.memory.index) == 3
    assert sum(1 for g in judge.guidelines if "sweater" in g.source_ids) == 1
    judge.close()


def test_wrong_schema_version_is_refused(make_judge: Any, model: Any, db: str) -> None:
    url = judge_url(db)
    make_judge(path=url).close()
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("UPDATE memalign_schema SET version = 99")
    with pytest.raises(MemoryFormatError, match="schema version 99 is not supported"):
        MemAlignJudge.load(url, model=model, embeddings=HashEmbeddings())
    with pytest.raises(MemoryFormatError, match="schema version 99"):
        make_judge(path=url)


def test_unknown_judge_and_other_embedding_model_are_refused(
    make_judge: Any, model: Any, db: str
) -> None:
    url = judge_url(db)
    make_judge(path=url).align([HOURS])
    with pytest.raises(EmbeddingMismatchError):
        MemAlignJudge.load(url, model=model, embeddings=HashEmbeddings(model="other"))
    with pytest.raises(MemoryFormatError, match="no MemAlign memory for this judge"):
        MemAlignJudge.load(judge_url(db, "nobody"), model=model, embeddings=HashEmbeddings())


def test_failed_align_leaves_no_partial_write(
    make_judge: Any, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = judge_url(db)
    judge = make_judge(path=url)
    judge.align([HOURS])
    seq = judge.memory.store.change_seq()

    def boom(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(type(judge.memory.store), "put_guideline", boom)
    with pytest.raises(AlignFailedError, match="disk on fire") as failed:
        judge.align([SWEATER, RUDE])
    assert isinstance(failed.value.__cause__, RuntimeError)
    monkeypatch.undo()
    assert judge.memory.store.change_seq() == seq
    assert rows(db, "SELECT id FROM memalign_feedback") == [("hours",)]
    assert len(rows(db, "SELECT id FROM memalign_episodes")) == 1
    assert judge.feedback_ids == ["hours"]
    judge.align([SWEATER])  # and the memory keeps working
    assert judge.feedback_ids == ["hours", "sweater"]
    judge.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_server_is_memory_unavailable(make_judge: Any, model: Any) -> None:
    url = f"postgresql://bob:s3cret@127.0.0.1:{_free_port()}/x?judge=a&open_timeout=0.5"
    for opening in (
        lambda: make_judge(path=url),
        lambda: MemAlignJudge.load(url, model, HashEmbeddings()),
    ):
        with pytest.raises(MemoryUnavailableError, match="cannot reach PostgreSQL") as err:
            opening()
        assert isinstance(err.value, ConnectionError) and "s3cret" not in str(err.value)


def test_a_url_the_server_refuses_is_a_format_error(make_judge: Any, db: str) -> None:
    missing = db.rsplit("/", 1)[0] + "/no_such_database?judge=a&open_timeout=0.5"
    with pytest.raises(MemoryFormatError, match='database "no_such_database" does not exist'):
        make_judge(path=missing)


def _drop_connections(db: str) -> int:
    """End every other session on the database, as a restart or an administrator would."""
    got = rows(
        db,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    return len(got)


def test_dropped_connection_is_memory_unavailable_and_the_next_call_reconnects(
    make_judge: Any, db: str
) -> None:
    judge = make_judge(path=judge_url(db), k=2)
    judge.align([SWEATER, HOURS])
    expected = judge.invoke(CASE)
    assert _drop_connections(db) >= 1
    # Each pooled connection the server ended fails once and is replaced: a judgment
    # either raises MemoryUnavailableError or, on a fresh connection, succeeds.
    outcomes = []
    for _ in range(12):
        try:
            outcomes.append(judge.invoke(CASE))
            break
        except MemoryUnavailableError as e:
            assert "lost the connection" in str(e)
            outcomes.append(e)
    assert isinstance(outcomes[0], MemoryUnavailableError)
    assert outcomes[-1] == expected
    # An align meeting a dropped connection fails as documented, nothing half-written.
    seq = judge.memory.store.change_seq()
    _drop_connections(db)
    failures = 0
    while True:
        try:
            judge.align([RUDE])
            break
        except AlignFailedError as e:
            assert isinstance(e.__cause__, MemoryUnavailableError)
            assert rows(db, "SELECT count(*) FROM memalign_feedback") == [(2,)]
            failures += 1
            assert failures < 12
    assert failures >= 1 and judge.memory.store.change_seq() > seq
    assert sorted(judge.feedback_ids) == ["hours", "rude", "sweater"]
    judge.close()


def test_postgres_url_without_psycopg_names_the_extra(
    make_judge: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(MemoryFormatError, match=r"langchain-memalign\[postgres\]"):
        make_judge(path="postgresql://nobody@127.0.0.1:1/x?judge=a")


def test_bad_url_parameters_are_refused(make_judge: Any) -> None:
    with pytest.raises(MemoryFormatError, match="staleness"):
        make_judge(path="postgresql://nobody@127.0.0.1:1/x?staleness=-1")


def test_cli_memory_setting_takes_a_database_url(
    db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from test_cli import CONFIG, EXIT_OK, EXIT_USAGE, Env

    env = Env(tmp_path, capsys)
    url = judge_url(db, "helpfulness")
    env.config.write_text(CONFIG.replace('memory = "mem"', f'memory = "{url}"'))
    code, _, err = env.run("align", env.feedback)
    assert code == EXIT_USAGE and "create it first" in err
    code, out, _ = env.run("create")
    assert code == EXIT_OK and "Created judge 'helpfulness'" in out and "postgresql://" in out
    assert env.run("align", env.feedback)[0] == EXIT_OK
    code, out, _ = env.run("show")
    assert code == EXIT_OK and "3 feedback, 3 episodes, 3 guidelines" in out
    assert not (tmp_path / "mem").exists()
    # --memory overrides the file's setting with another judge in the same database.
    other = judge_url(db, "other")
    code, _, err = env.run("show", "--memory", other)
    assert code == EXIT_USAGE and "no MemAlign memory for this judge" in err


def test_memory_url_parameters_and_redaction() -> None:
    from langchain_memalign.memory.postgres import PostgresTarget, describe_location

    t = PostgresTarget.parse(
        "postgresql://bob:s3cret@db.example:5433/team?sslmode=require&judge=tone&staleness=2.5"
    )
    assert (t.judge, t.staleness, t.pool_size) == ("tone", 2.5, 8)
    assert t.conninfo == "postgresql://bob:s3cret@db.example:5433/team?sslmode=require"
    assert "s3cret" not in t.describe() and "'tone'" in t.describe()
    assert "s3cret" not in describe_location("postgresql://bob:s3cret@h/db")
    assert PostgresTarget.parse("postgres:///db?host=/run/postgresql").judge == "default"


def test_catch_up_replaces_changed_episodes_in_an_hnsw_index(make_judge: Any, db: str) -> None:
    url = judge_url(db)
    writer = make_judge(path=url, k=3)
    reader = make_judge(
        path=url, k=3, options={"retrieval": {"hnsw_threshold": 1}}
    )  # approximate index: tombstones
    writer.align([SWEATER, HOURS, RUDE])
    reader.invoke(CASE)
    assert reader.memory.index.kind == "hnsw" and len(reader.memory.index) == 3
    before = set(reader.memory.index.ids().tolist())
    changed = SWEATER.model_copy(update={"inputs": "My new jumper's colour is wrong, I'm upset."})
    writer.align([changed])
    result = reader.invoke({"inputs": changed.inputs, "outputs": "Colors vary."})
    assert result["metadata"]["episode_ids"][0] == "sweater"
    after = set(reader.memory.index.ids().tolist())
    assert len(after) == 3 and len(after - before) == 1  # the changed episode has a new id
    assert after == set(writer.memory.index.ids().tolist())
    writer.close()
    reader.close()


async def test_async_judgments_catch_up_too(make_judge: Any, db: str) -> None:
    url = judge_url(db)
    writer = make_judge(path=url, k=2)
    reader = make_judge(path=url, k=2)
    assert (await reader.ainvoke(SWEATER_CASE))["metadata"]["episode_ids"] == []
    await writer.aalign([SWEATER])
    assert (await reader.ainvoke(SWEATER_CASE))["metadata"]["episode_ids"] == ["sweater"]
    writer.close()
    reader.close()


def test_big_memory_opens_exact_then_swaps_in_hnsw(
    make_judge: Any, model: Any, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conftest import fb

    from langchain_memalign.memory.judge_memory import JudgeMemory

    url = judge_url(db)
    writer = make_judge(path=url, k=3)
    writer.align([SWEATER, HOURS, RUDE])
    gate = threading.Event()
    build = JudgeMemory._build_hnsw

    def gated(self: JudgeMemory, *args: Any) -> None:
        gate.wait(30)  # hold the background build until the memory has moved on
        build(self, *args)

    monkeypatch.setattr(JudgeMemory, "_build_hnsw", gated)
    emb = HashEmbeddings()
    reader = MemAlignJudge.load(
        url, model=model, embeddings=emb, options={"retrieval": {"hnsw_threshold": 2}}
    )
    assert emb.calls == 0
    assert reader.memory.index.kind == "flat" and not reader.memory.wait_for_index(0)
    writer.unalign(["rude"])
    writer.align([fb("late", "Where is my parcel? I'm worried.", "Tracking: 123.", True, "Good.")])
    assert reader.invoke(CASE)["metadata"]["episode_ids"]  # judged on the exact index
    gate.set()
    assert reader.memory.wait_for_index(30)
    assert reader.memory.index.kind == "hnsw"
    ids = set(reader.memory.index.ids().tolist())
    assert ids == set(writer.memory.index.ids().tolist()) and len(ids) == 3
    assert reader.invoke(SWEATER_CASE)["metadata"]["episode_ids"][0] == "sweater"
    writer.close()
    reader.close()


def test_a_judgment_never_mixes_versions(make_judge: Any, db: str) -> None:
    url = judge_url(db)
    writer = make_judge(path=url, k=3)
    reader = make_judge(path=url, k=3)
    writer.align([SWEATER, HOURS])
    reader.invoke(CASE)
    old = reader.memory.snapshot()
    vector = reader.memory.embed([reader.memory.case_text(SWEATER.inputs)])[0]
    assert reader.memory.retrieve(vector, view=old)[0].feedback_id == "sweater"
    # Another process changes the sweater's rationale (same embedded text, same episode).
    writer.align([SWEATER.model_copy(update={"rationale": "Say sorry first."})])
    # A judgment still on the old version does not see the newer text: the episode
    # is left out rather than shown as the newer version has it.
    on_old = reader.memory.retrieve(vector, view=old)
    assert [e.feedback_id for e in on_old] == ["hours"]
    new = reader.memory.snapshot()  # catches up
    assert new.seq > old.seq
    on_new = reader.memory.retrieve(vector, view=new)
    assert on_new[0].feedback_id == "sweater" and on_new[0].rationale == "Say sorry first."
    writer.close()
    reader.close()


def test_save_copies_between_judges_of_databases(
    make_judge: Any, model: Any, db: str, pg_server: TempPostgres
) -> None:
    src = make_judge(path=judge_url(db, "src"))
    src.align([SWEATER, HOURS])
    src.save(src_url := judge_url(db, "src"))  # to itself: nothing to do
    other_db = pg_server.new_database()
    for target in (judge_url(db, "copy"), judge_url(other_db, "src")):
        src.save(target)
        copy = MemAlignJudge.load(target, model=model, embeddings=HashEmbeddings())
        assert copy.feedback_ids == src.feedback_ids
        assert copy.guidelines == src.guidelines
        assert copy.history() == src.history()
        copy.close()
    kept = MemAlignJudge.load(src_url, model=model, embeddings=HashEmbeddings())
    assert kept.feedback_ids == ["sweater", "hours"]
    kept.close()  # a pool left to the garbage collector fails a later test
    src.close()


def test_score_calibration_is_stored_in_the_database(make_judge: Any, model: Any, db: str) -> None:
    # The judge gives 3 to everything; the experts gave 2 to three cases of four.
    model.responder = lambda m: (
        {"rationale": "Fine.", "score": 3}
        if "expert evaluator" in str(m[0].content)
        else {"guidelines": []}
    )
    url = judge_url(db)
    judge = make_judge(path=url, scale=(1, 5), k=0)
    cases = [
        Feedback(id=f"c{i}", inputs=f"question {i}", outputs=f"answer {i}", value=v)
        for i, v in enumerate([2, 2, 2, 3])
    ]
    judge.align(cases)
    other = MemAlignJudge.load(url, model=model, embeddings=HashEmbeddings())
    assert dict(other.memory.calibration.mapping) == {3: 2}
    assert other.invoke({"inputs": "new", "outputs": "new"})["score"] == 2
    judge.unalign(["c0"])  # another process's view catches up: 2 against 1 is not enough
    other.memory.max_staleness = 0.0
    assert other.invoke({"inputs": "new", "outputs": "new"})["score"] == 3
    assert [p.feedback_id for p in other.memory.calibration.pairs] == ["c1", "c2", "c3"]
    judge.close()
    other.close()


def test_an_align_outlasting_the_servers_idle_transaction_timeout_fails_whole(
    make_judge: Any, db: str, responder: Any
) -> None:
    """An align is one transaction held open across its model calls (docs/postgres.md): a
    server that ends sessions idle in a transaction for longer fails the align whole."""
    from fakes import ScriptedChatModel

    url = judge_url(db)
    judge = make_judge(path=url)
    judge.align([SWEATER, HOURS])
    before = judge.memory.store.dump()
    judge.close()

    def slow(messages: Any) -> Any:
        time.sleep(3)  # a model call far longer than the server lets a transaction idle
        return responder(messages)

    # `-cname=value`: no space, which the URL's re-encoding would turn into a `+`.
    strict = url + "&options=-cidle_in_transaction_session_timeout%3D500"
    impatient = make_judge(path=strict, model=ScriptedChatModel(responder=slow))
    with pytest.raises(AlignFailedError, match="align failed and was rolled back") as err:
        impatient.align([SWEATER.model_copy(update={"rationale": "Say sorry first."}), RUDE])
    # The server ended the session: newer psycopg reports its error (SQLSTATE 25P03,
    # IdleInTransactionSessionTimeout), older versions only the closed connection.
    cause = err.value.__cause__
    assert getattr(cause, "sqlstate", None) == "25P03" or isinstance(
        cause, MemoryUnavailableError
    ), repr(cause)
    assert "idle-in-transaction timeout" in str(err.value) or "closed" in str(err.value)
    assert impatient.memory.store.dump() == before
    assert impatient.feedback_ids == ["sweater", "hours"]  # and it still reads
    impatient.close()


def test_save_refuses_to_replace_another_judge_in_the_database(
    make_judge: Any, model: Any, db: str
) -> None:
    hr_url = judge_url(db, "hr")
    hr = make_judge(name="hr", path=hr_url)
    hr.align([SWEATER])
    hr.close()
    support = make_judge(name="support")
    support.align([HOURS])
    with pytest.raises(MemoryFormatError, match="overwrite=True") as e:
        support.save(hr_url)
    assert "'hr'" in str(e.value)
    kept = MemAlignJudge.load(hr_url, model=model, embeddings=HashEmbeddings())
    assert (kept.config.name, kept.feedback_ids) == ("hr", ["sweater"])
    kept.close()
    assert support.save(hr_url, overwrite=True) == hr_url
    replaced = MemAlignJudge.load(hr_url, model=model, embeddings=HashEmbeddings())
    assert (replaced.config.name, replaced.feedback_ids) == ("support", ["hours"])
    replaced.close()
    support.close()


def _fail_meta_insert(monkeypatch: pytest.MonkeyPatch, fail: Fail) -> None:
    """The insert of the configuration fails."""
    execute = psycopg.Connection.execute

    def failing(conn: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if "INSERT INTO memalign_meta" in str(query):
            fail()
        return execute(conn, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", failing)


def _plant_open_fault(monkeypatch: pytest.MonkeyPatch, where: str) -> dict[str, Any]:
    """A constructor of a new judge fails at `where`; returns keywords for `make_judge`."""
    return plant_open_fault(monkeypatch, where, {"meta": _fail_meta_insert})


@pytest.mark.parametrize("where", ["fingerprint", "meta", "reload", "interrupt", "setup", "model"])
def test_a_failed_constructor_leaves_no_judge_behind(
    make_judge: Any, model: Any, db: str, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A new judge's row and its configuration are created whole or not at all: a
    constructor that raises leaves the database as it was, whatever fails."""
    make_judge(path=judge_url(db, "bystander"), name="bystander").close()  # tables exist
    before = [
        rows(db, "SELECT name, memory_id, change_seq FROM memalign_judges ORDER BY name"),
        rows(db, "SELECT judge, key, value FROM memalign_meta ORDER BY judge, key"),
    ]
    url = judge_url(db)
    kwargs = _plant_open_fault(monkeypatch, where)
    with pytest.raises((OpenInterrupted, KeyboardInterrupt, TypeError)):
        make_judge(path=url, **kwargs)
    monkeypatch.undo()
    assert [
        rows(db, "SELECT name, memory_id, change_seq FROM memalign_judges ORDER BY name"),
        rows(db, "SELECT judge, key, value FROM memalign_meta ORDER BY judge, key"),
    ] == before
    assert not memory_exists(url)
    assert_nothing_left_then_created(make_judge, model, url, "no MemAlign memory for this judge")


def test_a_failed_constructor_leaves_an_existing_judge_as_it_was(
    make_judge: Any, model: Any, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only what the failed call created is removed: a judge that was there, empty and
    never written since its creation (another process's), stays, with the configuration
    it stores (the changed one the constructor was to store is not)."""
    url = judge_url(db)
    make_judge(path=url).close()
    before = [
        rows(db, "SELECT name, memory_id, change_seq FROM memalign_judges"),
        rows(db, "SELECT judge, key, value FROM memalign_meta ORDER BY key"),
    ]
    _plant_open_fault(monkeypatch, "reload")
    with pytest.raises(OpenInterrupted):
        make_judge(path=url, k=4)
    monkeypatch.undo()
    assert [
        rows(db, "SELECT name, memory_id, change_seq FROM memalign_judges"),
        rows(db, "SELECT judge, key, value FROM memalign_meta ORDER BY key"),
    ] == before
    loaded = MemAlignJudge.load(url, model=model, embeddings=HashEmbeddings())
    assert (loaded.config.k, loaded.feedback_ids) == (3, [])
    loaded.close()


def test_a_failed_constructor_keeps_a_judge_another_process_wrote_meanwhile(
    make_judge: Any, model: Any, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The judge a failed constructor added is deleted only while no one committed to
    it: another process that opened it meanwhile and aligned keeps what it wrote."""
    assert_kept_what_another_process_wrote(make_judge, model, judge_url(db), monkeypatch)


class SaveInterrupted(Exception):
    """The fault planted in the middle of a save's copy."""


def _fail_at_the_episodes(monkeypatch: pytest.MonkeyPatch, fault: type[BaseException]) -> None:
    """A save fails midway: after its meta and feedback rows, at the episodes."""
    executemany = psycopg.Cursor.executemany

    def failing(cur: Any, query: Any, params_seq: Any, **kwargs: Any) -> Any:
        if "memalign_episodes" in str(query):
            raise fault("the save fails at the episodes")
        return executemany(cur, query, params_seq, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "executemany", failing)


@pytest.mark.parametrize("fault", [SaveInterrupted, KeyboardInterrupt])
def test_a_failed_save_to_a_new_judge_leaves_no_judge_behind(
    make_judge: Any, model: Any, db: str, monkeypatch: pytest.MonkeyPatch, fault: type
) -> None:
    """The judge row and the copied rows are one transaction: a save that fails midway
    (after the meta and feedback rows, at the episodes) leaves the database as it was."""
    src = make_judge(name="src")
    src.align([SWEATER, HOURS])
    url = judge_url(db)
    make_judge(path=judge_url(db, "bystander"), name="bystander").close()  # tables exist
    judges_before = rows(db, "SELECT name, memory_id, change_seq FROM memalign_judges")
    _fail_at_the_episodes(monkeypatch, fault)
    with pytest.raises(fault):
        src.save(url)
    monkeypatch.undo()
    assert rows(db, "SELECT name, memory_id, change_seq FROM memalign_judges") == judges_before
    name = url.rsplit("judge=", 1)[1]
    for t in TABLES:
        assert rows(db, f"SELECT count(*) FROM {t} WHERE judge=%s", name) == [(0,)], t
    assert not memory_exists(url)
    with pytest.raises(MemoryFormatError, match="no MemAlign memory for this judge"):
        MemAlignJudge.load(url, model=model, embeddings=HashEmbeddings())
    # The same save, without the fault, creates the judge whole.
    assert src.save(url) == url
    copy = MemAlignJudge.load(url, model=model, embeddings=HashEmbeddings())
    assert copy.feedback_ids == ["sweater", "hours"]
    assert copy.memory.store.change_seq() == 1
    copy.close()
    src.close()


def test_a_failed_save_to_a_new_schema_leaves_its_tables_empty(
    make_judge: Any, model: Any, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save that fails in a database without MemAlign tables leaves no judge; the schema
    and the tables it created stay, empty: they are every judge's of that schema, created
    once and idempotently, and another process may be opening a judge in them meanwhile."""
    src = make_judge(name="src")
    src.align([SWEATER])
    url = judge_url(db) + "&schema=team_a"
    _fail_at_the_episodes(monkeypatch, SaveInterrupted)
    with pytest.raises(SaveInterrupted):
        src.save(url)
    monkeypatch.undo()
    for t in ["memalign_judges", *TABLES]:
        assert rows(db, f"SELECT count(*) FROM team_a.{t}") == [(0,)], t
    assert not memory_exists(url)
    assert src.save(url) == url
    copy = MemAlignJudge.load(url, model=model, embeddings=HashEmbeddings())
    assert copy.feedback_ids == ["sweater"]
    copy.close()
    src.close()
