"""Many threads judging a freshly loaded judge; aligning while judging."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from conftest import fb
from fakes import HashEmbeddings

from langchain_memalign import MemAlignJudge

ITEMS = [
    fb(
        f"f{i}",
        f"question about topic{i} alpha{i} beta{i}",
        f"answer {i}",
        i % 2 == 0,
        # "rNx", not the case's own number "N", which would make it a case summary.
        f"reason r{i}x",
    )
    for i in range(40)
]


def test_threads_judging_a_freshly_loaded_judge_see_full_memory(
    make_judge: Any, model: Any, tmp_path: Path
) -> None:
    judge = make_judge(k=3)
    judge.align(ITEMS)
    judge.save(tmp_path)
    loaded = MemAlignJudge.load(tmp_path, model=model, embeddings=HashEmbeddings())
    barrier = threading.Barrier(16)

    def one(i: int) -> dict[str, Any]:
        barrier.wait()  # all threads hit the new judge at once
        return loaded.invoke({"inputs": ITEMS[i].inputs, "outputs": "x"})

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, range(16)))
    for i, r in enumerate(results):
        assert len(r["metadata"]["episode_ids"]) == 3
        assert r["metadata"]["episode_ids"][0] == f"f{i}"
        assert len(r["metadata"]["guideline_ids"]) == len(judge.guidelines)


def test_aligning_while_judging_never_corrupts_state(make_judge: Any) -> None:
    judge = make_judge(k=2)
    judge.align(ITEMS[:5])
    stop = threading.Event()
    errors: list[BaseException] = []

    def judge_loop() -> None:
        while not stop.is_set():
            try:
                r = judge.invoke({"inputs": "question about topic 3", "outputs": "x"})
                assert r["metadata"]["episode_ids"], r
            except BaseException as e:
                errors.append(e)
                return

    threads = [threading.Thread(target=judge_loop) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        for i in range(5, 40, 5):
            judge.align(ITEMS[i : i + 5])
            judge.unalign([ITEMS[i].id])
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    assert judge.stats()["episodes"] == len(judge.memory.index) == 40 - 7
    ids = set(judge.feedback_ids)
    assert all(set(g.source_ids) <= ids for g in judge.guidelines)


def test_concurrent_aligns_serialize(make_judge: Any) -> None:
    judge = make_judge()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: judge.align(ITEMS[i * 10 : i * 10 + 10]), range(4)))
    assert judge.stats()["feedback"] == 40 == len(judge.memory.index)
    assert len(judge.guidelines) == 40
