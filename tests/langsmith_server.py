"""In-process fake LangSmith REST API for tests (stdlib only, but for ``server.platform``).

Answers the endpoints that the real ``langsmith.Client`` (0.15.x) calls, with the
JSON shapes of the LangSmith REST API, so tests can drive the real client over
HTTP without network access::

    with LangSmithTestServer() as server:
        client = langsmith.Client(api_url=server.url, api_key="test")
        client.create_project("p")
        ...
        client.flush()  # runs / queued feedback are sent by a background thread

Everything lives in memory, guarded by one re-entrant lock (``server.lock``).
Tests can read the stores directly (``server.sessions``, ``server.runs``,
``server.feedback``, ``server.annotation_queues``, ``server.queue_items``,
``server.datasets``, ``server.examples``), the request log (``server.requests``)
and the requests nothing answered (``server.unhandled``), and can inject failures
with :meth:`LangSmithTestServer.inject_failure`.

Supported endpoints (paths may also carry the ``/api/v1`` prefix the generated
OpenAPI resources use):

* ``GET /info``, ``GET /settings``
* sessions: ``POST/GET /sessions``, ``GET/PATCH/DELETE /sessions/{id}``
* runs: ``POST /runs``, ``POST /runs/batch``, ``POST /runs/multipart`` (plain or
  zstd when enabled; also carries queued ``feedback.{id}`` parts),
  ``GET/PATCH /runs/{id}``, ``POST /runs/query`` (cursor pagination)
* runs v2 (``client.runs`` / the generated OpenAPI client, when ``runs_v2``):
  ``POST /api/v2/runs/query`` (``selects``, opaque ``next_cursor``; the start-time window
  defaults to the last day, as the API's does), ``GET /api/v2/runs/{id}``
* feedback: ``POST/GET /feedback``, ``GET/PATCH/DELETE /feedback/{id}``
* feedback configs: ``POST/GET/DELETE /feedback-configs``
* datasets: ``POST/GET /datasets``, ``GET/PATCH/DELETE /datasets/{id}``,
  ``POST /datasets/comparative``, ``POST /examples``, ``POST /examples/bulk``, ``GET /examples``,
  ``DELETE /examples`` (``example_ids``), ``GET/PATCH/DELETE /examples/{id}``
* annotation queues (legacy v1): ``POST/GET /annotation-queues``,
  ``GET/PATCH/DELETE /annotation-queues/{id}``, ``POST .../{id}/runs``,
  ``POST .../{id}/runs/by-key``, ``GET .../{id}/runs``, ``GET .../{id}/run/{index}``,
  ``PATCH/DELETE .../{id}/runs/{run_id}``, ``POST .../{id}/runs/delete``,
  ``POST /annotation-queues/status/{queue_item_id}``, ``GET .../{id}/size``,
  ``GET .../{id}/total_size``
* prompt hub, online evaluators and run rules: see ``tests/langsmith_platform.py``
  (``server.platform``), whose requests are validated against the SDK's own types
* annotation queue items (``/api/v1/platform/annotation-queues``): ``POST/GET
  .../{id}/items``, ``PATCH .../{id}/items/{item_id}``, ``POST .../{id}/items/delete``,
  ``POST .../items/{item_id}/status``
* pairwise annotation queues: ``POST /annotation-queues/populate`` (any queue), queues
  made in the UI with :meth:`LangSmithTestServer.add_pairwise_queue` and a reviewer's
  choice with :meth:`LangSmithTestServer.review_pair` (see that section for what is
  documented and what is modeled)

Ordering follows the real API: runs and feedback are listed newest first (the v1 run
query also oldest first with ``order="asc"``; the v2 run query's order is undocumented,
``v2_run_order`` makes it oldest first, or unrelated to time).
Offset-paginated lists (feedback, sessions, examples, queues...) return ``limit``
items per page; the real client stops at the first page shorter than ``limit`` (at
most 100), so more than ``2 * limit`` items give more than two pages. ``/runs/query``
uses an opaque cursor; its page size is ``runs_page_size``.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import hashlib
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

__all__ = [
    "FaultRule",
    "HTTPError",
    "LangSmithTestServer",
    "RecordedRequest",
    "running_server",
]

JSON = dict[str, Any]
Query = dict[str, list[str]]

_API_PREFIXES = ("/api/v1", "/api")
_DEFAULT_TENANT_ID = "00000000-0000-4000-8000-000000000001"


# ---------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------


class HTTPError(Exception):
    """Raised by a handler to answer with an error status and ``{"detail": ...}``."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _iso(value: dt.datetime) -> str:
    return value.isoformat()


def _parse_time(value: Any) -> dt.datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        parsed = value
    else:
        text = str(value)
        try:
            parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            # dotted-order style timestamps: 20240101T000000000000Z
            parsed = dt.datetime.strptime(text, "%Y%m%dT%H%M%S%fZ")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed


def _norm_time(value: Any) -> str | None:
    parsed = _parse_time(value)
    return _iso(parsed) if parsed is not None else None


def _time_order(run: JSON) -> tuple[dt.datetime, int]:
    # By start time as a time (ISO strings with other offsets or precisions do not sort
    # as text), then by arrival.
    return (_parse_time(run.get("start_time")) or _now(), run["_seq"])


def _uuid_str(value: Any, what: str = "id") -> str:
    try:
        return str(uuid.UUID(str(value)))
    except (ValueError, TypeError, AttributeError) as exc:
        raise HTTPError(422, f"invalid {what}: {value!r}") from exc


def _maybe_uuid(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return _uuid_str(value)


def _first(query: Query, key: str, default: str | None = None) -> str | None:
    values = query.get(key)
    return values[0] if values else default


def _many(query: Query, key: str) -> list[str]:
    """Values of a repeated query parameter (``?run=a&run=b`` or ``?run=a,b``)."""
    out: list[str] = []
    for raw in query.get(key, []):
        out.extend(part for part in raw.split(",") if part)
    return out


def _bool(value: Any) -> bool | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def _int(query: Query, key: str, default: int) -> int:
    raw = _first(query, key)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise HTTPError(422, f"{key} must be an integer, got {raw!r}") from exc


def _source_type(value: str) -> str:
    """Normalize a feedback source type from a query string.

    ``langsmith.schemas.FeedbackSourceType`` is a plain ``Enum``, so ``requests``
    encodes ``list_feedback(feedback_source_type=[FeedbackSourceType.API])`` as
    ``source=FeedbackSourceType.API``; accept that as well as ``api``.
    """
    return value.rsplit(".", 1)[-1].strip().lower()


def _paginate(items: list[JSON], query: Query, default_limit: int = 100) -> list[JSON]:
    offset = max(_int(query, "offset", 0), 0)
    limit = _int(query, "limit", default_limit)
    if limit < 1:
        raise HTTPError(422, "limit must be >= 1")
    return items[offset : offset + limit]


def _parse_multipart(body: bytes, content_type: str) -> list[tuple[str, dict[str, str], bytes]]:
    """Split a ``multipart/form-data`` body into ``(name, headers, data)`` parts."""
    match = re.search(r'boundary="?([^";]+)"?', content_type)
    if match is None:
        raise HTTPError(400, "multipart body without boundary")
    delimiter = b"--" + match.group(1).encode()
    parts: list[tuple[str, dict[str, str], bytes]] = []
    for chunk in body.split(delimiter)[1:]:
        if chunk.startswith(b"--"):
            break
        chunk = chunk.removeprefix(b"\r\n")
        raw_headers, _, data = chunk.partition(b"\r\n\r\n")
        data = data.removesuffix(b"\r\n")
        headers: dict[str, str] = {}
        for line in raw_headers.decode("utf-8", "replace").split("\r\n"):
            key, sep, value = line.partition(":")
            if sep:
                headers[key.strip().lower()] = value.strip()
        name_match = re.search(r'name="([^"]*)"', headers.get("content-disposition", ""))
        if name_match is None:
            raise HTTPError(400, "multipart part without a name")
        parts.append((name_match.group(1), headers, data))
    return parts


# ---------------------------------------------------------------------------
# records
# ---------------------------------------------------------------------------


@dataclass
class RecordedRequest:
    """One request the server received (kept in ``server.requests``)."""

    method: str
    path: str
    query: Query
    status: int = 0
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    injected: bool = False


@dataclass
class FaultRule:
    """Fail the next ``remaining`` requests whose path starts with ``path_prefix``."""

    path_prefix: str
    status: int
    remaining: int
    retry_after: float | None = None
    method: str | None = None
    hits: int = 0
    after: int = 0

    def matches(self, method: str, paths: tuple[str, ...]) -> bool:
        if self.remaining <= 0:
            return False
        if self.method is not None and self.method.upper() != method:
            return False
        if not any(path.startswith(self.path_prefix) for path in paths):
            return False
        if self.after > 0:  # let this many matching requests through first
            self.after -= 1
            return False
        return True


Handler = Callable[[re.Match[str], Query, Any], tuple[int, Any]]


# ---------------------------------------------------------------------------
# the server
# ---------------------------------------------------------------------------


class LangSmithTestServer:
    """A fake LangSmith API served over HTTP from a background thread."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        version: str = "0.16.14",
        runs_page_size: int = 100,
        use_multipart_endpoint: bool = True,
        zstd_compression: bool = False,
        tenant_id: str = _DEFAULT_TENANT_ID,
        runs_v2: bool = True,
        query_backend: str | None = None,
        enforced_feedback_configs: bool = False,
        include_all_configs: bool = True,
        v2_run_order: str = "newest",
    ) -> None:
        """Configure the server; call :meth:`start` (or use ``with``) to serve.

        Args:
            host: Interface to bind.
            port: Port to bind; 0 picks a free one.
            version: Backend version reported by ``/info``. The client sends queued
                feedback through ``/runs/multipart`` only for versions >= 0.8.10,
                and warns on ``client.annotation_queues`` below 0.16.14.
            runs_page_size: Page size of the ``/runs/query`` cursor pagination.
            use_multipart_endpoint: Reported in ``/info``; False makes the client's
                background thread use ``/runs/batch`` instead of ``/runs/multipart``.
            zstd_compression: Report ``zstd_compression_enabled`` in ``/info`` and
                accept zstd-compressed multipart bodies (needs ``zstandard``).
                When False the client logs "Run compression is not enabled"
                once per client unless ``LANGSMITH_DISABLE_RUN_COMPRESSION=true``.
            tenant_id: Tenant (workspace) id stamped on sessions and queues.
            runs_v2: Serve the v2 run endpoints (``/api/v2/runs/...``) that the
                client's current ``runs`` resource uses; False answers them with 404,
                like a self-hosted server older than 0.16.
            query_backend: What ``/info``'s ``instance_flags`` say about run queries, as
                the SDK reads them (``ch_query_enabled``/``sdb_query_enabled``):
                ``"clickhouse_only"``, ``"dual"`` or ``"smithdb_only"``; None (the default)
                means ``"dual"`` when ``runs_v2`` and no flags at all otherwise (an older
                server). On ``"smithdb_only"`` the v1 run reads (``/runs/query``,
                ``GET /runs/{id}``) answer 400, as they do not work on that storage.
            enforced_feedback_configs: The workspace has enforced feedback configs on: a
                second, different config for a key is added next to the first instead of
                answering 400 (unless the key has an enforced config: 409).
            include_all_configs: ``GET /feedback-configs`` takes ``include_all_configs``;
                False refuses the parameter with 422, as self-hosted servers before 0.18.
            v2_run_order: The order of the v2 run query's results, which the API does not
                document (it has no order parameter): ``"newest"`` (start time descending,
                what the service is seen to do), ``"oldest"`` (start time ascending: every
                caller taking the first runs for the latest is wrong on it) or
                ``"unordered"`` (an order stable across the pages of a query but unrelated
                to time), for tests that show a caller assumes none. The v1
                ``/runs/query`` takes ``order`` (``"asc"``/``"desc"``, newest first by
                default), as the SDK's ``read_thread`` documents.

        Strict like the real service: ``feedback_source.user_id`` is stamped from the
        caller's API key (see :meth:`add_user`), ``user_name`` is only returned with
        ``include_user_names=true``; feedback carries only the fields it was stored with;
        queue item statuses are per reviewer and an item is archived once the queue's
        review requirements are met; status updates take item ids only; runs on the base
        retention tier can be expired with :meth:`expire_base_runs`.
        """
        self.host = host
        self.port = port
        self.version = version
        self.runs_page_size = runs_page_size
        self.use_multipart_endpoint = use_multipart_endpoint
        self.zstd_compression = zstd_compression
        self.tenant_id = tenant_id
        self.runs_v2 = runs_v2
        if query_backend is None:
            query_backend = "dual" if runs_v2 else None
        if query_backend not in (None, "clickhouse_only", "dual", "smithdb_only"):
            raise ValueError(f"unknown query_backend {query_backend!r}")
        self.query_backend = query_backend
        self.enforced_feedback_configs = enforced_feedback_configs
        self.include_all_configs = include_all_configs
        if v2_run_order not in ("newest", "oldest", "unordered"):
            raise ValueError(f"unknown v2_run_order {v2_run_order!r}")
        self.v2_run_order = v2_run_order
        # API key -> user ({"id", "name"}); the caller of the request being handled
        self.users: dict[str, JSON] = {}
        self._caller_key: str | None = None

        self.lock = threading.RLock()
        self.requests: list[RecordedRequest] = []
        self.unhandled: list[RecordedRequest] = []
        self.faults: list[FaultRule] = []

        self.sessions: dict[str, JSON] = {}
        self.runs: dict[str, JSON] = {}
        self.attachments: dict[tuple[str, str], tuple[str, bytes]] = {}
        self.feedback: dict[str, JSON] = {}
        # every config of a key, the first one first (``feedback_configs`` shows the first)
        self.feedback_config_sets: dict[str, list[JSON]] = {}
        self.annotation_queues: dict[str, JSON] = {}
        self.queue_items: dict[str, list[JSON]] = {}
        self.datasets: dict[str, JSON] = {}
        self.comparative: dict[str, JSON] = {}
        self.examples: dict[str, JSON] = {}
        self.extended_traces: set[str] = set()
        from langsmith_platform import PlatformAPI

        # the prompt hub, online evaluators and run rules (tests/langsmith_platform.py)
        self.platform = PlatformAPI(self)

        self._seq = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []
        self._register_routes()

    # -- lifecycle -----------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL to pass as ``Client(api_url=...)``."""
        if self._httpd is None:
            raise RuntimeError("server not started")
        return f"http://{self.host}:{self._httpd.server_address[1]}"

    def start(self) -> LangSmithTestServer:
        """Bind and serve in a daemon thread; returns ``self``."""
        if self._httpd is not None:
            return self
        httpd = ThreadingHTTPServer((self.host, self.port), _RequestHandler)
        httpd.daemon_threads = True
        httpd.block_on_close = False
        httpd.app = self  # type: ignore[attr-defined]
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="langsmith-test-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> LangSmithTestServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def reset(self) -> None:
        """Forget all stored objects, logged requests and pending faults."""
        with self.lock:
            self.requests.clear()
            self.unhandled.clear()
            self.faults.clear()
            for store in (
                self.sessions,
                self.runs,
                self.attachments,
                self.feedback,
                self.feedback_config_sets,
                self.annotation_queues,
                self.queue_items,
                self.datasets,
                self.examples,
                self.extended_traces,
            ):
                store.clear()
            self.platform.reset()

    # -- fault injection & introspection -------------------------------------

    def inject_failure(
        self,
        path_prefix: str,
        *,
        status: int = 500,
        times: int = 1,
        retry_after: float | None = None,
        method: str | None = None,
        after: int = 0,
    ) -> FaultRule:
        """Make the next ``times`` requests under ``path_prefix`` fail with ``status``.

        With ``after``, that many matching requests succeed before the failures start
        (to fail a job midway).

        The prefix is matched against the path with and without an ``/api/v1``
        prefix (e.g. ``"/feedback"``, ``"/runs/multipart"``). A 429 carries a
        ``Retry-After`` header (``retry_after``, default 0 so retries are quick;
        urllib3 honours it). Failing requests are still logged, with
        ``injected=True``, and do not touch the stores.
        """
        if status == 429 and retry_after is None:
            retry_after = 0
        rule = FaultRule(
            path_prefix=path_prefix,
            status=status,
            remaining=times,
            retry_after=retry_after,
            method=method,
            after=after,
        )
        with self.lock:
            self.faults.append(rule)
        return rule

    def clear_faults(self) -> None:
        """Drop pending injected failures."""
        with self.lock:
            self.faults.clear()

    def requests_to(self, path_prefix: str, method: str | None = None) -> list[RecordedRequest]:
        """Logged requests whose (un-prefixed) path starts with ``path_prefix``."""
        with self.lock:
            return [
                r
                for r in self.requests
                if _strip_prefix(r.path).startswith(path_prefix)
                and (method is None or r.method == method.upper())
            ]

    def wait_for(
        self, predicate: Callable[[], bool], timeout: float = 5.0, interval: float = 0.01
    ) -> bool:
        """Poll ``predicate`` (under the lock) until true or ``timeout``; returns its value."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                if predicate():
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(interval)

    # -- direct seeding (no HTTP) --------------------------------------------

    def add_project(self, name: str, **fields: Any) -> JSON:
        """Create (or return) a project by name without going through HTTP."""
        with self.lock:
            existing = self._session_by_name(name)
            if existing is not None:
                return existing
            return self._new_session({"name": name, **fields})

    def add_run(self, **fields: Any) -> JSON:
        """Store a run as if ingested (``name``/``inputs``/``run_type`` get defaults)."""
        fields.setdefault("id", str(uuid.uuid4()))
        fields.setdefault("name", "run")
        fields.setdefault("run_type", "chain")
        fields.setdefault("inputs", {})
        with self.lock:
            self._apply_run_post(fields)
            return self.runs[_uuid_str(fields["id"])]

    def add_timed_runs(
        self,
        n: int,
        *,
        project: str = "prod",
        start: dt.datetime | None = None,
        step: dt.timedelta = dt.timedelta(milliseconds=1),
    ) -> list[str]:
        """`n` ended root runs of `project`, started `step` apart from `start` (by default
        half an hour ago); their ids, oldest first. Run `i` asks "polite answer i"."""
        session = self.add_project(project)
        start = start or dt.datetime.now(dt.UTC) - dt.timedelta(minutes=30)
        ids = []
        for i in range(n):
            at = start + i * step
            ids.append(
                self.add_run(
                    session_id=session["id"],
                    inputs={"q": f"polite answer {i}"},
                    outputs={"a": f"answer {i}"},
                    start_time=at.isoformat(),
                    end_time=(at + dt.timedelta(seconds=1)).isoformat(),
                )["id"]
            )
        return ids

    def add_feedback(
        self, run_id: Any = None, key: str = "score", *, user: str | None = None, **fields: Any
    ) -> JSON:
        """Store a feedback record as if created by ``POST /feedback``.

        ``user`` is the reviewer's name (a reviewer in the UI, or the owner of the API key a
        tool wrote through): the record gets that user's id, as the service stamps it. A
        ``feedback_source`` with a ``user_name`` and no ``user_id`` is read the same way.
        """
        body = {"run_id": run_id, "key": key, **fields}
        source = dict(body.get("feedback_source") or {})
        name = user or source.get("user_name")
        if name is not None and not source.get("user_id"):
            source["user_id"] = self.user_named(name)["id"]
        body["feedback_source"] = source or None
        with self.lock:
            # seeded records are stored with what was given (session, start time...)
            return self._store_feedback(body, stamp_user=False)

    # -- users (API keys) ----------------------------------------------------

    def add_user(self, api_key: str, name: str | None, user_id: str | None = None) -> JSON:
        """Register the user behind an API key (a service key has no name)."""
        with self.lock:
            user = {"id": user_id or str(uuid.uuid5(uuid.NAMESPACE_OID, api_key)), "name": name}
            self.users[api_key] = user
            return user

    def user_named(self, name: str) -> JSON:
        """The user with this display name (registered under a key of the same name)."""
        with self.lock:
            for user in self.users.values():
                if user["name"] == name:
                    return user
            return self.add_user(f"key-of-{name}", name)

    def _caller(self) -> JSON:
        """The user whose API key made the request being handled."""
        key = self._caller_key or "anonymous"
        user = self.users.get(key)
        if user is None:
            user = self.add_user(key, None)
        return user

    def _user_name(self, user_id: Any) -> str | None:
        for user in self.users.values():
            if user["id"] == str(user_id):
                return str(user["name"]) if user["name"] is not None else None
        return None

    # -- retention -------------------------------------------------------------

    def expire_base_runs(self) -> list[str]:
        """Delete the runs whose trace is still on the base retention tier (as time would).

        A trace moves to the extended tier when feedback is created on it with
        ``extend_trace_retention`` (the SDK's default) or when it is queued with
        ``extend_trace_retention=true``. Returns the ids deleted.
        """
        with self.lock:
            gone = [
                rid
                for rid, run in self.runs.items()
                if str(run.get("trace_id") or rid) not in self.extended_traces
            ]
            for rid in gone:
                del self.runs[rid]
            return gone

    def _extend_trace(self, run_id: str | None) -> None:
        run = self.runs.get(run_id or "")
        if run is not None:
            self.extended_traces.add(str(run.get("trace_id") or run["id"]))

    @property
    def feedback_configs(self) -> dict[str, JSON]:
        """Each key's first feedback config (``feedback_config_sets`` has them all)."""
        return {k: v[0] for k, v in self.feedback_config_sets.items() if v}

    # -- dispatch ------------------------------------------------------------

    def _handle(
        self, method: str, raw_path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        split = urlsplit(raw_path)
        path = split.path.rstrip("/") or "/"
        query = parse_qs(split.query, keep_blank_values=True)
        record = RecordedRequest(method=method, path=path, query=query, headers=headers)
        with self.lock:
            self.requests.append(record)
            stripped = _strip_prefix(path)
            for rule in self.faults:
                if rule.matches(method, (path, stripped)):
                    rule.remaining -= 1
                    rule.hits += 1
                    record.status = rule.status
                    record.injected = True
                    extra: dict[str, str] = {}
                    if rule.retry_after is not None:
                        extra["Retry-After"] = f"{rule.retry_after:g}"
                    return rule.status, extra, _dump({"detail": "injected failure"})
            self._caller_key = headers.get("x-api-key")
            try:
                payload = self._decode_body(headers, body)
                record.json = None if isinstance(payload, _Multipart) else payload
                status, result = self._route(method, stripped, query, payload, record)
            except HTTPError as err:
                status, result = err.status, {"detail": err.detail}
            except Exception as exc:  # a bug here should surface as a 500, not a hang
                status, result = 500, {"detail": f"fake server error: {exc!r}"}
            record.status = status
        return status, {}, _dump(result)

    def _route(
        self, method: str, path: str, query: Query, payload: Any, record: RecordedRequest
    ) -> tuple[int, Any]:
        path_matched = False
        for route_method, pattern, handler in self._routes:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            path_matched = True
            if route_method == method:
                return handler(match, query, payload)
        self.unhandled.append(record)
        if path_matched:
            raise HTTPError(405, f"method {method} not supported by fake server for {path}")
        raise HTTPError(404, f"fake LangSmith server has no route for {method} {path}")

    def _decode_body(self, headers: dict[str, str], body: bytes) -> Any:
        if not body:
            return None
        if headers.get("content-encoding", "").lower() == "zstd":
            try:
                import zstandard  # type: ignore[import-not-found,unused-ignore]
            except ImportError as exc:  # pragma: no cover - depends on environment
                raise HTTPError(415, "zstd body but zstandard is not installed") from exc
            reader = zstandard.ZstdDecompressor().stream_reader(body)
            body = reader.read()
        content_type = headers.get("content-type", "")
        if content_type.startswith("multipart/form-data"):
            return _Multipart(_parse_multipart(body, content_type))
        try:
            return json.loads(body)
        except ValueError as exc:
            raise HTTPError(422, f"body is not JSON: {exc}") from exc

    def _register_routes(self) -> None:
        uuid_re = r"[0-9a-fA-F-]{32,36}"
        table: list[tuple[str, str, Handler]] = [
            ("GET", r"/info", self._get_info),
            ("GET", r"/settings", self._get_settings),
            # sessions
            ("POST", r"/sessions", self._create_session),
            ("GET", r"/sessions", self._list_sessions),
            ("GET", rf"/sessions/(?P<id>{uuid_re})", self._read_session),
            ("PATCH", rf"/sessions/(?P<id>{uuid_re})", self._update_session),
            ("DELETE", rf"/sessions/(?P<id>{uuid_re})", self._delete_session),
            # runs
            ("POST", r"/runs", self._create_run),
            ("POST", r"/runs/batch", self._batch_runs),
            ("POST", r"/runs/multipart", self._multipart_runs),
            ("POST", r"/runs/query", self._query_runs),
            ("GET", rf"/runs/(?P<id>{uuid_re})", self._read_run),
            ("PATCH", rf"/runs/(?P<id>{uuid_re})", self._update_run),
            # runs v2 (generated OpenAPI client: /api/v2/... arrives as /v2/...)
            ("POST", r"/v2/runs/query", self._query_runs_v2),
            ("GET", rf"/v2/runs/(?P<id>{uuid_re})", self._read_run_v2),
            # feedback configs
            ("POST", r"/feedback-configs", self._create_feedback_config),
            ("GET", r"/feedback-configs", self._list_feedback_configs),
            ("DELETE", r"/feedback-configs", self._delete_feedback_config),
            # feedback
            ("POST", r"/feedback", self._create_feedback),
            ("GET", r"/feedback", self._list_feedback),
            ("GET", rf"/feedback/(?P<id>{uuid_re})", self._read_feedback),
            ("PATCH", rf"/feedback/(?P<id>{uuid_re})", self._update_feedback),
            ("DELETE", rf"/feedback/(?P<id>{uuid_re})", self._delete_feedback),
            # datasets & examples
            ("POST", r"/datasets/comparative", self._create_comparative),
            ("POST", r"/datasets", self._create_dataset),
            ("GET", r"/datasets", self._list_datasets),
            ("GET", rf"/datasets/(?P<id>{uuid_re})", self._read_dataset),
            ("PATCH", rf"/datasets/(?P<id>{uuid_re})", self._update_dataset),
            ("DELETE", rf"/datasets/(?P<id>{uuid_re})", self._delete_dataset),
            ("POST", r"/examples", self._create_example),
            ("POST", r"/examples/bulk", self._create_examples_bulk),
            ("GET", r"/examples", self._list_examples),
            ("DELETE", r"/examples", self._delete_examples),
            ("GET", rf"/examples/(?P<id>{uuid_re})", self._read_example),
            ("PATCH", rf"/examples/(?P<id>{uuid_re})", self._update_example),
            ("DELETE", rf"/examples/(?P<id>{uuid_re})", self._delete_example),
            # annotation queues (legacy v1)
            ("POST", r"/annotation-queues", self._create_queue),
            ("GET", r"/annotation-queues", self._list_queues),
            ("POST", r"/annotation-queues/status/(?P<item>[^/]+)", self._set_item_status),
            ("GET", rf"/annotation-queues/(?P<id>{uuid_re})", self._read_queue),
            ("PATCH", rf"/annotation-queues/(?P<id>{uuid_re})", self._update_queue),
            ("DELETE", rf"/annotation-queues/(?P<id>{uuid_re})", self._delete_queue),
            ("POST", rf"/annotation-queues/(?P<id>{uuid_re})/runs", self._add_queue_runs),
            ("POST", rf"/annotation-queues/(?P<id>{uuid_re})/runs/by-key", self._add_queue_keys),
            ("POST", rf"/annotation-queues/(?P<id>{uuid_re})/runs/delete", self._delete_queue_runs),
            ("GET", rf"/annotation-queues/(?P<id>{uuid_re})/runs", self._list_queue_runs),
            (
                "GET",
                rf"/annotation-queues/(?P<id>{uuid_re})/run/(?P<index>\d+)",
                self._queue_run_at,
            ),
            (
                "PATCH",
                rf"/annotation-queues/(?P<id>{uuid_re})/runs/(?P<run>{uuid_re})",
                self._update_queue_run,
            ),
            (
                "DELETE",
                rf"/annotation-queues/(?P<id>{uuid_re})/runs/(?P<run>{uuid_re})",
                self._delete_queue_run,
            ),
            ("GET", rf"/annotation-queues/(?P<id>{uuid_re})/size", self._queue_size),
            ("GET", rf"/annotation-queues/(?P<id>{uuid_re})/total_size", self._queue_total_size),
            # annotation queue items (platform API used by client.annotation_queues.items)
            (
                "POST",
                rf"/platform/annotation-queues/(?P<id>{uuid_re})/items",
                self._create_items,
            ),
            ("GET", rf"/platform/annotation-queues/(?P<id>{uuid_re})/items", self._list_items),
            (
                "PUT",
                rf"/platform/annotation-queues/(?P<id>{uuid_re})/items/(?P<item>{uuid_re})"
                r"/finals/(?P<key>[^/]+)",
                self._set_final,
            ),
            (
                "POST",
                rf"/platform/annotation-queues/(?P<id>{uuid_re})/items/delete",
                self._delete_items,
            ),
            (
                "PATCH",
                rf"/platform/annotation-queues/(?P<id>{uuid_re})/items/(?P<item>{uuid_re})",
                self._update_item,
            ),
            (
                "POST",
                rf"/platform/annotation-queues/items/(?P<item>{uuid_re})/status",
                self._set_item_status,
            ),
        ]
        table += self.platform.routes(uuid_re)
        table += self._pairwise_routes()
        self._routes = [(m, re.compile(p), h) for m, p, h in table]

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    # -- info ----------------------------------------------------------------

    def _get_info(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        return 200, {
            "version": self.version,
            "license_expiration_time": None,
            "batch_ingest_config": {
                "use_multipart_endpoint": self.use_multipart_endpoint,
                "scale_up_qsize_trigger": 1000,
                "scale_up_nthreads_limit": 16,
                "scale_down_nempty_trigger": 4,
                "size_limit": 100,
                "size_limit_bytes": 20_971_520,
            },
            "instance_flags": {
                "zstd_compression_enabled": self.zstd_compression,
                "dataset_examples_multipart_enabled": False,
                "examples_multipart_enabled": False,
                **self._query_flags(),
            },
        }

    def _query_flags(self) -> JSON:
        # what the SDK reads to pick v1 or v2 run reads (langsmith _v2_migration_utils)
        if self.query_backend is None:
            return {}
        return {
            "ch_query_enabled": self.query_backend != "smithdb_only",
            "sdb_query_enabled": self.query_backend != "clickhouse_only",
        }

    def _require_v1_runs(self) -> None:
        if self.query_backend == "smithdb_only":
            raise HTTPError(400, "v1 run queries are not supported on this deployment (SmithDB)")

    def _get_settings(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        return 200, {
            "id": self.tenant_id,
            "display_name": "fake-tenant",
            "created_at": "2024-01-01T00:00:00+00:00",
            "tenant_handle": "fake",
        }

    # -- sessions ------------------------------------------------------------

    def _session_by_name(self, name: str) -> JSON | None:
        for session in self.sessions.values():
            if session["name"] == name:
                return session
        return None

    def _new_session(self, body: JSON) -> JSON:
        session_id = _maybe_uuid(body.get("id")) or str(uuid.uuid4())
        if session_id in self.sessions:
            raise HTTPError(409, f"session {session_id} already exists")
        session = {
            "id": session_id,
            "name": body.get("name") or session_id,
            "description": body.get("description"),
            "start_time": _norm_time(body.get("start_time")) or _iso(_now()),
            "end_time": _norm_time(body.get("end_time")),
            "extra": body.get("extra"),
            "reference_dataset_id": _maybe_uuid(body.get("reference_dataset_id")),
            "tenant_id": self.tenant_id,
            "trace_tier": None,
        }
        self.sessions[session_id] = session
        return session

    def _session_out(self, session: JSON, include_stats: bool = True) -> JSON:
        out = dict(session)
        if include_stats:
            runs = [r for r in self.runs.values() if r.get("session_id") == session["id"]]
            out["run_count"] = len(runs)
            out["last_run_start_time"] = max((r["start_time"] for r in runs), default=None)
            out["feedback_stats"] = self._feedback_stats(
                f for f in self.feedback.values() if self._feedback_session(f) == session["id"]
            )
            out["error_rate"] = sum(1 for r in runs if r.get("error")) / len(runs) if runs else None
        return out

    def _session_or_404(self, session_id: str) -> JSON:
        session = self.sessions.get(_uuid_str(session_id))
        if session is None:
            raise HTTPError(404, f"session {session_id} not found")
        return session

    def _create_session(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        body = body or {}
        name = body.get("name")
        existing = self._session_by_name(name) if name else None
        if existing is not None:
            if not _bool(_first(query, "upsert")):
                raise HTTPError(409, f"session {name!r} already exists")
            for key in ("description", "extra", "reference_dataset_id"):
                if body.get(key) is not None:
                    existing[key] = body[key]
            return 200, self._session_out(existing)
        return 200, self._session_out(self._new_session(body))

    def _list_sessions(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        items = list(self.sessions.values())
        ids = {_uuid_str(i) for i in _many(query, "id")}
        if ids:
            items = [s for s in items if s["id"] in ids]
        if (name := _first(query, "name")) is not None:
            items = [s for s in items if s["name"] == name]
        if (contains := _first(query, "name_contains")) is not None:
            items = [s for s in items if contains.lower() in s["name"].lower()]
        if (ref := _first(query, "reference_dataset")) is not None:
            items = [s for s in items if s.get("reference_dataset_id") == _uuid_str(ref)]
        if _bool(_first(query, "reference_free")):
            items = [s for s in items if not s.get("reference_dataset_id")]
        if (metadata := _first(query, "metadata")) is not None:
            wanted = json.loads(metadata)
            items = [
                s
                for s in items
                if all(
                    ((s.get("extra") or {}).get("metadata") or {}).get(k) == v
                    for k, v in wanted.items()
                )
            ]
        items.sort(key=lambda s: s["start_time"], reverse=True)
        stats = _bool(_first(query, "include_stats")) or False
        return 200, [self._session_out(s, stats) for s in _paginate(items, query)]

    def _read_session(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        return 200, self._session_out(self._session_or_404(match["id"]))

    def _update_session(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        session = self._session_or_404(match["id"])
        for key in ("name", "description", "extra"):
            if (body or {}).get(key) is not None:
                session[key] = body[key]
        if (body or {}).get("end_time") is not None:
            session["end_time"] = _norm_time(body["end_time"])
        return 200, self._session_out(session)

    def _delete_session(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        session = self._session_or_404(match["id"])
        del self.sessions[session["id"]]
        for run_id in [k for k, r in self.runs.items() if r.get("session_id") == session["id"]]:
            del self.runs[run_id]
        return 202, {}

    # -- runs ----------------------------------------------------------------

    def _resolve_session_id(self, data: JSON) -> str | None:
        session_id = _maybe_uuid(data.pop("session_id", None))
        session_name = data.pop("session_name", None)
        if session_id is not None:
            if session_id not in self.sessions:
                self._new_session({"id": session_id, "name": session_name or session_id})
            return session_id
        if session_name is not None:
            session = self._session_by_name(session_name) or self._new_session(
                {"name": session_name}
            )
            return str(session["id"])
        return None

    def _apply_run_post(self, data: JSON) -> None:
        data = dict(data)
        data.pop("address", None)
        run_id = _uuid_str(data.get("id") or uuid.uuid4(), "run id")
        session_id = self._resolve_session_id(data)
        if session_id is None:
            session = self._session_by_name("default") or self._new_session({"name": "default"})
            session_id = session["id"]
        existing = self.runs.get(run_id)
        run: JSON = {
            "id": run_id,
            "name": data.get("name"),
            "run_type": data.get("run_type"),
            "start_time": _norm_time(data.get("start_time")) or _iso(_now()),
            "end_time": _norm_time(data.get("end_time")),
            "inputs": data.get("inputs") or {},
            "outputs": data.get("outputs"),
            "error": data.get("error"),
            "extra": data.get("extra") or {},
            "events": data.get("events"),
            "serialized": data.get("serialized"),
            "tags": data.get("tags"),
            "parent_run_id": _maybe_uuid(data.get("parent_run_id")),
            "trace_id": _maybe_uuid(data.get("trace_id")) or run_id,
            "dotted_order": data.get("dotted_order"),
            "reference_example_id": _maybe_uuid(data.get("reference_example_id")),
            "session_id": session_id,
            "_seq": self._next_seq(),
        }
        for key, value in data.items():
            if key not in run and key != "attachments":
                run[key] = value
        if existing is not None:
            # a patch arrived first (or a duplicate post): the patch's fields win
            run.update({k: v for k, v in existing.items() if v is not None and k != "_seq"})
        if not run["dotted_order"]:
            stamp = _parse_time(run["start_time"]) or _now()
            run["dotted_order"] = stamp.strftime("%Y%m%dT%H%M%S%fZ") + run_id
        self.runs[run_id] = run

    def _apply_run_patch(self, run_id: str, data: JSON) -> None:
        data = dict(data)
        data.pop("address", None)
        data.pop("id", None)
        run_id = _uuid_str(run_id, "run id")
        session_id = self._resolve_session_id(data)
        run = self.runs.get(run_id)
        if run is None:
            # patch before post (possible with background batching): keep a stub
            run = {"id": run_id, "_seq": self._next_seq()}
            self.runs[run_id] = run
        if session_id is not None:
            run["session_id"] = session_id
        for key, value in data.items():
            if value is None or key == "attachments":
                continue
            if key in ("start_time", "end_time"):
                value = _norm_time(value)
            elif key in ("trace_id", "parent_run_id", "reference_example_id"):
                value = _maybe_uuid(value)
            elif key == "extra" and isinstance(run.get("extra"), dict):
                merged = dict(run["extra"])
                merged.update(value)
                if "metadata" in run["extra"] and "metadata" in value:
                    merged["metadata"] = {**run["extra"]["metadata"], **value["metadata"]}
                value = merged
            run[key] = value

    def _run_out(self, run: JSON) -> JSON:
        out = {k: v for k, v in run.items() if not k.startswith("_")}
        out.setdefault("name", None)
        out.setdefault("run_type", None)
        out.setdefault("inputs", {})
        out.setdefault("start_time", _iso(_now()))
        out.setdefault("trace_id", run["id"])
        out.setdefault("dotted_order", "")
        if out.get("error"):
            out["status"] = "error"
        elif out.get("end_time"):
            out["status"] = "success"
        else:
            out["status"] = "pending"
        parents = [
            seg.split("Z", 1)[1] for seg in (out.get("dotted_order") or "").split(".") if "Z" in seg
        ][:-1]
        out["parent_run_ids"] = parents
        out["child_run_ids"] = [
            r["id"] for r in self.runs.values() if r.get("parent_run_id") == run["id"]
        ] or None
        out["feedback_stats"] = self._feedback_stats(
            f for f in self.feedback.values() if f.get("run_id") == run["id"]
        )
        out["app_path"] = (
            f"/o/{self.tenant_id}/projects/p/{out.get('session_id')}/r/{run['id']}"
            f"?trace_id={out['trace_id']}&start_time={out['start_time']}"
        )
        return out

    def _run_or_404(self, run_id: str) -> JSON:
        run = self.runs.get(_uuid_str(run_id, "run id"))
        if run is None:
            raise HTTPError(404, f"run {run_id} not found")
        return run

    def _create_run(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        if not isinstance(body, dict):
            raise HTTPError(422, "run body must be an object")
        self._apply_run_post(body)
        return 202, {}

    def _batch_runs(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        body = body or {}
        for run in body.get("post") or []:
            self._apply_run_post(run)
        for run in body.get("patch") or []:
            self._apply_run_patch(run["id"], run)
        return 202, {}

    def _multipart_runs(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        if not isinstance(body, _Multipart):
            raise HTTPError(422, "expected a multipart/form-data body")
        ops: dict[tuple[str, str], JSON] = {}
        order: list[tuple[str, str]] = []
        feedbacks: list[JSON] = []
        for name, headers, data in body.parts:
            pieces = name.split(".")
            kind = pieces[0]
            if kind == "attachment" and len(pieces) >= 3:
                content_type = headers.get("content-type", "application/octet-stream")
                self.attachments[(_uuid_str(pieces[1]), pieces[2])] = (content_type, data)
                continue
            if kind == "feedback" and len(pieces) == 2:
                feedbacks.append(json.loads(data))
                continue
            if kind not in ("post", "patch") or len(pieces) not in (2, 3):
                raise HTTPError(422, f"unexpected multipart part {name!r}")
            key = (kind, pieces[1])
            if key not in ops:
                ops[key] = {}
                order.append(key)
            if len(pieces) == 2:
                ops[key].update(json.loads(data))
            else:
                ops[key][pieces[2]] = json.loads(data)
        for kind, run_id in sorted(order, key=lambda k: k[0] != "post"):
            if kind == "post":
                self._apply_run_post({"id": run_id, **ops[(kind, run_id)]})
            else:
                self._apply_run_patch(run_id, ops[(kind, run_id)])
        for fb in feedbacks:
            self._store_feedback(fb, upsert=True)
        return 202, {}

    def _read_run(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        self._require_v1_runs()
        return 200, self._run_out(self._run_or_404(match["id"]))

    def _update_run(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        self._apply_run_patch(match["id"], body or {})
        return 202, {}

    def _query_runs(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        self._require_v1_runs()
        body = body or {}
        runs = list(self.runs.values())

        def ids(key: str) -> set[str] | None:
            value = body.get(key)
            if value is None:
                return None
            values = value if isinstance(value, list) else [value]
            return {_uuid_str(v) for v in values}

        if (sessions := ids("session")) is not None:
            runs = [r for r in runs if r.get("session_id") in sessions]
        if (run_ids := ids("id")) is not None:
            runs = [r for r in runs if r["id"] in run_ids]
        if (traces := ids("trace")) is not None:
            runs = [r for r in runs if r.get("trace_id", r["id"]) in traces]
        if (parents := ids("parent_run")) is not None:
            runs = [r for r in runs if r.get("parent_run_id") in parents]
        if (examples := ids("reference_example")) is not None:
            runs = [r for r in runs if r.get("reference_example_id") in examples]
        if body.get("is_root") is not None:
            want_root = bool(body["is_root"])
            runs = [r for r in runs if (r.get("parent_run_id") is None) == want_root]
        if body.get("run_type") is not None:
            runs = [r for r in runs if r.get("run_type") == body["run_type"]]
        if body.get("error") is not None:
            want_error = bool(body["error"])
            runs = [r for r in runs if bool(r.get("error")) == want_error]
        if body.get("start_time") is not None:
            since = _parse_time(body["start_time"])
            runs = [r for r in runs if (_parse_time(r.get("start_time")) or _now()) >= since]  # type: ignore[operator]
        for key in ("filter", "trace_filter", "tree_filter"):
            if body.get(key):
                predicate = _compile_filter(body[key])
                if key == "filter":
                    runs = [r for r in runs if predicate(self._run_out(r), self)]
                elif key == "trace_filter":
                    runs = [
                        r
                        for r in runs
                        if (root := self.runs.get(str(r.get("trace_id") or r["id"]))) is not None
                        and predicate(self._run_out(root), self)
                    ]
                else:
                    runs = [
                        r
                        for r in runs
                        if any(
                            predicate(self._run_out(o), self)
                            for o in self.runs.values()
                            if o.get("trace_id") == r.get("trace_id") and o["id"] != r["id"]
                        )
                    ]
        if body.get("query"):
            needle = str(body["query"]).lower()
            runs = [r for r in runs if needle in json.dumps(r, default=str).lower()]
        order = body.get("order", "desc")
        if order not in ("asc", "desc"):
            raise HTTPError(422, f"order must be 'asc' or 'desc', got {order!r}")
        runs.sort(key=_time_order, reverse=order == "desc")
        offset = int(body.get("cursor") or 0)
        page_size = self.runs_page_size
        if body.get("limit"):
            page_size = min(page_size, int(body["limit"]))
        page = runs[offset : offset + page_size]
        next_cursor = str(offset + page_size) if offset + page_size < len(runs) else None
        select = body.get("select")
        return 200, {
            "runs": [self._run_v1_out(r, select) for r in page],
            "cursors": {"next": next_cursor, "prev": str(offset) if offset else None},
        }

    def _run_v1_out(self, run: JSON, select: list[str] | None) -> JSON:
        # Strict: only the fields selected (and the id), as the query returns them; the
        # SDK's default selection names fields the fake does not record (costs): null.
        out = self._run_out(run)
        if not select:
            return out
        return {"id": out["id"], **{name: out.get(name) for name in select}}

    # -- runs v2 -------------------------------------------------------------

    _V2_FIELDS: ClassVar[dict[str, str]] = {
        "ID": "id",
        "NAME": "name",
        "RUN_TYPE": "run_type",
        "STATUS": "status",
        "START_TIME": "start_time",
        "END_TIME": "end_time",
        "ERROR": "error",
        "EXTRA": "extra",
        "METADATA": "metadata",
        "EVENTS": "events",
        "INPUTS": "inputs",
        "OUTPUTS": "outputs",
        "PARENT_RUN_IDS": "parent_run_ids",
        "PROJECT_ID": "project_id",
        "TRACE_ID": "trace_id",
        "DOTTED_ORDER": "dotted_order",
        "IS_ROOT": "is_root",
        "REFERENCE_EXAMPLE_ID": "reference_example_id",
        "REFERENCE_DATASET_ID": "reference_dataset_id",
        "TAGS": "tags",
        "APP_PATH": "app_path",
        "FEEDBACK_STATS": "feedback_stats",
        # Served as null: the test server records no token counts, costs or attachments.
        "FIRST_TOKEN_TIME": "first_token_time",
        "PROMPT_TOKENS": "prompt_tokens",
        "COMPLETION_TOKENS": "completion_tokens",
        "TOTAL_TOKENS": "total_tokens",
        "PROMPT_COST": "prompt_cost",
        "COMPLETION_COST": "completion_cost",
        "TOTAL_COST": "total_cost",
        "PROMPT_TOKEN_DETAILS": "prompt_token_details",
        "COMPLETION_TOKEN_DETAILS": "completion_token_details",
        "PROMPT_COST_DETAILS": "prompt_cost_details",
        "COMPLETION_COST_DETAILS": "completion_cost_details",
        "ATTACHMENTS": "attachments",
    }

    def _run_v2_out(self, run: JSON, selects: list[str] | None) -> JSON:
        v1 = self._run_out(run)
        session = self.sessions.get(str(v1.get("session_id")))
        extra = dict(v1.get("extra") or {})
        metadata = extra.pop("metadata", None)
        full = {
            **v1,
            # v2 serves metadata as its own select (METADATA): EXTRA comes without it
            "extra": extra,
            "status": str(v1["status"]).upper(),
            "metadata": metadata,
            "project_id": v1.get("session_id"),
            "is_root": run.get("parent_run_id") is None,
            "reference_dataset_id": session.get("reference_dataset_id") if session else None,
        }
        names = selects or ["ID"]
        out: JSON = {"id": full["id"]}
        for name in names:
            key = self._V2_FIELDS.get(str(name).upper())
            if key is None:
                raise HTTPError(422, f"unsupported select {name!r}")
            out[key] = full.get(key)
        return out

    def _require_v2(self) -> None:
        if not self.runs_v2:
            raise HTTPError(404, "Not Found")

    def _query_runs_v2(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        self._require_v2()
        body = body or {}
        projects = {_uuid_str(p) for p in body.get("project_ids") or []}
        dataset = _maybe_uuid(body.get("reference_dataset_id"))
        if bool(projects) == bool(dataset):
            raise HTTPError(422, "set exactly one of project_ids and reference_dataset_id")
        if dataset:
            projects = {
                s["id"] for s in self.sessions.values() if s.get("reference_dataset_id") == dataset
            }
        hi = _parse_time(body.get("max_start_time")) or _now()
        lo = _parse_time(body.get("min_start_time")) or (hi - dt.timedelta(days=1))
        runs = [
            r
            for r in self.runs.values()
            if r.get("session_id") in projects
            and lo <= (_parse_time(r.get("start_time")) or _now()) <= hi
        ]
        if ids := {_uuid_str(i) for i in body.get("ids") or []}:
            runs = [r for r in runs if r["id"] in ids]
        if body.get("trace_id"):
            trace = _uuid_str(body["trace_id"])
            runs = [r for r in runs if r.get("trace_id", r["id"]) == trace]
        if body.get("is_root") is not None:
            want_root = bool(body["is_root"])
            runs = [r for r in runs if (r.get("parent_run_id") is None) == want_root]
        if body.get("run_type") is not None:
            runs = [r for r in runs if r.get("run_type") == body["run_type"]]
        if body.get("has_error") is not None:
            runs = [r for r in runs if bool(r.get("error")) == bool(body["has_error"])]
        if examples := {_uuid_str(e) for e in body.get("reference_examples") or []}:
            runs = [r for r in runs if r.get("reference_example_id") in examples]
        if body.get("filter"):
            predicate = _compile_filter(body["filter"])
            runs = [r for r in runs if predicate(self._run_out(r), self)]
        lo_fb = _parse_time(body.get("min_feedback_modified_at"))
        hi_fb = _parse_time(body.get("max_feedback_modified_at"))
        if lo_fb is not None or hi_fb is not None:
            # bounds on the modified time of the feedback the filter's conditions name
            keys = set(re.findall(r'feedback_key\s*,\s*"([^"]+)"', body.get("filter") or ""))
            if not keys:
                raise HTTPError(400, "feedback modified bounds need a feedback condition")
            touched = {
                f["run_id"]
                for f in self.feedback.values()
                if f["key"] in keys
                and (lo_fb is None or _parse_time(f["modified_at"]) >= lo_fb)  # type: ignore[operator]
                and (hi_fb is None or _parse_time(f["modified_at"]) < hi_fb)  # type: ignore[operator]
            }
            runs = [r for r in runs if r["id"] in touched]
        if self.v2_run_order in ("newest", "oldest"):
            runs.sort(key=_time_order, reverse=self.v2_run_order == "newest")
        else:  # stable across a query's pages, unrelated to time
            runs.sort(key=lambda r: hashlib.sha256(r["id"].encode()).digest())
        offset = int(body.get("cursor") or 0)
        asked = int(body.get("page_size") or 100)
        if not 1 <= asked <= 1000:  # checked as asked, before the server's own cap
            raise HTTPError(422, "page_size must be between 1 and 1000")
        page_size = min(asked, self.runs_page_size)
        page = runs[offset : offset + page_size]
        more = offset + page_size < len(runs)
        selects = body.get("selects")
        return 200, {
            "items": [self._run_v2_out(r, selects) for r in page],
            "next_cursor": str(offset + page_size) if more else None,
        }

    def _read_run_v2(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        self._require_v2()
        run = self._run_or_404(match["id"])
        project = _first(query, "project_id")
        if project is None:
            raise HTTPError(422, "project_id is required")
        if run.get("session_id") != _uuid_str(project):
            raise HTTPError(404, f"run {run['id']} not found in project {project}")
        return 200, self._run_v2_out(run, _many(query, "selects") or None)

    # -- feedback configs ----------------------------------------------------

    def _feedback_config_out(self, entry: JSON) -> JSON:
        return {
            "id": entry["id"],
            "feedback_key": entry["feedback_key"],
            "feedback_config": copy.deepcopy(entry["feedback_config"]),
            "tenant_id": self.tenant_id,
            "modified_at": entry["modified_at"],
            "is_lower_score_better": entry.get("is_lower_score_better"),
            "is_enforced": bool(entry.get("is_enforced")),
            "is_first": entry is self.feedback_config_sets[entry["feedback_key"]][0],
        }

    def _config_by_id(self, key: str, config_id: Any) -> JSON | None:
        for entry in self.feedback_config_sets.get(key, []):
            if entry["id"] == str(config_id):
                return entry
        return None

    def _add_feedback_config(self, key: str, config: JSON, **fields: Any) -> JSON:
        entry = {
            "id": str(uuid.uuid4()),
            "feedback_key": key,
            "feedback_config": copy.deepcopy(config),
            "modified_at": _iso(_now()),
            **fields,
        }
        self.feedback_config_sets.setdefault(key, []).append(entry)
        return entry

    def add_feedback_config(self, key: str, config: JSON, *, is_enforced: bool = False) -> JSON:
        """Seed a workspace feedback config for ``key`` (as an admin would have made)."""
        with self.lock:
            return self._add_feedback_config(key, config, is_enforced=is_enforced)

    def _create_feedback_config(
        self, match: re.Match[str], query: Query, body: Any
    ) -> tuple[int, Any]:
        body = body or {}
        key = body.get("feedback_key")
        config = body.get("feedback_config")
        if not key or not isinstance(config, dict):
            raise HTTPError(422, "feedback_key and feedback_config are required")
        existing = self.feedback_config_sets.get(key, [])
        for entry in existing:
            if entry["feedback_config"] == config:  # identical: returned unchanged
                return 200, self._feedback_config_out(entry)
        if existing:
            # As the SDK documents create_feedback_config: a different config is added
            # next to the existing ones only with enforced configs on, and never next to
            # an enforced one; otherwise 400.
            if any(e.get("is_enforced") for e in existing) or body.get("is_enforced"):
                raise HTTPError(409, f"feedback key {key!r} already has an enforced config")
            if not self.enforced_feedback_configs:
                raise HTTPError(400, "Feedback config already exists")
        entry = self._add_feedback_config(
            key,
            config,
            is_lower_score_better=body.get("is_lower_score_better"),
            is_enforced=bool(body.get("is_enforced")),
        )
        return 200, self._feedback_config_out(entry)

    def _list_feedback_configs(
        self, match: re.Match[str], query: Query, body: Any
    ) -> tuple[int, Any]:
        keys = set(_many(query, "key")) or set(self.feedback_config_sets)
        if not self.include_all_configs and _first(query, "include_all_configs") is not None:
            raise HTTPError(422, "unknown query parameter include_all_configs")
        every = _bool(_first(query, "include_all_configs")) or False
        out = []
        for key in sorted(keys & set(self.feedback_config_sets)):
            entries = self.feedback_config_sets[key]
            out.extend(self._feedback_config_out(e) for e in (entries if every else entries[:1]))
        return 200, _paginate(out, query)

    def _delete_feedback_config(
        self, match: re.Match[str], query: Query, body: Any
    ) -> tuple[int, Any]:
        key = _first(query, "feedback_key")
        if key is None or key not in self.feedback_config_sets:
            raise HTTPError(404, f"feedback config {key!r} not found")
        del self.feedback_config_sets[key]
        return 200, {}

    # -- feedback ------------------------------------------------------------

    def _feedback_session(self, fb: JSON) -> str | None:
        if fb.get("session_id"):
            return str(fb["session_id"])
        run = self.runs.get(fb.get("run_id") or "")
        return run.get("session_id") if run else None

    @staticmethod
    def _feedback_stats(feedbacks: Iterable[JSON]) -> JSON | None:
        stats: dict[str, JSON] = {}
        for fb in feedbacks:
            entry = stats.setdefault(
                fb["key"], {"n": 0, "avg": None, "values": {}, "comments": [], "_scores": []}
            )
            entry["n"] += 1
            score = fb.get("score")
            if isinstance(score, int | float):  # bool is an int too
                entry["_scores"].append(float(score))
            value = fb.get("value")
            if isinstance(value, str):
                entry["values"][value] = entry["values"].get(value, 0) + 1
            if fb.get("comment"):
                entry["comments"].append(fb["comment"])
        for entry in stats.values():
            scores = entry.pop("_scores")
            entry["avg"] = sum(scores) / len(scores) if scores else None
        return stats or None

    def _feedback_out(self, fb: JSON, *, user_names: bool = False) -> JSON:
        # Only what was stored: no start time or trace id filled in from the run.
        out = {k: v for k, v in fb.items() if not k.startswith("_")}
        source = dict(out["feedback_source"])
        # user names are resolved on request only (GET /feedback?include_user_names=true)
        source["user_name"] = self._user_name(source.get("user_id")) if user_names else None
        out["feedback_source"] = source
        return copy.deepcopy(out)

    def _store_feedback(self, body: JSON, *, upsert: bool = False, stamp_user: bool = True) -> JSON:
        body = dict(body)
        feedback_id = _maybe_uuid(body.get("id")) or str(uuid.uuid4())
        if feedback_id in self.feedback and not upsert:
            raise HTTPError(409, f"feedback {feedback_id} already exists")
        run_id = _maybe_uuid(body.get("run_id"))
        trace_id = _maybe_uuid(body.get("trace_id"))
        session_id = _maybe_uuid(body.get("session_id"))
        if run_id is None and session_id is None and trace_id is None:
            raise HTTPError(422, "feedback needs run_id, trace_id or session_id")
        if session_id is None and run_id is not None:
            # the service files run feedback under the run's project when it is not given
            run = self.runs.get(run_id)
            session_id = run.get("session_id") if run else None
        source = body.get("feedback_source") or {"type": "api"}
        # The service stamps who wrote the feedback from the API key; what the client
        # says about the user is ignored. (Seeded records keep the user they were given.)
        user_id = self._caller()["id"] if stamp_user else source.get("user_id")
        source = {
            "type": source.get("type") or "api",
            "metadata": source.get("metadata") or {},
            "user_id": user_id,
            "user_name": None,
        }
        now = _iso(_now())
        comparative = _maybe_uuid(body.get("comparative_experiment_id"))
        if comparative is not None and comparative not in self.comparative:
            raise HTTPError(404, f"comparative experiment {comparative} not found")
        if body.get("feedback_config") and not self.feedback_config_sets.get(body["key"]):
            self._add_feedback_config(body["key"], body["feedback_config"])
        if body.get("extend_trace_retention", True):
            self._extend_trace(run_id or trace_id)
        fb: JSON = {
            "id": feedback_id,
            "run_id": run_id,
            "trace_id": trace_id,
            "key": body.get("key") or "unnamed",
            "score": body.get("score"),
            "value": body.get("value"),
            "comment": body.get("comment"),
            "correction": body.get("correction"),
            "feedback_source": source,
            "created_at": _norm_time(body.get("created_at")) or now,
            "modified_at": _norm_time(body.get("modified_at")) or now,
            "session_id": session_id,
            "start_time": _norm_time(body.get("start_time")),
            "comparative_experiment_id": _maybe_uuid(body.get("comparative_experiment_id")),
            "feedback_group_id": _maybe_uuid(body.get("feedback_group_id")),
            "extra": body.get("extra"),
            "_seq": self._next_seq(),
        }
        self.feedback[feedback_id] = fb
        return fb

    def _feedback_or_404(self, feedback_id: str) -> JSON:
        fb = self.feedback.get(_uuid_str(feedback_id, "feedback id"))
        if fb is None:
            raise HTTPError(404, f"feedback {feedback_id} not found")
        return fb

    def _create_feedback(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        if not isinstance(body, dict):
            raise HTTPError(422, "feedback body must be an object")
        return 200, self._feedback_out(self._store_feedback(body))

    def _list_feedback(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        items = list(self.feedback.values())
        if run_ids := {_uuid_str(r) for r in _many(query, "run")}:
            items = [f for f in items if f.get("run_id") in run_ids]
        if keys := set(_many(query, "key")):
            items = [f for f in items if f["key"] in keys]
        if sessions := {_uuid_str(s) for s in _many(query, "session")}:
            items = [f for f in items if f.get("session_id") in sessions]
        if sources := {_source_type(s) for s in _many(query, "source")}:
            items = [f for f in items if f["feedback_source"]["type"] in sources]
        if users := set(_many(query, "user")):
            items = [f for f in items if str(f["feedback_source"].get("user_id")) in users]
        if (has_comment := _bool(_first(query, "has_comment"))) is not None:
            items = [f for f in items if bool(f.get("comment")) == has_comment]
        if (has_score := _bool(_first(query, "has_score"))) is not None:
            items = [f for f in items if (f.get("score") is not None) == has_score]
        if (level := _first(query, "level")) is not None:
            want_run = level == "run"
            items = [f for f in items if (f.get("run_id") is not None) == want_run]
        for key in ("comparative_experiment_id", "feedback_group_id"):
            if (value := _first(query, key)) is not None:
                items = [f for f in items if f.get(key) == _uuid_str(value)]
        if (lo := _first(query, "min_created_at")) is not None:
            items = [f for f in items if _parse_time(f["created_at"]) >= _parse_time(lo)]  # type: ignore[operator]
        if (hi := _first(query, "max_created_at")) is not None:
            items = [f for f in items if _parse_time(f["created_at"]) <= _parse_time(hi)]  # type: ignore[operator]
        items.sort(key=lambda f: (f["created_at"], f["_seq"]), reverse=True)
        names = _bool(_first(query, "include_user_names")) or False
        return 200, [self._feedback_out(f, user_names=names) for f in _paginate(items, query)]

    def _read_feedback(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        return 200, self._feedback_out(self._feedback_or_404(match["id"]))

    def _update_feedback(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        fb = self._feedback_or_404(match["id"])
        for key in ("score", "value", "comment", "correction"):
            if key in (body or {}):
                fb[key] = body[key]
        fb["modified_at"] = _iso(_now())
        self.platform.after_feedback_update(fb, body or {})
        return 200, self._feedback_out(fb)

    def _delete_feedback(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        fb = self._feedback_or_404(match["id"])
        del self.feedback[fb["id"]]
        return 200, {}

    # -- datasets & examples -------------------------------------------------

    def _dataset_out(self, ds: JSON) -> JSON:
        out = {k: v for k, v in ds.items() if not k.startswith("_")}
        examples = [e for e in self.examples.values() if e["dataset_id"] == ds["id"]]
        out["example_count"] = len(examples)
        out["session_count"] = sum(
            1 for s in self.sessions.values() if s.get("reference_dataset_id") == ds["id"]
        )
        out["metadata"] = ((ds.get("extra") or {}).get("metadata")) or None
        return out

    def _dataset_or_404(self, dataset_id: str) -> JSON:
        ds = self.datasets.get(_uuid_str(dataset_id, "dataset id"))
        if ds is None:
            raise HTTPError(404, f"dataset {dataset_id} not found")
        return ds

    def _create_comparative(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        """A comparative experiment: two or more experiments of one reference dataset."""
        if not isinstance(body, dict) or not body.get("name"):
            raise HTTPError(422, "a comparative experiment needs a name")
        dataset = self._dataset_or_404(body.get("reference_dataset_id") or "")
        ids = [_uuid_str(e, "experiment id") for e in body.get("experiment_ids") or []]
        if len(set(ids)) < 2:
            raise HTTPError(422, "a comparative experiment needs at least two experiments")
        for e in ids:
            if self._session_or_404(e).get("reference_dataset_id") != dataset["id"]:
                raise HTTPError(422, f"experiment {e} is not on dataset {dataset['id']}")
        cid = _maybe_uuid(body.get("id")) or str(uuid.uuid4())
        if cid in self.comparative:
            raise HTTPError(409, f"comparative experiment {cid} already exists")
        now = _iso(_now())
        self.comparative[cid] = {
            "id": cid,
            "name": body["name"],
            "description": body.get("description"),
            "tenant_id": self.tenant_id,
            "created_at": _norm_time(body.get("created_at")) or now,
            "modified_at": now,
            "reference_dataset_id": dataset["id"],
            "extra": body.get("extra") or {},
            "experiments_info": [{"id": e, "name": self.sessions[e]["name"]} for e in ids],
        }
        return 200, copy.deepcopy(self.comparative[cid])

    def _create_dataset(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        body = body or {}
        name = body.get("name")
        if not name:
            raise HTTPError(422, "dataset name is required")
        if any(d["name"] == name for d in self.datasets.values()):
            raise HTTPError(409, f"dataset {name!r} already exists")
        dataset_id = _maybe_uuid(body.get("id")) or str(uuid.uuid4())
        now = _iso(_now())
        ds = {
            "id": dataset_id,
            "name": name,
            "description": body.get("description"),
            "data_type": body.get("data_type") or "kv",
            "created_at": now,
            "modified_at": now,
            "inputs_schema_definition": body.get("inputs_schema_definition"),
            "outputs_schema_definition": body.get("outputs_schema_definition"),
            "transformations": body.get("transformations"),
            "extra": body.get("extra"),
            "tenant_id": self.tenant_id,
        }
        self.datasets[dataset_id] = ds
        return 200, self._dataset_out(ds)

    def _list_datasets(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        items = list(self.datasets.values())
        if ids := {_uuid_str(i) for i in _many(query, "id")}:
            items = [d for d in items if d["id"] in ids]
        if (name := _first(query, "name")) is not None:
            items = [d for d in items if d["name"] == name]
        if (contains := _first(query, "name_contains")) is not None:
            items = [d for d in items if contains.lower() in d["name"].lower()]
        if (data_type := _first(query, "data_type")) is not None:
            items = [d for d in items if d["data_type"] == data_type]
        items.sort(key=lambda d: d["created_at"], reverse=True)
        return 200, [self._dataset_out(d) for d in _paginate(items, query)]

    def _read_dataset(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        return 200, self._dataset_out(self._dataset_or_404(match["id"]))

    def _update_dataset(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        ds = self._dataset_or_404(match["id"])
        for key in ("name", "description"):
            if (body or {}).get(key) is not None:
                ds[key] = body[key]
        ds["modified_at"] = _iso(_now())
        return 200, self._dataset_out(ds)

    def _delete_dataset(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        ds = self._dataset_or_404(match["id"])
        del self.datasets[ds["id"]]
        for ex_id in [k for k, e in self.examples.items() if e["dataset_id"] == ds["id"]]:
            del self.examples[ex_id]
        return 200, {}

    def _store_example(self, body: JSON) -> JSON:
        dataset_id = _uuid_str(body.get("dataset_id"), "dataset_id")
        self._dataset_or_404(dataset_id)
        example_id = _maybe_uuid(body.get("id")) or str(uuid.uuid4())
        metadata = dict(body.get("metadata") or {})
        split = body.get("split")
        if split is not None:
            metadata["dataset_split"] = [split] if isinstance(split, str) else list(split)
        else:
            metadata.setdefault("dataset_split", ["base"])
        now = _iso(_now())
        example = {
            "id": example_id,
            "dataset_id": dataset_id,
            "inputs": body.get("inputs") or {},
            "outputs": body.get("outputs"),
            "metadata": metadata,
            "created_at": _norm_time(body.get("created_at")) or now,
            "modified_at": now,
            "source_run_id": _maybe_uuid(body.get("source_run_id")),
            "_seq": self._next_seq(),
        }
        self.examples[example_id] = example
        self.datasets[dataset_id]["modified_at"] = now
        return example

    @staticmethod
    def _example_out(example: JSON) -> JSON:
        out = {k: v for k, v in example.items() if not k.startswith("_")}
        out["attachment_urls"] = None
        return copy.deepcopy(out)

    def _create_example(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        return 200, self._example_out(self._store_example(body or {}))

    def _create_examples_bulk(
        self, match: re.Match[str], query: Query, body: Any
    ) -> tuple[int, Any]:
        if not isinstance(body, list):
            raise HTTPError(422, "bulk body must be a list")
        return 200, [self._example_out(self._store_example(b)) for b in body]

    def _list_examples(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        items = list(self.examples.values())
        if (dataset := _first(query, "dataset")) is not None:
            items = [e for e in items if e["dataset_id"] == _uuid_str(dataset)]
        if ids := {_uuid_str(i) for i in _many(query, "id")}:
            items = [e for e in items if e["id"] in ids]
        if splits := set(_many(query, "splits")):
            items = [
                e for e in items if splits & set((e["metadata"] or {}).get("dataset_split", []))
            ]
        if (metadata := _first(query, "metadata")) is not None:
            wanted = json.loads(metadata)
            items = [
                e
                for e in items
                if all((e["metadata"] or {}).get(k) == v for k, v in wanted.items())
            ]
        if _first(query, "filter"):
            raise HTTPError(400, "fake server does not support example filters")
        items.sort(key=lambda e: e["_seq"])
        return 200, [self._example_out(e) for e in _paginate(items, query)]

    def _delete_examples(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        ids = [_uuid_str(i, "example id") for i in _many(query, "example_ids")]
        if not ids:
            raise HTTPError(422, "example_ids is required")
        for example_id in ids:
            self._example_or_404(example_id)
        for example_id in ids:
            del self.examples[example_id]
        return 200, {}

    def _example_or_404(self, example_id: str) -> JSON:
        example = self.examples.get(_uuid_str(example_id, "example id"))
        if example is None:
            raise HTTPError(404, f"example {example_id} not found")
        return example

    def _read_example(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        return 200, self._example_out(self._example_or_404(match["id"]))

    def _update_example(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        example = self._example_or_404(match["id"])
        for key in ("inputs", "outputs", "metadata"):
            if (body or {}).get(key) is not None:
                example[key] = body[key]
        example["modified_at"] = _iso(_now())
        return 200, self._example_out(example)

    def _delete_example(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        example = self._example_or_404(match["id"])
        del self.examples[example["id"]]
        return 200, {}

    # -- annotation queues ---------------------------------------------------

    def _queue_or_404(self, queue_id: str) -> JSON:
        queue = self.annotation_queues.get(_uuid_str(queue_id, "queue id"))
        if queue is None:
            raise HTTPError(404, f"annotation queue {queue_id} not found")
        return queue

    def _queue_out(self, queue: JSON, details: bool) -> JSON:
        out = {k: v for k, v in queue.items() if not k.startswith("_")}
        items = self.queue_items.get(queue["id"], [])
        out["total_runs"] = len(items)
        if details:
            rubric = []
            for item in queue.get("rubric_items") or []:
                entry = dict(item)
                # read-only: the item's config, or the key's first one when it has none
                key = entry.get("feedback_key", "")
                config = self._config_by_id(key, entry.get("feedback_config_id"))
                if config is None and self.feedback_config_sets.get(key):
                    config = self.feedback_config_sets[key][0]
                entry["feedback_config"] = self._feedback_config_out(config) if config else None
                rubric.append(entry)
            out["rubric_items"] = rubric
        else:
            out.pop("rubric_items", None)
            out.pop("rubric_instructions", None)
        return copy.deepcopy(out)

    def _rubric_in(self, items: Any, previous: list[JSON]) -> list[JSON]:
        """Rubric items as stored: the config each one uses is pinned by id.

        As the SDK documents ``feedback_config_id``: the key's enforced config wins, an
        item that already has a config keeps it, and ``feedback_config`` is ignored.
        """
        before = {i.get("feedback_key"): i.get("feedback_config_id") for i in previous}
        stored = []
        for raw in items or []:
            item = {k: v for k, v in dict(raw).items() if k != "feedback_config"}
            key = item.get("feedback_key", "")
            enforced = [e for e in self.feedback_config_sets.get(key, []) if e.get("is_enforced")]
            if enforced:
                item["feedback_config_id"] = enforced[0]["id"]
            elif before.get(key):
                item["feedback_config_id"] = before[key]
            elif item.get("feedback_config_id") is not None:
                if self._config_by_id(key, item["feedback_config_id"]) is None:
                    raise HTTPError(
                        400, f"feedback config {item['feedback_config_id']} is not one of {key!r}"
                    )
                item["feedback_config_id"] = str(item["feedback_config_id"])
            stored.append(item)
        return stored

    def _create_queue(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        body = body or {}
        if not body.get("name"):
            raise HTTPError(422, "queue name is required")
        queue_id = _maybe_uuid(body.get("id")) or str(uuid.uuid4())
        if queue_id in self.annotation_queues:
            raise HTTPError(409, f"annotation queue {queue_id} already exists")
        now = _iso(_now())
        queue = {
            **{k: v for k, v in body.items() if k not in ("id", "rubric_items")},
            "id": queue_id,
            "name": body["name"],
            "description": body.get("description"),
            "created_at": now,
            "updated_at": now,
            "tenant_id": self.tenant_id,
            # the create API takes no queue type: pairwise queues are made in the UI
            # (see the pairwise annotation queue section)
            "queue_type": "single",
            "rubric_instructions": body.get("rubric_instructions"),
            "rubric_items": self._rubric_in(body.get("rubric_items"), []),
            "num_reviewers_per_item": body.get("num_reviewers_per_item") or 1,
            "reviewer_access_mode": body.get("reviewer_access_mode") or "any",
            "assigned_reviewers": body.get("assigned_reviewers") or [],
            "_seq": self._next_seq(),
        }
        self.annotation_queues[queue_id] = queue
        self.queue_items[queue_id] = []
        out = self._queue_out(queue, details=True)
        out["rubric_items"] = None  # like the API: create does not echo the stored rubric
        return 200, out

    def _list_queues(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        items = list(self.annotation_queues.values())
        if ids := {_uuid_str(i) for i in _many(query, "ids")}:
            items = [q for q in items if q["id"] in ids]
        if (name := _first(query, "name")) is not None:
            items = [q for q in items if q["name"] == name]
        if (contains := _first(query, "name_contains")) is not None:
            items = [q for q in items if contains.lower() in q["name"].lower()]
        items.sort(key=lambda q: q["_seq"], reverse=True)
        return 200, [self._queue_out(q, details=False) for q in _paginate(items, query)]

    def _read_queue(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        return 200, self._queue_out(self._queue_or_404(match["id"]), details=True)

    def _update_queue(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        queue = self._queue_or_404(match["id"])
        for key, value in (body or {}).items():
            if key == "rubric_items" and value is not None:
                queue[key] = self._rubric_in(value, queue.get("rubric_items") or [])
            elif key != "id" and value is not None:
                queue[key] = copy.deepcopy(value)
        queue["updated_at"] = _iso(_now())
        for item in self.queue_items.get(queue["id"], []):
            self._settle(queue, item)
        return 200, self._queue_out(queue, details=True)

    def _delete_queue(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        queue = self._queue_or_404(match["id"])
        del self.annotation_queues[queue["id"]]
        self.queue_items.pop(queue["id"], None)
        return 200, {}

    def _add_item(self, queue_id: str, key: JSON) -> JSON:
        run_id = _uuid_str(key.get("run_id"), "run_id")
        items = self.queue_items.setdefault(queue_id, [])
        for item in items:
            if item["run_id"] == run_id:
                return item
        run = self.runs.get(run_id)
        project_id = _maybe_uuid(key.get("session_id") or key.get("project_id"))
        item = {
            "id": str(uuid.uuid4()),
            "queue_id": queue_id,
            "run_id": run_id,
            "item_type": "RUN",
            "project_id": project_id or (run.get("session_id") if run else None),
            "start_time": _norm_time(key.get("start_time"))
            or (run.get("start_time") if run else None),
            "added_at": _iso(_now()),
            "last_reviewed_time": None,
            # "completed" once archived (the queue's review requirements met); per-reviewer
            # statuses are in "reviews" (user id -> "viewed" | "completed")
            "status": None,
            "reviews": {},
            "source_proposed_example_id": _maybe_uuid(key.get("source_proposed_example_id")),
        }
        items.append(item)
        return item

    def _settle(self, queue: JSON, item: JSON) -> None:
        """Archive an item once the queue's review requirements are met."""
        done = {u for u, st in item["reviews"].items() if st == "completed"}
        assigned = [str(r.get("id", r)) for r in queue.get("assigned_reviewers") or []]
        if queue.get("reviewer_access_mode") == "assigned" and assigned:
            archived = set(assigned) <= done
        else:
            archived = len(done) >= int(queue.get("num_reviewers_per_item") or 1)
        if archived:
            item["status"] = "completed"
        else:
            item["status"] = "viewed" if item["reviews"] else None

    def _review_item(self, item: JSON, user_id: str, status: str | None) -> None:
        if status is None:
            item["reviews"].pop(user_id, None)  # a null status re-shows the item
        else:
            item["reviews"][user_id] = status
        item["last_reviewed_time"] = _iso(_now())
        self._settle(self.annotation_queues[item["queue_id"]], item)

    @staticmethod
    def _item_create_out(item: JSON) -> JSON:
        return {
            k: item.get(k)
            for k in (
                "id",
                "queue_id",
                "run_id",
                "added_at",
                "last_reviewed_time",
                "source_proposed_example_id",
            )
        }

    def _add_queue_runs(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        queue = self._queue_or_404(match["id"])
        if not isinstance(body, list):
            raise HTTPError(422, "body must be a list of run ids")
        added = [self._add_item(queue["id"], {"run_id": run_id}) for run_id in body]
        return 200, [self._item_create_out(i) for i in added]

    def _add_queue_keys(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        queue = self._queue_or_404(match["id"])
        if not isinstance(body, list):
            raise HTTPError(422, "body must be a list of run keys")
        added = [self._add_item(queue["id"], key) for key in body]
        return 200, [self._item_create_out(i) for i in added]

    def _filter_items(self, queue_id: str, status: str | None) -> list[JSON]:
        """The items in one review section, as the calling reviewer sees them."""
        items = list(self.queue_items.get(queue_id, []))
        me = self._caller()["id"]
        if status == "completed" or status == "archived":
            items = [i for i in items if i["status"] == "completed"]
        elif status == "needs_my_review":
            items = [
                i
                for i in items
                if i["status"] != "completed" and i["reviews"].get(me) != "completed"
            ]
        elif status == "needs_others_review":
            items = [
                i
                for i in items
                if i["status"] != "completed" and i["reviews"].get(me) == "completed"
            ]
        return items

    def _queue_run_out(self, item: JSON) -> JSON:
        run = self.runs.get(item["run_id"])
        base = (
            self._run_out(run)
            if run is not None
            else {
                "id": item["run_id"],
                "name": "",
                "run_type": "chain",
                "inputs": {},
                "start_time": item.get("start_time") or item["added_at"],
                "trace_id": item["run_id"],
                "dotted_order": "",
                "session_id": item.get("project_id"),
                "status": "pending",
                "app_path": "",
            }
        )
        base.update(
            {
                "queue_run_id": item["id"],
                "added_at": item["added_at"],
                "effective_added_at": item["added_at"],
                "last_reviewed_time": item["last_reviewed_time"],
                "completed_by": _completed_by(item),
                "source_proposed_example_id": item.get("source_proposed_example_id"),
            }
        )
        return base

    def _list_queue_runs(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        queue = self._queue_or_404(match["id"])
        items = self._filter_items(queue["id"], _first(query, "status"))
        if _bool(_first(query, "archived")) is False:
            items = [i for i in items if i["status"] != "completed"]
        return 200, [self._queue_run_out(i) for i in _paginate(items, query)]

    def _queue_run_at(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        queue = self._queue_or_404(match["id"])
        items = self._filter_items(queue["id"], "needs_my_review")
        index = int(match["index"])
        if index >= len(items):
            raise HTTPError(404, f"no run at index {index}")
        return 200, self._queue_run_out(items[index])

    def _find_item(self, queue_id: str, ident: str, *, by: str = "item") -> JSON:
        """An item by its id (``by="item"``) or, for the legacy run paths, by run id."""
        ident = _uuid_str(ident)
        field = "id" if by == "item" else "run_id"
        for item in self.queue_items.get(queue_id, []):
            if item[field] == ident:
                return item
        raise HTTPError(404, f"{'queue item' if by == 'item' else 'run'} {ident} not found")

    def _update_queue_run(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        queue = self._queue_or_404(match["id"])
        item = self._find_item(queue["id"], match["run"], by="run")
        body = body or {}
        if "last_reviewed_time" in body:
            item["last_reviewed_time"] = _norm_time(body["last_reviewed_time"])
        if body.get("added_at"):
            item["added_at"] = _norm_time(body["added_at"])
        return 200, self._item_create_out(item)

    def _delete_queue_run(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        queue = self._queue_or_404(match["id"])
        item = self._find_item(queue["id"], match["run"], by="run")
        self.queue_items[queue["id"]].remove(item)
        return 200, {}

    def _delete_queue_runs(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        queue = self._queue_or_404(match["id"])
        body = body or {}
        items = self.queue_items.setdefault(queue["id"], [])
        if body.get("delete_all"):
            keep = {_uuid_str(r) for r in body.get("exclude_run_ids") or []}
            items[:] = [i for i in items if i["run_id"] in keep]
        else:
            drop = {_uuid_str(r) for r in body.get("run_ids") or []}
            items[:] = [i for i in items if i["run_id"] not in drop]
        return 200, {}

    def _queue_size(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        queue = self._queue_or_404(match["id"])
        return 200, {"size": len(self._filter_items(queue["id"], "needs_my_review"))}

    def _queue_total_size(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        queue = self._queue_or_404(match["id"])
        return 200, {"size": len(self.queue_items.get(queue["id"], []))}

    def _set_item_status(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        ident = _uuid_str(match["item"], "queue item id")
        body = body or {}
        status = body.get("status")
        if status not in (None, "viewed", "completed"):
            raise HTTPError(422, f"invalid status {status!r}")
        for items in self.queue_items.values():
            for item in items:
                if ident == item["id"]:  # a run id is not an item id
                    self._review_item(item, self._caller()["id"], status)
                    if body.get("override_added_at"):
                        item["added_at"] = _norm_time(body["override_added_at"])
                    return 200, {
                        "queue_item_id": item["id"],
                        "status": status,
                        "is_archived": item["status"] == "completed",
                        "override_added_at": body.get("override_added_at"),
                    }
        raise HTTPError(404, f"queue item {ident} not found")

    def mark_queue_item(
        self, queue_id: Any, run_id: Any, status: str = "completed", *, reviewer: str = "reviewer"
    ) -> JSON:
        """Record one reviewer's status on a queued run (as they would in the UI)."""
        with self.lock:
            item = self._find_item(_uuid_str(queue_id), str(run_id), by="run")
            self._review_item(item, self.user_named(reviewer)["id"], status)
            return item

    def _key_agreements(self, item: JSON) -> dict[str, JSON]:
        """Per rubric key: whether the run's human reviews agree, and the final answer.

        A key two reviewers scored differently is "disagreed" until someone sets its final
        answer (``PUT .../finals/{key}``); the answer is then the final.
        """
        queue = self.annotation_queues.get(item["queue_id"]) or {}
        out: dict[str, JSON] = {}
        for rubric in queue.get("rubric_items") or []:
            key = rubric["feedback_key"]
            answers = [
                {"value": f["value"]} if f.get("value") is not None else {"score": f["score"]}
                for f in self.feedback.values()
                if f["run_id"] == item["run_id"]
                and f["key"] == key
                and f["feedback_source"]["type"] != "model"
                and (f.get("value") is not None or f.get("score") is not None)
            ]
            final = (item.get("finals") or {}).get(key)
            distinct = {json.dumps(a, sort_keys=True) for a in answers}
            state = "none" if len(answers) < 2 else "agreed" if len(distinct) == 1 else "disagreed"
            answer = final if final is not None else (answers[0] if state == "agreed" else None)
            out[key] = {"state": state, "has_final": final is not None, "answer": answer}
        return out

    def _platform_item_out(self, item: JSON) -> JSON:
        agreements = self._key_agreements(item)
        states = {a["state"] for a in agreements.values()}
        return {
            "id": item["id"],
            "queue_id": item["queue_id"],
            "run_id": item["run_id"],
            "item_type": item["item_type"],
            "project_id": item.get("project_id"),
            "start_time": item.get("start_time"),
            "added_at": item["added_at"],
            "effective_added_at": item["added_at"],
            "last_reviewed_time": item["last_reviewed_time"],
            "source_proposed_example_id": item.get("source_proposed_example_id"),
            "completed_by": _completed_by(item),
            "assigned_to": [],
            "reserved_by": [],
            "thread_id": None,
            "key_agreements": agreements,
            "agreement_state": "disagreed"
            if "disagreed" in states
            else "agreed"
            if "agreed" in states
            else "none",
            "has_unresolved_keys": any(
                a["state"] == "disagreed" and not a["has_final"] for a in agreements.values()
            ),
        }

    def _set_final(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        queue = self._queue_or_404(match["id"])
        item = self._find_item(queue["id"], match["item"], by="item")
        key = match["key"]
        if key not in {r["feedback_key"] for r in queue.get("rubric_items") or []}:
            raise HTTPError(422, f"{key!r} is not a rubric key of the queue")
        final = {k: v for k, v in (body or {}).items() if k in ("score", "value", "values")}
        if len(final) != 1:
            raise HTTPError(422, "give exactly one of score, value or values")
        item.setdefault("finals", {})[key] = final
        agreement = self._key_agreements(item)[key]
        return 200, {
            "key": key,
            "final": final,
            "answer": final,
            "has_final": True,
            "state": agreement["state"],
            "final_set_at": _iso(_now()),
            "final_set_by": "",
        }

    def _create_items(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        queue = self._queue_or_404(match["id"])
        extend = _bool(_first(query, "extend_trace_retention")) or False  # default: false
        added = []
        for entry in (body or {}).get("items") or []:
            if entry.get("item_type", "RUN") != "RUN":
                raise HTTPError(422, "fake server only supports RUN items")
            added.append(self._add_item(queue["id"], entry))
            if extend:
                self._extend_trace(added[-1]["run_id"])
        return 200, {"items": [self._platform_item_out(i) for i in added]}

    def _list_items(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        queue = self._queue_or_404(match["id"])
        status = _first(query, "status")
        if status is None:
            raise HTTPError(422, "status is required")
        items = self._filter_items(queue["id"], status)
        offset = int(_first(query, "cursor") or 0)
        page_size = min(_int(query, "page_size", 100), 100)
        page = items[offset : offset + page_size]
        more = offset + page_size < len(items)
        return 200, {
            "items": [self._platform_item_out(i) for i in page],
            "next_cursor": str(offset + page_size) if more else None,
        }

    def _update_item(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        queue = self._queue_or_404(match["id"])
        item = self._find_item(queue["id"], match["item"], by="item")
        body = body or {}
        if body.get("last_reviewed_time"):
            item["last_reviewed_time"] = _norm_time(body["last_reviewed_time"])
        if body.get("added_at"):
            item["added_at"] = _norm_time(body["added_at"])
        return 200, self._platform_item_out(item)

    def _delete_items(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        queue = self._queue_or_404(match["id"])
        drop = {_uuid_str(i) for i in (body or {}).get("item_ids") or []}
        items = self.queue_items.setdefault(queue["id"], [])
        items[:] = [i for i in items if i["id"] not in drop]
        return 200, {"message": "deleted"}

    # -- pairwise annotation queues --------------------------------------------
    #
    # What LangSmith documents ("Use annotation queues", "Pairwise annotation queues"): a
    # pairwise queue is made in the UI from exactly two experiments on one dataset;
    # LangSmith pairs their runs in chronological order and populates the queue; sending
    # two experiments to it again appends new pairs and keeps the old ones; for each
    # rubric key a reviewer chooses "A is better", "B is better" or "Equal", and the UI
    # records binary feedback on both runs. The SDK (0.15) adds `queue_type` ("single" or
    # "pairwise") to the queue and `POST /annotation-queues/populate` ("Experiments whose
    # runs are added to the queue. Each must be an experiment on a dataset.").
    #
    # What the docs leave open is modeled as follows, and no library code may rely on it:
    # a pair is the two experiments' runs of one example (the k-th with the k-th by start
    # time when an example has several); the queue lists one item per run, pairs in the
    # order of their earlier run's start time; "Equal" scores both runs 1 ("both are
    # better"); a reviewer who chooses again updates their own two records.

    def _pairwise_routes(self) -> list[tuple[str, str, Handler]]:
        return [("POST", r"/annotation-queues/populate", self._populate_queue)]

    def _experiment_runs(self, session_id: str) -> list[JSON]:
        """An experiment's root runs on dataset examples, in chronological order."""
        session = self._session_or_404(session_id)
        if not session.get("reference_dataset_id"):
            raise HTTPError(422, f"session {session['id']} is not an experiment on a dataset")
        runs = [
            r
            for r in self.runs.values()
            if r.get("session_id") == session["id"]
            and r.get("parent_run_id") is None
            and r.get("reference_example_id")
        ]
        return sorted(runs, key=_time_order)

    def _pairs_of(self, experiments: list[str]) -> list[tuple[JSON, JSON]]:
        """Two experiments' runs paired by example, pairs in chronological order."""
        ids = [_uuid_str(e, "session id") for e in experiments]
        if len(ids) != 2 or ids[0] == ids[1]:
            raise HTTPError(422, "a pairwise queue compares exactly two experiments")
        first, second = (self._experiment_runs(e) for e in ids)
        datasets = {self.sessions[e]["reference_dataset_id"] for e in ids}
        if len(datasets) != 1:
            raise HTTPError(422, "a pairwise queue compares two experiments on one dataset")
        by_example: dict[str, list[JSON]] = {}
        for run in second:
            by_example.setdefault(run["reference_example_id"], []).append(run)
        pairs = []
        taken: dict[str, int] = {}
        for run in first:
            example = run["reference_example_id"]
            k = taken.get(example, 0)
            others = by_example.get(example, [])
            if k < len(others):
                pairs.append((run, others[k]))
                taken[example] = k + 1
        return sorted(pairs, key=lambda p: min(_time_order(p[0]), _time_order(p[1])))

    def _populate(self, queue: JSON, experiments: list[str], extend: bool = False) -> list[JSON]:
        """Add experiments' runs to a queue: a pairwise queue's as new pairs."""
        if queue.get("queue_type") == "pairwise":
            known = {tuple(p) for p in queue.setdefault("_pairs", [])}
            runs = []
            for a, b in self._pairs_of(experiments):
                if (a["id"], b["id"]) not in known:
                    queue["_pairs"].append([a["id"], b["id"]])
                runs += [a, b]
        else:
            runs = [r for e in experiments for r in self._experiment_runs(_uuid_str(e))]
        added = []
        for run in runs:
            key = {k: run[k] for k in ("session_id", "start_time")}
            added.append(self._add_item(queue["id"], {"run_id": run["id"], **key}))
            if extend:
                self._extend_trace(run["id"])
        return added

    def _populate_queue(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        body = body or {}
        queue = self._queue_or_404(body.get("queue_id") or "")
        sessions = body.get("session_ids")
        if not isinstance(sessions, list) or not sessions:
            raise HTTPError(422, "session_ids must be a non-empty list of experiment ids")
        self._populate(queue, sessions, bool(body.get("extend_trace_retention")))
        return 200, {}

    def add_pairwise_queue(self, name: str, experiments: list[Any], **fields: Any) -> JSON:
        """A pairwise queue made in the UI from two experiments, populated with their pairs.

        ``fields`` are the queue's other settings (``rubric_items``,
        ``num_reviewers_per_item``...). Raises ``HTTPError`` unless the experiments are
        two, on one dataset.
        """
        with self.lock:
            now = _iso(_now())
            queue = {
                **fields,
                "id": str(uuid.uuid4()),
                "name": name,
                "queue_type": "pairwise",
                "description": fields.get("description"),
                "created_at": now,
                "updated_at": now,
                "tenant_id": self.tenant_id,
                "rubric_instructions": fields.get("rubric_instructions"),
                "rubric_items": self._rubric_in(fields.get("rubric_items"), []),
                "num_reviewers_per_item": fields.get("num_reviewers_per_item") or 1,
                "reviewer_access_mode": fields.get("reviewer_access_mode") or "any",
                "assigned_reviewers": fields.get("assigned_reviewers") or [],
                # pairwise queues use no default dataset (their pairs span two experiments)
                "default_dataset": None,
                "_pairs": [],
                "_seq": self._next_seq(),
            }
            self._pairs_of([str(e) for e in experiments])  # refused before it is stored
            self.annotation_queues[queue["id"]] = queue
            self.queue_items[queue["id"]] = []
            self._populate(queue, [str(e) for e in experiments])
            return queue

    def queue_pairs(self, queue_id: Any) -> list[tuple[str, str]]:
        """A pairwise queue's pairs (run ids, the first experiment's run first)."""
        with self.lock:
            queue = self._queue_or_404(str(queue_id))
            return [(a, b) for a, b in queue.get("_pairs", [])]

    def review_pair(
        self,
        queue_id: Any,
        runs: tuple[Any, Any],
        choice: str,
        *,
        key: str,
        reviewer: str,
        comment: str | None = None,
    ) -> list[JSON]:
        """A reviewer's choice on one rubric key of a pair, as the queue's UI records it.

        ``runs`` are the pair's runs as the reviewer sees them (A, then B) and ``choice``
        is ``"A"``, ``"B"`` or ``"equal"``: A better scores A 1 and B 0, B better the
        reverse, equal both 1. The records are the reviewer's ("app" feedback with their
        user id, ``comment`` on both); choosing again updates them. Returns the records.
        """
        scores = {"A": (1.0, 0.0), "B": (0.0, 1.0), "equal": (1.0, 1.0)}.get(choice)
        if scores is None:
            raise ValueError(f"choice must be 'A', 'B' or 'equal', not {choice!r}")
        with self.lock:
            queue = self._queue_or_404(str(queue_id))
            if queue.get("queue_type") != "pairwise":
                raise HTTPError(422, f"annotation queue {queue['id']} is not pairwise")
            if key not in {r["feedback_key"] for r in queue.get("rubric_items") or []}:
                raise HTTPError(422, f"{key!r} is not a rubric key of the queue")
            ids = [_uuid_str(r, "run id") for r in runs]
            pairs = {tuple(p) for p in queue["_pairs"]}
            if tuple(ids) not in pairs and tuple(reversed(ids)) not in pairs:
                raise HTTPError(404, f"runs {ids} are not a pair of queue {queue['id']}")
            user = self.user_named(reviewer)["id"]
            records = []
            for run_id, score in zip(ids, scores, strict=True):
                mine = [
                    f
                    for f in self.feedback.values()
                    if f["run_id"] == run_id
                    and f["key"] == key
                    and f["feedback_source"]["type"] == "app"
                    and f["feedback_source"].get("user_id") == user
                ]
                if mine:
                    record = mine[-1]
                    record.update(score=score, comment=comment, modified_at=_iso(_now()))
                else:
                    record = self._store_feedback(
                        {"run_id": run_id, "key": key, "score": score, "comment": comment,
                         "feedback_source": {"type": "app", "user_id": user}},
                        stamp_user=False,
                    )  # fmt: skip
                records.append(record)
            return records


# ---------------------------------------------------------------------------
# run filter language (subset): and/or/not, eq/neq/gt/gte/lt/lte, has, in, exists
# ---------------------------------------------------------------------------

_TOKEN = re.compile(
    r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\')|(?P<punct>[(),])|(?P<word>[^\s(),]+))'
)
FilterFn = Callable[[JSON, LangSmithTestServer], bool]


def _compile_filter(text: str) -> FilterFn:
    """Compile the subset of the LangSmith run filter language the fake supports."""
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            if text[pos:].strip() == "":
                break
            raise HTTPError(400, f"cannot parse filter {text!r}")
        pos = m.end()
        kind = m.lastgroup or "word"
        tokens.append((kind, m.group(kind)))
    index = 0

    def expr() -> Any:
        nonlocal index
        kind, value = tokens[index]
        index += 1
        if kind == "str":
            return ("lit", json.loads(value) if value.startswith('"') else value[1:-1])
        if kind == "word" and index < len(tokens) and tokens[index] == ("punct", "("):
            index += 1
            args = []
            while tokens[index] != ("punct", ")"):
                args.append(expr())
                if tokens[index] == ("punct", ","):
                    index += 1
            index += 1
            return ("call", value, args)
        if kind == "word":
            return ("word", value)
        raise HTTPError(400, f"unexpected {value!r} in filter {text!r}")

    try:
        tree = expr()
    except IndexError as exc:
        raise HTTPError(400, f"cannot parse filter {text!r}") from exc

    def literal(node: Any) -> Any:
        if node[0] == "lit":
            return node[1]
        if node[0] == "word":
            word = node[1]
            if word == "null":
                return None
            if word in ("true", "false"):
                return word == "true"
            try:
                return float(word) if "." in word else int(word)
            except ValueError:
                return word
        raise HTTPError(400, f"expected a literal in filter {text!r}")

    def field_value(run: JSON, server: LangSmithTestServer, name: str) -> Any:
        if name == "latency":
            start, end = _parse_time(run.get("start_time")), _parse_time(run.get("end_time"))
            return (end - start).total_seconds() if start and end else None
        if name in ("feedback_key", "feedback_score"):
            return [
                f["key"] if name == "feedback_key" else f.get("score")
                for f in server.feedback.values()
                if f.get("run_id") == run["id"]
            ]
        if name == "metadata_key":
            return list(((run.get("extra") or {}).get("metadata") or {}).keys())
        if name == "metadata_value":
            return list(((run.get("extra") or {}).get("metadata") or {}).values())
        if name == "is_root":
            return run.get("parent_run_id") is None
        return run.get(name)

    def compare(op: str, left: Any, right: Any) -> bool:
        if isinstance(left, list) and op in ("eq", "neq"):
            hit = right in left
            return hit if op == "eq" else not hit
        if op == "eq":
            return bool(left == right or (left is not None and str(left) == str(right)))
        if op == "neq":
            return not compare("eq", left, right)
        if left is None or right is None:
            return False
        if isinstance(right, str) and isinstance(left, str):
            lt, rt = _parse_time(left), _parse_time(right)
            left, right = (lt, rt) if lt and rt else (left, right)
        ops: dict[str, Callable[[Any, Any], bool]] = {
            "gt": lambda a, b: a > b,
            "gte": lambda a, b: a >= b,
            "lt": lambda a, b: a < b,
            "lte": lambda a, b: a <= b,
        }
        return ops[op](left, right)

    def build(node: Any) -> FilterFn:
        if node[0] != "call":
            raise HTTPError(400, f"filter must be a function call: {text!r}")
        name, args = node[1], node[2]
        if name in ("and", "or"):
            parts = [build(a) for a in args]
            combine = all if name == "and" else any
            return lambda run, server: combine(p(run, server) for p in parts)
        if name == "not":
            inner = build(args[0])
            return lambda run, server: not inner(run, server)
        if name in ("eq", "neq", "gt", "gte", "lt", "lte"):
            field_name, value = args[0][1], literal(args[1])
            return lambda run, server: compare(name, field_value(run, server, field_name), value)
        if name == "has":
            field_name, value = args[0][1], literal(args[1])
            return lambda run, server: value in (field_value(run, server, field_name) or [])
        if name == "in":
            field_name = args[0][1]
            values = [literal(a) for a in args[1:]]
            return lambda run, server: field_value(run, server, field_name) in values
        if name == "exists":
            field_name = args[0][1]
            return lambda run, server: field_value(run, server, field_name) is not None
        raise HTTPError(400, f"fake server does not support filter function {name!r}")

    return build(tree)


# ---------------------------------------------------------------------------
# HTTP plumbing
# ---------------------------------------------------------------------------


@dataclass
class _Multipart:
    parts: list[tuple[str, dict[str, str], bytes]]


def _completed_by(item: JSON) -> list[str]:
    return [u for u, st in item.get("reviews", {}).items() if st == "completed"]


def _strip_prefix(path: str) -> str:
    for prefix in _API_PREFIXES:
        if path == prefix:
            return "/"
        if path.startswith(prefix + "/"):
            return path[len(prefix) :]
    return path


def _dump(value: Any) -> bytes:
    return json.dumps(value, default=str).encode()


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeLangSmith/0.1"
    # Headers and body go out in two writes; without TCP_NODELAY every keep-alive
    # response waits ~40 ms for the client's delayed ACK.
    disable_nagle_algorithm = True

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _serve(self) -> None:
        body = self._read_body()
        app: LangSmithTestServer = self.server.app  # type: ignore[attr-defined]
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, extra_headers, payload = app._handle(self.command, self.path, headers, body)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for key, value in extra_headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(payload)

    do_GET = _serve
    do_POST = _serve
    do_PATCH = _serve
    do_PUT = _serve
    do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""


@contextlib.contextmanager
def running_server(**kwargs: Any) -> Iterator[LangSmithTestServer]:
    """Context manager that starts a :class:`LangSmithTestServer` and stops it after."""
    server = LangSmithTestServer(**kwargs)
    server.start()
    try:
        yield server
    finally:
        server.stop()
