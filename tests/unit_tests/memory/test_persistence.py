"""Memory folders: round trips, atomic saves, corrupt folders, privacy after unalign."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import HOURS, INSTRUCTIONS, RUDE, SWEATER, fb
from fakes import HashEmbeddings
from open_faults import (
    Fail,
    OpenInterrupted,
    assert_kept_what_another_process_wrote,
    assert_nothing_left_then_created,
    plant_open_fault,
)

from langchain_memalign import AlignFailedError, MemAlignJudge, MemoryFormatError
from langchain_memalign.errors import EmbeddingMismatchError
from langchain_memalign.memory.store import DB_FILE, INDEX_FILE

CASE = {"inputs": "I was charged twice and I'm frustrated!", "outputs": "Refunds take 5-7 days."}


def test_save_load_round_trip_makes_no_embedding_call(
    make_judge: Any, model: Any, tmp_path: Path
) -> None:
    judge = make_judge(k=2, scale=bool)
    judge.align([SWEATER, HOURS, RUDE])
    expected = judge.invoke(CASE)
    judge.save(tmp_path / "mem")
    fresh = HashEmbeddings()
    loaded = MemAlignJudge.load(tmp_path / "mem", model=model, embeddings=fresh)
    assert fresh.calls == 0
    assert loaded.config == judge.config
    assert loaded.guidelines == judge.guidelines
    assert loaded.feedback_ids == judge.feedback_ids
    assert loaded.history() == judge.history()
    assert loaded.invoke(CASE) == expected
    assert fresh.calls == 1  # only the query


def test_index_cache_is_used_and_rebuilt_when_missing_or_stale(
    make_judge: Any, model: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    judge = make_judge()
    judge.align([SWEATER, HOURS])
    judge.save(tmp_path)
    assert (tmp_path / INDEX_FILE).is_file()
    (tmp_path / INDEX_FILE).write_bytes(b"garbage")
    with caplog.at_level("WARNING", logger="langchain_memalign"):
        loaded = MemAlignJudge.load(tmp_path, model=model, embeddings=HashEmbeddings())
    assert len(loaded.memory.index) == 2  # rebuilt from stored vectors
    assert "index cache" in caplog.text  # and said so
    assert not (tmp_path / INDEX_FILE).exists()  # the damaged cache is removed on open
    loaded = MemAlignJudge.load(tmp_path, model=model, embeddings=HashEmbeddings())
    assert len(loaded.memory.index) == 2
    result = loaded.invoke({"inputs": SWEATER.inputs, "outputs": "x"})
    assert result["metadata"]["episode_ids"][0] == "sweater"


def test_path_judge_persists_every_change(make_judge: Any, model: Any, tmp_path: Path) -> None:
    judge = make_judge(path=tmp_path)
    judge.align([SWEATER, HOURS])
    judge.unalign(["hours"])
    # no save: SQLite commits each change
    other = MemAlignJudge.load(tmp_path, model=model, embeddings=HashEmbeddings())
    assert other.feedback_ids == ["sweater"]
    assert [g.source_ids for g in other.guidelines] == [("sweater",)]
    assert len(other.memory.index) == 1


def test_reopening_a_folder_with_the_constructor_keeps_memory(
    make_judge: Any, tmp_path: Path
) -> None:
    make_judge(path=tmp_path).align([SWEATER])
    again = make_judge(path=tmp_path, k=4)
    assert again.feedback_ids == ["sweater"] and again.config.k == 4
    with pytest.raises(MemoryFormatError, match="holds the memory of judge 'helpfulness'"):
        make_judge(path=tmp_path, name="tone")
    with pytest.raises(MemoryFormatError, match="different retrieval.embed"):
        make_judge(path=tmp_path, options={"retrieval": {"embed": "inputs_outputs"}})
    with pytest.raises(MemoryFormatError, match="different scale"):
        MemAlignJudge.load(tmp_path, model=again.model, embeddings=HashEmbeddings(), scale=(1, 5))


def test_crash_during_save_leaves_previous_memory_intact(
    make_judge: Any, model: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    judge = make_judge()
    judge.align([SWEATER])
    judge.save(tmp_path)
    judge.align([HOURS, RUDE])

    real_replace = os.replace

    def crash(src: Any, dst: Any) -> None:
        if str(dst).endswith(DB_FILE):
            raise OSError("disk full")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        judge.save(tmp_path)
    monkeypatch.setattr(os, "replace", real_replace)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([DB_FILE, INDEX_FILE])
    loaded = MemAlignJudge.load(tmp_path, model=model, embeddings=HashEmbeddings())
    assert loaded.feedback_ids == ["sweater"]
    assert len(loaded.memory.index) == 1


def test_crash_inside_a_write_rolls_back(
    make_judge: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    judge = make_judge(path=tmp_path)
    judge.align([SWEATER])
    from langchain_memalign.memory.store import MemoryStore

    def boom(*a: Any, **k: Any) -> None:
        raise RuntimeError("power cut")

    monkeypatch.setattr(MemoryStore, "put_guideline", staticmethod(boom))
    with pytest.raises(AlignFailedError, match="power cut") as err:
        judge.align([HOURS])
    assert isinstance(err.value.__cause__, RuntimeError)
    monkeypatch.undo()
    assert judge.feedback_ids == ["sweater"]
    assert judge.stats()["episodes"] == 1 and len(judge.memory.index) == 1


def test_loading_with_other_embeddings_is_refused(
    make_judge: Any, model: Any, tmp_path: Path
) -> None:
    judge = make_judge()
    judge.align([SWEATER])
    judge.save(tmp_path)
    with pytest.raises(EmbeddingMismatchError, match="size=32"):
        MemAlignJudge.load(tmp_path, model=model, embeddings=HashEmbeddings(size=32))
    with pytest.raises(EmbeddingMismatchError, match="model=other"):
        MemAlignJudge.load(tmp_path, model=model, embeddings=HashEmbeddings(model="other"))


def test_missing_and_corrupt_folders(model: Any, tmp_path: Path) -> None:
    with pytest.raises(MemoryFormatError, match="missing memory.sqlite"):
        MemAlignJudge.load(tmp_path / "nowhere", model=model, embeddings=HashEmbeddings())
    (tmp_path / DB_FILE).write_bytes(b"this is not a database" * 100)
    with pytest.raises(MemoryFormatError, match="corrupt"):
        MemAlignJudge.load(tmp_path, model=model, embeddings=HashEmbeddings())
    with pytest.raises(MemoryFormatError):
        MemAlignJudge(
            name="x",
            instructions=INSTRUCTIONS,
            model=model,
            embeddings=HashEmbeddings(),
            path=tmp_path,
        )
    assert (tmp_path / DB_FILE).read_bytes() == b"this is not a database" * 100


def test_unsupported_format_version(make_judge: Any, model: Any, tmp_path: Path) -> None:
    make_judge().save(tmp_path)
    with sqlite3.connect(tmp_path / DB_FILE) as conn:
        conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    with pytest.raises(MemoryFormatError, match="version 99"):
        MemAlignJudge.load(tmp_path, model=model, embeddings=HashEmbeddings())


def _folder_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("mode", ["path", "save"])
def test_no_text_of_unaligned_feedback_left_in_folder(
    make_judge: Any, tmp_path: Path, mode: str
) -> None:
    judge = make_judge(path=tmp_path if mode == "path" else None)
    judge.align([SWEATER, HOURS, RUDE])
    if mode == "save":
        judge.save(tmp_path)
    needles = [b"disappointment first", b"looks different from the website", b"monitor settings"]
    before = _folder_bytes(tmp_path)
    assert all(n in before for n in needles)
    judge.unalign(["sweater"])
    judge.save(tmp_path)
    judge.close()
    after = _folder_bytes(tmp_path)
    assert not [n for n in needles if n in after]
    assert HOURS.rationale.encode() in after  # the rest is still there


def test_no_pickle_in_memory_folder(make_judge: Any, tmp_path: Path) -> None:
    judge = make_judge()
    judge.align([SWEATER])
    judge.save(tmp_path)
    for p in tmp_path.iterdir():
        assert not p.read_bytes().startswith(b"\x80")  # pickle protocol marker


def test_a_judge_is_a_context_manager_that_closes_its_memory(model: Any, tmp_path: Path) -> None:
    with MemAlignJudge("h", INSTRUCTIONS, model, HashEmbeddings(), path=tmp_path / "mem") as judge:
        judge.align([SWEATER, HOURS, RUDE])
    with pytest.raises(sqlite3.ProgrammingError):  # closed
        judge.stats()
    reopened = MemAlignJudge.load(tmp_path / "mem", model=model, embeddings=HashEmbeddings())
    assert reopened.feedback_ids == ["sweater", "hours", "rude"]
    reopened.close()


def test_integration_state_is_kept_with_the_memory(model: Any, tmp_path: Path) -> None:
    judge = MemAlignJudge("h", INSTRUCTIONS, model, HashEmbeddings(), path=tmp_path / "mem")
    with judge.memory.integration_state("my_source:scope") as state:
        assert state.get() is None
        state.set({"cursor": 3})
        judge.align([HOURS])  # the lock is re-entrant: aligning inside the block works
    with pytest.raises(ValueError, match="namespace"), judge.memory.integration_state("config"):
        pass
    judge.close()
    reopened = MemAlignJudge.load(tmp_path / "mem", model=model, embeddings=HashEmbeddings())
    with reopened.memory.integration_state("my_source:scope") as state:
        assert state.get() == {"cursor": 3}
        state.set(None)
        assert state.get() is None
    assert reopened.config.name == "h"  # the memory's own keys are untouched
    reopened.close()


def test_save_refuses_to_replace_another_judges_folder(
    make_judge: Any, model: Any, tmp_path: Path
) -> None:
    support = make_judge(name="support", path=tmp_path / "support")
    support.align([SWEATER])
    support.save(tmp_path / "support")  # to itself
    copy = tmp_path / "copy"
    support.save(copy)
    support.save(copy)  # over an older copy of the same judge: no flag needed
    # Another name; the same name on another scale.
    for other, value in (
        (make_judge(name="hr"), True),
        (make_judge(name="support", scale=(1, 5)), 3),
    ):
        other.align([fb("x", "a question", "an answer", value)])
        with pytest.raises(MemoryFormatError, match="overwrite=True") as e:
            other.save(copy)
        assert "'support'" in str(e.value)
        kept = MemAlignJudge.load(copy, model=model, embeddings=HashEmbeddings())
        assert (kept.config.name, kept.feedback_ids) == ("support", ["sweater"])  # untouched
        kept.close()
    hr = make_judge(name="hr")
    hr.align([fb("x", "a question", "an answer", True)])
    hr.save(copy, overwrite=True)
    replaced = MemAlignJudge.load(copy, model=model, embeddings=HashEmbeddings())
    assert (replaced.config.name, replaced.feedback_ids) == ("hr", ["x"])
    replaced.close()


def _fail_meta_write(monkeypatch: pytest.MonkeyPatch, fail: Fail) -> None:
    """The write of the configuration fails."""
    from langchain_memalign.memory.store import StoreBase

    write = StoreBase._write_meta

    def failing(store: Any, values: dict[str, Any], what: str) -> None:
        if "config" in values:
            fail()
        write(store, values, what)

    monkeypatch.setattr(StoreBase, "_write_meta", failing)


def _fail_format_check(monkeypatch: pytest.MonkeyPatch, fail: Fail) -> None:
    """The database is written: its check fails."""
    from langchain_memalign.memory.store import MemoryStore

    monkeypatch.setattr(MemoryStore, "_check_format", fail)


FOLDER_FAULTS = {"meta": _fail_meta_write, "format": _fail_format_check}


def _plant_open_fault(monkeypatch: pytest.MonkeyPatch, where: str) -> dict[str, Any]:
    """A constructor on a folder fails at `where`; returns keywords for `make_judge`."""
    return plant_open_fault(monkeypatch, where, FOLDER_FAULTS)


OPEN_FAULTS = ["fingerprint", "meta", "format", "reload", "interrupt", "setup", "model"]


@pytest.mark.parametrize("where", OPEN_FAULTS)
def test_a_failed_constructor_leaves_no_new_folder_behind(
    make_judge: Any, model: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A constructor that raises on a folder that did not exist leaves no folder (nor
    its parents it made), so nothing opens later as a memory without a configuration."""
    folder = tmp_path / "new" / "mem"
    kwargs = _plant_open_fault(monkeypatch, where)
    with pytest.raises((OpenInterrupted, KeyboardInterrupt, TypeError)):
        make_judge(path=folder, **kwargs)
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []
    assert_nothing_left_then_created(make_judge, model, folder, "no MemAlign memory here")


@pytest.mark.parametrize("where", OPEN_FAULTS)
def test_a_failed_constructor_leaves_an_existing_folder_as_it_was(
    make_judge: Any, model: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """An existing folder keeps what it held: its other files, and a memory byte for
    byte (the changed configuration the constructor was to store included)."""
    empty, kept = tmp_path / "empty", tmp_path / "kept"
    empty.mkdir()
    (empty / "notes.txt").write_text("mine")
    make_judge(path=kept).close()
    kept_bytes = (kept / DB_FILE).read_bytes()
    kwargs = _plant_open_fault(monkeypatch, where)
    for folder in (empty, kept):
        with pytest.raises((OpenInterrupted, KeyboardInterrupt, TypeError)):
            make_judge(path=folder, k=4, **kwargs)
    monkeypatch.undo()
    assert [p.name for p in empty.iterdir()] == ["notes.txt"]
    assert (kept / DB_FILE).read_bytes() == kept_bytes
    loaded = MemAlignJudge.load(kept, model=model, embeddings=HashEmbeddings())
    assert loaded.config.k == 3
    loaded.close()


def test_a_failed_constructor_keeps_a_memory_another_process_wrote_meanwhile(
    make_judge: Any, model: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The memory a failed constructor made is deleted only while no one committed to it:
    another process that opened it meanwhile and aligned keeps what it wrote."""
    assert_kept_what_another_process_wrote(make_judge, model, tmp_path / "new", monkeypatch)


def test_a_folder_of_before_memory_ids_keeps_its_configuration_when_opened(
    make_judge: Any, model: Any, tmp_path: Path
) -> None:
    """A memory without a memory id gains one on open, but is no new memory: the
    configuration a new memory starts with is not written over the one it stores."""
    make_judge(path=tmp_path).close()
    conn = sqlite3.connect(tmp_path / DB_FILE)
    with conn:
        conn.execute("DELETE FROM meta WHERE key='memory_id'")
    conn.close()
    with pytest.raises(MemoryFormatError, match="holds the memory of judge 'helpfulness'"):
        make_judge(path=tmp_path, name="tone")
    loaded = MemAlignJudge.load(tmp_path, model=model, embeddings=HashEmbeddings())
    assert loaded.config.name == "helpfulness"
    loaded.close()


@pytest.mark.parametrize("where", ["copy", "index", "interrupt"])
def test_a_failed_save_leaves_no_new_folder_and_the_previous_memory_whole(
    make_judge: Any, model: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A save that fails midway leaves no folder where there was none (nor its parents
    it made) and a previous memory byte for byte, whichever step fails."""
    import langchain_memalign.memory.judge_memory as jm

    judge = make_judge()
    judge.align([SWEATER])
    old = tmp_path / "old"
    judge.save(old)
    old_bytes = (old / DB_FILE).read_bytes()
    judge.align([HOURS])
    real_link, real_replace, real_write = os.link, os.replace, jm.write_atomic

    def fail() -> None:
        if where == "interrupt":
            raise KeyboardInterrupt
        raise OSError(5, "Input/output error")

    def link(src: Any, dst: Any) -> None:
        if where != "index" and str(dst).endswith(DB_FILE):
            fail()
        real_link(src, dst)

    def replace(src: Any, dst: Any) -> None:
        if where != "index" and str(dst).endswith(DB_FILE):
            fail()
        real_replace(src, dst)

    def write_atomic(path: Path, write: Any) -> None:
        if where == "index":
            fail()
        real_write(path, write)

    new = tmp_path / "new" / "mem"
    with monkeypatch.context() as m:
        m.setattr(os, "link", link)
        m.setattr(os, "replace", replace)
        m.setattr(jm, "write_atomic", write_atomic)
        for target in (new, old):
            with pytest.raises((OSError, KeyboardInterrupt)):
                judge.save(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old"]
    assert (old / DB_FILE).read_bytes() == old_bytes
    with pytest.raises(MemoryFormatError, match="no MemAlign memory here"):
        MemAlignJudge.load(new, model=model, embeddings=HashEmbeddings())
    loaded = MemAlignJudge.load(old, model=model, embeddings=HashEmbeddings())
    assert loaded.feedback_ids == ["sweater"]
    loaded.close()
    judge.save(new)  # the same save, without the fault
    copy = MemAlignJudge.load(new, model=model, embeddings=HashEmbeddings())
    assert copy.feedback_ids == ["sweater", "hours"]
    copy.close()
    judge.close()
