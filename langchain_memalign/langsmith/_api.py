"""The LangSmith calls the integration makes, on the client's current APIs first.

langsmith 0.15 marks its run-reading and annotation-queue helpers
(`list_runs`, `add_runs_to_annotation_queue`, `list_runs_from_annotation_queue`)
deprecated in favour of the generated v2 resources (`client.runs`,
`client.annotation_queues.items`). Those need a recent server (0.16, 0.16.14
for queue items). `LangSmithAPI` uses them when the server says it is recent
enough and falls back to the older helpers when it is not, or when the server
answers them with 404/405/501; it remembers the fallback per client.

The v2 resources on `Client` are async; this module drives their synchronous
twin (the client's generated sync API), so that sync code stays sync.
"""

from __future__ import annotations

import contextlib
import datetime as dt
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

_RUN_SELECTS = [
    "ID",
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


class LangSmithAPI:
    """The calls the integration makes, on current APIs with a fallback to older ones.

    Use `LangSmithAPI.of(client)`: one instance per client remembers which
    APIs the server answers.
    """

    def __init__(self, client: Client) -> None:
        self.client = client
        self._use_v2_runs: bool | None = None
        self._use_queue_items: bool | None = None

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

    def _openapi(self) -> Any | None:
        # Private on purpose: langsmith 0.15's public accessors (`client.runs`,
        # `client.annotation_queues`) return the *async* resources; the sync
        # OpenAPI client has no public accessor. getattr: absent, we use v1 calls.
        get = getattr(self.client, "_get_langsmith_api_sync", None)
        return get() if callable(get) else None

    def _v2_runs(self) -> Any | None:
        if self._use_v2_runs is None:
            self._use_v2_runs = self._server_at_least("0.16.0") and self._openapi() is not None
        return self._openapi() if self._use_v2_runs else None

    def _queue_items(self) -> Any | None:
        if self._use_queue_items is None:
            self._use_queue_items = self._server_at_least("0.16.14") and self._openapi() is not None
        api = self._openapi() if self._use_queue_items else None
        return None if api is None else api.annotation_queues.items

    # -- projects ------------------------------------------------------------------------

    def project(self, name_or_id: str | uuid.UUID) -> ls_schemas.TracerSession:
        """A project (or experiment) by id or name."""
        pid = as_uuid_str(name_or_id)
        if pid is not None:
            project: ls_schemas.TracerSession = self.client.read_project(project_id=pid)
        else:
            project = self.client.read_project(project_name=str(name_or_id))
        return project

    # -- feedback ------------------------------------------------------------------------

    def list_feedback(
        self,
        *,
        key: str,
        source_types: Sequence[str],
        project_ids: Sequence[str] | None = None,
        run_ids: Sequence[str] | None = None,
    ) -> Iterator[ls_schemas.Feedback]:
        """Every feedback record on `key` in the projects or on the runs, all pages."""
        # Plain strings: the FeedbackSourceType enum is serialized as
        # "FeedbackSourceType.API" in query strings, which servers reject.
        sources = cast(Any, list(source_types))
        if run_ids is not None:
            for chunk in _chunks(list(run_ids), 50):
                yield from self.client.list_feedback(
                    run_ids=chunk, feedback_key=[key], feedback_source_type=sources
                )
            return
        kwargs: dict[str, Any] = {}
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
    ) -> dict[str, RunRecord]:
        """Runs by id; `hints` maps a run id to its project and start time if known.

        Runs that no longer exist (deleted, past retention) are absent from the result.
        """
        ids = sorted(set(run_ids))
        hints = hints or {}
        found: dict[str, RunRecord] = {}
        api = self._v2_runs()
        if api is not None:
            groups: dict[str, list[str]] = {}
            for rid in ids:
                project, start = hints.get(rid, (None, None))
                if project and start:
                    groups.setdefault(project, []).append(rid)
            try:
                for project, members in groups.items():
                    for chunk in _chunks(members):
                        times = [t for r in chunk if (t := hints[r][1]) is not None]
                        found.update(
                            self._query_v2(
                                api,
                                project_ids=[project],
                                ids=chunk,
                                min_start_time=min(times) - dt.timedelta(seconds=1),
                                max_start_time=max(times) + dt.timedelta(seconds=1),
                            )
                        )
            except Exception as e:
                if not _is_unsupported(e):
                    raise
                self._use_v2_runs = False
            # runs the v2 query did not return (no hint, odd start time) are looked up by id
            ids = [rid for rid in ids if rid not in found]
        for chunk in _chunks(ids):
            with _legacy():
                for run in self.client.list_runs(run_ids=chunk):
                    found[str(run.id)] = _from_v1(run)
        return found

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
                if not _is_unsupported(e):
                    raise
                self._use_v2_runs = False
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

    # -- annotation queues ---------------------------------------------------------------

    def find_queue(self, name: str) -> ls_schemas.AnnotationQueue | None:
        """The annotation queue with exactly this name, if any."""
        for queue in self.client.list_annotation_queues(name=name):
            if queue.name == name:
                return queue
        return None

    def ensure_feedback_config(self, key: str, config: ls_schemas.FeedbackConfig) -> bool:
        """Declare how feedback on `key` is interpreted; False if the workspace keeps another."""
        try:
            self.client.create_feedback_config(key, feedback_config=config)
        except ls_utils.LangSmithError as e:
            if "already exists" in str(e) or _is_unsupported(e):
                return False
            raise
        return True

    def queue_run_ids(self, queue_id: str, status: QueueStatus | None) -> list[str]:
        """Ids of the runs in a queue (`status=None`: all of them), in queue order."""
        items = self._queue_items()
        if items is not None:
            try:
                sections: list[Literal["needs_my_review", "needs_others_review", "archived"]]
                if status is None:
                    sections = ["needs_my_review", "needs_others_review", "archived"]
                else:
                    sections = ["archived" if status == "completed" else status]
                seen: dict[str, None] = {}
                for section in sections:
                    for item in items.list(queue_id, status=section, page_size=100):
                        if item.run_id:
                            seen[str(item.run_id)] = None
                return list(seen)
            except Exception as e:
                if not _is_unsupported(e):
                    raise
                self._use_queue_items = False
        with _legacy():
            return [
                str(r.id)
                for r in self.client.list_runs_from_annotation_queue(queue_id, status=status)
            ]

    def add_to_queue(self, queue_id: str, runs: Sequence[RunRecord]) -> None:
        """Add runs to a queue, with their full lookup keys when known."""
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
                    items.create(queue_id, items=batch)
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

    def complete_queue_runs(self, queue_id: str, run_ids: Sequence[str]) -> None:
        """Mark queued runs as reviewed (the reviewer's "Done")."""
        wanted = set(run_ids)
        items = self._queue_items()
        if items is not None:
            try:
                for section in ("needs_my_review", "needs_others_review"):
                    for item in items.list(queue_id, status=section, page_size=100):
                        if item.id and item.run_id in wanted:
                            items.create_status(item.id, status="completed")
                return
            except Exception as e:
                if not _is_unsupported(e):
                    raise
                self._use_queue_items = False
        offset = 0
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
            if len(page) < 100:
                return
            offset += 100

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
        ids = list(dict.fromkeys(run_id_of(r) for r in runs))
        missing = [i for i in ids if i not in ready]
        found = {**ready, **self.read_runs(missing)} if missing else ready
        return [found[i] for i in ids if i in found]


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
    return RunRecord(
        id=str(run.id),
        project_id=run.project_id,
        start_time=_time(run.start_time),
        inputs=run.inputs,
        outputs=run.outputs,
        reference_example_id=run.reference_example_id,
        trace_id=run.trace_id,
        name=run.name,
        extra=dict(run.extra or {}),
    )
