"""Run references, capability detection and error reading of the LangSmith calls.

`APIBase` is the part of `LangSmithAPI` every call depends on: the client,
the detection of which APIs the server answers (the v2 run queries from
`/info`'s instance flags, the queue items API from the server version), the
fall-back to v1 after an unsupported answer, and project lookups. The module
also holds the run types the integration passes around (`RunRecord`,
`RunRef`) and the helpers that read ids, times and HTTP statuses.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import uuid
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import langsmith
from langsmith import Client
from langsmith import schemas as ls_schemas
from langsmith import utils as ls_utils

# METADATA is its own select on v2: EXTRA comes without the run's metadata.
_RUN_SELECTS = [
    "ID",
    "METADATA",
    "NAME",
    "INPUTS",
    "OUTPUTS",
    "PROJECT_ID",
    "START_TIME",
    "END_TIME",
    "ERROR",
    "TRACE_ID",
    "REFERENCE_EXAMPLE_ID",
    "EXTRA",
]
_CHUNK = 100
# The lower bound of every v2 run window over a project (the query needs one, and its
# default is the last day). Not the project's start time: runs can start before it (a
# project created by its first batch of runs, clients with their own clocks, traces
# imported later), and those would never be read. The SDK's own project-wide v2 reads
# (`Client.get_test_results`) use the same bound.
EARLIEST = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
_FALLBACK_STATUS = {404, 405, 501}


@dataclass(frozen=True)
class RunRecord:
    """The parts of a LangSmith run the integration uses."""

    id: str
    project_id: str | None = None
    start_time: dt.datetime | None = None
    inputs: Any = None
    outputs: Any = None
    reference_example_id: str | None = None
    trace_id: str | None = None
    name: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # Last, so that records built positionally keep their meaning.
    end_time: dt.datetime | None = None
    """None while the run is still running (e.g. streaming its output)."""
    error: str | None = None
    """The error the run ended with, if it failed."""

    def unjudgeable(self) -> str | None:
        """Why the run has nothing to judge yet (running, or failed), or None."""
        if self.error:
            first = self.error.strip().splitlines()[0] if self.error.strip() else ""
            return f"ended with an error ({first[:120]})" if first else "ended with an error"
        if self.end_time is None:
            return "still running (no end time yet): judged once it has ended"
        return None

    def run_key(self) -> dict[str, Any] | None:
        """The run's full lookup key (project and start time), when both are known."""
        if self.project_id is None or self.start_time is None:
            return None
        return {
            "run_id": self.id,
            "session_id": self.project_id,
            "start_time": self.start_time.isoformat(),
        }


RunRef = str | uuid.UUID | ls_schemas.Run | RunRecord
"""A run: its id, a `langsmith.schemas.Run`, or a `RunRecord`."""


# The service counts requests in a 60 s window: a rate limit that outlasts the client's own
# retries is waited out this long, this many times, before the error is the caller's.
RATE_LIMIT_PAUSE = 60.0
RATE_LIMIT_RETRIES = 2


def run_id_of(run: RunRef) -> str:
    """The canonical id of a run reference, or `ValueError`."""
    raw = run.id if isinstance(run, ls_schemas.Run | RunRecord) else run
    rid = as_uuid_str(raw)
    if rid is None:
        raise ValueError(f"not a run id: {raw!r}")
    return rid


def as_uuid_str(value: Any) -> str | None:
    """`value` as a canonical UUID string, or None if it is not a UUID."""
    try:
        return str(uuid.UUID(str(value)))
    except (ValueError, TypeError, AttributeError):
        return None


def _time(value: Any) -> dt.datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        parsed = value
    else:
        try:
            parsed = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _chunks(items: Sequence[str], size: int = _CHUNK) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield list(items[i : i + size])


@contextlib.contextmanager
def _legacy() -> Iterator[None]:
    """Call a deprecated helper on purpose, without warning the user about our fallback."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*is deprecated", category=DeprecationWarning)
        yield


def _reraise(error: Exception) -> NoReturn:
    """Raise `error`; a 429 of the generated v2 resources as the v1 calls' rate-limit error.

    The v2 run query and the queue items API raise `langsmith.RateLimitError` once their
    own retries are spent, the v1 calls `LangSmithRateLimitError`: callers wait out (a
    sync) or cut short (a monitor's cycle) one error whichever API refused.
    """
    if isinstance(error, langsmith.RateLimitError):
        raise ls_utils.LangSmithRateLimitError(f"rate limited (429): {error}") from error
    raise error


def _is_unsupported(error: BaseException) -> bool:
    status = getattr(error, "status_code", None)
    if status is None:
        response = getattr(error, "response", None)
        status = getattr(response, "status_code", None)
    if status in _FALLBACK_STATUS:
        return True
    return isinstance(error, ls_utils.LangSmithNotFoundError)


class QueryBackend:
    """Where a deployment serves run queries from (the SDK's reading of `instance_flags`)."""

    CLICKHOUSE_ONLY = "clickhouse_only"
    SMITHDB_ONLY = "smithdb_only"
    DUAL = "dual"


def query_backend(instance_flags: Mapping[str, Any] | None) -> str:
    """The query backend `/info`'s instance flags describe.

    The same rule as the SDK's (`langsmith._internal._v2_migration_utils`, private):
    `ch_query_enabled` defaults to on (older servers predate it), `sdb_query_enabled`
    to off.
    """
    flags = instance_flags or {}
    ch = bool(flags.get("ch_query_enabled", True))
    sdb = bool(flags.get("sdb_query_enabled", False))
    if sdb and not ch:
        return QueryBackend.SMITHDB_ONLY
    return QueryBackend.DUAL if sdb else QueryBackend.CLICKHOUSE_ONLY


class APIBase:
    """The client, the APIs the server answers, and project lookups."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._use_v2_runs: bool | None = None
        self._use_queue_items: bool | None = None
        self._warned_retention = False  # the legacy queue API cannot extend retention

    # -- capability detection ------------------------------------------------------------

    def _server_at_least(self, version: str) -> bool:
        try:
            current = self.client.info.version
        except Exception:  # an unreachable /info: let the calls themselves decide
            return True
        if not current:
            return True
        return ls_utils.is_version_greater_or_equal(current, version)

    def backend(self) -> str:
        """Where the deployment serves run queries from (see `QueryBackend`)."""
        try:
            flags = self.client.info.instance_flags
        except Exception:  # an unreachable /info: the flags' defaults
            flags = None
        return query_backend(flags)

    def _openapi(self) -> Any | None:
        # Private on purpose: langsmith 0.15's public accessors (`client.runs`,
        # `client.annotation_queues`) return the *async* resources; the sync
        # OpenAPI client has no public accessor. getattr: absent, we use v1 calls.
        get = getattr(self.client, "_get_langsmith_api_sync", None)
        return get() if callable(get) else None

    def _v2_runs(self) -> Any | None:
        if self._use_v2_runs is None:
            # As the SDK decides: v1 only where ClickHouse is the only query backend.
            self._use_v2_runs = (
                self.backend() != QueryBackend.CLICKHOUSE_ONLY and self._openapi() is not None
            )
        return self._openapi() if self._use_v2_runs else None

    def _queue_items(self) -> Any | None:
        if self._use_queue_items is None:
            self._use_queue_items = self._server_at_least("0.16.14") and self._openapi() is not None
        api = self._openapi() if self._use_queue_items else None
        return None if api is None else api.annotation_queues.items

    def _v2_failed(self, error: Exception) -> None:
        """Fall back to v1 after an unsupported answer, unless v1 cannot work here."""
        if not _is_unsupported(error) or self.backend() == QueryBackend.SMITHDB_ONLY:
            _reraise(error)
        self._use_v2_runs = False

    # -- projects ------------------------------------------------------------------------

    def project(self, name_or_id: str | uuid.UUID) -> ls_schemas.TracerSession:
        """A project (or experiment) by id or name."""
        pid = as_uuid_str(name_or_id)
        if pid is not None:
            project: ls_schemas.TracerSession = self.client.read_project(project_id=pid)
        else:
            project = self.client.read_project(project_name=str(name_or_id))
        return project


def _status(error: BaseException) -> int | None:
    """The HTTP status behind an SDK error (its sync client keeps it only in the message)."""
    if isinstance(error, ls_utils.LangSmithConflictError):
        return 409
    if isinstance(error, ls_utils.LangSmithNotFoundError):
        return 404
    status = getattr(error, "status_code", None)
    if status is None:
        status = getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(status, int):
        return status
    match = re.search(r"\b([45]\d\d) (?:Client|Server) Error", str(error))
    return int(match.group(1)) if match else None
