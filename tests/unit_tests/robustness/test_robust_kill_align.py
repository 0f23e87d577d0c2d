"""SIGKILL during aligns and unaligns of a folder-backed memory: each call is whole or absent.

Every `align` and `unalign` is one SQLite transaction, so a process
killed in the middle of one leaves a hot journal that SQLite rolls back on the next open:
the folder holds each call completely or not at all. CI kills 4 times;
`MEMALIGN_KILLS=40` runs the figure quoted in docs/persistence.md.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np
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
    scale=bool, k=3, path={folder!r},
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


def test_sigkill_during_folder_aligns_leaves_whole_calls_only(tmp_path: Path, model: Any) -> None:
    folder = tmp_path / "mem"
    tests = str(Path(__file__).resolve().parents[2])
    code = _WORKER.format(tests=tests, folder=str(folder))
    rng = np.random.default_rng(1313)
    opened = 0
    for _ in range(KILLS):
        run_and_kill(code, rng)
        if not (folder / DB_FILE).exists():
            continue
        judge = MemAlignJudge.load(folder, model=model, embeddings=HashEmbeddings())
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
        judge.close()
    assert opened >= 1
