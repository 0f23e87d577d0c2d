"""Building and running a judge leaves the process's FAISS thread count as it was."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import faiss
from conftest import HOURS, RUDE, SWEATER

from langchain_memalign.memory import episodic
from langchain_memalign.memory.episodic import EpisodicIndex

TESTS = Path(__file__).resolve().parents[2]


def _use_a_judge(make_judge: Any) -> None:
    judge = make_judge(k=2)
    judge.align([SWEATER, HOURS, RUDE])
    judge.invoke({"inputs": "I'm frustrated!", "outputs": "Refunds take 5-7 days."})
    judge.batch([{"inputs": "hours?", "outputs": "9 to 5"}, {"inputs": "help", "outputs": "no"}])


def test_a_judge_restores_the_callers_thread_count(make_judge: Any) -> None:
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(3)  # neither our search setting (1) nor the core count
    try:
        _use_a_judge(make_judge)
        assert faiss.omp_get_max_threads() == 3
        with ThreadPoolExecutor(1) as pool:  # the setting is per thread: check a worker too

            def in_worker() -> int:
                faiss.omp_set_num_threads(3)
                _use_a_judge(make_judge)
                return faiss.omp_get_max_threads()

            assert pool.submit(in_worker).result() == 3
    finally:
        faiss.omp_set_num_threads(before)


def test_our_own_calls_use_their_own_setting(monkeypatch: Any) -> None:
    seen: list[int] = []
    index = EpisodicIndex.build([1, 2, 3], [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    inner = index._index

    class Spy:
        def __getattr__(self, name: str) -> Any:
            return getattr(inner, name)

        def search(self, *args: Any, **kwargs: Any) -> Any:
            seen.append(faiss.omp_get_max_threads())
            return inner.search(*args, **kwargs)

    index._index = Spy()
    faiss.omp_set_num_threads(3)
    try:
        assert [i for i, _ in index.search([1.0, 0.0], 1)] == [1]
        assert seen == [episodic._search_threads] == [1]
        assert faiss.omp_get_max_threads() == 3
    finally:
        faiss.omp_set_num_threads(1)


def test_a_fresh_process_keeps_its_thread_count() -> None:
    # What a user sees: the count in a process that imports and runs a judge.
    code = textwrap.dedent(
        """
        import faiss, langchain_memalign as m
        from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel
        n = faiss.omp_get_max_threads()
        model = ScriptedChatModel(responder=RoleResponder())
        judge = m.MemAlignJudge("h", "{inputs} {outputs}", model, HashEmbeddings())
        judge.align([m.Feedback(id="a", inputs="q", outputs="a", value=True, rationale="ok")])
        judge.invoke({"inputs": "q", "outputs": "a"})
        assert faiss.omp_get_max_threads() == n, (faiss.omp_get_max_threads(), n)
        """
    )
    env = {"PYTHONPATH": str(TESTS), "PATH": ""}  # no OMP_NUM_THREADS: FAISS uses every core
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
