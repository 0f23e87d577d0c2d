"""Crash leftovers are removed; removed feedback leaves nothing behind."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import HOURS, RUDE, fb
from fakes import HashEmbeddings
from sigkill import run_and_kill

from langchain_memalign import MemAlignJudge
from langchain_memalign.memory.store import DB_FILE, INDEX_FILE, MemoryStore

# CI kills 4 times; MEMALIGN_KILLS=40 runs the figure quoted in docs/persistence.md.
KILLS = int(os.environ.get("MEMALIGN_KILLS", "4"))
SECRET = "Quokka-7741 zebra rationale: never quote the internal ticket number"
SECRET_CASE = fb(
    "secret",
    "Why was my ticket 55-QX escalated?",
    "Ticket 55-QX was escalated by our fraud team.",
    False,
    SECRET,
)


def _plant_leftovers(folder: Path) -> list[str]:
    """What a save killed at various points leaves: copies of the database and the cache."""
    shutil.copy(folder / DB_FILE, folder / ".memory-k1lled.tmp")
    if (folder / INDEX_FILE).exists():
        shutil.copy(folder / INDEX_FILE, folder / f".{INDEX_FILE}-k1lled.tmp")
    shutil.copy(folder / DB_FILE, folder / ".memory-k1lled.tmp-journal")
    (folder / ".memory-olddir.tmp").mkdir()
    shutil.copy(folder / DB_FILE, folder / ".memory-olddir.tmp" / "copy")
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def _folder_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_leftovers_are_removed_on_open(make_judge: Any, model: Any, tmp_path: Path) -> None:
    judge = make_judge(path=tmp_path)
    judge.align([SECRET_CASE, HOURS])
    judge.close()
    assert len(_plant_leftovers(tmp_path)) == 4
    MemAlignJudge.load(tmp_path, model=model, embeddings=HashEmbeddings()).close()
    assert _names(tmp_path) == sorted([DB_FILE, INDEX_FILE])
    _plant_leftovers(tmp_path)
    MemoryStore.open(tmp_path).close()  # what `memalign show` opens
    assert _names(tmp_path) == sorted([DB_FILE, INDEX_FILE])
    _plant_leftovers(tmp_path)
    make_judge(path=tmp_path).close()  # reopening with the constructor
    assert _names(tmp_path) == sorted([DB_FILE, INDEX_FILE])


def test_leftovers_are_removed_on_save(make_judge: Any, tmp_path: Path) -> None:
    judge = make_judge()
    judge.align([SECRET_CASE, HOURS])
    judge.save(tmp_path)
    _plant_leftovers(tmp_path)
    judge.save(tmp_path)
    assert _names(tmp_path) == sorted([DB_FILE, INDEX_FILE])


@pytest.mark.parametrize("mode", ["path", "save"])
def test_no_text_or_vector_of_unaligned_feedback_after_a_killed_save(
    make_judge: Any, tmp_path: Path, mode: str
) -> None:
    judge = make_judge(path=tmp_path if mode == "path" else None)
    judge.align([SECRET_CASE, HOURS, RUDE])
    judge.save(tmp_path)
    vector = judge.memory.store.episode_vectors(["secret"])["secret"].tobytes()
    _plant_leftovers(tmp_path)
    needles = [SECRET.encode(), b"55-QX", vector]
    assert all(n in _folder_bytes(tmp_path) for n in needles)
    judge.unalign(["secret"])
    judge.save(tmp_path)
    after = _folder_bytes(tmp_path)
    assert [n[:20] for n in needles if n in after] == []
    assert HOURS.rationale is not None and HOURS.rationale.encode() in after
    judge.close()


_WORKER = r"""
import sys
sys.path.insert(0, {tests!r})
from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel
from langchain_memalign import Feedback, MemAlignJudge

folder = {folder!r}
judge = MemAlignJudge(
    name="helpfulness", instructions="Is it helpful? {{inputs}} {{outputs}}",
    model=ScriptedChatModel(responder=RoleResponder()), embeddings=HashEmbeddings(),
    scale=bool, k=3,
    options={{"validation": {{"mode": "off"}}, "reflection": {{"source_support": None}}}},
)
print("ready", flush=True)
n = 0
while True:
    n += 1
    items = [Feedback(id=f"f{{n}}-{{i}}", inputs=f"case {{n}} {{i}} words", outputs="reply",
                      value=bool(i % 2), rationale=f"Secret-{{n}}-{{i}} reason")
             for i in range(4)]
    judge.align(items)
    judge.save(folder)
    judge.unalign([items[0].id])
    judge.save(folder)
"""


def test_sigkill_during_save_loop_leaves_an_openable_folder_and_no_removed_text(
    model: Any, tmp_path: Path
) -> None:
    """A process aligning, unaligning and copy-saving in a loop is killed at random points."""
    folder = tmp_path / "mem"
    tests = str(Path(__file__).resolve().parents[2])
    code = _WORKER.format(tests=tests, folder=str(folder))
    rng = np.random.default_rng(13)
    kills, opened = 0, 0
    for _ in range(KILLS):
        run_and_kill(code, rng)
        kills += 1
        if not (folder / DB_FILE).exists():
            continue
        judge = MemAlignJudge.load(folder, model=model, embeddings=HashEmbeddings())
        opened += 1
        assert not [p for p in folder.iterdir() if p.name.startswith(".")]
        ids = judge.feedback_ids
        if ids:
            gone = ids[0]
            text = judge.get_feedback(gone).rationale
            judge.unalign([gone])
            judge.save(folder)
            assert text is not None and text.encode() not in _folder_bytes(folder)
        judge.close()
    assert kills == KILLS and opened >= 1
