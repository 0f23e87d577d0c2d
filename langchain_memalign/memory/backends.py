"""Which backend keeps the memory at a location: `open_store` and `memory_exists`.

A folder (or `None`, in process) is a SQLite memory (`store.MemoryStore`); a
`postgresql://` URL is a judge in a PostgreSQL database
(`postgres.PostgresStore`). Everything that opens a memory opens it here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_memalign.errors import MemoryFormatError
from langchain_memalign.memory._store_base import DB_FILE
from langchain_memalign.memory.base import Store
from langchain_memalign.memory.location import Location, is_postgres_url
from langchain_memalign.memory.store import MemoryStore

__all__ = ["memory_exists", "open_store"]


def open_store(
    location: Location | None, *, create: bool, meta: dict[str, Any] | None = None
) -> Store:
    """Open the memory at `location` in the backend that location names.

    Args:
        location: A memory folder, a `postgresql://` URL (see
            `location.PostgresTarget`), or `None` for a new memory kept in process.
        create: Create the memory (folder, tables, judge) if it does not exist;
            otherwise a missing memory raises `MemoryFormatError`.
        meta: With `create`, the meta values a memory this call creates starts
            with, written in the transaction that creates it.
    """
    if is_postgres_url(location):
        # Imported here: `postgres` re-exports `memory_exists` from this module.
        from langchain_memalign.memory.postgres import PostgresStore

        url = str(location)
        return PostgresStore.create(url, meta=meta) if create else PostgresStore.open(url)
    if create:
        return MemoryStore.create(location, meta)
    if location is None:
        raise ValueError("an in-process memory cannot be opened again: pass create=True")
    return MemoryStore.open(location)


def memory_exists(location: object) -> bool:
    """Whether a folder or a database holds a memory (for a URL: the judge's row exists)."""
    if is_postgres_url(location):
        try:
            open_store(str(location), create=False).close()
        except MemoryFormatError:
            return False
        return True
    return (Path(str(location)) / DB_FILE).is_file()
