"""The table specification (`_tables`) against the format folders are written in.

A folder's schema is compared word for word with the one this package writes
(`_sqlite_schema`), so the definitions generated from the specification must
stay those every earlier version wrote; the literal below is format version 2
as written before the specification existed.
"""

from __future__ import annotations

import sqlite3

from langchain_memalign.memory._sqlite_schema import expected_entries
from langchain_memalign.memory._tables import (
    BY_NAME,
    COPIED,
    VERSION,
    pg_upgrade,
    sqlite_schema,
    upgrade_sqlite,
)

_VERSION_2 = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS feedback (
    id TEXT PRIMARY KEY,
    payload TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    reflected INTEGER NOT NULL DEFAULT 0,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS episodes (
    rowid INTEGER PRIMARY KEY AUTOINCREMENT,
    feedback_id TEXT NOT NULL UNIQUE REFERENCES feedback(id) ON DELETE CASCADE,
    text_hash TEXT NOT NULL,
    vector BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS guidelines (
    id TEXT PRIMARY KEY,
    text TEXT NOT NULL,
    vector BLOB,
    created_at TEXT NOT NULL,
    position INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS guideline_sources (
    guideline_id TEXT NOT NULL REFERENCES guidelines(id) ON DELETE CASCADE,
    feedback_id TEXT NOT NULL,
    PRIMARY KEY (guideline_id, feedback_id)
);
CREATE INDEX IF NOT EXISTS guideline_sources_by_feedback ON guideline_sources(feedback_id);
CREATE INDEX IF NOT EXISTS feedback_pending ON feedback(reflected) WHERE reflected = 0;
CREATE TABLE IF NOT EXISTS history (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    action TEXT NOT NULL,
    feedback_ids TEXT NOT NULL,
    guideline_ids TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS prequential (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    kind TEXT NOT NULL,
    feedback_id TEXT UNIQUE REFERENCES feedback(id) ON DELETE CASCADE,
    judge_value TEXT,
    expert_value TEXT,
    source TEXT,
    learned INTEGER
);
"""


def test_generated_sqlite_schema_is_the_written_format() -> None:
    assert VERSION == 2
    assert expected_entries(sqlite_schema()) == expected_entries(_VERSION_2)


def test_a_version_1_file_upgraded_has_the_current_definitions() -> None:
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(sqlite_schema(1))
        assert "prequential" not in sqlite_schema(1)
        upgrade_sqlite(conn, 1)
        upgrade_sqlite(conn, 1)  # what is there already is left alone
        found = {
            (kind, name, sql and " ".join(sql.split()))
            for kind, name, sql in conn.execute("SELECT type, name, sql FROM sqlite_master")
        }
    finally:
        conn.close()
    assert found == {(kind, name, sql) for kind, name, _, sql in expected_entries(_VERSION_2)}


def test_copies_and_upgrades_take_their_columns_from_the_specification() -> None:
    guidelines = BY_NAME["guidelines"]
    assert [c.name for c in guidelines.copied()] == [
        "id", "text", "vector", "created_at", "position",
    ]  # fmt: skip
    assert guidelines.sqlite_insert() == (
        "INSERT INTO guidelines(id, text, vector, created_at, position) VALUES (?, ?, ?, ?, ?)"
    )
    text, rows = BY_NAME["history"].pg_insert("j", 7, [(1, "at", "a", "[]", "[]")])
    assert text == (
        "INSERT INTO memalign_history(judge, at, action, feedback_ids, guideline_ids) "
        "VALUES (%s, %s, %s, %s, %s)"
    )
    assert rows == [("j", "at", "a", "[]", "[]")]
    text, rows = BY_NAME["episodes"].pg_insert("j", 7, [(3, "f", "h", b"v")])
    assert "(judge, feedback_id, text_hash, vector, added_seq)" in text
    assert rows == [("j", "f", "h", b"v", 7)]
    assert [t.dump for t in COPIED] == [
        "feedback", "episodes", "guidelines", "sources", "history", "prequential",
    ]  # fmt: skip
    assert "CREATE TABLE IF NOT EXISTS memalign_prequential" in pg_upgrade(1)
