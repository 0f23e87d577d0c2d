"""Annotation queue calls of the LangSmith integration.

`QueuesAPI` finds a queue by name, lists its items by review status, adds
runs with their full lookup keys (extending their retention) and records a
reviewer's "Done" on queued runs, on the items API when the server has it
and on the older helpers and endpoints otherwise. `CompletedItems` is what
that last call reports.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from langsmith import schemas as ls_schemas

from langchain_memalign.langsmith._api_base import (
    _CHUNK,
    APIBase,
    RunRecord,
    _is_unsupported,
    _legacy,
    _reraise,
)

QueueStatus = Literal["needs_my_review", "needs_others_review", "completed"]


@dataclass(frozen=True)
class CompletedItems:
    """What marking queued runs as reviewed did (see `JudgeAnnotationQueue.complete`)."""

    archived: list[str] = field(default_factory=list)
    """Runs whose queue review requirements are now met: `pull` reads their reviews."""
    waiting: list[str] = field(default_factory=list)
    """Runs that still need other reviewers before the queue archives them."""
    missing: list[str] = field(default_factory=list)
    """Runs that are not in the queue."""


class QueuesAPI(APIBase):
    """Annotation queues and their items."""

    # -- annotation queues ---------------------------------------------------------------

    def find_queue(self, name: str) -> ls_schemas.AnnotationQueue | None:
        """The annotation queue with exactly this name, if any."""
        for queue in self.client.list_annotation_queues(name=name):
            if queue.name == name:
                return queue
        return None

    def queue_type(self, queue_id: str) -> str | None:
        """The queue's type, "single" or "pairwise"; None from a server that does not say.

        Read from the REST answer: langsmith 0.15's `schemas.AnnotationQueue` drops the
        field, which its generated types (`AnnotationQueueSchema.queue_type`) require.
        """
        response = self.client.request_with_retries("GET", f"/annotation-queues/{queue_id}")
        value = response.json().get("queue_type")
        return None if value is None else str(value)

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
                    _reraise(e)
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
                    _reraise(e)
                self._use_queue_items = False
            runs = runs[sent:]  # what the newer API took must not be queued twice
        keys = [run.run_key() for run in runs]
        if runs and not self._warned_retention:
            self._warned_retention = True
            warnings.warn(
                "this LangSmith server queues runs through its legacy API, which cannot "
                "extend their trace retention: runs on the base tier may expire before "
                "they are reviewed",
                stacklevel=3,
            )
        with _legacy():
            if all(k is not None for k in keys):
                self.client.add_runs_to_annotation_queue(
                    queue_id, runs=cast(list[ls_schemas.RunKey], keys)
                )
            else:
                self.client.add_runs_to_annotation_queue(queue_id, run_ids=[r.id for r in runs])

    def set_final(self, queue_id: str, run_id: str, key: str, answer: dict[str, Any]) -> bool:
        """Set the final answer on `key` for a queued run (newer items API only).

        False when the run is not in the queue.
        """
        items = self._queue_items()
        if items is None:
            raise ValueError("this LangSmith server has no final answers for queue items")
        for rid, item in self.queue_items(queue_id, None):
            if rid == run_id and item is not None and item.id:
                try:
                    items.set_final(key, queue_id=queue_id, item_id=item.id, **answer)
                except Exception as e:
                    _reraise(e)
                return True
        return False

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
                    _reraise(e)
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
