"""SIGKILL during aligns and unaligns: each call is whole or absent, in a folder or a database.

Every `align` and `unalign` is one transaction. In a folder, a process killed in the
middle of one leaves a hot journal that SQLite rolls back on the next open; on
PostgreSQL, the server rolls back the transaction of the session the kill ended. The
memory holds each call completely or not at all, and a replaced item's correction is
never lost (the old version with its guideline, or the new one with its own). CI kills
4 times per backend; `MEMALIGN_KILLS=40` runs the figures quoted in docs/persistence.md
and docs/postgres.md.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakes import HashEmbeddings
from sigkill import run_and_kill

from langchain_memalign import MemAlignJudge
from langchain_memalign.memory.store import DB_FILE

KILLS = int(os.environ.get("MEMALIGN_KILLS", "4"))

_WORKER = r"""
import sys
sys.path.insert(0, {tests!r})
from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel
from langchain_memalign import Feedback, MemAlignJudge

judge = MemAlignJudge(
    name="helpfulness", instructions="Is it helpful? {{inputs}} {{outputs}}",
    model=ScriptedChatModel(responder=RoleResponder()), embeddings=HashEmbeddings(),
    scale=bool, k=3, path={where!r},
    options={{"validation": {{"mode": "off"}},
              "reflection": {{"source_support": None, "guideline_token_budget": 60}}}},
)
print("ready", flush=True)
n = len(judge.feedback_ids)
while True:
    n += 1
    # Four new items, and a changed version of an item of the previous round: its old
    # guideline is forgotten and the new one merged in the same call.
    items = [Feedback(id=f"r{{n}}-{{i}}", inputs=f"case {{n}} {{i}} words", outputs="reply",
                      value=bool(i % 2), rationale=f"Round {{n}} item {{i}} reason")
             for i in range(4)]
    old = [i for i in judge.feedback_ids if i.endswith("-1")]
    if old:
        items.append(Feedback(id=old[-1], inputs="changed case", outputs="reply",
                              value=False, rationale=f"Changed in round {{n}}"))
    judge.align(items)
    judge.unalign([items[0].id])
"""


@pytest.mark.parametrize("backend", ["folder", "postgres"])
def test_sigkill_during_aligns_leaves_whole_calls_only(
    tmp_path: Path, model: Any, backend: str, request: pytest.FixtureRequest
) -> None:
    where: str | Path
    if backend == "folder":
        where = tmp_path / "mem"
    else:
        pytest.importorskip("psycopg", reason="the postgres extra is not installed")
        db = request.getfixturevalue("pg_server").new_database()
        where = f"{db}?judge=killed"
    tests = str(Path(__file__).resolve().parents[2])
    code = _WORKER.format(tests=tests, where=str(where))
    rng = np.random.default_rng(1313)
    opened = replaced = 0
    for _ in range(KILLS):
        run_and_kill(code, rng)
        if isinstance(where, Path) and not (where / DB_FILE).exists():
            continue
        judge = MemAlignJudge.load(where, model=model, embeddings=HashEmbeddings())
        opened += 1
        ids = judge.feedback_ids
        rounds: dict[str, set[str]] = {}
        for i in ids:
            m = re.fullmatch(r"r(\d+)-(\d)", i)
            assert m, i
            rounds.setdefault(m.group(1), set()).add(m.group(2))
        for items in rounds.values():
            # An align stores items 0-3 together; the unalign after it removes item 0.
            assert items in ({"0", "1", "2", "3"}, {"1", "2", "3"}), rounds
        store = judge.memory.store
        assert store.count("episodes") == len(ids) == len(judge.memory.index)
        for g in judge.guidelines:
            assert set(g.source_ids) <= set(ids)
        # No reflection fails in the worker: a pending item is half an align (the old
        # version forgotten and committed, the new one never merged).
        assert judge.memory.pending_ids() == []
        # The expert's correction is never lost: a replacing align forgets what the old
        # version taught ("replace") and merges the new one ("align") in one call, so no
        # item's last change is a "replace" (the old version kept, its guideline deleted).
        last: dict[str, str] = {}
        for entry in judge.history():
            for fid in entry["feedback_ids"]:
                last[fid] = entry["action"]
        assert not [fid for fid in ids if last.get(fid) == "replace"], last
        replaced += sum(
            1 for fb in judge.memory.feedback(ids).values() if fb.inputs == "changed case"
        )
        judge.close()
    assert opened >= 1
    if KILLS >= 10:  # enough kills to land some inside replacing aligns
        assert replaced > 0
