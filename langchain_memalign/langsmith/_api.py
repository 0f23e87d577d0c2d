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

This module holds `LangSmithAPI`, one shared instance per client, made of
`_api_runs` (run lookups), `_api_feedback` (feedback listing and configs)
and `_api_queues` (annotation queues) on top of `_api_base` (run types,
capability detection, projects); every name is importable from here.
"""

from __future__ import annotations

import threading
import weakref

from langsmith import Client

from langchain_memalign.langsmith._api_base import (
    APIBase,
    QueryBackend,
    RunRecord,
    RunRef,
    as_uuid_str,
    query_backend,
    run_id_of,
)
from langchain_memalign.langsmith._api_feedback import FeedbackAPI
from langchain_memalign.langsmith._api_queues import CompletedItems, QueuesAPI, QueueStatus
from langchain_memalign.langsmith._api_runs import RunsAPI

__all__ = [
    "APIBase",
    "CompletedItems",
    "FeedbackAPI",
    "LangSmithAPI",
    "QueryBackend",
    "QueueStatus",
    "QueuesAPI",
    "RunRecord",
    "RunRef",
    "RunsAPI",
    "as_uuid_str",
    "query_backend",
    "run_id_of",
]

_INSTANCES: weakref.WeakKeyDictionary[Client, LangSmithAPI] = weakref.WeakKeyDictionary()
_INSTANCES_LOCK = threading.Lock()


class LangSmithAPI(RunsAPI, FeedbackAPI, QueuesAPI):
    """The calls the integration makes, on current APIs with a fallback to older ones.

    Use `LangSmithAPI.of(client)`: one instance per client remembers which
    APIs the server answers.
    """

    @classmethod
    def of(cls, client: Client) -> LangSmithAPI:
        """The shared instance for `client`."""
        with _INSTANCES_LOCK:
            api = _INSTANCES.get(client)
            if api is None:
                api = _INSTANCES[client] = cls(client)
            return api
