"""Faults planted in a judge's constructor, shared by the folder and PostgreSQL tests.

A test module imports these by name (its folder is on `sys.path`); each backend adds the
faults only it has (where its configuration is written, its format check).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from langchain_memalign import MemAlignJudge

Fail = Callable[..., Any]


class OpenInterrupted(Exception):
    """The fault planted in a constructor or a save."""


def plant_open_fault(
    monkeypatch: pytest.MonkeyPatch,
    where: str,
    backend: dict[str, Callable[[pytest.MonkeyPatch, Fail], None]],
) -> dict[str, Any]:
    """A constructor fails at `where`; returns keywords for `make_judge`.

    `backend` plants the faults of one backend by name, given the function that raises.
    """
    import langchain_memalign.judge as judge_module
    import langchain_memalign.memory.judge_memory as jm

    def fail(*_: Any, **__: Any) -> Any:
        raise KeyboardInterrupt if where == "interrupt" else OpenInterrupted(where)

    if where in backend:
        backend[where](monkeypatch, fail)
    elif where == "fingerprint":  # before anything is written
        monkeypatch.setattr(jm, "embeddings_fingerprint", fail)
    elif where in ("reload", "interrupt"):  # the configuration is stored by then
        monkeypatch.setattr(jm.JudgeMemory, "reload", fail)
    elif where == "setup":  # the memory is open: the judge's graphs fail
        monkeypatch.setattr(judge_module, "build_align_graph", fail)
    else:  # an invalid model: raised after the memory was opened, before the fix
        return {"model": 42}
    return {}


def assert_kept_what_another_process_wrote(
    make_judge: Any, model: Any, location: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A constructor fails after another process opened the memory it made and aligned
    in it: the memory stays, with what the other process wrote."""
    from conftest import SWEATER
    from fakes import HashEmbeddings

    from langchain_memalign.memory.judge_memory import JudgeMemory

    reload = JudgeMemory.reload
    failed: list[bool] = []

    def reload_then_fail(memory: JudgeMemory) -> None:
        reload(memory)
        if not failed:
            failed.append(True)
            other = make_judge(path=location)  # opens the memory this call made
            other.align([SWEATER])
            other.close()
            raise OpenInterrupted("after another process wrote")

    monkeypatch.setattr(JudgeMemory, "reload", reload_then_fail)
    with pytest.raises(OpenInterrupted):
        make_judge(path=location)
    monkeypatch.undo()
    loaded = MemAlignJudge.load(location, model=model, embeddings=HashEmbeddings())
    assert loaded.feedback_ids == ["sweater"]
    loaded.close()


def assert_nothing_left_then_created(
    make_judge: Any, model: Any, location: Any, missing: str
) -> None:
    """After a failed constructor: no memory opens at `location` (`MemoryFormatError`
    matching `missing`), and the same constructor without the fault makes one whose
    configuration loads back."""
    from fakes import HashEmbeddings

    from langchain_memalign.errors import MemoryFormatError

    with pytest.raises(MemoryFormatError, match=missing):
        MemAlignJudge.load(location, model=model, embeddings=HashEmbeddings())
    judge = make_judge(path=location, k=4)  # the same constructor, without the fault
    judge.close()
    loaded = MemAlignJudge.load(location, model=model, embeddings=HashEmbeddings())
    assert loaded.config == judge.config
    loaded.close()
