"""An integration's own state, stored in a judge's memory.

An integration that feeds the judge (a LangSmith feedback source, an
annotation queue) keeps what it has seen as one JSON value in the memory's
meta table, so that the state and the memory it describes are saved, copied
and deleted together. `IntegrationState` reads and writes that value;
`_CORE_META` names the memory's own meta keys, which no integration may use.
`JudgeMemory.integration_state` hands one out under the memory's write lock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langchain_memalign.memory.base import Store


class IntegrationState:
    """One integration's state in the memory: a JSON value (see `integration_state`)."""

    def __init__(self, store: Store, namespace: str) -> None:
        self._store = store
        self.namespace = namespace

    def get(self) -> Any:
        """The stored value, or None."""
        return self._store.get_meta(self.namespace)

    def set(self, value: Any) -> None:
        """Store `value` (JSON-serializable) at once; `None` clears it."""
        self._store.set_meta(self.namespace, value)


# The memory's own meta keys, which no integration may overwrite.
_CORE_META = frozenset(
    {"config", "embeddings", "schema_version", "change_seq", "index_seq", "calibration", "rulebook"}
)
