"""The LangSmith calls the integration makes, on the client's current APIs first.

langsmith 0.15 marks its run-reading and annotation-queue helpers
(`list_runs`, `add_runs_to_annotation_queue`, `list_runs_from_annotation_queue`)
deprecated in favour of the generated v2 resources (`client.runs`,
`client.annotation_queues.items`).

Runs are read the way the SDK itself chooses (`Client.read_run`,
`get_test_results`): from `/info`'s `instance_flags`. A deployment whose
ClickHouse queries are off (SmithDB only) cannot answer the v1 reads at all;
one with both, or with SmithDB only, is read through `/v2/runs/query`; one
with ClickHouse only (or an older server without the flags) through v1. The
v2 query is keyed by project and start-time window, never by run id alone:
a run whose start time is unknown is looked up in its project's whole
lifetime. Queue items use the items API when the server is 0.16.14 or later
(the version `client.annotation_queues` requires), the older helpers otherwise.

The v2 resources on `Client` are async (`client.runs` is an
`AsyncRunsResource`); sync code drives their generated synchronous twin, the
one the SDK's own sync helpers use (`Client._get_langsmith_api_sync`), so that
it shares the client's credentials, workspace and session.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import threading
import uuid
import warnings
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from langsmith import Client
from langsmith import schemas as ls_schemas
from langsmith import utils as ls_utils

from langchain_memalign.errors import FeedbackConfigMismatchError
from langchain_memalign.langsmith._fields import describe_config, same_config

# METADATA is its own select on v2: EXTRA comes without the run's metadata.
_RUN_SELECTS = [
    "ID",
    "METADATA",
    "NAME",
    "INPUTS",
    "OUTPUTS",
    "PROJECT_ID",
    "START_TIME",
    "TRACE_ID",
    "REFERENCE_EXAMPLE_ID",
    "EXTRA",
]
_CHUNK = 100
_FALLBACK_STATUS = {404, 405, 501}

QueueStatus = Literal["needs_my_review", "needs_others_review", "completed"]


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


def _is_unsupported(error: BaseException) -> bool:
    status = getattr(error, "status_code", None)
    if status is None:
        response = getattr(error, "response", None)
        status = getattr(response, "status_code", None)
    if status in _FALLBACK_STATUS:
        return True
    return isinstance(error, ls_utils.LangSmithNotFoundError)


_INSTANCES: weakref.WeakKeyDictionary[Client, LangSmithAPI] = weakref.WeakKeyDictionary()
_INSTANCES_LOCK = threading.Lock()


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


@dataclass(frozen=True)
class CompletedItems:
    """What marking queued runs as reviewed did (see `JudgeAnnotationQueue.complete`)."""

    archived: list[str] = field(default_factory=list)
    """Runs whose queue review requirements are now met: `pull` reads their reviews."""
    waiting: list[str] = field(default_factory=list)
    """Runs that still need other reviewers before the queue archives them."""
    missing: list[str] = field(default_factory=list)
    """Runs that are not in the queue."""


class LangSmithAPI:
    """The calls the integration makes, on current APIs with a fallback to older ones.

    Use `LangSmithAPI.of(client)`: one instance per client remembers which
    APIs the server answers.
    """

    def __init__(self, client: Client) -> None:
        self.client = client
        self._use_v2_runs: bool | None = None
        self._use_queue_items: bool | None = None
        self._project_starts: dict[str, dt.datetime | None] = {}

    @classmethod
    def of(cls, client: Client) -> LangSmithAPI:
        """The shared instance for `client`."""
        with _INSTANCES_LOCK:
            api = _INSTANCES.get(client)
            if api is None:
                api = _INSTANCES[client] = cls(client)
            return api

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

    def _v2_failed(self, error: BaseException) -> None:
        """Fall back to v1 after an unsupported answer, unless v1 cannot work here."""
        if not _is_unsupported(error) or self.backend() == QueryBackend.SMITHDB_ONLY:
            raise error
        self._use_v2_runs = False

    # -- projects ------------------------------------------------------------------------

    def project(self, name_or_id: str | uuid.UUID) -> ls_schemas.TracerSession:
        """A project (or experiment) by id or name."""
        pid = as_uuid_str(name_or_id)
        if pid is not None:
            project: ls_schemas.TracerSession = self.client.read_project(project_id=pid)
        else:
            project = self.client.read_project(project_name=str(name_or_id))
        self._project_starts[str(project.id)] = _time(project.start_time)
        return project

    def _project_start(self, project_id: str) -> dt.datetime | None:
        if project_id not in self._project_starts:
            try:
                self.project(project_id)
            except ls_utils.LangSmithNotFoundError:
                self._project_starts[project_id] = None
        return self._project_starts[project_id]

    # -- feedback ------------------------------------------------------------------------

    def list_feedback(
        self,
        *,
        key: str,
        source_types: Sequence[str],
        project_ids: Sequence[str] | None = None,
        run_ids: Sequence[str] | None = None,
        created_since: dt.datetime | None = None,
    ) -> Iterator[ls_schemas.Feedback]:
        """Every feedback record on `key` in the projects or on the runs, all pages.

        Reviewers' names are requested (`include_user_names`): without it the service
        returns only their user ids. `created_since` keeps the records created at or
        after that time (the only time filter `GET /feedback` has).
        """
        # Plain strings: the FeedbackSourceType enum is serialized as
        # "FeedbackSourceType.API" in query strings, which servers reject.
        sources = cast(Any, list(source_types))
        # "true", not True: requests would send "True", which strict parsers refuse
        kwargs: dict[str, Any] = {"include_user_names": "true"}
        if created_since is not None:
            kwargs["min_created_at"] = created_since.isoformat()
        if run_ids is not None:
            for chunk in _chunks(list(run_ids), 50):
                yield from self.client.list_feedback(
                    run_ids=chunk, feedback_key=[key], feedback_source_type=sources, **kwargs
                )
            return
        if project_ids:
            kwargs["session"] = list(project_ids)
        yield from self.client.list_feedback(
            feedback_key=[key], feedback_source_type=sources, **kwargs
        )

    def feedback_exists(self, feedback_id: str) -> bool:
        """Whether a feedback record still exists (only a not-found answer says it doesn't)."""
        try:
            self.client.read_feedback(feedback_id)
        except ls_utils.LangSmithNotFoundError:
            return False
        return True

    # -- runs ----------------------------------------------------------------------------

    def read_runs(
        self,
        run_ids: Iterable[str],
        hints: Mapping[str, tuple[str | None, dt.datetime | None]] | None = None,
        *,
        projects: Sequence[str] = (),
    ) -> dict[str, RunRecord]:
        """Runs by id; `hints` maps a run id to its project and start time if known.

        On the v2 API a run is found through its project: the hint's, else each of
        `projects` in turn. A missing start time widens the window to the project's
        lifetime. Runs that no longer exist (deleted, past retention), or whose project
        is unknown on a deployment that only reads runs by project, are absent.
        """
        ids = sorted(set(run_ids))
        hints = hints or {}
        found: dict[str, RunRecord] = {}
        api = self._v2_runs()
        if api is not None:
            try:
                for project in [None, *projects]:
                    groups: dict[str, list[str]] = {}
                    for rid in ids:
                        if rid in found:
                            continue
                        where = hints.get(rid, (None, None))[0] if project is None else project
                        if where:
                            groups.setdefault(where, []).append(rid)
                    for where, members in groups.items():
                        found.update(self._read_v2(api, where, members, hints))
            except Exception as e:
                self._v2_failed(e)
            if self._use_v2_runs:
                if self.backend() == QueryBackend.SMITHDB_ONLY:
                    return found  # v1 cannot read runs there: the rest stays unknown
                # Runs searched in a project and not found there are gone; only runs of
                # unknown project are left to the v1 lookup by id (ClickHouse has them).
                ids = [rid for rid in ids if not hints.get(rid, (None, None))[0] and not projects]
            ids = [rid for rid in ids if rid not in found]
        for chunk in _chunks(ids):
            with _legacy():
                for run in self.client.list_runs(run_ids=chunk):
                    found[str(run.id)] = _from_v1(run)
        return found

    def _read_v2(
        self,
        api: Any,
        project: str,
        run_ids: Sequence[str],
        hints: Mapping[str, tuple[str | None, dt.datetime | None]],
    ) -> dict[str, RunRecord]:
        found: dict[str, RunRecord] = {}
        now = dt.datetime.now(dt.UTC)
        for chunk in _chunks(list(run_ids)):
            times = [hints.get(r, (None, None))[1] for r in chunk]
            known = [t for t in times if t is not None]
            if len(known) == len(times):
                lo, hi = min(known), max(known)
            else:
                # No start time (feedback carries only what it was stored with): search
                # the project's whole lifetime rather than the API's default last day.
                start = self._project_start(project)
                lo = start or dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
                hi = now
            found.update(
                self._query_v2(
                    api,
                    project_ids=[project],
                    ids=chunk,
                    min_start_time=lo - dt.timedelta(seconds=1),
                    max_start_time=hi + dt.timedelta(minutes=1),
                )
            )
        return found

    def runs_with_feedback_modified(
        self, project_id: str, key: str, since: dt.datetime
    ) -> list[str] | None:
        """Ids of the project's runs whose feedback on `key` was modified since `since`.

        Only the v2 query can bound feedback by modification time
        (`min_feedback_modified_at`, with a feedback condition in the filter); None when
        the deployment is read through v1, where no listing can.
        """
        api = self._v2_runs()
        if api is None:
            return None
        start = self._project_start(project_id) or dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
        quoted = key.replace("\\", "\\\\").replace('"', '\\"')
        try:
            return [
                str(run.id)
                for run in api.runs.query_v2(
                    project_ids=[project_id],
                    filter=f'eq(feedback_key, "{quoted}")',
                    min_feedback_modified_at=since,
                    min_start_time=start - dt.timedelta(seconds=1),
                    max_start_time=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1),
                    selects=["ID"],
                    page_size=_CHUNK,
                )
            ]
        except Exception as e:
            self._v2_failed(e)
            return None

    def project_runs(
        self, project: ls_schemas.TracerSession, *, limit: int | None = None
    ) -> list[RunRecord]:
        """The root runs of a project, newest first."""
        api = self._v2_runs()
        if api is not None:
            try:
                runs: list[RunRecord] = []
                for run in self._query_v2_iter(
                    api,
                    project_ids=[str(project.id)],
                    is_root=True,
                    min_start_time=project.start_time - dt.timedelta(seconds=1),
                    max_start_time=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1),
                ):
                    runs.append(run)
                    if limit is not None and len(runs) >= limit:
                        break
                return runs
            except Exception as e:
                self._v2_failed(e)
        with _legacy():
            return [
                _from_v1(r)
                for r in self.client.list_runs(project_id=project.id, is_root=True, limit=limit)
            ]

    def _query_v2(self, api: Any, **kwargs: Any) -> dict[str, RunRecord]:
        return {r.id: r for r in self._query_v2_iter(api, **kwargs)}

    @staticmethod
    def _query_v2_iter(api: Any, **kwargs: Any) -> Iterator[RunRecord]:
        for run in api.runs.query_v2(selects=_RUN_SELECTS, page_size=_CHUNK, **kwargs):
            yield _from_v2(run)

    def example_outputs(self, example_ids: Iterable[str]) -> dict[str, Any]:
        """Reference outputs of dataset examples by id."""
        ids = sorted(set(example_ids))
        out: dict[str, Any] = {}
        for chunk in _chunks(ids):
            for ex in self.client.list_examples(example_ids=chunk):
                out[str(ex.id)] = ex.outputs
        return out

    # -- feedback configs ----------------------------------------------------------------

    def ensure_feedback_config(self, key: str, config: ls_schemas.FeedbackConfig) -> str | None:
        """The id of the workspace config that reads `key` as `config`, created if needed.

        Raises `FeedbackConfigMismatchError` when the workspace keeps another config for
        the key and will not take a second one (HTTP 400, or 409 next to an enforced
        config), or when the key's enforced config is another: reviews would be given on
        a scale the judge cannot read. None when the server has no feedback configs.
        """
        existing = self._configs(key)
        for entry in existing:
            if entry.is_enforced and not same_config(entry.feedback_config, config):
                raise _mismatch(key, entry.feedback_config, config, enforced=True)
        for entry in existing:
            if same_config(entry.feedback_config, config):
                return str(entry.id) if entry.id else None
        try:
            created = self.client.create_feedback_config(key, feedback_config=config)
        except ls_utils.LangSmithError as e:
            if _status(e) in (400, 409) or "already exists" in str(e):
                other = existing[0].feedback_config if existing else None
                raise _mismatch(key, other, config, enforced=_status(e) == 409) from e
            if _is_unsupported(e):
                return None
            raise
        if not same_config(created.feedback_config, config):  # the service kept its own
            raise _mismatch(key, created.feedback_config, config, enforced=False)
        return str(created.id) if created.id else None

    def _configs(self, key: str) -> list[ls_schemas.FeedbackConfigSchema]:
        try:
            return [
                c
                for c in self.client.list_feedback_configs(
                    feedback_key=[key], include_all_configs=True
                )
                if c.feedback_key == key and not c.is_deleted
            ]
        except ls_utils.LangSmithError as e:
            if _is_unsupported(e):
                return []
            raise

    # -- annotation queues ---------------------------------------------------------------

    def find_queue(self, name: str) -> ls_schemas.AnnotationQueue | None:
        """The annotation queue with exactly this name, if any."""
        for queue in self.client.list_annotation_queues(name=name):
            if queue.name == name:
                return queue
        return None

    def queue_items(self, queue_id: str, status: QueueStatus | None) -> list[tuple[str, Any]]:
        """`(run id, item)` of the runs in a queue (`status=None`: all), in queue order.

        `status="completed"` is the archived section: the items whose queue review
        requirements are met, not those the caller alone has reviewed. Items carry
        their run's project and start time when the newer items API answers.
        """
        items = self._queue_items()
        if items is not None:
            try:
                sections: list[Literal["needs_my_review", "needs_others_review", "archived"]]
                if status is None:
                    sections = ["needs_my_review", "needs_others_review", "archived"]
                else:
                    sections = ["archived" if status == "completed" else status]
                seen: dict[str, Any] = {}
                for section in sections:
                    for item in items.list(queue_id, status=section, page_size=100):
                        if item.run_id:
                            seen[str(item.run_id)] = item
                return list(seen.items())
            except Exception as e:
                if not _is_unsupported(e):
                    raise
                self._use_queue_items = False
        with _legacy():
            return [
                (str(r.id), None)
                for r in self.client.list_runs_from_annotation_queue(queue_id, status=status)
            ]

    def queue_run_ids(self, queue_id: str, status: QueueStatus | None) -> list[str]:
        """Ids of the runs in a queue (`status=None`: all of them), in queue order."""
        return [rid for rid, _ in self.queue_items(queue_id, status)]

    def add_to_queue(self, queue_id: str, runs: Sequence[RunRecord]) -> None:
        """Add runs to a queue with their full lookup keys, extending their retention.

        Queued traces are moved to extended retention (`extend_trace_retention`):
        on the base tier a run can expire before anyone reviews it.
        """
        if not runs:
            return
        items = self._queue_items()
        if items is not None:
            sent = 0
            try:
                for i in range(0, len(runs), _CHUNK):
                    batch = []
                    for run in runs[i : i + _CHUNK]:
                        item: dict[str, Any] = {"item_type": "RUN", "run_id": run.id}
                        if run.project_id:
                            item["project_id"] = run.project_id
                        if run.start_time:
                            item["start_time"] = run.start_time.isoformat()
                        batch.append(item)
                    items.create(queue_id, items=batch, extend_trace_retention=True)
                    sent += len(batch)
                return
            except Exception as e:
                if not _is_unsupported(e):
                    raise
                self._use_queue_items = False
            runs = runs[sent:]  # what the newer API took must not be queued twice
        keys = [run.run_key() for run in runs]
        with _legacy():
            if all(k is not None for k in keys):
                self.client.add_runs_to_annotation_queue(
                    queue_id, runs=cast(list[ls_schemas.RunKey], keys)
                )
            else:
                self.client.add_runs_to_annotation_queue(queue_id, run_ids=[r.id for r in runs])

    def complete_queue_runs(self, queue_id: str, run_ids: Sequence[str]) -> CompletedItems:
        """Record the caller's "Done" on queued runs (by their queue item ids).

        The service archives an item only once the queue's review requirements are met
        (reviewers per item, assigned reviewers): the result says which runs that made
        archived and which still wait for other reviewers.
        """
        wanted = list(dict.fromkeys(run_ids))
        archived: list[str] = []
        waiting: list[str] = []
        items = self._queue_items()
        if items is not None:
            try:
                done = set()
                for run_id, item in self.queue_items(queue_id, None):
                    if run_id not in wanted or item is None or not item.id:
                        continue
                    answer = items.create_status(item.id, status="completed")
                    (archived if answer.is_archived else waiting).append(run_id)
                    done.add(run_id)
                if self._use_queue_items:
                    return CompletedItems(
                        archived=[r for r in wanted if r in archived],
                        waiting=[r for r in wanted if r in waiting],
                        missing=[r for r in wanted if r not in done],
                    )
            except Exception as e:
                if not _is_unsupported(e):
                    raise
                self._use_queue_items = False
        # Older servers: the legacy status endpoint, by queue item id ("queue_run_id").
        offset, found = 0, set()
        while True:
            response = self.client.request_with_retries(
                "GET",
                f"/annotation-queues/{queue_id}/runs",
                params={"limit": 100, "offset": offset},
            )
            page = response.json()
            for entry in page:
                if str(entry.get("id")) in wanted and entry.get("queue_run_id"):
                    self.client.request_with_retries(
                        "POST",
                        f"/annotation-queues/status/{entry['queue_run_id']}",
                        json={"status": "completed"},
                    )
                    found.add(str(entry["id"]))
            if len(page) < 100:
                break
            offset += 100
        done_now = set(self.queue_run_ids(queue_id, "completed"))
        return CompletedItems(
            archived=[r for r in wanted if r in found and r in done_now],
            waiting=[r for r in wanted if r in found and r not in done_now],
            missing=[r for r in wanted if r not in found],
        )

    # -- run references ------------------------------------------------------------------

    def records(
        self,
        runs: Sequence[RunRef] | None,
        project: str | uuid.UUID | None,
        limit: int | None = None,
    ) -> list[RunRecord]:
        """The runs given (read when only their ids are), or a project's latest root runs."""
        if (runs is None) == (project is None):
            raise ValueError("give exactly one of runs or project")
        if project is not None:
            return self.project_runs(self.project(project), limit=limit)
        assert runs is not None
        ready = {r.id: r for r in runs if isinstance(r, RunRecord)}
        hints: dict[str, tuple[str | None, dt.datetime | None]] = {}
        for r in runs:
            if isinstance(r, ls_schemas.Run) and r.session_id:
                hints[str(r.id)] = (str(r.session_id), _time(r.start_time))
        ids = list(dict.fromkeys(run_id_of(r) for r in runs))
        missing = [i for i in ids if i not in ready]
        found = {**ready, **self.read_runs(missing, hints)} if missing else ready
        if self.backend() == QueryBackend.SMITHDB_ONLY and any(
            i not in found and i not in hints for i in ids
        ):
            raise ValueError(
                "this LangSmith deployment reads runs only through their project: pass "
                "Run objects (with session_id) or project=... instead of bare run ids"
            )
        return [found[i] for i in ids if i in found]


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


def _mismatch(
    key: str, existing: Any, wanted: ls_schemas.FeedbackConfig, *, enforced: bool
) -> FeedbackConfigMismatchError:
    have = describe_config(existing) if existing else "another config"
    kind = "an enforced" if enforced else "a"
    return FeedbackConfigMismatchError(
        f"the LangSmith workspace has {kind} feedback config for {key!r} on another scale "
        f"({have}) than the judge's ({describe_config(wanted)}): reviews given on it could "
        "not be read. Delete or change that config, name the judge differently, or give "
        "it the workspace's scale.",
        key=key,
        existing=existing,
        wanted=wanted,
    )


def _from_v1(run: ls_schemas.Run) -> RunRecord:
    return RunRecord(
        id=str(run.id),
        project_id=str(run.session_id) if run.session_id else None,
        start_time=_time(run.start_time),
        inputs=run.inputs,
        outputs=run.outputs,
        reference_example_id=str(run.reference_example_id) if run.reference_example_id else None,
        trace_id=str(run.trace_id) if run.trace_id else None,
        name=run.name,
        extra=dict(run.extra or {}),
    )


def _from_v2(run: Any) -> RunRecord:
    extra = dict(run.extra or {})
    metadata = getattr(run, "metadata", None)
    if metadata is not None:  # v2 serves it as its own field; v1 inside extra
        extra["metadata"] = dict(metadata)
    return RunRecord(
        id=str(run.id),
        project_id=run.project_id,
        start_time=_time(run.start_time),
        inputs=run.inputs,
        outputs=run.outputs,
        reference_example_id=run.reference_example_id,
        trace_id=run.trace_id,
        name=run.name,
        extra=extra,
    )
