"""No credential of a memory URL in any message, repr, traceback, log record or CLI output.

A password sits in a URL's user info, in its query string (`?password=`,
`?sslpassword=`), or in pieces in a driver's message about a URL it could not parse;
`langchain_memalign._redact.redact` masks all of them, and every place that shows a
location or a driver's error goes through it. The server tests use the session's
PostgreSQL server with one role that needs a password.
"""

from __future__ import annotations

import logging
import time
import traceback
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fakes import HashEmbeddings

from langchain_memalign import MemAlignJudge, MemoryFormatError
from langchain_memalign._redact import redact, secrets_of
from langchain_memalign.cli import main
from langchain_memalign.errors import MemoryPermissionError, MemoryUnavailableError
from langchain_memalign.memory.location import PostgresTarget, describe_location
from langchain_memalign.memory.postgres import PostgresStore

SECRET = "Tr0ub4dor-S3cret"
OTHER = "Corr3ct-H0rse"

URLS = [
    f"postgresql://alice:{SECRET}@db.example:5433/team?sslmode=require",
    f"postgresql://alice@db.example/team?password={SECRET}&judge=tone",
    f"postgresql://alice@db.example/team?sslpassword={SECRET}&password={OTHER}",
    f"postgres://alice:{SECRET}@db.example/team?judge=a@b",
    f"postgresql:///team?host=/run/postgresql&user=alice&password={SECRET}",
    f"postgresql://alice:{SECRET}%2F@db.example/team",
    f"postgresql://alice:x/{SECRET}@db.example/team?judge=j",
    f"postgresql://alice:x?{SECRET}@db.example/team",
    f"postgresql://alice:p@{SECRET}@db.example/team",
    f"postgresql://alice@db.example/team?PassWord={SECRET}",
    f"host=db.example user=alice password={SECRET} dbname=team",
    f"host=db.example user=alice password='{SECRET} x' dbname=team",
]


def _leaks(text: str) -> bool:
    return SECRET in text or OTHER in text


@pytest.mark.parametrize("url", URLS)
def test_redact_masks_every_credential_of_a_url(url: str) -> None:
    shown = redact(url)
    assert not _leaks(shown) and "***" in shown
    assert "db.example" in shown or "/run/postgresql" in shown  # still says where
    assert not _leaks(redact(f"cannot open {url}: refused"))  # inside a message too
    assert SECRET in secrets_of(url) or any(SECRET in s for s in secrets_of(url))


def test_a_drivers_message_quoting_a_piece_of_the_url_is_scrubbed() -> None:
    url = f"postgresql://alice:Xq9/{SECRET}@127.0.0.1/team"
    message = 'invalid integer value "Xq9" for connection option "port"'
    assert "Xq9" not in redact(message, url)
    assert redact("no secret here", url) == "no secret here"


def test_text_without_credentials_is_unchanged() -> None:
    for text in (
        "postgresql://alice@db.example:5433/team?sslmode=require&judge=tone",
        "/home/alice/memories/helpfulness",
        'FATAL: password authentication failed for user "alice"',
    ):
        assert redact(text) == text


def test_target_repr_and_describe_and_parse_errors_hide_the_password() -> None:
    url = f"postgresql://alice:{SECRET}@db.example/team?password={OTHER}&judge=tone"
    target = PostgresTarget.parse(url)
    for text in (repr(target), str(target), target.describe(), describe_location(url)):
        assert not _leaks(text) and "db.example" in text
    with pytest.raises(MemoryFormatError) as e:
        PostgresTarget.parse(url + "&staleness=soon")
    assert not _leaks(_everything(e.value))


def test_a_nul_in_the_judge_name_is_a_documented_error() -> None:
    with pytest.raises(MemoryFormatError, match="NUL"):
        PostgresTarget.parse("postgresql://db.example/team?judge=a%00b")


def _everything(error: BaseException) -> str:
    """Message, repr and the whole printed traceback, causes included."""
    return "\n".join([str(error), repr(error), *traceback.format_exception(error)])


# -- against the server --------------------------------------------------------------------


@pytest.fixture(scope="module")
def password_role(pg_server: Any) -> str:
    """A role that must give its password (the others are trusted); returns its name."""
    import psycopg

    hba = pg_server.data / "pg_hba.conf"
    line = "host all memalign_pw 127.0.0.1/32 scram-sha-256\n"
    if line not in hba.read_text():
        hba.write_text(line + hba.read_text())
    with psycopg.connect(pg_server.url(), autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS memalign_pw")
        conn.execute("CREATE ROLE memalign_pw LOGIN PASSWORD 'the-right-one'")
        conn.execute("SELECT pg_reload_conf()")
    return "memalign_pw"


def _server_urls(pg_server: Any, role: str) -> list[tuple[str, Any]]:
    host = f"127.0.0.1:{pg_server.port}"
    opts = "open_timeout=1"
    return [
        (f"postgresql://{role}:{SECRET}@{host}/postgres?{opts}", MemoryFormatError),
        (f"postgresql://{role}@{host}/postgres?password={SECRET}&{opts}", MemoryFormatError),
        (
            f"postgresql://{role}@{host}/postgres?sslpassword={OTHER}&password={SECRET}&{opts}",
            MemoryFormatError,
        ),
        (f"postgresql://{role}@{host}/nodb?password={SECRET}&{opts}", MemoryFormatError),
        (f"postgresql://{role}:{SECRET}@127.0.0.1:1/postgres?{opts}", MemoryUnavailableError),
        (
            f"postgresql://{role}@127.0.0.1:1/postgres?password={SECRET}&{opts}",
            MemoryUnavailableError,
        ),
        # A password with "/", read as host:port: a driver's message may quote a piece.
        (
            f"postgresql://{role}:Xq9/{SECRET}@{host}/postgres?{opts}",
            (MemoryFormatError, MemoryUnavailableError),
        ),
    ]


def test_no_open_error_shows_a_credential(
    pg_server: Any, password_role: str, caplog: pytest.LogCaptureFixture, model: Any
) -> None:
    caplog.set_level(logging.DEBUG, logger="psycopg")
    caplog.set_level(logging.DEBUG, logger="psycopg.pool")
    for url, expected in _server_urls(pg_server, password_role):
        for open_it in (
            lambda url=url: MemAlignJudge.load(url, model=model, embeddings=HashEmbeddings()),
            lambda url=url: MemAlignJudge(
                name="j",
                instructions="Good? {inputs}",
                model=model,
                embeddings=HashEmbeddings(),
                path=url,
            ),
        ):
            with pytest.raises((MemoryFormatError, MemoryUnavailableError)) as e:
                open_it()
            assert isinstance(e.value, expected), (url, e.value)
            text = _everything(e.value)
            assert not _leaks(text) and "Xq9" not in text, text
            assert "127.0.0.1" in str(e.value)
    logged = caplog.text + "".join(str(r.args) for r in caplog.records)
    assert not _leaks(logged) and "Xq9" not in logged


def test_a_wrong_password_fails_fast_and_says_so(pg_server: Any, password_role: str) -> None:
    # The default open_timeout (30 s): the pool would retry a wrong password until then.
    url = f"postgresql://{password_role}:{SECRET}@127.0.0.1:{pg_server.port}/postgres"
    for opening in (PostgresStore.create, PostgresStore.open):
        started = time.monotonic()
        with pytest.raises(MemoryPermissionError, match="authentication failed") as e:
            opening(url)
        assert time.monotonic() - started < 20  # under 30 s, with room for a loaded machine
        assert not _leaks(_everything(e.value))
        assert "memalign_pw" in str(e.value)  # names the role PostgreSQL refused


def test_messages_about_a_stored_judge_hide_the_password(
    pg_server: Any, make_judge: Any, model: Any
) -> None:
    # Trusted role: the password is accepted and ignored, and must still never show.
    db = pg_server.new_database()
    url = f"{db}?judge=j{uuid.uuid4().hex[:8]}&password={SECRET}"
    judge = make_judge(path=url)
    assert not _leaks(repr(judge.memory.store)) and not _leaks(judge.memory.store.describe())
    judge.close()
    with pytest.raises(MemoryFormatError, match="holds the memory of judge") as e:
        make_judge(path=url, scale=(1, 5))
    assert not _leaks(_everything(e.value))


def test_the_cli_prints_no_credential(
    pg_server: Any, password_role: str, tmp_path: Path, capsys: Any
) -> None:
    url = (
        f"postgresql://{password_role}@127.0.0.1:{pg_server.port}/postgres"
        f"?password={SECRET}&open_timeout=1"
    )
    assert main(["show", "--memory", url]) != 0
    out = capsys.readouterr()
    assert "error" in out.err and not _leaks(out.out + out.err)


# -- passwords written without percent-encoding (issue 47) ---------------------------------

# Each password holds SECRET and a second word (PART): a parser that cuts the password at
# a character libpq or urllib read otherwise must still show neither piece.
PART = "Wh1sk3rs"


def _forms(host: str, role: str = "alice", db: str = "team") -> dict[str, str]:
    """A password in the ten ways a memory location may hold one."""
    u = f"postgresql://{role}"
    return {
        "plain": f"{u}:{SECRET}{PART}@{host}/{db}",
        "percent-encoded": f"{u}:{SECRET}%40{PART}%2F%20@{host}/{db}",
        "quote": f"{u}:{SECRET}'{PART}\"@{host}/{db}",
        "space": f"{u}:{SECRET} {PART}@{host}/{db}",
        "question mark": f"{u}:{SECRET}?{PART}@{host}/{db}",
        "hash": f"{u}:{SECRET}#{PART}@{host}/{db}",
        "at": f"{u}:{SECRET}@{PART}@{host}/{db}",
        "at and slash": f"{u}:{SECRET}@x/{PART}@{host}/{db}",
        "query parameter": f"{u}@{host}/{db}?password={SECRET}{PART}",
        "key=value": (
            f"host={host.split(':')[0]} port={[*host.split(':'), '5432'][1]} "
            f"user={role} password='{SECRET} {PART}' dbname={db}"
        ),
    }


FORMS = _forms("db.example:5433")


def _shows_a_part(text: str) -> bool:
    return SECRET in text or PART in text or "Tr0ub" in text


@pytest.mark.parametrize("form", list(FORMS))
def test_no_form_of_password_shows_in_any_rendering(form: str) -> None:
    url = FORMS[form]
    sep = "&" if form == "query parameter" else "?"  # the `?` of a password starts no query
    rendered = [redact(url), redact(f"cannot open {url}: refused"), redact(url, url)]
    rendered.append(describe_location(url))
    if url.startswith("postgresql://"):
        target = PostgresTarget.parse(f"{url}{sep}judge=tone")
        assert target.judge == "tone"
        rendered += [repr(target), target.describe(), target.redact(target.conninfo)]
        rendered.append(target.redact(f"{target.conninfo} and {url}"))
        with pytest.raises(MemoryFormatError) as e:
            PostgresTarget.parse(f"{url}{sep}staleness=soon")
        rendered.append(_everything(e.value))
    for text in rendered:
        assert not _shows_a_part(text), (form, text)
        assert "db.example" in text, (form, text)  # still says where


def test_a_question_mark_or_hash_in_the_password_stays_the_password() -> None:
    # libpq reads the user info up to the first `@`: `?` and `#` before it are the
    # password's, and the URL's own parameters after the host are still ours.
    for sep in "?#":
        target = PostgresTarget.parse(f"postgresql://a:{SECRET}{sep}x@h/db?judge=tone")
        assert target.judge == "tone"
        assert target.conninfo == f"postgresql://a:{SECRET}{sep}x@h/db"


def test_libpq_parameters_are_passed_on_as_written() -> None:
    # A space in `options=` is `%20` for libpq, which does not read `+` as a space.
    url = "postgresql://h/db?options=-c%20statement_timeout%3D5000&judge=tone&sslmode=prefer"
    target = PostgresTarget.parse(url)
    assert (
        target.conninfo == "postgresql://h/db?options=-c%20statement_timeout%3D5000&sslmode=prefer"
    )
    psycopg = pytest.importorskip("psycopg")
    params = psycopg.conninfo.conninfo_to_dict(target.conninfo)
    assert params["options"] == "-c statement_timeout=5000"


@pytest.mark.parametrize("form", list(FORMS))
def test_no_form_of_password_shows_when_opening_fails(
    form: str,
    pg_server: Any,
    password_role: str,
    caplog: pytest.LogCaptureFixture,
    capsys: Any,
    model: Any,
) -> None:
    url = _forms(f"127.0.0.1:{pg_server.port}", password_role, "postgres")[form]
    if url.startswith("postgresql://"):
        url += ("&" if form == "query parameter" else "?") + "open_timeout=3"
    else:
        pytest.skip("a key=value string is no memory location; redact covers it above")
    caplog.set_level(logging.DEBUG, logger="psycopg")
    caplog.set_level(logging.DEBUG, logger="psycopg.pool")
    with pytest.raises((MemoryFormatError, MemoryUnavailableError)) as e:
        MemAlignJudge.load(url, model=model, embeddings=HashEmbeddings())
    text = _everything(e.value)
    assert not _shows_a_part(text), text
    assert main(["show", "--memory", url]) != 0
    out = capsys.readouterr()
    assert "error" in out.err and not _shows_a_part(out.out + out.err), out.err
    logged = caplog.text + "".join(str(r.args) for r in caplog.records)
    assert not _shows_a_part(logged), logged


# -- what the driver's exception objects carry (issue 47) ----------------------------------


def _chain(error: BaseException) -> list[BaseException]:
    """`error` and every exception reachable from it by `__cause__` and `__context__`."""
    seen: list[BaseException] = []
    todo = [error]
    while todo:
        e = todo.pop()
        if any(e is s for s in seen):
            continue
        seen.append(e)
        todo += [x for x in (e.__cause__, e.__context__) if x is not None]
    return seen


def _carried(error: BaseException) -> str:
    """Everything an exception chain holds that code could read: messages, reprs, args,
    and every attribute of every exception in it (psycopg's `pgconn` among them)."""
    parts = []
    for e in _chain(error):
        parts += [str(e), repr(e), repr(e.args)]
        for name in dir(e):
            if name.startswith("__") or name == "with_traceback":
                continue
            try:
                parts.append(repr(getattr(e, name)))
            except Exception:  # a property that needs what the exception does not have
                continue
    return "\n".join(parts)


def test_no_exception_object_of_a_failed_open_carries_the_password(
    pg_server: Any, password_role: str, caplog: pytest.LogCaptureFixture, model: Any
) -> None:
    """psycopg keeps the failed connection in `e.pgconn`, password and all: neither the
    error raised nor anything chained to it or logged may hold it."""
    caplog.set_level(logging.DEBUG, logger="psycopg")
    caplog.set_level(logging.DEBUG, logger="psycopg.pool")
    host = f"127.0.0.1:{pg_server.port}"
    urls = [
        f"postgresql://{password_role}:{SECRET}@{host}/postgres?open_timeout=3",  # refused
        f"postgresql://{password_role}@{host}/postgres?password={SECRET}&open_timeout=3",
        f"postgresql://memalign:{SECRET}@{host}/nodb_{uuid.uuid4().hex[:6]}?open_timeout=3",
    ]
    for url in urls:
        for opening in (PostgresStore.create, PostgresStore.open):
            with pytest.raises(MemoryFormatError) as e:
                opening(url)
            assert not _leaks(_carried(e.value)), (url, _carried(e.value))
    for record in caplog.records:
        held = [record.getMessage(), repr(record.args), repr(record.exc_info)]
        for arg in (*(record.args or ()), *(record.exc_info or ())[1:2]):
            if isinstance(arg, BaseException):
                held.append(_carried(arg))
        assert not _leaks("\n".join(held)), held


def test_a_database_that_does_not_exist_fails_fast_and_is_named(pg_server: Any) -> None:
    """SQLSTATE 3D000 stays so however long the pool retries: no wait for open_timeout."""
    missing = f"nodb_{uuid.uuid4().hex[:8]}"
    url = f"postgresql://memalign@127.0.0.1:{pg_server.port}/{missing}?judge=tone"
    for opening in (PostgresStore.create, PostgresStore.open):
        started = time.monotonic()
        with pytest.raises(MemoryFormatError) as e:
            opening(url)
        assert time.monotonic() - started < 20  # the default open_timeout is 30 s
        assert not isinstance(e.value, MemoryPermissionError)
        assert f"database {missing!r} does not exist" in str(e.value)
        assert "127.0.0.1" in str(e.value)


def test_refusals_are_told_by_sqlstate_before_the_message() -> None:
    """A server whose messages are translated (`lc_messages`) still refuses by code:
    28P01 and 28000 are authentication, 3D000 a missing database, whatever the words."""
    psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    from langchain_memalign.memory._pg_base import _refusal

    errors = psycopg.errors
    german = {
        errors.InvalidPassword: "Passwort-Authentifizierung für Benutzer »a« fehlgeschlagen",
        errors.InvalidAuthorizationSpecification: "Rolle »a« existiert nicht",
        errors.InvalidCatalogName: "Datenbank »x« existiert nicht",
    }
    assert _refusal(errors.InvalidPassword(german[errors.InvalidPassword])) == "authentication"
    assert _refusal(errors.InvalidAuthorizationSpecification("x")) == "authentication"
    assert _refusal(errors.InvalidCatalogName(german[errors.InvalidCatalogName])) == "database"
    # No SQLSTATE (psycopg gives none for a failed connection attempt): libpq's own flag
    # that the server asked for a password none was given for, then the English words.
    no_password = psycopg.OperationalError("Verbindung fehlgeschlagen")
    no_password._pgconn = SimpleNamespace(needs_password=True)  # what libpq reports
    assert _refusal(no_password) == "authentication"
    english = 'connection failed: FATAL:  password authentication failed for user "a"'
    assert _refusal(psycopg.OperationalError(english)) == "authentication"
    assert _refusal(psycopg.OperationalError('FATAL:  database "x" does not exist')) == "database"
    for transient in (
        "connection failed: Connection refused",
        "FATAL:  the database system is starting up",
        "FATAL:  sorry, too many clients already",
    ):
        assert _refusal(psycopg.OperationalError(transient)) is None
    assert _refusal(errors.TooManyConnections("zu viele Verbindungen")) is None


def test_a_server_out_of_connections_is_told_by_sqlstate_before_the_message() -> None:
    """SQLSTATE 53300 is a server with no connection to spare, whatever its words; without
    a SQLSTATE (a failed connection attempt), the server's English words."""
    psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    from langchain_memalign.memory._pg_base import _out_of_connections

    assert _out_of_connections(psycopg.errors.TooManyConnections("zu viele Verbindungen"))
    for text in (
        "connection failed: FATAL:  sorry, too many clients already",
        'FATAL:  too many connections for role "a"',
        'FATAL:  too many connections for database "x"',
        "FATAL:  remaining connection slots are reserved for roles with the SUPERUSER attribute",
        "FATAL:  remaining connection slots are reserved for non-replication superuser connections",
    ):
        assert _out_of_connections(psycopg.OperationalError(text)), text
    for text in (
        'FATAL:  database "x" does not exist',
        "FATAL:  the database system is starting up",
        "connection failed: Connection refused",
    ):
        assert not _out_of_connections(psycopg.OperationalError(text)), text
    assert not _out_of_connections(psycopg.errors.InvalidCatalogName("too many clients"))
    assert not _out_of_connections(None)
