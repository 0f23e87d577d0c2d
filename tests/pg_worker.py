"""Functions run in other processes by the PostgreSQL tests (spawned, so importable)."""

from __future__ import annotations

from typing import Any

from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel

from langchain_memalign import Feedback, MemAlignJudge


def open_judge(url: str) -> tuple[MemAlignJudge, HashEmbeddings]:
    emb = HashEmbeddings()
    judge = MemAlignJudge.load(
        url, model=ScriptedChatModel(responder=RoleResponder()), embeddings=emb
    )
    return judge, emb


def judge_after_signal(url: str, case: dict[str, Any], ready: Any, go: Any, out: Any) -> None:
    """Open the judge, report the embedding calls of opening, judge `case` once told to."""
    judge, emb = open_judge(url)
    calls_at_open = emb.calls
    episodes_at_open = len(judge.memory.index)
    ready.set()
    go.wait(60)
    result = judge.invoke(case)
    out.put(
        {
            "calls_at_open": calls_at_open,
            "episodes_at_open": episodes_at_open,
            "episode_ids": result["metadata"]["episode_ids"],
            "guideline_ids": result["metadata"]["guideline_ids"],
            "guidelines": [g.text for g in judge.guidelines],
        }
    )
    judge.close()


def align_after_signal(
    url: str, items: list[dict[str, Any]], ready: Any, go: Any, out: Any
) -> None:
    """Open the judge and align `items` once told to; report what the align did."""
    judge, _ = open_judge(url)
    ready.set()
    go.wait(60)
    report = judge.align([Feedback(**i) for i in items])
    out.put({"added": report.added, "unchanged": report.unchanged, "failed": report.failed})
    judge.close()
