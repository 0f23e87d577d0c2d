"""The learning-curve protocol with fake models: shards, seeds, cost counting, JSON and PNG."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import fb
from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel

from langchain_memalign import Feedback, MemAlignJudge
from langchain_memalign.evaluation.learning_curve import (
    LearningCurve,
    StageResult,
    learning_curve,
    split_train_test,
)
from langchain_memalign.evaluation.plots import plot_curves

TOPICS = ["refund", "delivery", "password", "invoice", "size", "colour", "warranty", "login"]


def dataset() -> list[Feedback]:
    """Replies with "sorry" pass, the others fail; every rationale teaches "acknowledge"."""
    items = []
    for i, topic in enumerate(TOPICS * 2):
        polite = i % 2 == 0
        items.append(
            fb(
                f"c{i}",
                f"My {topic} problem is not solved, case {i}.",
                ("Sorry about that! " if polite else "") + f"Here is how to fix your {topic}.",
                polite,
                "Good: it does acknowledge the frustration."
                if polite
                else "Cold: acknowledge the frustration first.",
            )
        )
    return items


@pytest.fixture
def make() -> Any:
    model = ScriptedChatModel(responder=RoleResponder())
    embeddings = HashEmbeddings()

    def make_judge() -> MemAlignJudge:
        return MemAlignJudge(
            name="empathy",
            instructions="Is the reply empathetic?\nUser: {inputs}\nReply: {outputs}",
            model=model,
            embeddings=embeddings,
            k=2,
            # one reflection call per stage: the counts below
            options={
                "validation": {"mode": "off"},
                "reflection": {"source_support": None, "mode": "batch"},
                "checks": {"mode": "off"},  # no check calls in the counts either
            },
        )

    make_judge.model = model  # type: ignore[attr-defined]
    return make_judge


def test_split_is_stratified_seeded_and_disjoint() -> None:
    data = dataset()
    train, test = split_train_test(data, 6, 6, seed=3)
    assert len(train) == 6 and len(test) == 6
    assert not {f.id for f in train} & {f.id for f in test}
    assert Counter(f.value for f in train) == {True: 3, False: 3}
    assert Counter(f.value for f in test) == {True: 3, False: 3}
    again, _ = split_train_test(data, 6, 6, seed=3)
    other, _ = split_train_test(data, 6, 6, seed=4)
    assert [f.id for f in again] == [f.id for f in train]
    assert {f.id for f in other} != {f.id for f in train}
    _, rest = split_train_test(data, 4, seed=0)
    assert len(rest) == len(data) - 4
    with pytest.raises(ValueError, match="only"):
        split_train_test(data, 100)


def test_learning_curve_protocol(make: Any, tmp_path: Path) -> None:
    seen: list[StageResult] = []
    curve = learning_curve(
        make,
        dataset(),
        n_train=6,
        n_test=6,
        shards=(0, 2, 6, 50),  # 50 > n_train is dropped
        seeds=(0, 1),
        on_stage=seen.append,
    )
    assert curve.shards == [0, 2, 6] and curve.seeds == [0, 1]
    assert (curve.n_train, curve.n_test) == (6, 6)
    assert [(s.seed, s.n_feedback) for s in curve.stages] == [
        (0, 0), (0, 2), (0, 6), (1, 0), (1, 2), (1, 6),
    ]  # fmt: skip
    assert seen == curve.stages
    for st in curve.stages:
        assert st.test["n"] == 6
        assert len(st.test_predictions) == 6
        if st.n_feedback == 0:
            assert st.seen is None
            assert st.align_usage.llm_calls == 0 and st.align_seconds == 0.0
            assert st.test["accuracy"] == pytest.approx(0.5)  # passes everything
        else:
            assert st.seen is not None and st.seen["n"] == st.n_feedback
            # one reflection call per new batch (all new items fit one batch)
            assert st.align_usage.llm_calls == 1
            assert st.align_usage.input_tokens > 0 and st.align_usage.output_tokens == 10
            assert st.align_usage.embedding_calls == 1
            assert st.test["accuracy"] == pytest.approx(1.0)  # learned "acknowledge"
            assert st.stats["feedback"] == st.n_feedback
    last = [s for s in curve.stages if s.n_feedback == 6]
    assert all(s.cumulative_align_usage.llm_calls == 2 for s in last)
    assert all(s.cumulative_align_seconds >= s.align_seconds for s in last)
    assert curve.mean("accuracy") == {0: pytest.approx(0.5), 2: 1.0, 6: 1.0}
    assert curve.series("accuracy", "seen") == {2: [1.0, 1.0], 6: [1.0, 1.0]}

    path = curve.save(tmp_path / "out" / "curve.json")
    loaded = LearningCurve.load(path)
    assert loaded == curve

    # The PNG needs matplotlib (the `bench` extra); without it the checks above still ran.
    pytest.importorskip("matplotlib")
    png = curve.plot(tmp_path / "curve.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    two = plot_curves({"a": curve, "b": loaded}, tmp_path / "both.png", metric="kappa")
    assert two.stat().st_size > 1000


def test_learning_curve_counts_judging_separately(make: Any) -> None:
    curve = learning_curve(
        make, dataset(), n_train=4, n_test=4, shards=(0, 4), seeds=(0,), evaluate_seen=False
    )
    zero, four = curve.stages
    assert four.seen is None
    assert zero.test["llm_calls"] == 4 and four.test["llm_calls"] == 4
    # model calls: 4 + 4 judgments, 1 reflection
    assert len(make.model.calls) == 9


def test_learning_curve_custom_split_and_errors(make: Any) -> None:
    data = dataset()
    curve = learning_curve(
        make, data, n_train=2, shards=(0, 2), seeds=(7,), split=lambda seed: (data[:2], data[2:4])
    )
    assert curve.n_test == 2 and curve.stages[-1].test["n"] == 2
    with pytest.raises(ValueError, match="no shard"):
        learning_curve(make, data, n_train=2, shards=(5,))
