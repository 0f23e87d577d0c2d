"""Run lookups of the LangSmith calls.

`RunsAPI` reads runs by id (through their project on the v2 query, by id on
v1), lists a project's root runs (the latest, newest first, or those after a
position, oldest first; the v2 query's own order is relied on for neither) and
the runs whose feedback changed since a time, reads dataset examples' reference
outputs, and turns the run references callers give into `RunRecord`s; `_from_v1`
and `_from_v2` convert the two APIs' run objects.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langsmith import schemas as ls_schemas

from langchain_memalign.langsmith._api_base import (
    _CHUNK,
    _RUN_SELECTS,
    EARLIEST,
    APIBase,
    QueryBackend,
    RunRecord,
    RunRef,
    _chunks,
    _legacy,
    _time,
    run_id_of,
)

RunPosition = tuple[dt.datetime, str]
"""Where a run stands among a project's runs: its start time, then its id (ties)."""

# A window's lower bound is moved this much earlier: whether the API's bound is inclusive
# is not documented, and runs at the position's own start time may follow it (by id).
_BOUND_MARGIN = dt.timedelta(milliseconds=1)
# Positions are listed with ids and start times only: many a page (the v2 query's most).
_LIST_PAGE = 1000
_V1_LIST_SELECT = ["id", "name", "run_type", "start_time"]  # what `schemas.Run` requires
# Listing a project's latest runs, a window is narrowed only once this many runs past the
# `limit` asked for are seen: whatever order the query lists in, a narrowing then leaves
# out at least this many runs, and on the newest-first order the service is seen to use,
# the second listing is the last.
_LATEST_SLACK = _LIST_PAGE


@dataclass
class RunsAfter:
    """The first runs after a position, oldest first, and how many more there are."""

    positions: list[RunPosition] = field(default_factory=list)
    left: int = 0
    """Runs after those listed (counted up to the `count` asked for)."""
    capped: bool = False
    """More than `left` runs are left: counting stopped there."""


class RunsAPI(APIBase):
    """Runs and dataset examples."""

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
                # every run of the project rather than the API's default last day.
                lo, hi = EARLIEST, now
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
        quoted = key.replace("\\", "\\\\").replace('"', '\\"')
        try:
            return [
                str(run.id)
                for run in api.runs.query_v2(
                    project_ids=[project_id],
                    filter=f'eq(feedback_key, "{quoted}")',
                    min_feedback_modified_at=since,
                    min_start_time=EARLIEST,
                    max_start_time=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1),
                    selects=["ID"],
                    page_size=_CHUNK,
                )
            ]
        except Exception as e:
            self._v2_failed(e)
            return None

    def project_runs(
        self,
        project: ls_schemas.TracerSession,
        *,
        limit: int | None = None,
        with_errors: bool = True,
    ) -> list[RunRecord]:
        """The latest `limit` root runs of a project (all without a limit), newest first.

        Newest first by start time, then id; `with_errors=False` leaves out the runs that
        ended with an error (the query does: they take no place among the `limit`).

        The v2 query has no order parameter (its order is not documented), so with a
        `limit` its windows are listed (ids and start times only) and sorted here: a
        window holding more than `limit` runs and a slack is narrowed to the start time
        of the `limit`-th latest seen, until one is listed whole; then the runs chosen
        are read in full. v1 is asked for newest first (`order="desc"`, as the SDK's own
        `list_threads` asks).
        """
        if limit is not None and limit < 1:
            return []
        # Left out by the service, errored runs take no place among the `limit` latest.
        no_error: dict[str, bool] = {} if with_errors else {"has_error": False}
        api = self._v2_runs()
        if api is not None:
            try:
                pid = str(project.id)
                if limit is None:
                    runs = list(
                        self._query_v2_iter(
                            api,
                            project_ids=[pid],
                            is_root=True,
                            # Not the project's start time: runs can start before it.
                            min_start_time=EARLIEST,
                            max_start_time=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1),
                            **no_error,
                        )
                    )
                    return sorted(runs, key=_start_and_id, reverse=True)
                positions = self._latest_v2(api, project, limit, no_error)
                found = self._read_v2(
                    api, pid, [rid for _, rid in positions], {rid: (pid, t) for t, rid in positions}
                )
                return [found[rid] for _, rid in positions if rid in found]
            except Exception as e:
                self._v2_failed(e)
        with _legacy():
            return [
                _from_v1(r)
                for r in self.client.list_runs(
                    project_id=project.id,
                    is_root=True,
                    limit=limit,
                    error=None if with_errors else False,
                    order="desc",
                )
            ]

    def errored_runs(
        self, project: ls_schemas.TracerSession, since: dt.datetime, *, limit: int
    ) -> tuple[list[RunRecord], bool]:
        """The project's root runs that ended with an error, started at `since` or later.

        What `project_runs(with_errors=False)` leaves out, for a report: one query, of at
        most `limit` runs (ids, start times and errors only), newest first; the second
        value says more were left unread. (On v2, whose order is not documented, which
        runs are read when there are more is up to the service.)
        """
        api = self._v2_runs()
        lo = since - _BOUND_MARGIN  # whether the API's bound is inclusive is not documented
        runs: list[RunRecord] = []
        if api is not None:
            try:
                for run in api.runs.query_v2(
                    project_ids=[str(project.id)],
                    is_root=True,
                    has_error=True,
                    min_start_time=lo,
                    max_start_time=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1),
                    selects=["ID", "START_TIME", "ERROR"],
                    page_size=min(limit + 1, _LIST_PAGE),
                ):
                    runs.append(_from_v2(run))
                    if len(runs) > limit:
                        break
            except Exception as e:
                self._v2_failed(e)
                runs = []
        if api is None or not self._use_v2_runs:
            with _legacy():
                for v1_run in self.client.list_runs(
                    project_id=project.id,
                    is_root=True,
                    error=True,
                    start_time=lo,
                    select=[*_V1_LIST_SELECT, "error"],
                    order="desc",
                    limit=limit + 1,
                ):
                    runs.append(_from_v1(v1_run))
        runs = [r for r in runs if r.start_time is not None and r.start_time >= since]
        runs.sort(key=_start_and_id, reverse=True)
        return runs[:limit], len(runs) > limit

    @staticmethod
    def _latest_v2(
        api: Any, project: ls_schemas.TracerSession, limit: int, no_error: dict[str, bool]
    ) -> list[RunPosition]:
        """The positions of the `limit` latest root runs of a project, newest first."""
        lo = EARLIEST  # not the project's start time: runs can start before it
        hi = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
        whole = False
        while True:
            cap = None if whole else limit + _LATEST_SLACK
            found, over = _window_v2(api, project, lo, hi, no_error, cap)
            found.sort(reverse=True)
            if not over:
                return found[:limit]
            # Too many to list whole: the `limit` latest of the window are no earlier than
            # the `limit`-th latest seen so far. (The bound is moved before it in case the
            # API's lower bound is exclusive.)
            bound = found[limit - 1][0] - _BOUND_MARGIN
            if bound <= lo:  # no narrower than the last window: list this one whole
                whole = True
            lo = max(lo, bound)

    def runs_after(
        self,
        project: ls_schemas.TracerSession,
        after: RunPosition,
        *,
        limit: int,
        skip: Collection[str] = (),
        count: int = 0,
    ) -> RunsAfter:
        """The positions of the first `limit` root runs of a project after `after`.

        Runs are taken oldest first by position (start time, then id), leaving out the
        runs at or before `after` and those whose id is in `skip` (runs that ended with
        an error are listed: the watch reports them). Only ids and start times are read;
        up to `count` more runs past the `limit` first are counted (`left`).

        The v2 query has no order parameter (its order is not documented), so its
        windows are read whole and sorted here; a window holding more than
        `limit + count` runs is narrowed to the start time of the `limit`-th earliest
        seen, until one is read whole. v1 lists oldest first (`order="asc"`, as the
        SDK's `read_thread` passes it) and is read until `limit + count` runs are seen
        past the last start time the first `limit` need.
        """
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        api = self._v2_runs()
        if api is not None:
            try:
                return self._runs_after_v2(api, project, after, limit, set(skip), count)
            except Exception as e:
                self._v2_failed(e)
        return self._runs_after_v1(project, after, limit, set(skip), count)

    @staticmethod
    def _runs_after_v2(
        api: Any,
        project: ls_schemas.TracerSession,
        after: RunPosition,
        limit: int,
        skip: set[str],
        count: int,
    ) -> RunsAfter:
        hi = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
        narrowed, whole = False, False
        lo = after[0] - _BOUND_MARGIN
        while True:
            found, over = _window_v2(
                api, project, lo, hi, {}, None if whole else limit + count,
                keep=lambda p: p > after and p[1] not in skip,
            )  # fmt: skip
            found.sort()
            if not over:
                break
            # Too many to read whole: the `limit` earliest of the window are no later than
            # the `limit`-th earliest seen so far. (The bound is moved past it in case the
            # API's upper bound is exclusive.)
            narrowed = True
            bound = found[limit - 1][0] + dt.timedelta(microseconds=1)
            if bound >= hi:  # all at one start time: read that window whole
                whole = True
            hi = min(hi, bound)
        left = max(0, len(found) - limit)
        if narrowed:  # runs past the narrowed window are not counted: more than `count`
            return RunsAfter(found[:limit], left=count, capped=True)
        return RunsAfter(found[:limit], left=left)

    def _runs_after_v1(
        self,
        project: ls_schemas.TracerSession,
        after: RunPosition,
        limit: int,
        skip: set[str],
        count: int,
    ) -> RunsAfter:
        found: list[RunPosition] = []
        capped = False
        with _legacy():
            runs = self.client.list_runs(
                project_id=project.id,
                is_root=True,
                start_time=after[0] - _BOUND_MARGIN,
                select=_V1_LIST_SELECT,
                order="asc",
            )
            for run in runs:
                position = _position(run)
                if position is None or position <= after or position[1] in skip:
                    continue
                # Oldest first, ties in no known order: the first `limit` by position are
                # known once a later start time than the `limit`-th's comes.
                if len(found) >= limit + count and position[0] > found[limit - 1][0]:
                    capped = True
                    break
                found.append(position)
        found.sort()
        if capped:
            return RunsAfter(found[:limit], left=count, capped=True)
        return RunsAfter(found[:limit], left=max(0, len(found) - limit))

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


def _window_v2(
    api: Any,
    project: ls_schemas.TracerSession,
    lo: dt.datetime,
    hi: dt.datetime,
    no_error: dict[str, bool],
    cap: int | None,
    keep: Callable[[RunPosition], bool] = lambda _: True,
) -> tuple[list[RunPosition], bool]:
    """Root runs' positions in a window, in the query's order; whether it stopped at `cap`.

    The runs of `project` started between `lo` and `hi` that `keep` accepts (ids and start
    times only); the listing stops once more than `cap` of them are seen.
    """
    found: list[RunPosition] = []
    for run in api.runs.query_v2(
        project_ids=[str(project.id)],
        is_root=True,
        min_start_time=lo,
        max_start_time=hi,
        selects=["ID", "START_TIME"],
        page_size=_LIST_PAGE,
        **no_error,
    ):
        position = _position(run)
        if position is None or not keep(position):
            continue
        found.append(position)
        if cap is not None and len(found) > cap:
            return found, True
    return found, False


def _start_and_id(run: RunRecord) -> RunPosition:
    """A run's position (a run without a start time sorts first)."""
    return (run.start_time or EARLIEST, run.id)


def _position(run: Any) -> RunPosition | None:
    start = _time(run.start_time)
    return None if start is None else (start, str(run.id))


def _from_v1(run: ls_schemas.Run) -> RunRecord:
    return RunRecord(
        id=str(run.id),
        project_id=str(run.session_id) if run.session_id else None,
        start_time=_time(run.start_time),
        end_time=_time(run.end_time),
        inputs=run.inputs,
        outputs=run.outputs,
        reference_example_id=str(run.reference_example_id) if run.reference_example_id else None,
        trace_id=str(run.trace_id) if run.trace_id else None,
        name=run.name,
        extra=dict(run.extra or {}),
        error=run.error or None,
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
        end_time=_time(run.end_time),
        inputs=run.inputs,
        outputs=run.outputs,
        reference_example_id=run.reference_example_id,
        trace_id=run.trace_id,
        name=run.name,
        extra=extra,
        error=getattr(run, "error", None) or None,
    )
