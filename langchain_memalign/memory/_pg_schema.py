"""The PostgreSQL tables of judge memories: their SQL, version and names.

Several judges share one database, each under its name: every table holds a
`judge` column (the judge row in `memalign_judges` owns the rest, so deleting
it deletes the judge's memory). The tables are created once per database,
by the first `PostgresStore.create`.
"""

from __future__ import annotations

# The version of the tables below; a database with another refuses to open, except
# an older one that `_PG_UPGRADES` brings to this version (on open).
# 2: the agreement series (`memalign_prequential`).
PG_SCHEMA_VERSION = 2
# First key of the advisory locks this package takes (the second is the judge's
# name hashed), so they do not collide with another application's locks.
_LOCK_CLASS = 0x4D41  # "MA"

_PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS memalign_schema (
    id integer PRIMARY KEY CHECK (id = 1),
    version integer NOT NULL
);
CREATE TABLE IF NOT EXISTS memalign_judges (
    name text PRIMARY KEY,
    memory_id text NOT NULL,
    change_seq bigint NOT NULL DEFAULT 0,
    content_version text NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS memalign_meta (
    judge text NOT NULL REFERENCES memalign_judges(name) ON DELETE CASCADE,
    key text NOT NULL,
    value text NOT NULL,
    PRIMARY KEY (judge, key)
);
CREATE TABLE IF NOT EXISTS memalign_feedback (
    judge text NOT NULL REFERENCES memalign_judges(name) ON DELETE CASCADE,
    id text NOT NULL,
    ord bigint GENERATED ALWAYS AS IDENTITY,
    payload text NOT NULL,
    content_hash text NOT NULL,
    reflected boolean NOT NULL DEFAULT false,
    updated_at text NOT NULL,
    changed_seq bigint NOT NULL,
    PRIMARY KEY (judge, id)
);
CREATE INDEX IF NOT EXISTS memalign_feedback_pending
    ON memalign_feedback(judge) WHERE NOT reflected;
CREATE TABLE IF NOT EXISTS memalign_episodes (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    judge text NOT NULL,
    feedback_id text NOT NULL,
    text_hash text NOT NULL,
    vector bytea NOT NULL,
    added_seq bigint NOT NULL,
    UNIQUE (judge, feedback_id),
    FOREIGN KEY (judge, feedback_id) REFERENCES memalign_feedback(judge, id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS memalign_episodes_added ON memalign_episodes(judge, added_seq);
CREATE TABLE IF NOT EXISTS memalign_removed_episodes (
    judge text NOT NULL REFERENCES memalign_judges(name) ON DELETE CASCADE,
    seq bigint NOT NULL,
    episode_id bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS memalign_removed_by_seq ON memalign_removed_episodes(judge, seq);
CREATE TABLE IF NOT EXISTS memalign_guidelines (
    judge text NOT NULL REFERENCES memalign_judges(name) ON DELETE CASCADE,
    id text NOT NULL,
    ord bigint GENERATED ALWAYS AS IDENTITY,
    text text NOT NULL,
    vector bytea,
    created_at text NOT NULL,
    position bigint NOT NULL,
    PRIMARY KEY (judge, id)
);
CREATE TABLE IF NOT EXISTS memalign_guideline_sources (
    judge text NOT NULL,
    guideline_id text NOT NULL,
    feedback_id text NOT NULL,
    ord bigint GENERATED ALWAYS AS IDENTITY,
    PRIMARY KEY (judge, guideline_id, feedback_id),
    FOREIGN KEY (judge, guideline_id) REFERENCES memalign_guidelines(judge, id)
        ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS memalign_sources_by_feedback
    ON memalign_guideline_sources(judge, feedback_id);
CREATE TABLE IF NOT EXISTS memalign_history (
    judge text NOT NULL REFERENCES memalign_judges(name) ON DELETE CASCADE,
    seq bigint GENERATED ALWAYS AS IDENTITY,
    at text NOT NULL,
    action text NOT NULL,
    feedback_ids text NOT NULL,
    guideline_ids text NOT NULL,
    PRIMARY KEY (judge, seq)
);
"""
# The agreement series (version 2): each review beside the judge's verdict on its case
# from before the judge learned it (`kind` "review"), and where each align happened
# (`kind` "align"). A review's row goes with its feedback (unalign removes it).
_PG_PREQUENTIAL = """
CREATE TABLE IF NOT EXISTS memalign_prequential (
    judge text NOT NULL REFERENCES memalign_judges(name) ON DELETE CASCADE,
    seq bigint GENERATED ALWAYS AS IDENTITY,
    at text NOT NULL,
    kind text NOT NULL,
    feedback_id text,
    judge_value text,
    expert_value text,
    source text,
    learned integer,
    PRIMARY KEY (judge, seq),
    UNIQUE (judge, feedback_id),
    FOREIGN KEY (judge, feedback_id) REFERENCES memalign_feedback(judge, id) ON DELETE CASCADE
);
"""
_PG_SCHEMA += _PG_PREQUENTIAL
# What brings a database of an older version to the next one, by its version.
_PG_UPGRADES = {1: _PG_PREQUENTIAL}

_TABLES = {
    "feedback": "memalign_feedback",
    "episodes": "memalign_episodes",
    "guidelines": "memalign_guidelines",
    "history": "memalign_history",
}
# Meta keys kept in the judge row rather than in `memalign_meta`.
_ROW_META = ("memory_id", "change_seq", "content_version")
