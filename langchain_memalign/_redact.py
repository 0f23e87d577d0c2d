"""Credentials out of every message, log record, repr and traceback: `redact`.

A PostgreSQL location may carry a password in three places: the user info of
a URL (`postgresql://alice:pw@host/db`), its query string (`?password=pw`,
`?sslpassword=...`), and the `password=...` pair of a libpq key=value
connection string. Every place this package shows a location, or text that may
hold one (an error of the driver, a log record of the pool), passes it through
`redact`, the one function that knows all of them.

A location is parsed as libpq parses it, not matched by patterns: a URL's user
info ends at its first `@` or `/` (libpq reads `#`, `?`, quotes and spaces
before it as part of the password, and no fragment), its query starts at the
first `?` after that, a key=value string is split into its quoted and escaped
values. A password libpq reads otherwise than its writer meant (an unencoded
`@` or `/` in it) is masked the way each reading cuts it: from the user
name's `:` to the last `@` before the query. Text that quotes the location is
then scrubbed of every secret value of it, as written, as libpq decodes it,
and in the pieces a parser may quote ("invalid port number: "pa"").

Which query parameters are secret is decided by name: libpq's `password`
and `sslpassword`, and any other whose name says it is one (`pass`,
`secret`, `token`, `key` as a word). A value masked that was not secret
costs a less precise message; a secret shown cannot be taken back.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from urllib.parse import unquote

__all__ = [
    "MASK",
    "mask_location",
    "redact",
    "redact_logs",
    "scrub_exception",
    "secrets_of",
    "split_uri",
]

MASK = "***"

# The URI designators libpq accepts.
_URI_PREFIXES = ("postgresql://", "postgres://")
# A query or connection-string parameter whose value is a secret, by its name.
_SECRET_NAME = re.compile(r"pass|secret|token|credential|(?:^|_)key$|^auth", re.IGNORECASE)
# A URL inside free text (a location quoted without being named as a source).
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]*")
# Where a parser may cut a password in pieces (and quote one of them).
_DELIMITERS = re.compile(r"[/?#@:&=\s'\"\\,;]")
# Where a URL's query starts: the first `?name=` or `&name=`.
_QUERY_START = re.compile(r"[?&][\w.\-]+=")
# A key of a key=value connection string, then its `=`.
_KEY = re.compile(r"\s*([A-Za-z_][\w.\-]*)\s*=\s*")


def split_uri(url: str) -> tuple[int, int, int] | None:
    """How libpq reads a `postgresql://` URI: (end of its user info, start of its query).

    Indexes into `url`, as a 3-tuple (start of the text after the scheme, end
    of the user info: the index after its `@`, or that start if it has none,
    and the index of the query's `?`, or len(url)); None if `url` is not a URI
    libpq accepts. libpq's grammar: the user info runs to the first `@` unless
    a `/` comes first, and the host, port and database all end at a `?`.
    """
    prefix = next((p for p in _URI_PREFIXES if url.startswith(p)), None)
    if prefix is None:
        return None
    start = len(prefix)
    at = re.compile(r"[@/]").search(url, start)
    user_end = at.end() if at is not None and at.group() == "@" else start
    query = url.find("?", user_end)
    return start, user_end, query if query >= 0 else len(url)


def _password_span(url: str) -> tuple[int, int, int]:
    """(start, end) of the password of a URI however a parser reads it, and its query start.

    The widest of three readings, so that a password is masked however it is
    cut: libpq's (`split_uri`), urllib's (the last `@` before the first `/`,
    `?` or `#`), and the writer's (the last `@` before the query's first
    `name=`: a password with an unencoded `/`, `?` or `@`).
    """
    start = url.index("://") + 3
    ends = []
    libpq = split_uri(url)
    if libpq is not None and libpq[1] > libpq[0]:
        ends.append(libpq[1] - 1)
    stop = re.compile(r"[/?#]").search(url, start)
    ends.append(url.rfind("@", start, stop.start() if stop else len(url)))
    named = _QUERY_START.search(url, start)
    ends.append(url.rfind("@", start, named.start() if named else len(url)))
    end = max(ends)
    if end < 0:
        query = url.find("?", start)
        return start, start, query if query >= 0 else len(url)
    colon = url.find(":", start, end)
    query = url.find("?", end)
    return (colon + 1 if colon >= 0 else end), end, query if query >= 0 else len(url)


def _query_secrets(url: str, query: int) -> Iterator[tuple[int, int]]:
    """Spans of the values of secret-named parameters of the query starting at `query`."""
    pos = query + 1
    while pos <= len(url):
        amp = url.find("&", pos)
        piece_end = len(url) if amp < 0 else amp
        key, eq, _ = url[pos:piece_end].partition("=")
        if eq and _SECRET_NAME.search(unquote(key)) and piece_end > pos + len(key) + 1:
            yield pos + len(key) + 1, piece_end
        pos = piece_end + 1


def _dsn_values(text: str) -> Iterator[tuple[str, int, int, str]]:
    """(key, value start, value end, value as libpq unescapes it) of a key=value string.

    libpq's grammar: `key = value` pairs separated by white space, a value
    either bare (up to white space) or single-quoted, a backslash escaping the
    next character in both.
    """
    pos = 0
    while True:
        m = _KEY.match(text, pos)
        if m is None:
            return
        start = i = m.end()
        quoted = i < len(text) and text[i] == "'"
        i += quoted
        value: list[str] = []
        while i < len(text):
            c = text[i]
            if c == "\\" and i + 1 < len(text):
                value.append(text[i + 1])
                i += 2
                continue
            if (quoted and c == "'") or (not quoted and c.isspace()):
                break
            value.append(c)
            i += 1
        end = i + 1 if quoted and i < len(text) else i
        yield m.group(1), start, end, "".join(value)
        pos = end


def _secret_spans(location: str) -> list[tuple[int, int]]:
    """Spans of `location` (a URI or a key=value string) that hold a credential."""
    if "://" in location:
        start, end, query = _password_span(location)
        spans = [(start, end)] if end > start else []
        return spans + list(_query_secrets(location, query))
    return [(s, e) for key, s, e, _ in _dsn_values(location) if _SECRET_NAME.search(key) and e > s]


def mask_location(location: str) -> str:
    """A location (URI or key=value string) with every credential replaced by `***`."""
    out, last = [], 0
    for s, e in _secret_spans(location):
        out += [location[last:s], MASK]
        last = e
    return "".join(out) + location[last:]


def _libpq_secrets(location: str) -> list[str]:
    """The secret values of `location` exactly as libpq reads them (if psycopg is installed)."""
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        return []
    try:
        params = conninfo_to_dict(location)
    except Exception:  # a location libpq refuses has no reading of its own
        return []
    return [str(v) for k, v in params.items() if v and _SECRET_NAME.search(k)]


def secrets_of(location: str) -> list[str]:
    """The credentials of a URI or key=value string: as written, decoded, and in pieces."""
    values: list[str] = []
    for s, e in _secret_spans(location):
        raw = location[s:e]
        values += [raw, unquote(raw)]
    if "://" not in location:
        values += [v for key, _, _, v in _dsn_values(location) if _SECRET_NAME.search(key)]
    values += _libpq_secrets(location)
    # A parser that splits the location elsewhere quotes pieces of it ("invalid port
    # number: "pa"" for the password `pa/ss`): the pieces are secrets too.
    values += [p for v in list(values) for p in _DELIMITERS.split(v) if len(p) > 1]
    return list(dict.fromkeys(v for v in values if v))


def _free_text_url(text: str, m: re.Match[str]) -> int:
    """Where a URL found in free text ends: past a user info cut by a space or a quote.

    A password may hold characters that end a URL in prose; a PostgreSQL URL
    whose match holds no `@` but whose line has one later is taken up to that
    `@`'s host, so that its password is masked with it.
    """
    end = m.end()
    if split_uri(m.group()) is None or "@" in m.group():
        return end
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end
    at = text.rfind("@", end, line_end)
    if at < 0:
        return end
    host = re.compile(r"[^\s'\"<>`]*").match(text, at + 1)
    return host.end() if host is not None else at + 1


def redact(text: str, *sources: str) -> str:
    """`text` with every credential it may hold replaced by `***`.

    `sources` are the locations (URLs, key=value strings) `text` may quote
    or have been derived from: each one quoted whole is masked as parsed
    (`mask_location`), then every credential of them is masked wherever it
    is in the text. Also masked, sources or not: the credentials of every
    other URL in the text and every secret `name=value` pair (`password=...`).
    """
    secrets = sorted({s for src in sources for s in secrets_of(src)}, key=len, reverse=True)
    for source in sorted(set(sources), key=len, reverse=True):
        if source:
            text = text.replace(source, mask_location(source))
    out, last, pos = [], 0, 0
    while (m := _URL.search(text, pos)) is not None:
        end = _free_text_url(text, m)
        out += [_mask_pairs(text[last : m.start()]), mask_location(text[m.start() : end])]
        last = pos = end
    out.append(_mask_pairs(text[last:]))
    return _scrub("".join(out), secrets)


def _mask_pairs(text: str) -> str:
    """`text` with the value of every secret-named `name=value` pair masked."""
    out, last = [], 0
    for m in re.finditer(r"[A-Za-z_][\w.\-]*\s*=", text):
        if m.start() < last or not _SECRET_NAME.search(m.group().rstrip("= ")):
            continue
        for _, s, e, _ in _dsn_values(text[m.start() :]):
            s, e = m.start() + s, m.start() + e
            if e > s:
                out += [text[last:s], MASK]
                last = e
            break
    return "".join(out) + text[last:]


def _scrub(text: str, secrets: list[str]) -> str:
    for secret in secrets:  # longest first: a secret inside another goes with it
        text = text.replace(secret, MASK)
    return text


# -- exception objects ----------------------------------------------------------------------

# Attributes through which a driver's exception keeps the connection it failed to open:
# psycopg's `Error.pgconn` (stored as `_pgconn`) holds libpq's connection options, the
# password among them, in its attributes and its repr.
_CONNECTION_ATTRIBUTES = ("_pgconn",)


def _chain(error: BaseException) -> list[BaseException]:
    """`error` and every exception reachable from it by `__cause__` and `__context__`."""
    seen: list[BaseException] = []
    todo = [error]
    while todo and len(seen) < 64:  # a chain, not a cycle
        e = todo.pop()
        if any(e is s for s in seen):
            continue
        seen.append(e)
        todo += [x for x in (e.__cause__, e.__context__) if x is not None]
    return seen


def scrub_exception(error: BaseException, *sources: str) -> bool:
    """Take the credentials of `sources` out of `error` and all it chains to, in place.

    An exception is more than its message: code (an error tracker, a debugger, a
    log handler that keeps a record's arguments) reads its attributes and every
    exception of its chain (`__cause__`, and `__context__`, which Python sets on
    any error raised while another is handled, `from None` or not). So each
    exception of the chain loses the failed connection a driver keeps on it
    (`_CONNECTION_ATTRIBUTES`), and its string arguments are redacted.

    Returns whether the chain is clean now: False if an exception still shows a
    credential (one whose `str` is not made from its arguments), so that the
    caller does not chain it.
    """
    clean = True
    for e in _chain(error):
        for name in _CONNECTION_ATTRIBUTES:
            if getattr(e, name, None) is not None:
                try:
                    setattr(e, name, None)
                except AttributeError:  # a read-only attribute: keep the chain out
                    clean = False
        args = tuple(redact(a, *sources) if isinstance(a, str) else a for a in e.args)
        if args != e.args:
            e.args = args
        text = f"{e}{e.args!r}"
        if redact(text, *sources) != text:
            clean = False
    return clean


# -- log records of the database driver ---------------------------------------------------

_lock = threading.Lock()
_sources: set[str] = set()
_guarded: set[str] = set()


class _RedactingFilter(logging.Filter):
    """Redacts every record of a logger with the credentials of the URLs opened so far."""

    def filter(self, record: logging.LogRecord) -> bool:
        with _lock:
            sources = tuple(_sources)
        message = record.getMessage()
        clean = redact(message, *sources)
        errors = [a for a in _args(record.args) if isinstance(a, BaseException)]
        for error in [*errors, *(record.exc_info or ())[1:2]]:
            if isinstance(error, BaseException):
                scrub_exception(error, *sources)
        # An exception among the arguments goes as the text it was formatted to: a
        # handler that keeps the arguments (structured logging) never holds the object.
        if clean != message or errors:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            # Formatted now, redacted, and cached where handlers look for it.
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info), *sources)
        return True


def _args(args: object) -> tuple[object, ...]:
    """A log record's arguments as a tuple (a single mapping is one argument)."""
    return args if isinstance(args, tuple) else () if args is None else (args,)


def redact_logs(logger_names: tuple[str, ...], source: str) -> None:
    """Redact the credentials of `source` (a URL) from these loggers' records from now on.

    A logger's filters see only records logged on that very logger, so each
    logger that may quote a connection error is named (psycopg's pool logs
    every failed connection attempt with libpq's message).
    """
    with _lock:
        _sources.add(source)
        for name in logger_names:
            if name not in _guarded:
                logging.getLogger(name).addFilter(_RedactingFilter())
                _guarded.add(name)
