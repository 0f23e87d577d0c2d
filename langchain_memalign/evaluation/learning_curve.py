"""Learning curves: how a judge's agreement with humans grows with the feedback it is given.

The protocol follows the MemAlign paper: split the labelled data into a
training pool (50 cases by default) and a test set; feed the judge the
training feedback in growing shards (0, 2, 5, 10, 20, 50 by default), aligning
only the new items at each stage; after each stage measure agreement on the
feedback seen so far and on the test set, and record what the alignment cost
(seconds, LLM calls and tokens, counted with a LangChain callback handler).
Repeat for several seeds (each reshuffles the split and the order of the
pool). Save the result as JSON and draw it as a PNG (matplotlib, an optional
dependency: `pip install "langchain-memalign[plot]"`).

Example:
    ```python
    from langchain_memalign.evaluation.learning_curve import learning_curve

    data = [Feedback(...), ...]  # labelled cases, with rationales
    curve = learning_curve(
        lambda: MemAlignJudge("quality", instructions, model=llm, embeddings=emb,
                              scale=["Excellent", "Acceptable", "Bad"]),
        data, n_train=50, n_test=50, seeds=(0, 1, 2), ordinal=True,
    )
    curve.save("curve.json"); curve.plot("curve.png")
    ```
"""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from langchain_core.runnables import RunnableConfig
from pydantic import BaseModel, Field

from langchain_memalign.evaluation.agreement import (
    BatchJudge,
    agreement_report,
    evaluate_agreement,
)
from langchain_memalign.evaluation.usage import UsageCallbackHandler, with_callback
from langchain_memalign.feedback import Feedback
from langchain_memalign.reports import Usage
from langchain_memalign.scale import Scale

__all__ = [
    "DEFAULT_SHARDS",
    "AlignableJudge",
    "LearningCurve",
    "StageResult",
    "learning_curve",
    "split_train_test",
]

DEFAULT_SHARDS = (0, 2, 5, 10, 20, 50)


class AlignableJudge(BatchJudge, Protocol):
    """What a learning curve needs of a judge: a scale, `batch` and `align`."""

    @property
    def scale(self) -> Scale:
        """The judge's scale."""
        ...

    def align(
        self,
        feedback: Iterable[Feedback | dict[str, Any]],
        config: RunnableConfig | None = None,
        *,
        raise_on_failure: bool = True,
    ) -> Any:
        """Learn from feedback."""
        ...


class StageResult(BaseModel):
    """One point of a learning curve: a seed after aligning `n_feedback` items."""

    seed: int
    n_feedback: int = Field(description="Training feedback aligned so far.")
    seen: dict[str, Any] | None = Field(
        default=None, description="Agreement summary on the feedback seen so far (None at 0)."
    )
    test: dict[str, Any] = Field(description="Agreement summary on the test set.")
    test_predictions: list[dict[str, Any]] = Field(
        default_factory=list, description="Per test case: id, human, judge, error."
    )
    align_seconds: float = Field(default=0.0, description="Wall time of this stage's alignment.")
    align_usage: Usage = Field(
        default_factory=Usage, description="LLM calls and tokens of this stage's alignment."
    )
    align_failed: list[str] = Field(
        default_factory=list, description="Feedback whose reflection failed at this stage."
    )
    cumulative_align_seconds: float = 0.0
    cumulative_align_usage: Usage = Field(default_factory=Usage)
    stats: dict[str, int] = Field(
        default_factory=dict, description="The judge's memory counts, when it has `stats()`."
    )


class LearningCurve(BaseModel):
    """The results of `learning_curve`: one `StageResult` per seed and shard."""

    name: str = "judge"
    scale: Scale
    n_train: int
    n_test: int
    shards: list[int]
    seeds: list[int]
    stages: list[StageResult] = Field(default_factory=list)
    config: dict[str, Any] = Field(default_factory=dict, description="Anything to keep with it.")

    def series(self, metric: str = "accuracy", split: str = "test") -> dict[int, list[float]]:
        """Metric values by shard size over the seeds (`split`: "test" or "seen")."""
        out: dict[int, list[float]] = defaultdict(list)
        for st in self.stages:
            summary = st.test if split == "test" else st.seen
            value = (summary or {}).get(metric)
            if isinstance(value, int | float) and not math.isnan(value):
                out[st.n_feedback].append(float(value))
        return dict(sorted(out.items()))

    def mean(self, metric: str = "accuracy", split: str = "test") -> dict[int, float]:
        """Mean of a metric by shard size over the seeds."""
        return {n: statistics.fmean(v) for n, v in self.series(metric, split).items() if v}

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the curve as JSON (UTF-8, indented); returns the path."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(self.model_dump_json(indent=2), encoding="utf-8")
        return p

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> LearningCurve:
        """Read a curve written by `save`."""
        return cls.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))

    def plot(self, path: str | os.PathLike[str], metric: str = "accuracy") -> Path:
        """Draw this curve as a PNG (see `plots.plot_curves`; needs the `[plot]` extra)."""
        from langchain_memalign.evaluation.plots import plot_curves

        return plot_curves({self.name: self}, path, metric=metric)


def split_train_test(
    feedback: Sequence[Feedback],
    n_train: int = 50,
    n_test: int | None = None,
    *,
    seed: int = 0,
    stratify: bool = True,
) -> tuple[list[Feedback], list[Feedback]]:
    """Shuffle (with `seed`) and split into a training pool and a test set.

    With `stratify`, labels are dealt round-robin from shuffled label groups,
    so both parts hold the labels in about the data's proportions. `n_test`
    defaults to everything not in the training pool.
    """
    if n_train < 0 or (n_test is not None and n_test < 0):
        raise ValueError("n_train and n_test must be >= 0")
    rng = random.Random(seed)
    items = list(feedback)
    if stratify:
        groups: dict[str, list[Feedback]] = defaultdict(list)
        for fb in items:
            groups[json.dumps(fb.value)].append(fb)
        keys = sorted(groups)
        for k in keys:
            rng.shuffle(groups[k])
        # Interleave in proportion: the j-th of a group of m sits at (j + 0.5) / m.
        ranked = [
            ((j + 0.5) / len(groups[k]), n, fb)
            for n, k in enumerate(keys)
            for j, fb in enumerate(groups[k])
        ]
        items = [fb for _, _, fb in sorted(ranked, key=lambda r: (r[0], r[1]))]
    else:
        rng.shuffle(items)
    if n_train > len(items):
        raise ValueError(f"n_train={n_train} but only {len(items)} cases")
    train = items[:n_train]
    rest = items[n_train:]
    test = rest if n_test is None else rest[:n_test]
    rng.shuffle(train)  # the order in which feedback arrives
    return train, test


def _predictions(report: Any) -> list[dict[str, Any]]:
    return [
        {"id": c.id, "human": c.human, "judge": c.judge, "error": c.error} for c in report.cases
    ]


def learning_curve(
    make_judge: Callable[[], AlignableJudge],
    feedback: Sequence[Feedback],
    *,
    n_train: int = 50,
    n_test: int | None = None,
    shards: Sequence[int] = DEFAULT_SHARDS,
    seeds: Sequence[int] = (0, 1, 2),
    ordinal: bool | None = None,
    evaluate_seen: bool = True,
    stratify: bool = True,
    max_concurrency: int | None = None,
    config: RunnableConfig | None = None,
    name: str | None = None,
    on_stage: Callable[[StageResult], None] | None = None,
    split: Callable[[int], tuple[list[Feedback], list[Feedback]]] | None = None,
) -> LearningCurve:
    """Run the learning-curve protocol.

    Args:
        make_judge: Builds a fresh, unaligned judge (called once per seed).
        feedback: The labelled cases (split per seed into pool and test set).
        n_train: Size of the training pool.
        n_test: Size of the test set (default: all the rest).
        shards: Cumulative feedback counts after which to measure; counts above
            `n_train` are dropped, duplicates merged.
        seeds: One run per seed: its own split, pool order and judge.
        ordinal: Whether the scale is ordered (see `agreement_report`).
        evaluate_seen: Also measure agreement on the feedback aligned so far.
            A `MemAlignJudge` answers seen cases with the experts' own verdicts
            unless built with `options={"retrieval": {"reuse_expert_verdicts": False}}`;
            build it so to
            measure what the model learned from them.
        stratify: Keep label proportions in the split.
        max_concurrency: Parallel judgments when evaluating.
        config: Runnable config for aligning and judging (callbacks, tags).
        name: The curve's name (default: the first judge's `name`).
        on_stage: Called with every stage's result as soon as it is measured.
        split: Replaces the default split: `seed -> (train pool, test set)`.
    """
    points = sorted({s for s in shards if 0 <= s <= n_train})
    if not points:
        raise ValueError(f"no shard size within 0..{n_train}: {list(shards)}")
    curve: LearningCurve | None = None
    for seed in seeds:
        if split is not None:
            train, test = split(seed)
        else:
            train, test = split_train_test(feedback, n_train, n_test, seed=seed, stratify=stratify)
        judge = make_judge()
        if curve is None:
            curve = LearningCurve(
                name=name or str(getattr(judge, "name", "judge")),
                scale=judge.scale,
                n_train=len(train),
                n_test=len(test),
                shards=[p for p in points if p <= len(train)],
                seeds=list(seeds),
            )
        done = 0
        total_seconds, total_usage = 0.0, Usage()
        for point in (p for p in points if p <= len(train)):
            new = train[done:point]
            counter = UsageCallbackHandler()
            failed: list[str] = []
            usage = Usage()
            seconds = 0.0  # a stage with nothing new aligns nothing
            if new:
                started = time.perf_counter()
                report = judge.align(new, with_callback(config, counter), raise_on_failure=False)
                seconds = time.perf_counter() - started
                failed = list(getattr(report, "failed", None) or [])
                reported = getattr(report, "usage", None)
                if isinstance(reported, Usage):  # embedding counts come from the report
                    usage.embedding_calls = reported.embedding_calls
                    usage.embedded_texts = reported.embedded_texts
            done = point
            counted = counter.usage()
            usage.llm_calls = counted.llm_calls
            usage.input_tokens = counted.input_tokens
            usage.output_tokens = counted.output_tokens
            total_seconds += seconds
            total_usage = total_usage + usage
            seen_summary = None
            if evaluate_seen and point:
                seen = evaluate_agreement(
                    judge, train[:point], config, ordinal=ordinal, max_concurrency=max_concurrency
                )
                seen_summary = seen.summary()
            test_report = (
                evaluate_agreement(
                    judge, test, config, ordinal=ordinal, max_concurrency=max_concurrency
                )
                if test
                else agreement_report([], [], judge.scale)
            )
            stats_fn = getattr(judge, "stats", None)
            stage = StageResult(
                seed=seed,
                n_feedback=point,
                seen=seen_summary,
                test=test_report.summary(),
                test_predictions=_predictions(test_report),
                align_seconds=round(seconds, 4),
                align_usage=usage,
                align_failed=failed,
                cumulative_align_seconds=round(total_seconds, 4),
                cumulative_align_usage=total_usage,
                stats=dict(stats_fn()) if callable(stats_fn) else {},
            )
            curve.stages.append(stage)
            if on_stage is not None:
                on_stage(stage)
    assert curve is not None, "seeds must not be empty"
    return curve
