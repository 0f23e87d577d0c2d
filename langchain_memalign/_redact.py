"""Credentials out of every message, log record, repr and traceback: `redact`.

A memory URL may carry a password in three places: the user-info part
(`postgresql://alice:pw@host/db`), the query string (`?password=pw`,
`?sslpassword=...`), and, once a driver has taken the URL apart, in its own
words (libpq quotes a fragment it cannot parse, a connection string is shown
as `password=pw`). Every place this package shows a URL or a location, or
text that may hold one (an error of the driver, a log record of the pool),
passes it through `redact`, the one function that knows all of them.

Which query parameters are secret is decided by name: libpq's `password`
and `sslpassword`, and any other whose name says it is one (`pass`,
`secret`, `token`, `key` as a word). A value masked that was not secret
costs a less precise message; a secret shown cannot be taken back.
"""

from __future__ import annotations

import logging
import re
import threading
from urllib.parse import unquote

__all__ = ["MASK", "redact", "redact_logs", "secrets_of"]

MASK = "***"

# A query or connection-string parameter whose value is a secret, by its name.
_SECRET_NAME = re.compile(r"pass|secret|token|credential|(?:^|_)key$|^auth", re.IGNORECASE)
# A URL inside free text: a scheme, `://`, then anything up to white space or a quote.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]*")
# A parameter of a libpq key=value connection string, or of a query string quoted alone.
_PAIR = re.compile(r"([A-Za-z_][\w.\-]*)(\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'\",;)]*)")
# Where a URL parser may cut a password in pieces.
_DELIMITERS = re.compile(r"[/?#@:&=]")
# Where a URL's query starts: the first `?name=` or `&name=`.
_QUERY_START = re.compile(r"[?&][\w.\-]+=")


def _userinfo_end(rest: str) -> int:
    """Where a URL's user info ends (the index of its `@`), or -1 if it has none.

    The most generous of three readings, so that a password is masked however a
    parser splits it: libpq's (up to the first `@` or `/`), urllib's (the last
    `@` before the first `/`, `?` or `#`), and a password with `/` or `?` in it
    (the last `@` before the query's first `name=`).
    """
    ends: list[int] = []
    libpq = re.search(r"[@/]", rest)
    if libpq is not None and libpq.group() == "@":
        ends.append(libpq.start())
    stop = re.search(r"[/?#]", rest)
    ends.append(rest.rfind("@", 0, stop.start() if stop else len(rest)))
    query = _QUERY_START.search(rest)
    ends.append(rest.rfind("@", 0, query.start() if query else len(rest)))
    return max(ends)


def _split_url(url: str) -> tuple[str, int, int, int]:
    """(prefix up to `://`, start and end of the password, start of the query) of `url`.

    Indexes are into `url`; an absent password has start == end, an absent
    query starts at len(url).
    """
    head, sep, rest = url.partition("://")
    if not sep:
        return "", 0, 0, len(url)
    base = len(head) + len(sep)
    end = _userinfo_end(rest)
    start = end
    if end >= 0:
        colon = rest.find(":", 0, end)
        start = colon + 1 if colon >= 0 else end
    query = rest.find("?", max(end, 0))
    end = max(end, 0)
    return url[:base], base + max(start, 0), base + end, base + query if query >= 0 else len(url)


def _secret_pairs(text: str) -> list[tuple[int, int]]:
    """Spans of the values of secret-named `name=value` pairs in `text`."""
    return [
        (m.start(3), m.end(3))
        for m in _PAIR.finditer(text)
        if _SECRET_NAME.search(m.group(1)) and m.group(3)
    ]


def secrets_of(url: str) -> list[str]:
    """The credentials of a URL or connection string, as written and percent-decoded."""
    found: list[str] = []
    _, start, end, query = _split_url(url)
    spans = ([(start, end)] if end > start else []) + [
        (query + s, query + e) for s, e in _secret_pairs(url[query:])
    ]
    if not url.partition("://")[1]:  # a key=value connection string
        spans = _secret_pairs(url)
    for s, e in spans:
        raw = url[s:e]
        values = [raw, unquote(raw), raw.strip("'")]
        # A parser that splits the URL elsewhere quotes pieces of it ("invalid port
        # number: "pa"" for the password `pa/ss`): the pieces are secrets too.
        values += [p for v in values[:2] for p in _DELIMITERS.split(v) if len(p) > 1]
        for value in values:
            if value and value not in found:
                found.append(value)
    return found


def _mask_url(url: str) -> str:
    _, start, end, query = _split_url(url)
    out = url[:start] + (MASK if end > start else "") + url[end:query]
    tail = url[query:]
    last = 0
    for s, e in _secret_pairs(tail):
        out += tail[last:s] + MASK
        last = e
    return out + tail[last:]


def _mask_pairs(text: str) -> str:
    out, last = "", 0
    for s, e in _secret_pairs(text):
        out += text[last:s] + MASK
        last = e
    return out + text[last:]


def redact(text: str, *sources: str) -> str:
    """`text` with every credential it may hold replaced by `***`.

    Masked: in every URL inside `text`, the password of its user info and the
    values of its secret query parameters; every secret `name=value` pair
    (`password=...` of a libpq connection string); and, anywhere in the
    rest of the text, every credential of the URLs in `sources` (a driver's
    message may quote a piece of a URL it could not parse).
    """
    secrets = sorted({s for src in sources for s in secrets_of(src)}, key=len, reverse=True)
    out, last = [], 0
    for m in _URL.finditer(text):
        out.append(_scrub(_mask_pairs(text[last : m.start()]), secrets))
        out.append(_mask_url(m.group()))
        last = m.end()
    out.append(_scrub(_mask_pairs(text[last:]), secrets))
    return "".join(out)


def _scrub(text: str, secrets: list[str]) -> str:
    for secret in secrets:  # longest first: a secret inside another goes with it
        text = text.replace(secret, MASK)
    return text


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
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            # Formatted now, redacted, and cached where handlers look for it.
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info), *sources)
        return True


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
