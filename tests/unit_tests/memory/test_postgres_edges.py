"""PostgreSQL memories at their edges: freshness, bad URLs, NUL, privileges, schemas.

Runs on the real server of the `pg_server` fixture (see test_postgres.py). The
privilege and isolation tests create roles of their own (roles belong to the
whole server, so each test names them uniquely) and connect as them: the
test server trusts every local connection, so a role needs no password.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import HOURS, RUDE, SWEATER, fb
from fakes import HashEmbeddings

from langchain_memalign import (
    InvalidFeedbackError,
    MemAlignJudge,
    MemoryBusyError,
    MemoryFormatError,
)
from langchain_memalign.errors import (
    MemoryPermissionError,
    MemoryReadOnlyError,
    MemoryUnavailableError,
)
from langchain_memalign.memory.location import PostgresTarget
from langchain_memalign.memory.postgres import PostgresStore

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")

from pg_server import TempPostgres  # noqa: E402

CASE = {"inputs": "I was charged twice and I'm frustrated!", "outputs": "Refunds take 5-7 days."}


@pytest.fixture
def db(pg_server: TempPostgres) -> str:
    """A fresh database's URL."""
    return pg_server.new_database()


def judge_url(db: str, name: str | None = None, **params: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"judge": name or _name("j"), **params}.items())
    return f"{db}?{query}"


def _name(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:8]


def sql(db: str, statement: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(db, autocommit=True) as conn:
        cur = conn.execute(statement, args or None)
        return list(cur.fetchall()) if cur.description else []


def as_role(db: str, role: str) -> str:
    """`db`'s URL, connecting as `role` (with a password the trusting server ignores)."""
    return db.replace("postgresql://memalign@", f"postgresql://{role}:s3cretpw@")


# -- staleness 0: a judgment sees every commit made before it started ------------------


def _slow_catch_ups(judge: MemAlignJudge, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make this judge's catch-ups slow, so that judgments often find one running."""
    memory = judge.memory
    publish = memory._publish_locked

    def slow() -> None:
        time.sleep(0.02)
        publish()

    monkeypatch.setattr(memory, "_publish_locked", slow)


def test_staleness_zero_sees_every_commit_of_another_judge(
    make_judge: Any, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = judge_url(db)
    writer = make_judge(path=url, k=50)
    reader = make_judge(path=url, k=50)  # another pool, index and process state
    _slow_catch_ups(reader, monkeypatch)
    stop = threading.Event()
    errors: list[BaseException] = []

    def judge_all_the_time() -> None:
        # Other judgments of the reader's process: their catch-ups hold the index
        # while the checked judgment starts (a catch-up to an older commit, say).
        try:
            while not stop.is_set():
                reader.memory.snapshot()
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=judge_all_the_time) for _ in range(3)]
    for t in threads:
        t.start()
    stale = []
    try:
        for i in range(40):
            item = fb(f"f{i}", f"question number {i}", f"answer {i}", i % 2 == 0, None)
            writer.align([item])  # returned: committed
            committed = writer.memory.store.change_seq()
            view = reader.memory.snapshot()  # what a judgment starting now reads
            ids = reader.memory.store.episodes_by_rowid(view.index.ids().tolist(), as_of=view.seq)
            if view.seq < committed or f"f{i}" not in {e.id for e in ids.values()}:
                stale.append(i)
        # A whole judgment too, on the newest item.
        result = reader.invoke({"inputs": "question number 39", "outputs": "answer 39"})
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors
    assert stale == []
    assert "f39" in result["metadata"]["episode_ids"]
    writer.close()
    reader.close()


def test_staleness_zero_does_not_wait_for_a_writer_of_its_own_process(
    make_judge: Any, db: str
) -> None:
    url = judge_url(db)
    other = make_judge(path=url, k=5)
    reader = make_judge(path=url, k=5)
    reader.invoke(CASE)
    memory = reader.memory
    holding, release = threading.Event(), threading.Event()

    def hold_the_index() -> None:
        # As a writer of the reader's process does for a whole align (its database
        # lock left out: the other judge's commit below stands for one that does
        # not take it, such as a `save` into this judge).
        with memory.write_lock._writers, memory._index_lock:
            holding.set()
            release.wait(60)

    holder = threading.Thread(target=hold_the_index)
    holder.start()
    try:
        assert holding.wait(30)
        other.align([SWEATER, HOURS])
        committed = other.memory.store.change_seq()
        started = time.monotonic()
        result = reader.invoke({"inputs": SWEATER.inputs, "outputs": "Colors vary."})
        assert time.monotonic() - started < 20  # not blocked until the writer ends
        assert result["metadata"]["episode_ids"][0] == "sweater"
        assert reader.memory.snapshot().seq >= committed
        assert memory._view.seq < committed  # the writer's index was left alone
    finally:
        release.set()
        holder.join(30)
    # Once the writer is gone the published version catches up as usual.
    assert reader.memory.snapshot().seq == other.memory.store.change_seq()
    assert len(reader.memory.index) == 2
    other.close()
    reader.close()


# -- a URL libpq cannot use is refused at once --------------------------------------------


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgresql://bob:s3cretpw@127.0.0.1:abc/db", "invalid port 'abc'"),
        ("postgresql://bob:s3cretpw@127.0.0.1:99999/db", "invalid port '99999'"),
        ("postgresql://bob:s3cretpw@h1,h2,h3/db?port=1,2", "could not match 2 port numbers"),
        ("postgresql://%%%/db", "invalid percent-encoded token"),
        ("postgresql://bob:s3cret%zzpw@127.0.0.1/db", "invalid percent-encoded token"),
        ("postgresql://bob:s3cretpw@127.0.0.1/db?jugde=a", 'invalid URI query parameter: "jugde"'),
        ("postgresql://bob:s3cretpw@[::1/db", "malformed PostgreSQL URL"),
        ("postgresql://bob:s3cretpw@127.0.0.1/db?sslmode=bogus", 'invalid sslmode value: "bogus"'),
        ("postgresql://bob:s3cretpw@127.0.0.1/db?schema=Team_A", "schema 'Team_A'"),
        ("postgresql://bob:s3cretpw@127.0.0.1/db?schema=a;drop", "schema 'a;drop'"),
        ("postgresql://bob:s3cretpw@127.0.0.1/db?schema=pg_catalog", "schema 'pg_catalog'"),
    ],
)
def test_a_malformed_url_is_a_format_error_at_once(
    make_judge: Any, model: Any, url: str, says: str
) -> None:
    def check(error: MemoryFormatError) -> None:
        assert not isinstance(error, MemoryUnavailableError | ConnectionError)
        assert says in str(error)
        assert "s3cret" not in str(error) and "zzpw" not in str(error)
        assert "s3cret" not in repr(error.__cause__)

    # Timed where the opening starts (the judge's own setup is not the point), with
    # the default open_timeout of 30 s.
    for opening in (PostgresStore.create, PostgresStore.open):
        started = time.monotonic()
        with pytest.raises(MemoryFormatError) as err:
            opening(url)
        # Far under the 30 s a retried refusal takes, with room for a loaded machine.
        assert time.monotonic() - started < 15
        check(err.value)
    for through_judge in (
        lambda: make_judge(path=url),
        lambda: MemAlignJudge.load(url, model=model, embeddings=HashEmbeddings()),
    ):
        with pytest.raises(MemoryFormatError) as err:
            through_judge()
        check(err.value)


def test_schema_parameter_is_parsed_and_shown_without_the_password() -> None:
    t = PostgresTarget.parse("postgresql://bob:s3cretpw@h/db?schema=team_a&judge=tone")
    assert (t.schema, t.judge) == ("team_a", "tone")
    assert t.conninfo == "postgresql://bob:s3cretpw@h/db"  # not passed on to libpq
    assert "schema 'team_a'" in t.describe() and "s3cretpw" not in t.describe()
    assert PostgresTarget.parse("postgresql://h/db?schema=").schema is None
    assert PostgresTarget.parse("postgresql://h/db").schema is None


# -- content PostgreSQL cannot store, refused alike on every memory -----------------------


@pytest.mark.parametrize(
    ("field", "item"),
    [
        ("id", SWEATER.model_copy(update={"id": "swe\x00ater"})),
        ("rationale", SWEATER.model_copy(update={"rationale": "Say sorry\x00 first."})),
    ],
)
def test_nul_is_refused_before_any_model_call_on_both_backends(
    make_judge: Any,
    model: Any,
    embeddings: HashEmbeddings,
    db: str,
    tmp_path: Path,
    field: str,
    item: Any,
) -> None:
    messages = []
    for path in (tmp_path / "folder", judge_url(db)):
        judge = make_judge(path=path)
        judge.align([HOURS])
        seq, calls, embedded = judge.memory.store.change_seq(), len(model.calls), embeddings.calls
        with pytest.raises(InvalidFeedbackError) as err:
            judge.align([RUDE, item])
        assert err.value.feedback_id == item.id
        assert f"the {field} holds a NUL character" in str(err.value)
        messages.append(str(err.value))
        assert len(model.calls) == calls and embeddings.calls == embedded  # no model call
        assert judge.memory.store.change_seq() == seq  # nothing written
        assert judge.feedback_ids == ["hours"] and judge.stats()["episodes"] == 1
        judge.close()
    assert messages[0] == messages[1]  # the same error and message on both


def test_nul_where_json_keeps_it_round_trips_on_both_backends(
    make_judge: Any, db: str, tmp_path: Path
) -> None:
    item = SWEATER.model_copy(
        update={"annotator": "ann\x00", "metadata": {"k\x00": "v\x00"}, "outputs": "o\x00"}
    )
    for path in (tmp_path / "folder", judge_url(db)):
        judge = make_judge(path=path)
        judge.align([item])
        assert judge.get_feedback(item.id) == item
        judge.close()


def test_a_judge_name_with_nul_is_refused_on_both_backends(
    make_judge: Any, db: str, tmp_path: Path
) -> None:
    url = judge_url(db)
    messages = []
    for path in (tmp_path / "folder", url):
        with pytest.raises(ValueError, match="judge name holds a NUL character") as err:
            make_judge(path=path, name="help\x00fulness")
        messages.append(str(err.value))
    assert messages[0] == messages[1]
    assert not (tmp_path / "folder").exists()
    assert not sql(db, "SELECT 1 FROM pg_tables WHERE tablename='memalign_judges'")


# -- privileges: a role that may not do something gets MemoryPermissionError --------------


@pytest.fixture
def roles(db: str) -> Iterator[list[str]]:
    """Create roles on the test server (`roles.append(name)`); dropped afterwards."""
    made: list[str] = []
    yield made
    for role in made:
        sql(db, f"DROP OWNED BY {role} CASCADE")
        sql(db, f"DROP ROLE {role}")


def make_role(db: str, roles: list[str], prefix: str) -> str:
    role = _name(prefix)
    sql(db, f"CREATE ROLE {role} LOGIN")
    roles.append(role)
    return role


def test_a_role_with_select_only_may_judge_but_not_write(
    make_judge: Any, model: Any, db: str, roles: list[str]
) -> None:
    owner = make_role(db, roles, "owner_")
    reader = make_role(db, roles, "reader_")
    nobody = make_role(db, roles, "nobody_")
    sql(db, f"CREATE SCHEMA memory AUTHORIZATION {owner}")
    url = judge_url(as_role(db, owner), "helpfulness", schema="memory")
    judge = make_judge(path=url, k=2)
    judge.align([SWEATER, HOURS])
    expected = judge.invoke(CASE)
    judge.close()
    sql(db, f"GRANT USAGE ON SCHEMA memory TO {reader}")
    sql(db, f"GRANT SELECT ON ALL TABLES IN SCHEMA memory TO {reader}")
    seq = sql(db, "SELECT change_seq FROM memory.memalign_judges")

    read_url = url.replace(f"{owner}:", f"{reader}:")
    loaded = MemAlignJudge.load(read_url, model=model, embeddings=HashEmbeddings())
    assert loaded.invoke(CASE) == expected  # judging needs SELECT only
    for write in (lambda: loaded.align([RUDE]), lambda: loaded.unalign(["hours"])):
        with pytest.raises(MemoryPermissionError, match="permission denied for table") as err:
            write()
        assert f"refused role '{reader}'" in str(err.value) and "s3cretpw" not in str(err.value)
        assert not isinstance(err.value, psycopg.Error)
        assert isinstance(err.value.__cause__, psycopg.errors.InsufficientPrivilege)
    loaded.close()
    with pytest.raises(MemoryPermissionError, match="permission denied"):
        make_judge(path=read_url, k=2)  # creating (or opening with a configuration) writes
    assert sql(db, "SELECT change_seq FROM memory.memalign_judges") == seq
    assert sql(db, "SELECT count(*) FROM memory.memalign_feedback") == [(2,)]

    no_url = url.replace(f"{owner}:", f"{nobody}:")
    for opening in (
        lambda: MemAlignJudge.load(no_url, model=model, embeddings=HashEmbeddings()),
        lambda: make_judge(path=no_url),
    ):
        with pytest.raises(MemoryPermissionError, match="no USAGE privilege on schema 'memory'"):
            opening()
    # Without the schema parameter: the tables in a schema it may use, but no privilege.
    sql(db, f"GRANT USAGE ON SCHEMA memory TO {nobody}")
    plain = judge_url(as_role(db, nobody), "helpfulness") + "&options=-csearch_path%3Dmemory"
    with pytest.raises(MemoryPermissionError, match="permission denied for table memalign_schema"):
        MemAlignJudge.load(plain, model=model, embeddings=HashEmbeddings())


def test_a_role_that_may_not_create_the_schema_or_tables(
    make_judge: Any, db: str, roles: list[str]
) -> None:
    role = make_role(db, roles, "plain_")
    url = as_role(db, role)
    with pytest.raises(MemoryPermissionError, match="may not create it") as err:
        make_judge(path=judge_url(url, schema="fresh"))
    assert "s3cretpw" not in str(err.value)
    sql(db, f"CREATE SCHEMA locked AUTHORIZATION memalign; GRANT USAGE ON SCHEMA locked TO {role}")
    with pytest.raises(MemoryPermissionError, match="permission denied for schema locked"):
        make_judge(path=judge_url(url, schema="locked"))
    assert not sql(db, "SELECT 1 FROM pg_tables WHERE tablename='memalign_judges'")


# -- a read-only database, a lock not granted in time: the errors a folder gives -----------


def test_a_read_only_database_judges_and_refuses_writes_as_read_only(
    make_judge: Any, model: Any, db: str
) -> None:
    url = judge_url(db, "helpfulness")
    judge = make_judge(path=url, k=2)
    judge.align([SWEATER, HOURS])
    expected = judge.invoke(CASE)
    judge.close()
    # What a standby server, or a database an administrator made read-only, does.
    sql(db, f"ALTER DATABASE {db.rsplit('/', 1)[1]} SET default_transaction_read_only = on")
    loaded = MemAlignJudge.load(url, model=model, embeddings=HashEmbeddings())
    assert loaded.invoke(CASE) == expected
    for write in (lambda: loaded.align([RUDE]), lambda: loaded.unalign(["hours"])):
        with pytest.raises(MemoryReadOnlyError, match="read-only") as err:
            write()
        assert isinstance(err.value, OSError) and not isinstance(err.value, MemoryFormatError)
        assert isinstance(err.value.__cause__, psycopg.errors.ReadOnlySqlTransaction)
    loaded.close()
    assert sql(db, "SELECT count(*) FROM memalign_feedback") == [(2,)]


def test_a_lock_not_granted_within_lock_timeout_is_memory_busy(make_judge: Any, db: str) -> None:
    url = judge_url(db, "helpfulness", options="-clock_timeout%3D200")
    judge = make_judge(path=url, k=2)
    judge.align([SWEATER])
    with psycopg.connect(db) as other:  # another writer's transaction holds the judge's row
        other.execute("SELECT 1 FROM memalign_judges WHERE name='helpfulness' FOR UPDATE")
        with pytest.raises(MemoryBusyError, match="busy") as err:
            judge.align([HOURS])
        assert isinstance(err.value, TimeoutError) and not isinstance(err.value, MemoryFormatError)
        other.rollback()
    assert judge.memory.store.feedback_ids() == ["sweater"]
    judge.align([HOURS])  # the other writer is done: the retry goes through
    assert sorted(judge.memory.store.feedback_ids()) == ["hours", "sweater"]
    judge.close()


def test_a_server_out_of_connections_is_unavailable_not_a_format_error(
    make_judge: Any, model: Any, db: str, roles: list[str]
) -> None:
    """SQLSTATE 53300 (too many clients, or a role's or database's connection limit) is
    a server that is busy for now: retrying helps, the memory is not at fault."""
    url = judge_url(db, "helpfulness")
    make_judge(path=url).close()
    role = make_role(db, roles, "crowded_")
    sql(db, f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}")
    # The server refuses the role's every connection, as when max_connections is reached
    # ("sorry, too many clients already"), with the same SQLSTATE.
    sql(db, f"ALTER ROLE {role} CONNECTION LIMIT 0")
    crowded = as_role(db, role) + "?judge=helpfulness&open_timeout=1"
    for opening in (
        lambda: make_judge(path=crowded),
        lambda: MemAlignJudge.load(crowded, model, HashEmbeddings()),
    ):
        with pytest.raises(MemoryUnavailableError, match="too many connections") as err:
            opening()
        assert isinstance(err.value, ConnectionError)
        assert not isinstance(err.value, MemoryFormatError)
        assert "53300" in str(err.value) and "s3cretpw" not in str(err.value)
    sql(db, f"ALTER ROLE {role} CONNECTION LIMIT -1")  # a connection is free again
    # The default open_timeout: 1 s is short for a loaded CI machine's first connection.
    MemAlignJudge.load(crowded.replace("&open_timeout=1", ""), model, HashEmbeddings()).close()


# -- isolation: one database, a schema and a role per team ---------------------------------


def test_one_database_two_teams_each_in_its_schema(
    make_judge: Any, model: Any, db: str, roles: list[str]
) -> None:
    team_a = make_role(db, roles, "team_a_")
    team_b = make_role(db, roles, "team_b_")
    for role in (team_a, team_b):  # the recipe of docs/postgres.md
        sql(db, f"CREATE SCHEMA {role} AUTHORIZATION {role}")
    a_url = judge_url(as_role(db, team_a), "helpfulness", schema=team_a)
    b_url = judge_url(as_role(db, team_b), "helpfulness", schema=team_b)
    a = make_judge(path=a_url)
    b = make_judge(path=b_url)
    a.align([SWEATER, HOURS])
    b.align([RUDE])
    # The same judge name in each schema, each with its own rows and tables.
    assert (a.feedback_ids, b.feedback_ids) == (["sweater", "hours"], ["rude"])
    assert sorted(
        r[0]
        for r in sql(db, "SELECT schemaname FROM pg_tables WHERE tablename='memalign_feedback'")
    ) == sorted([team_a, team_b])
    assert sql(db, f"SELECT id FROM {team_b}.memalign_feedback") == [("rude",)]

    # Team A's role cannot read or write team B's memory, by URL or by SQL.
    a_to_b = b_url.replace(f"{team_b}:", f"{team_a}:")
    for opening in (
        lambda: MemAlignJudge.load(a_to_b, model=model, embeddings=HashEmbeddings()),
        lambda: make_judge(path=a_to_b),
    ):
        with pytest.raises(MemoryPermissionError, match=f"schema '{team_b}'") as err:
            opening()
        assert "s3cretpw" not in str(err.value)
    with (
        psycopg.connect(as_role(db, team_a)) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute(f"SELECT * FROM {team_b}.memalign_feedback")
    assert sql(db, f"SELECT id FROM {team_b}.memalign_feedback") == [("rude",)]

    # Writers of one judge name in two schemas do not wait for each other.
    done = threading.Event()
    with a.memory.write_lock:
        t = threading.Thread(target=lambda: (b.align([HOURS]), done.set()))
        t.start()
        assert done.wait(60)
    t.join(30)
    # Each team reopens its own memory.
    for url, ids in ((a_url, ["sweater", "hours"]), (b_url, ["rude", "hours"])):
        again = MemAlignJudge.load(url, model=model, embeddings=HashEmbeddings())
        assert again.feedback_ids == ids
        again.close()
    a.close()
    b.close()


def test_cli_memory_setting_takes_a_url_with_a_schema(
    db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], roles: list[str]
) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
    from test_cli import CONFIG, EXIT_OK, Env

    role = make_role(db, roles, "team_cli_")
    sql(db, f"CREATE SCHEMA {role} AUTHORIZATION {role}")
    url = judge_url(as_role(db, role), "helpfulness", schema=role)
    env = Env(tmp_path, capsys)
    env.config.write_text(CONFIG.replace('memory = "mem"', f'memory = "{url}"'))
    code, out, err = env.run("create")
    assert code == EXIT_OK and "Created judge 'helpfulness'" in out
    assert "s3cretpw" not in out + err
    assert env.run("align", env.feedback)[0] == EXIT_OK
    code, out, _ = env.run("show")
    assert code == EXIT_OK and "3 feedback" in out and "s3cretpw" not in out
    assert sql(db, f"SELECT count(*) FROM {role}.memalign_feedback") == [(3,)]


# -- the connections an align holds (issue 47) ---------------------------------------------


def test_an_align_works_on_a_pool_of_one_connection(make_judge: Any, db: str) -> None:
    # The writers' lock and the align's transaction share one connection: with two, the
    # transaction waited for a second connection of a pool of one, then failed as
    # "lost the connection" after the pool's 30 s.
    judge = make_judge(path=f"{db}?judge=one&pool_size=1")
    started = time.monotonic()
    report = judge.align([SWEATER, HOURS])
    assert time.monotonic() - started < 20
    assert report.added == ["sweater", "hours"]
    assert judge.invoke(CASE)["score"] is not None
    judge.close()


def test_a_judgment_during_a_slow_align_does_not_wait_for_it(
    make_judge: Any, model: Any, db: str, responder: Any
) -> None:
    # pool_size=2: the align holds one connection for its whole length (its model calls
    # included), the judgment takes the other.
    reflecting, release = threading.Event(), threading.Event()

    def slow(messages: Any) -> Any:
        if "<feedback id=" in str(messages[-1].content):  # a reflection of the align
            reflecting.set()
            release.wait(60)
        return responder(messages)

    judge = make_judge(path=f"{db}?judge=two&pool_size=2")
    judge.align([HOURS])
    model.responder = slow
    errors: list[BaseException] = []

    def align() -> None:
        try:
            judge.align([SWEATER])
        except BaseException as e:  # reported below
            errors.append(e)

    writer = threading.Thread(target=align)
    writer.start()
    try:
        assert reflecting.wait(30)
        started = time.monotonic()
        result = judge.invoke(CASE)
        # Blocked, it would wait for `release` (set only below): any bound proves it.
        assert time.monotonic() - started < 20
        assert result["score"] is not None
        assert not release.is_set()  # the align was still running
    finally:
        release.set()
        writer.join(60)
    assert not errors
    assert "sweater" in judge.feedback_ids
    judge.close()
