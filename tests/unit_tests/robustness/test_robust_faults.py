"""Hypothesis fault injection: provider failures at any point of align and unalign.

The properties (no undocumented exception and no partial write): every call
either succeeds, or raises one of the package's documented errors; an `AlignFailedError`
leaves the memory exactly as before the call; the memory's invariants hold after every
call. Sized for CI; `MEMALIGN_FUZZ_EXAMPLES` scales it up.
"""

from __future__ import annotations

import atexit
import os
from collections import Counter
from typing import Any

from conftest import INSTRUCTIONS, fb
from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_robust_atomic import dump

from langchain_memalign import AlignFailedError, MemAlignJudge, UnknownFeedbackError
from langchain_memalign.errors import ReflectionError

EXAMPLES = int(os.environ.get("MEMALIGN_FUZZ_EXAMPLES", "120"))
# Outcomes over all examples; MEMALIGN_FUZZ_REPORT=1 prints them (the figures of
# docs/persistence.md).
OUTCOMES: Counter[str] = Counter()
if os.environ.get("MEMALIGN_FUZZ_REPORT"):
    atexit.register(lambda: print("fault-injection outcomes:", dict(OUTCOMES)))

POOL = [
    fb(f"f{i}", f"question {i} about {topic}", f"answer {i}", i % 3 != 0, reason)
    for i, (topic, reason) in enumerate(
        [
            ("refunds", "Must state the refund window."),
            ("shipping", "Must give a delivery date."),
            ("passwords", "Must link the reset page."),
            ("sizes", None),
            ("colours", "Must acknowledge the disappointment first."),
        ]
    )
]


class Faulty:
    """Counts calls and fails the n-th one (0: never)."""

    def __init__(self) -> None:
        self.calls = 0
        self.fail_at = 0

    def tick(self) -> None:
        self.calls += 1
        if self.calls == self.fail_at:
            raise ConnectionError(f"provider down at call {self.calls}")


class FaultyEmbeddings(HashEmbeddings):
    def __init__(self, faults: Faulty) -> None:
        super().__init__()
        self.faults = faults

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.faults.tick()
        return super().embed_documents(texts)


OP = st.one_of(
    st.tuples(
        st.just("align"),
        st.lists(st.integers(0, len(POOL) - 1), min_size=1, max_size=3, unique=True),
        st.integers(0, 2),  # 0: as in the pool, 1: new rationale, 2: new metadata
    ),
    st.tuples(st.just("unalign"), st.lists(st.integers(0, len(POOL) - 1), max_size=2), st.just(0)),
)


def _invariants(judge: MemAlignJudge) -> None:
    store = judge.memory.store
    ids = set(store.feedback_ids())
    assert store.count("episodes") == len(ids) == len(judge.memory.index)
    for g in judge.guidelines:
        assert set(g.source_ids) <= ids, (g, ids)
    assert set(judge.memory.pending_ids()) <= ids


@settings(
    max_examples=max(20, EXAMPLES // 2),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
# An align makes 1-3 embedding and 1-5 chat calls: the n-th call from the start of an
# operation, n <= 3, fails (0: none).
@given(
    ops=st.lists(
        st.tuples(OP, st.integers(0, 3), st.sampled_from(["emb", "chat"])), min_size=1, max_size=6
    )
)
def test_faults_anywhere_leave_a_whole_memory(ops: list[Any]) -> None:
    emb_faults, chat_faults = Faulty(), Faulty()
    responder = RoleResponder()

    def chat(messages: Any) -> Any:
        try:
            chat_faults.tick()
        except ConnectionError as e:
            return e
        return responder(messages)

    judge = MemAlignJudge(
        name="helpfulness", instructions=INSTRUCTIONS,
        model=ScriptedChatModel(responder=chat), embeddings=FaultyEmbeddings(emb_faults),
        scale=bool, k=2,
        options={"reflection": {"source_support": 0.1, "guideline_token_budget": 50},
                 "validation": {"mode": "sources", "max_calls": 4}},
    )  # fmt: skip
    judge.align(POOL[:3])  # something to replace and to unalign from the start
    for (kind, idx, variant), fail_in, where in ops:
        faults = emb_faults if where == "emb" else chat_faults
        faults.fail_at = faults.calls + fail_in if fail_in else 0
        before = dump(judge)
        try:
            OUTCOMES["calls"] += 1
            if kind == "align":
                items = [POOL[i] for i in idx]
                if variant == 1:
                    items = [
                        x.model_copy(update={"rationale": "Changed: be brief."}) for x in items
                    ]
                elif variant == 2:
                    items = [x.model_copy(update={"metadata": {"v": 2}}) for x in items]
                judge.align(items)
            else:
                judge.unalign([POOL[i].id for i in idx])
        except AlignFailedError as e:
            assert isinstance(e.__cause__, ConnectionError)
            assert dump(judge) == before
            OUTCOMES["AlignFailedError, memory unchanged"] += 1
        except (ReflectionError, UnknownFeedbackError) as e:
            OUTCOMES[type(e).__name__] += 1  # documented: stored and pending / nothing removed
        finally:
            emb_faults.fail_at = chat_faults.fail_at = 0
        _invariants(judge)
    judge.close()
