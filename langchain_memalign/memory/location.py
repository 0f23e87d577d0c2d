"""Where a memory lives: a folder, or a PostgreSQL database named by a URL.

A memory location is a folder (a SQLite memory), `None` (in process), or a
`postgresql://` URL. This module tells them apart (`is_postgres_url`),
parses a URL into what libpq needs and our own settings (`PostgresTarget`),
and writes a location into messages without its password
(`describe_location`, with `redact`, the package's one redaction). It opens
nothing: `backends.open_store` does.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from urllib.parse import unquote, unquote_plus

from langchain_memalign._redact import mask_location, redact, split_uri
from langchain_memalign.errors import MemoryFormatError

__all__ = ["Location", "PostgresTarget", "describe_location", "is_postgres_url", "redact"]

# A memory's folder or `postgresql://` URL (`None`, where allowed: in process).
Location = str | os.PathLike[str]

_DEFAULT_JUDGE = "default"
# Parameters of a memory URL that are ours, not libpq's.
_OUR_PARAMS = ("judge", "staleness", "pool_size", "open_timeout", "schema")
# A schema name as PostgreSQL folds an unquoted identifier: lower case, at most 63
# bytes. Mixed case would name another schema than `CREATE SCHEMA Team_A` made.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def is_postgres_url(location: object) -> bool:
    """Whether a memory location is a PostgreSQL URL rather than a folder."""
    return isinstance(location, str) and location.startswith(("postgresql://", "postgres://"))


@dataclass(frozen=True)
class PostgresTarget:
    """A parsed memory URL: libpq connection string, judge name and our settings.

    `postgresql://user:pw@host:5432/db?judge=helpfulness&staleness=2` names
    the database, the judge inside it (default `default`), how many seconds
    a judgment may lag behind the newest commit (default 0: every judgment
    sees every committed change), the connection pool's size (default 8) and
    how many seconds opening waits for the server (`open_timeout`, default 30),
    and the PostgreSQL schema holding the tables (`schema`, default: the first
    schema of the role's search path).
    Every other parameter goes to libpq unchanged (`sslmode`, `host=/socket/dir` ...).
    """

    # Not in the repr: it may hold the password (`__repr__` shows `describe()`).
    conninfo: str = field(repr=False)
    judge: str
    staleness: float = 0.0
    pool_size: int = 8
    open_timeout: float = 30.0
    schema: str | None = None

    @classmethod
    def parse(cls, url: str) -> PostgresTarget:
        """Split a memory URL into the libpq part and ours; `MemoryFormatError` if malformed.

        The URL is split where libpq splits it (`split_uri`): the query starts
        at the first `?` after the user info, so a password with `?` or `#` in
        it stays the password. The parameters that are not ours are passed on
        exactly as written, for libpq to decode: re-encoding them would change
        what libpq reads (a `%20` in `options=` would become a `+`). Ours are
        decoded as a form is (`+` is a space).
        """
        uri = split_uri(url)
        if uri is None:
            raise MemoryFormatError(
                f"{redact(url, url)}: malformed memory URL (not postgresql:// or postgres://)"
            )
        query = uri[2]
        params: list[tuple[str, str, str]] = []  # (decoded name, decoded value, as written)
        for piece in url[query + 1 :].split("&"):
            if piece:
                name, _, value = piece.partition("=")
                params.append((unquote(name), unquote_plus(value), piece))
        ours = {k: v for k, v, _ in params if k in _OUR_PARAMS}
        rest = [raw for k, _, raw in params if k not in _OUR_PARAMS]
        judge = ours.get("judge") or _DEFAULT_JUDGE
        if "\x00" in judge:
            # PostgreSQL text cannot hold NUL: refused here, not as the driver's DataError.
            raise MemoryFormatError(
                f"{redact(url, url)}: the judge name {judge!r} contains a NUL character, which "
                "PostgreSQL cannot store"
            )
        try:
            staleness = float(ours.get("staleness") or 0)
            pool_size = int(ours.get("pool_size") or 8)
            open_timeout = float(ours.get("open_timeout") or 30)
        except ValueError as e:
            raise MemoryFormatError(f"{redact(url, url)}: bad memory URL parameter ({e})") from e
        if (
            not (0 <= staleness < 86_400)
            or not (1 <= pool_size <= 256)
            or not (0 < open_timeout <= 3_600)
        ):
            raise MemoryFormatError(
                f"{redact(url, url)}: staleness must be in [0, 86400) seconds, pool_size in "
                "[1, 256] and open_timeout in (0, 3600] seconds"
            )
        schema = ours.get("schema") or None
        if schema is not None and (not _SCHEMA_NAME.fullmatch(schema) or schema.startswith("pg_")):
            # Checked here, not quoted: the name goes into SQL (`SET search_path`,
            # `CREATE SCHEMA`), and a name PostgreSQL would fold or reserve would
            # select another schema than the one the URL seems to name.
            raise MemoryFormatError(
                f"{redact(url, url)}: schema {schema!r} is not a schema name this package "
                "accepts: lower-case letters, digits and underscores, starting with a "
                "letter or an underscore, at most 63 characters, not starting with pg_"
            )
        conninfo = url[:query] + ("?" + "&".join(rest) if rest else "")
        return cls(conninfo, judge, staleness, pool_size, open_timeout, schema)

    def describe(self) -> str:
        """The URL without its credentials, with the judge name (for messages)."""
        where = f"judge {self.judge!r}"
        if self.schema is not None:
            where += f" in schema {self.schema!r}"
        return f"{mask_location(self.conninfo)} ({where})"

    def redact(self, text: str) -> str:
        """`text` (a driver's message, say) without this URL's credentials."""
        return redact(text, self.conninfo)

    def __repr__(self) -> str:
        return f"PostgresTarget({self.describe()})"


def describe_location(location: object) -> str:
    """A memory location for messages: a folder as is, a URL without its credentials."""
    # A folder's name is shown as is; anything URL-like in it is redacted too. A
    # location is its own source: parsed whole, its password is masked however
    # it is written (a space or a quote in it would end a URL found in prose).
    text = str(location)
    return redact(text, text) if is_postgres_url(text) else redact(text)
