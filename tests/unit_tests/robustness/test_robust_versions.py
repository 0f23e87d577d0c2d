"""Readers see one committed version of the memory while writes run."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import HOURS, RUDE, SWEATER, fb

from langchain_memalign import MemAlignJudge

K = 3


@pytest.fixture
def fast_switching() -> Iterator[None]:
    # Switch threads often so that readers land inside the writers' windows.
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def _item(n: int) -> Any:
    return fb(
        f"case-{n}",
        f"customer question number {n} about refunds and shipping",
        f"answer {n}",
        bool(n % 2),
        # Distinct words: each rationale becomes a guideline of its own.
        " ".join(f"w{n}x{i}" for i in range(6)),
    )


def _wait_for_reads(reads: list[int], at_least: int) -> None:
    """Let the readers in before the next write: on a loaded machine a busy writer could
    otherwise starve them, and the reads these tests count would not happen."""
    deadline = time.monotonic() + 10
    while reads[0] < at_least and time.monotonic() < deadline:
        time.sleep(0.001)


def _judge(make_judge: Any) -> MemAlignJudge:
    # A large budget: no consolidation, so every guideline keeps its own source.
    judge: MemAlignJudge = make_judge(
        k=K, options={"reflection": {"guideline_token_budget": 100_000}}
    )
    judge.align([_item(n) for n in range(8)])
    return judge


def test_an_old_view_keeps_its_version_after_writes(make_judge: Any) -> None:
    judge = make_judge(k=K)
    judge.align([SWEATER, HOURS, RUDE])
    mem = judge.memory
    view = mem.snapshot()
    q = mem.embed([mem.case_text(SWEATER.inputs, SWEATER.outputs)])[0]
    before = mem.retrieve(q, view=view)
    guidelines = mem.select_guidelines(q, view=view)
    assert mem.snapshot(view.seq) is view
    judge.unalign(["sweater"])
    assert mem.snapshot(view.seq) is view  # the previous version is kept by number
    judge.align([SWEATER.model_copy(update={"id": "hours", "value": False})])  # replaced
    assert mem.retrieve(q, view=view) == before  # same episodes, same payloads
    assert mem.select_guidelines(q, view=view) == guidelines
    assert {e.feedback_id for e in before} == {"sweater", "hours", "rude"}
    assert mem.snapshot(view.seq) is mem.snapshot()  # too old: the newest
    now = mem.retrieve(q)
    assert "sweater" not in {e.feedback_id for e in now}
    assert [e.value for e in now if e.feedback_id == "hours"] == [False]


def test_readers_during_aligns_never_see_episodes_without_their_guidelines(
    make_judge: Any, fast_switching: None
) -> None:
    judge = _judge(make_judge)
    mem = judge.memory
    stop = threading.Event()
    torn: list[str] = []
    reads = [0]
    q = mem.embed(["customer question about refunds and shipping"])[0]

    def reader() -> None:
        while not stop.is_set():
            view = mem.snapshot()
            episodes = mem.retrieve(q, k=50, view=view)
            sources = {s for g in view.guidelines for s in g.source_ids}
            torn.extend(e.feedback_id for e in episodes if e.feedback_id not in sources)
            if len(episodes) != min(50, len(view.index)):
                torn.append(f"{len(episodes)} of {len(view.index)} episodes")
            reads[0] += 1

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    writes = 0
    try:
        for n in range(8, 8 + 24):
            _wait_for_reads(reads, 2 * (writes + 1))
            judge.align([_item(n)])
            if n % 3 == 0:
                judge.unalign([f"case-{n - 5}"])
            writes += 1
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert writes == 24 and reads[0] > 20
    assert torn == []


def test_retrieve_gives_k_episodes_while_unaligns_run(
    make_judge: Any, fast_switching: None
) -> None:
    """Without passing a view: each call still reads one version."""
    judge = _judge(make_judge)
    judge.align([_item(n) for n in range(8, 40)])
    mem = judge.memory
    stop = threading.Event()
    short: list[int] = []
    reads = [0]
    q = mem.embed(["customer question about refunds and shipping"])[0]

    def reader() -> None:
        while not stop.is_set():
            got = mem.retrieve(q)
            if len(got) < K:
                short.append(len(got))
            reads[0] += 1

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    started = time.monotonic()
    try:
        for n in range(0, 36, 2):
            _wait_for_reads(reads, n + 2)
            judge.unalign([f"case-{n}", f"case-{n + 1}"])
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert time.monotonic() - started < 120  # no deadlock (room for a loaded machine)
    assert reads[0] > 20
    assert short == []


@pytest.mark.parametrize("hnsw", [False, True])
def test_frozen_index_view_is_unaffected_by_later_changes(hnsw: bool) -> None:
    import numpy as np

    from langchain_memalign.memory.episodic import EpisodicIndex

    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(60, 16)).astype(np.float32)
    index = EpisodicIndex.build(
        list(range(1, 41)), vectors[:40], hnsw_threshold=10 if hnsw else 1000
    )
    assert index.kind == ("hnsw" if hnsw else "flat")
    view = index.frozen()
    queries = vectors[:5]
    before = [view.search(q, 5) for q in queries]
    index.remove(list(range(1, 20)))
    index.add(list(range(41, 61)), vectors[40:])
    assert len(view) == 40 and len(index) == 41
    assert [view.search(q, 5) for q in queries] == before
    assert set(view.ids().tolist()) == set(range(1, 41))
    with pytest.raises(RuntimeError, match="frozen"):
        view.add([99], vectors[:1])
    with pytest.raises(RuntimeError, match="frozen"):
        view.remove([1])


def test_before_images_are_dropped_once_no_reader_holds_an_old_version(
    make_judge: Any,
) -> None:
    import gc

    judge = make_judge(k=K)
    judge.align([SWEATER, HOURS, RUDE])
    mem = judge.memory
    view = mem.snapshot()
    judge.unalign(["sweater"])

    def kept() -> str:
        return " ".join(p for _, before in mem.store._versions for p in before.values())

    assert "disappointment" in kept()  # the old view may still need it
    assert [e.feedback_id for e in mem.retrieve(mem.embed(["sweater"])[0], k=5, view=view)]
    del view
    gc.collect()
    judge.align([fb("x", "another question", "a", True)])
    judge.align([fb("y", "yet another question", "a", True)])
    assert "disappointment" not in kept()  # no reader left: the removed text is gone
