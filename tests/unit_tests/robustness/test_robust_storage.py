"""A folder that is busy, full or read-only says so, and a failed call changes nothing.

Each condition has its own error (`MemoryBusyError`, `MemoryFullError`,
`MemoryReadOnlyError`), never `MemoryFormatError`, which means a damaged or foreign
memory. The conditions are SQLite's own, without root: a second connection holding
the write transaction, the page limit of the judge's connection (`max_page_count`:
SQLite's "database or disk is full" path), a folder made read-only with `chmod`
(skipped as root, whom file modes do not stop) or a connection SQLite will not let
write (`query_only`).
"""

from __future__ import annotations

import errno
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import HOURS, RUDE, SWEATER, fb
from fakes import HashEmbeddings
from test_robust_atomic import dump

from langchain_memalign import MemAlignError, MemAlignJudge, MemoryBusyError, MemoryFormatError
from langchain_memalign.errors import MemoryFullError, MemoryReadOnlyError
from langchain_memalign.memory.store import DB_FILE, INDEX_FILE

CASE = {"inputs": "What are your store hours?", "outputs": "9 to 6."}
# Past the free space of the memory's pages: the write needs new ones.
BIG = fb("big", "a long question " * 4000, "an answer", True, "Complete.")


@pytest.fixture
def aligned(make_judge: Any, tmp_path: Path) -> MemAlignJudge:
    judge: MemAlignJudge = make_judge(path=tmp_path / "memory")
    judge.align([SWEATER, HOURS])
    return judge


def _assert_storage_error(error: BaseException, kind: type[Exception]) -> None:
    assert isinstance(error, kind) and isinstance(error, MemAlignError)
    assert not isinstance(error, MemoryFormatError)  # not "missing, corrupt or foreign"


# -- busy ----------------------------------------------------------------------------


def test_a_second_writer_gets_memory_busy_and_nothing_changes(
    aligned: MemAlignJudge, make_judge: Any
) -> None:
    folder = aligned.memory.store.folder
    assert folder is not None
    before = dump(aligned)
    other = sqlite3.connect(folder / DB_FILE, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's write transaction
    # SQLite's wait is 5 s; the same wait, shorter, keeps the test quick.
    aligned.memory.store._conn.execute("PRAGMA busy_timeout=50")
    try:
        with pytest.raises(MemoryBusyError, match="busy") as err:
            aligned.align([RUDE])
        _assert_storage_error(err.value, TimeoutError)
        assert "nothing was changed" in str(err.value)
        assert dump(aligned) == before
        # Opening the folder beside the writer needs no write: the configuration is the same.
        make_judge(path=folder).memory.store.close()
    finally:
        other.execute("ROLLBACK")
        other.close()
    aligned.align([RUDE])  # the writer is done: the retry goes through
    assert "rude" in aligned.memory.store.feedback_ids()
    aligned.close()


# -- full ----------------------------------------------------------------------------


def test_a_full_disk_is_memory_full_and_the_align_is_rolled_back(
    aligned: MemAlignJudge,
) -> None:
    before = dump(aligned)
    conn = aligned.memory.store._conn
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count={pages}")
    with pytest.raises(MemoryFullError, match="disk is full") as err:
        aligned.align([BIG])
    _assert_storage_error(err.value, OSError)
    assert dump(aligned) == before
    assert aligned.invoke(CASE) is not None  # still judges
    conn.execute("PRAGMA max_page_count=4294967294")  # space again
    aligned.align([BIG])
    assert "big" in aligned.memory.store.feedback_ids()
    aligned.close()


def test_save_on_a_full_disk_is_memory_full_and_leaves_the_target_as_it_was(
    aligned: MemAlignJudge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = tmp_path / "old"
    aligned.save(old)
    old_bytes = (old / DB_FILE).read_bytes()
    aligned.align([RUDE])
    connect = sqlite3.connect

    def on_a_full_disk(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.execute("PRAGMA max_page_count=2")  # the copy `save` writes gets two pages
        return conn

    new = tmp_path / "new"
    with monkeypatch.context() as m:
        m.setattr(sqlite3, "connect", on_a_full_disk)
        for target in (new, old):
            with pytest.raises(MemoryFullError, match="disk is full") as err:
                aligned.save(target)
            _assert_storage_error(
                err.value, OSError
            )  # `save` raised `OSError` for a full disk before
    assert not new.exists()  # no folder where there was none, no temporary file
    assert (old / DB_FILE).read_bytes() == old_bytes
    aligned.close()


# -- read-only -----------------------------------------------------------------------


def _as_root() -> bool:
    return os.geteuid() == 0


needs_file_modes = pytest.mark.skipif(
    _as_root(), reason="root writes read-only files and folders: chmod cannot refuse it"
)


@pytest.fixture
def read_only(aligned: MemAlignJudge) -> Iterator[Path]:
    """The aligned memory's folder, closed and made read-only (restored after the test)."""
    folder = aligned.memory.store.folder
    assert folder is not None
    aligned.close()
    files = list(folder.iterdir())
    assert {p.name for p in files} >= {DB_FILE, INDEX_FILE}
    for p in files:
        p.chmod(0o444)
    folder.chmod(0o555)
    try:
        yield folder
    finally:
        folder.chmod(0o755)
        for p in files:
            p.chmod(0o644)


def _load(folder: Path, model: Any) -> MemAlignJudge:
    return MemAlignJudge.load(folder, model=model, embeddings=HashEmbeddings())


@needs_file_modes
def test_a_read_only_folder_judges_and_refuses_writes_as_read_only(
    read_only: Path, model: Any
) -> None:
    judge = _load(read_only, model)
    before = dump(judge)
    assert judge.invoke(CASE) is not None
    with pytest.raises(MemoryReadOnlyError, match="read-only") as err:
        judge.align([RUDE])
    _assert_storage_error(err.value, OSError)
    with pytest.raises(MemoryReadOnlyError):
        judge.rules.pin(judge.rules.list()[0].id, author="ops")
    assert dump(judge) == before
    judge.close()


@needs_file_modes
def test_close_on_a_read_only_folder_is_clean(read_only: Path, model: Any) -> None:
    judge = _load(read_only, model)
    judge.invoke(CASE)
    db_bytes = (read_only / DB_FILE).read_bytes()
    judge.close()
    assert judge.memory.store.closed
    assert (read_only / DB_FILE).read_bytes() == db_bytes
    judge = _load(read_only, model)
    with pytest.raises(MemoryReadOnlyError) as err:  # an explicit save says why it cannot
        judge.save(read_only)
    assert err.value.errno == errno.EACCES
    judge.close()


@needs_file_modes
def test_the_constructor_opens_a_read_only_folder_with_its_stored_configuration(
    read_only: Path, make_judge: Any
) -> None:
    judge = make_judge(path=read_only)
    assert judge.invoke(CASE) is not None
    judge.close()
    with pytest.raises(MemoryReadOnlyError):  # another configuration must be written
        make_judge(path=read_only, k=5)


def test_a_connection_sqlite_will_not_let_write_is_read_only(aligned: MemAlignJudge) -> None:
    # As root too: the connection refuses writes as one to a read-only file does.
    before = dump(aligned)
    aligned.memory.store._conn.execute("PRAGMA query_only=ON")
    with pytest.raises(MemoryReadOnlyError, match="read-only") as err:
        aligned.align([RUDE])
    _assert_storage_error(err.value, OSError)
    assert dump(aligned) == before
    aligned.close()


def test_close_on_a_read_only_volume_closes_the_database(
    aligned: MemAlignJudge, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As root too: a read-only volume refuses every new file, whoever asks.
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EROFS, "Read-only file system")

    aligned.invoke(CASE)
    with monkeypatch.context() as m:
        m.setattr(tempfile, "mkstemp", refused)
        aligned.close()
    assert aligned.memory.store.closed
