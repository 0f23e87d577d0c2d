"""A judge in another process that reads a memory while this one writes it (spawned).

Used by tests/unit_tests/memory/test_readers.py on a folder and on PostgreSQL:
the worker opens the memory, judges a case, waits while the test process
changes the memory, judges the case again, and reports what each judgment
read (the judge prompt and the ids in the result's metadata).
"""

from __future__ import annotations

from typing import Any

from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel

from langchain_memalign import MemAlignJudge


def what_was_read(model: ScriptedChatModel, result: dict[str, Any]) -> dict[str, Any]:
    """The judge prompt a judgment sent and the episodes and guidelines it reports."""
    prompt = "\n".join(str(m.content) for m in model.calls[-1])
    return {
        "prompt": prompt,
        "episode_ids": list(result["metadata"]["episode_ids"]),
        "guideline_ids": list(result["metadata"]["guideline_ids"]),
    }


def judge_before_and_after(
    location: str, case: dict[str, Any], ready: Any, go: Any, out: Any
) -> None:
    """Open the memory and judge `case`; after `go`, judge it again; report both reads."""
    model = ScriptedChatModel(responder=RoleResponder())
    judge = MemAlignJudge.load(location, model=model, embeddings=HashEmbeddings())
    try:
        before = what_was_read(model, judge.invoke(case))
        ready.set()
        go.wait(120)
        after = what_was_read(model, judge.invoke(case))
        out.put({"before": before, "after": after})
    finally:
        judge.close()
