"""`save`'s check of what it replaces and the replacement are one step (issue 47).

`save(target)` without `overwrite` refuses a target that holds another judge's memory.
If the check and the replacement were two steps, another process could put its memory
into the target between them, and the save would then replace it silently, as if it had
been given `overwrite=True`. The tests open that window on purpose: right after the
check, another judge saves into the target (with `overwrite=True`). The first save must
either keep the other memory out until it is done (the other save then replaces the
target, as its flag allows) or refuse; it must never replace the other judge's memory.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import HOURS, SWEATER, fb

from langchain_memalign import MemAlignJudge, MemoryFormatError
from langchain_memalign.memory.judge_memory import JudgeMemory
from langchain_memalign.memory.store import MemoryStore


@pytest.fixture(params=["folder", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    if request.param == "folder":
        return tmp_path / "target"
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    db: str = request.getfixturevalue("pg_server").new_database()
    return f"{db}?judge=target{uuid.uuid4().hex[:6]}"


def test_another_save_between_the_check_and_the_replacement_is_not_lost(
    make_judge: Any, model: Any, embeddings: Any, target: Path | str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    support = make_judge(name="support")
    support.align([SWEATER])
    support.save(target)  # the target holds an older copy of this judge: no flag needed
    support.align([HOURS])
    hr = make_judge(name="hr")
    hr.align([fb("x", "a question", "an answer", True)])

    check = JudgeMemory._check_replaceable
    other: dict[str, Any] = {}

    def save_of_hr() -> None:
        try:
            hr.save(target, overwrite=True)
        except BaseException as e:  # reported below
            other["error"] = e

    def checked_then_raced(self: JudgeMemory, dest: Any, overwrite: bool) -> None:
        check(self, dest, overwrite)
        if self is support.memory and "thread" not in other:
            # Another process saves its memory into the target now; it gets the time
            # it needs, unless the first save keeps it out until it is done.
            other["thread"] = threading.Thread(target=save_of_hr)
            other["thread"].start()
            other["thread"].join(1.5)
            other["done_in_window"] = not other["thread"].is_alive()

    monkeypatch.setattr(JudgeMemory, "_check_replaceable", checked_then_raced)
    try:
        support.save(target)
        refused = None
    except MemoryFormatError as e:  # the first save may refuse, having seen hr's memory
        refused = e
    other["thread"].join(30)
    assert "error" not in other, other.get("error")
    kept = MemAlignJudge.load(target, model=model, embeddings=embeddings)
    # hr's save came last, with its flag; support's save never replaced hr's memory.
    assert (kept.config.name, kept.feedback_ids) == ("hr", ["x"]), refused
    kept.close()
    if refused is None:  # support's save went through: hr's had to wait until it was done
        assert not other["done_in_window"]
    for judge in (support, hr):
        judge.close()


def test_a_memory_saved_into_a_new_folder_meanwhile_is_checked_not_replaced(
    make_judge: Any, model: Any, embeddings: Any, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A folder without a memory has no file to lock: the copy is put there only if no
    memory appeared meanwhile; one that did is checked like any other."""
    target = tmp_path / "new"
    support = make_judge(name="support")
    support.align([SWEATER])
    hr = make_judge(name="hr")
    hr.align([fb("x", "a question", "an answer", True)])

    backup = MemoryStore.backup_to
    raced: list[bool] = []

    def raced_backup(self: MemoryStore, folder: Path, **kwargs: Any) -> None:
        if self is support.memory.store and not raced:
            raced.append(True)
            hr.save(target)  # another process's memory lands in the empty folder first
        backup(self, folder, **kwargs)

    monkeypatch.setattr(MemoryStore, "backup_to", raced_backup)
    with pytest.raises(MemoryFormatError, match="overwrite=True"):
        support.save(target)
    kept = MemAlignJudge.load(target, model=model, embeddings=embeddings)
    assert (kept.config.name, kept.feedback_ids) == ("hr", ["x"])
    kept.close()
    support.save(target, overwrite=True)  # with the flag it is replaced
    for judge in (support, hr):
        judge.close()
