"""The PostgreSQL tables of judge memories: their SQL, version and names.

Several judges share one database, each under its name: every table holds a
`judge` column (the judge row in `memalign_judges` owns the rest, so deleting
it deletes the judge's memory). The tables are created once per database,
by the first `PostgresStore.create`.
"""

from __future__ import annotations

from langchain_memalign.memory._tables import VERSION, pg_schema, pg_upgrade

# The version of the tables below; a database with another refuses to open, except
# an older one that `_PG_UPGRADES` brings to this version (on open).
PG_SCHEMA_VERSION = VERSION
# First key of the advisory locks this package takes (the second is the judge's
# name hashed), so they do not collide with another application's locks.
_LOCK_CLASS = 0x4D41  # "MA"

# The tables as `_tables` specifies them.
_PG_SCHEMA = pg_schema()
# What brings a database of an older version to the next one, by its version.
_PG_UPGRADES = {version: pg_upgrade(version) for version in range(1, VERSION)}

_TABLES = {
    "feedback": "memalign_feedback",
    "episodes": "memalign_episodes",
    "guidelines": "memalign_guidelines",
    "history": "memalign_history",
}
# Meta keys kept in the judge row rather than in `memalign_meta`.
_ROW_META = ("memory_id", "change_seq", "content_version")
