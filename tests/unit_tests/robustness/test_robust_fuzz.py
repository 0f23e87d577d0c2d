"""Hypothesis fuzzing of stored feedback and of memory folders.

The properties: no undocumented exception (only the package's errors, or
pydantic's `ValidationError` when a `Feedback` is constructed directly) and no
partial write. Sized to run in a few seconds; the figures in
docs/persistence.md come from `MEMALIGN_FUZZ_EXAMPLES=2000`.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import HOURS, INSTRUCTIONS, RUDE, SWEATER
from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from langchain_memalign import Feedback, InvalidFeedbackError, MemAlignError, MemAlignJudge
from langchain_memalign.memory.store import DB_FILE, INDEX_FILE, MemoryStore

EXAMPLES = int(os.environ.get("MEMALIGN_FUZZ_EXAMPLES", "120"))
FAST = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,  # CI sees the same examples every run
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# Any code point, lone surrogates included: they cannot be stored as UTF-8.
ANY_CHAR = st.characters(exclude_categories=())
TEXT = st.text(alphabet=ANY_CHAR, max_size=30)
LEAF = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | TEXT
)
JSON = st.recursive(
    LEAF,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=16,
)
FEEDBACK = st.fixed_dictionaries(
    {
        "id": st.text(alphabet=ANY_CHAR, max_size=12),
        "inputs": JSON,
        "value": st.booleans() | st.integers() | st.floats() | TEXT,
    },
    optional={
        "outputs": JSON,
        "reference_outputs": JSON,
        "rationale": st.none() | TEXT,
        "annotator": st.none() | TEXT,
        "metadata": st.dictionaries(TEXT, JSON, max_size=3),
    },
)


def _state(store: MemoryStore) -> tuple[Any, ...]:
    return (store.feedback_ids(), store.count("episodes"), store.change_seq(), store.history())


@FAST
@given(items=st.lists(FEEDBACK, min_size=1, max_size=3))
def test_fuzz_storing_feedback_through_the_store(items: list[dict[str, Any]]) -> None:
    store = MemoryStore.create(None)
    with store.transaction() as conn:  # something already stored, to detect partial writes
        store.put_feedback(conn, HOURS, reflected=True)
    built: list[Feedback] = []
    for raw in items:
        try:
            built.append(Feedback.model_validate(raw))
        except ValidationError:
            continue  # refused at construction: nothing reached the store
    before = _state(store)
    try:
        with store.transaction() as conn:
            for i, fb in enumerate(built):
                store.put_feedback(conn, fb, reflected=False)
                store.put_episode(conn, fb.id, f"h{i}", np.ones(4, dtype=np.float32))
    except InvalidFeedbackError:
        assert _state(store) == before  # all or nothing
    else:
        last = {fb.id: fb for fb in built}  # a repeated id replaces the earlier item
        stored = store.get_feedback(last)
        for fb in last.values():
            # What comes back is what went in, as JSON sees it (no NaN became null).
            expected = json.loads(json.dumps(fb.model_dump(mode="json"), allow_nan=False))
            assert stored[fb.id].model_dump(mode="json") == expected
    store.close()


@pytest.fixture(scope="module")
def fuzz_judge() -> MemAlignJudge:
    return MemAlignJudge(
        name="helpfulness",
        instructions=INSTRUCTIONS,
        model=ScriptedChatModel(responder=RoleResponder()),
        embeddings=HashEmbeddings(),
        scale=(0.0, 1.0),
        k=2,
        options={"validation": {"mode": "off"}, "reflection": {"source_support": None}},
    )


@settings(FAST, max_examples=max(20, EXAMPLES // 4))
@given(raw=FEEDBACK)
def test_fuzz_align_raises_only_invalid_feedback_error(
    fuzz_judge: MemAlignJudge, raw: dict[str, Any]
) -> None:
    judge = fuzz_judge
    before = (judge.feedback_ids, judge.stats())
    try:
        judge.align([raw])
    except InvalidFeedbackError:
        assert (judge.feedback_ids, judge.stats()) == before
        return
    assert raw["id"] in judge.feedback_ids
    judge.unalign([raw["id"]])
    assert judge.feedback_ids == before[0]


def _template() -> bytes:
    with tempfile.TemporaryDirectory() as d:
        judge = MemAlignJudge(
            name="helpfulness",
            instructions=INSTRUCTIONS,
            model=ScriptedChatModel(responder=RoleResponder()),
            embeddings=HashEmbeddings(),
            scale=bool,
            k=2,
            options={"validation": {"mode": "off"}, "reflection": {"source_support": None}},
        )
        judge.align([SWEATER, HOURS, RUDE])
        judge.save(d)
        judge.close()
        return (Path(d) / DB_FILE).read_bytes()


TEMPLATE = _template()
META_KEYS = ["schema_version", "config", "embeddings", "change_seq", "memory_id"]


@settings(FAST, max_examples=max(20, EXAMPLES // 3))
@given(
    flips=st.lists(st.tuples(st.integers(0, len(TEMPLATE) - 1), st.integers(1, 255)), max_size=24),
    cut=st.none() | st.integers(0, len(TEMPLATE)),
    meta=st.dictionaries(st.sampled_from(META_KEYS), TEXT, max_size=2),
)
def test_fuzz_opening_folders_raises_only_memalign_errors(
    flips: list[tuple[int, int]], cut: int | None, meta: dict[str, str]
) -> None:
    import sqlite3

    data = bytearray(TEMPLATE)
    for pos, x in flips:
        data[pos] ^= x
    if cut is not None:
        data = data[:cut]
    model = ScriptedChatModel(responder=RoleResponder())
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        (folder / DB_FILE).write_bytes(bytes(data))
        if meta:
            try:
                with sqlite3.connect(folder / DB_FILE) as conn:
                    for key, value in meta.items():
                        value = value.encode("utf-8", "replace").decode("utf-8")
                        conn.execute("UPDATE meta SET value=? WHERE key=?", (value, key))
            except (sqlite3.DatabaseError, ValueError):
                pass  # too damaged to edit: open it as it is
        try:
            judge = MemAlignJudge.load(folder, model=model, embeddings=HashEmbeddings())
            for fid in judge.feedback_ids:
                judge.get_feedback(fid)
            judge.history()
            judge.invoke({"inputs": "My sweater looks odd", "outputs": "Colors vary."})
            judge.save(folder)
            judge.close()
        except MemAlignError:
            pass
        assert not [p for p in folder.iterdir() if p.name not in (DB_FILE, INDEX_FILE)]
