"""A memory folder's own SQL never runs: a schema that is not exactly ours is refused.

Each crafted folder is refused on opening, by `load` and by the constructor (which
creates missing parts), with `MemoryFormatError` naming what was found, and the file is
byte for byte unchanged: nothing of it ran. Older folders of this schema still open.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import struct
from pathlib import Path
from typing import Any

import pytest
from conftest import HOURS, INSTRUCTIONS, RUDE, SWEATER
from fakes import HashEmbeddings

from langchain_memalign import MemAlignJudge, MemoryFormatError
from langchain_memalign.cli import main
from langchain_memalign.memory.store import DB_FILE, MemoryStore

CASE = {"inputs": "My sweater looks different, I'm disappointed.", "outputs": "Colors vary."}

# What a folder can carry, and the words the error must name it by.
CRAFTED = {
    # Keeps the text of feedback that `unalign` deletes (in the meta table, so that
    # the trigger is the only foreign entry).
    "trigger": (
        "CREATE TRIGGER keep_text BEFORE DELETE ON feedback BEGIN "
        "INSERT OR REPLACE INTO meta(key, value) VALUES ('kept', json_quote(old.payload)); END",
        "trigger 'keep_text' on feedback",
    ),
    "view": ("CREATE VIEW everything AS SELECT payload FROM feedback", "view 'everything'"),
    "table": ("CREATE TABLE loot (text TEXT)", "table 'loot'"),
    "index": ("CREATE INDEX by_payload ON feedback(payload)", "index 'by_payload' on feedback"),
    "changed_table": (
        "DROP TABLE history; CREATE TABLE history (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
        "at TEXT NOT NULL, action TEXT NOT NULL CHECK (abs(1) = 1), feedback_ids TEXT NOT NULL, "
        "guideline_ids TEXT NOT NULL)",
        "table 'history' defined otherwise",
    ),
    # SQLite's statistics table is accepted as SQLite defines it, and no other way.
    "changed_statistics": (
        "ANALYZE; PRAGMA writable_schema=ON; UPDATE sqlite_master SET sql = "
        "'CREATE TABLE sqlite_stat1(tbl,idx,stat CHECK (abs(1) = 1))' "
        "WHERE name = 'sqlite_stat1'",
        "table 'sqlite_stat1' defined otherwise",
    ),
}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def saved(make_judge: Any, tmp_path: Path) -> Path:
    folder = tmp_path / "template"
    judge = make_judge()
    judge.align([SWEATER, HOURS, RUDE])
    judge.save(folder)
    judge.close()
    return folder


def _open_every_way(folder: Path, model: Any) -> list[MemoryFormatError]:
    """The errors of `load`, the constructor on the folder, and the store's own open."""
    errors = []
    for open_it in (
        lambda: MemAlignJudge.load(folder, model=model, embeddings=HashEmbeddings()),
        lambda: MemAlignJudge(
            name="helpfulness",
            instructions=INSTRUCTIONS,
            model=model,
            embeddings=HashEmbeddings(),
            path=folder,
        ),
        lambda: MemoryStore.open(folder),
        lambda: MemoryStore.create(folder),
    ):
        with pytest.raises(MemoryFormatError) as e:
            open_it()
        errors.append(e.value)
    return errors


@pytest.mark.parametrize("kind", sorted(CRAFTED))
def test_a_folder_with_sql_of_its_own_is_refused_and_left_unchanged(
    saved: Path, model: Any, kind: str
) -> None:
    sql, named = CRAFTED[kind]
    with sqlite3.connect(saved / DB_FILE) as conn:
        conn.executescript(sql)
    before = _sha(saved / DB_FILE)
    for error in _open_every_way(saved, model):
        assert named in str(error) and "refused without running any of it" in str(error)
    assert _sha(saved / DB_FILE) == before
    assert not any(p.name.endswith("-journal") for p in saved.iterdir())


def test_an_analyzed_folder_opens_every_way_and_keeps_working(
    saved: Path, model: Any, make_judge: Any
) -> None:
    # `ANALYZE` (or `PRAGMA optimize`) in `sqlite3 memory.sqlite` is routine maintenance:
    # the statistics table it adds is SQLite's own bookkeeping.
    with sqlite3.connect(saved / DB_FILE) as conn:
        conn.execute("ANALYZE")
        assert conn.execute("SELECT count(*) FROM sqlite_stat1").fetchone()[0] > 0
    MemoryStore.open(saved).close()
    MemoryStore.create(saved).close()
    make_judge(path=saved).close()
    judge = MemAlignJudge.load(saved, model=model, embeddings=HashEmbeddings())
    assert judge.invoke(CASE) is not None
    judge.unalign(["rude"])
    judge.close()
    again = MemAlignJudge.load(saved, model=model, embeddings=HashEmbeddings())
    assert sorted(again.memory.store.feedback_ids()) == ["hours", "sweater"]
    again.close()


def test_the_trigger_would_have_kept_unaligned_text(saved: Path, model: Any) -> None:
    # What the refusal prevents: the same trigger in a file this package opened before.
    sql, _ = CRAFTED["trigger"]
    with sqlite3.connect(saved / DB_FILE) as conn:
        conn.executescript(sql)
        conn.execute("DELETE FROM feedback WHERE id='hours'")
        kept = conn.execute("SELECT value FROM meta WHERE key='kept'").fetchone()
    assert kept is not None and "store hours" in kept[0]


def test_the_cli_refuses_it_too(saved: Path, capsys: Any) -> None:
    with sqlite3.connect(saved / DB_FILE) as conn:
        conn.executescript(CRAFTED["view"][0])
    before = _sha(saved / DB_FILE)
    assert main(["show", "--memory", str(saved)]) != 0
    assert "view 'everything'" in capsys.readouterr().err
    assert _sha(saved / DB_FILE) == before


@pytest.mark.parametrize("name", [DB_FILE, DB_FILE + "-journal"])
def test_a_symbolic_link_is_refused_and_its_target_unchanged(
    saved: Path, model: Any, tmp_path: Path, name: str
) -> None:
    outside = tmp_path / "outside.sqlite"
    if name == DB_FILE:
        shutil.move(saved / DB_FILE, outside)
    else:
        outside.write_bytes(b"not a journal")
    (saved / name).symlink_to(outside)
    before = _sha(outside)
    for error in _open_every_way(saved, model):
        assert f"{name} is a symbolic link" in str(error) and str(outside) in str(error)
    assert _sha(outside) == before and (saved / name).is_symlink()


@pytest.mark.parametrize("name", [DB_FILE, DB_FILE + "-journal", DB_FILE + "-wal"])
def test_a_hard_link_is_refused_and_the_other_file_unchanged(
    saved: Path, model: Any, tmp_path: Path, name: str
) -> None:
    # A hard link is no link to follow: the folder's name and the outside one are the
    # same file, so SQLite's writes (or its replay of a journal) would change both.
    outside = tmp_path / "outside.sqlite"
    if name == DB_FILE:
        shutil.move(saved / DB_FILE, outside)
    else:
        outside.write_bytes(b"not a journal")
    (saved / name).hardlink_to(outside)
    before = _sha(outside)
    for error in _open_every_way(saved, model):
        assert f"{name} is a hard link (2 names share the file" in str(error)
    assert _sha(outside) == before and outside.stat().st_nlink == 2


def test_a_copy_of_a_hard_linked_file_opens(saved: Path, tmp_path: Path) -> None:
    # The remedy the message gives: a copy is a file of its own.
    (tmp_path / "other-name").hardlink_to(saved / DB_FILE)
    with pytest.raises(MemoryFormatError, match="hard link"):
        MemoryStore.open(saved)
    copy = saved / "copy"
    shutil.copy(saved / DB_FILE, copy)
    copy.replace(saved / DB_FILE)
    MemoryStore.open(saved).close()


def _hot_journal(db: Path, journal: Path) -> None:
    """Write a rollback journal whose replay turns any database into `db`'s pages.

    SQLite's format (sqlite.org/fileformat2.html#the_rollback_journal): a header of one
    sector (magic, record count, checksum nonce, database size in pages, sector size,
    page size), then every page as (page number, page, checksum).
    """
    data = db.read_bytes()
    page_size = struct.unpack(">H", data[16:18])[0]
    pages, nonce, sector = len(data) // page_size, 7, 512
    header = bytes.fromhex("d9d505f920a163d7")
    header += struct.pack(">IIIII", pages, nonce, pages, sector, page_size)
    out = bytearray(header.ljust(sector, b"\0"))
    for n in range(pages):
        page = data[n * page_size : (n + 1) * page_size]
        checksum = nonce + sum(page[i] for i in range(page_size - 200, 0, -200))
        out += struct.pack(">I", n + 1) + page + struct.pack(">I", checksum & 0xFFFFFFFF)
    journal.write_bytes(bytes(out))


def _names(db: Path, *, replay: bool) -> set[str]:
    """The schema's names, as SQLite reads them with (or without) replaying a journal."""
    uri = f"file:{db}" + ("" if replay else "?immutable=1")
    conn = sqlite3.connect(uri, uri=True)
    try:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()


OPENERS = {
    "load": lambda folder, model: MemAlignJudge.load(
        folder, model=model, embeddings=HashEmbeddings()
    ),
    "constructor": lambda folder, model: MemAlignJudge(
        name="helpfulness",
        instructions=INSTRUCTIONS,
        model=model,
        embeddings=HashEmbeddings(),
        path=folder,
    ),
    "open": lambda folder, model: MemoryStore.open(folder),
    "create": lambda folder, model: MemoryStore.create(folder),
}


@pytest.mark.parametrize("how", sorted(OPENERS))
def test_a_trigger_in_a_hot_journal_is_seen_after_the_replay_and_refused(
    saved: Path, model: Any, tmp_path: Path, how: str
) -> None:
    # The file as it is has our schema only; the journal beside it, replayed by SQLite
    # before any statement reads a row, brings the trigger back.
    crafted = tmp_path / "crafted"
    shutil.copytree(saved, crafted)
    with sqlite3.connect(crafted / DB_FILE) as conn:
        conn.executescript(CRAFTED["trigger"][0])
    conn.close()
    _hot_journal(crafted / DB_FILE, saved / (DB_FILE + "-journal"))
    assert "keep_text" not in _names(saved / DB_FILE, replay=False)
    with pytest.raises(MemoryFormatError) as e:
        OPENERS[how](saved, model)
    assert "trigger 'keep_text' on feedback" in str(e.value)
    # The check read the replayed schema, and nothing ran: no text was kept.
    assert "keep_text" in _names(saved / DB_FILE, replay=False)
    with sqlite3.connect(saved / DB_FILE) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key='kept'").fetchone() is None
    conn.close()


@pytest.mark.parametrize("how", sorted(OPENERS))
def test_a_trigger_in_a_write_ahead_log_is_refused(
    saved: Path, model: Any, tmp_path: Path, how: str
) -> None:
    # A database in WAL mode whose log (never checkpointed) adds the trigger: SQLite
    # reads the log's pages in place of the file's.
    live = tmp_path / "live"
    shutil.copytree(saved, live)
    conn = sqlite3.connect(live / DB_FILE, isolation_level=None)
    try:
        assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.executescript(CRAFTED["trigger"][0])
        for suffix in ("", "-wal"):
            shutil.copy(live / (DB_FILE + suffix), saved / (DB_FILE + suffix))
    finally:
        conn.close()
    assert "keep_text" not in _names(saved / DB_FILE, replay=False)
    with pytest.raises(MemoryFormatError, match="trigger 'keep_text' on feedback"):
        OPENERS[how](saved, model)


def test_a_hot_journal_of_our_own_schema_is_replayed_and_opens(saved: Path, tmp_path: Path) -> None:
    # A writer that crashed mid-commit: the replay restores the last committed memory.
    before = MemoryStore.open(saved)
    ids = set(before.get_feedback(["sweater", "hours", "rude"]))
    before.close()
    committed = tmp_path / "committed"
    shutil.copytree(saved, committed)
    with sqlite3.connect(saved / DB_FILE) as conn:
        conn.execute("DELETE FROM feedback")
    conn.close()
    _hot_journal(committed / DB_FILE, saved / (DB_FILE + "-journal"))
    store = MemoryStore.open(saved)
    assert set(store.get_feedback(["sweater", "hours", "rude"])) == ids == {
        "sweater", "hours", "rude"
    }  # fmt: skip
    store.close()
    assert not (saved / (DB_FILE + "-journal")).exists()


def test_an_older_folder_still_opens_and_gains_what_it_lacks(saved: Path, model: Any) -> None:
    # Written before the pending-reflection index and the memory id existed.
    with sqlite3.connect(saved / DB_FILE) as conn:
        conn.execute("DROP INDEX feedback_pending")
        conn.execute("DELETE FROM meta WHERE key='memory_id'")
    judge = MemAlignJudge.load(saved, model=model, embeddings=HashEmbeddings())
    assert judge.invoke(CASE)["score"] in (True, False)
    assert judge.memory.store.get_meta("memory_id")
    judge.close()
    store = MemoryStore.create(saved)  # `create` adds the missing index
    names = {r[0] for r in store._conn.execute("SELECT name FROM sqlite_master")}
    assert "feedback_pending" in names
    store.close()


def test_missing_tables_are_named(saved: Path) -> None:
    with sqlite3.connect(saved / DB_FILE) as conn:
        conn.execute("DROP TABLE guideline_sources")
    with pytest.raises(MemoryFormatError, match="missing guideline_sources"):
        MemoryStore.open(saved)


def test_trusted_schema_is_off_on_every_connection(saved: Path) -> None:
    for store in (MemoryStore.open(saved), MemoryStore.create(None)):
        assert store._conn.execute("PRAGMA trusted_schema").fetchone()[0] == 0
        store.close()


def test_our_own_folders_pass_the_check(make_judge: Any, model: Any, tmp_path: Path) -> None:
    # A new folder, a saved copy of an in-process memory, and a copy saved over it.
    judge = make_judge(path=tmp_path / "a")
    judge.align([SWEATER])
    judge.save(tmp_path / "b")
    judge.close()
    for folder in ("a", "b"):
        MemAlignJudge.load(tmp_path / folder, model=model, embeddings=HashEmbeddings()).close()
