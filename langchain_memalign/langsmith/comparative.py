"""A pairwise judge as a comparative evaluator: `langsmith.evaluate((exp_a, exp_b), ...)`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from langsmith import schemas as ls_schemas
from langsmith.evaluation.evaluator import ComparisonEvaluationResult

from langchain_memalign.result import label_of

if TYPE_CHECKING:
    from langchain_memalign.judge import MemAlignJudge

__all__ = ["PairPreparer", "comparative_evaluator"]

PairPreparer = Callable[[Sequence[ls_schemas.Run], ls_schemas.Example | None], dict[str, Any]]
"""Builds the judge's case `{"inputs", "outputs": [a, b], "reference_outputs"}`."""

# LangSmith's comparative view reads the higher score as the preferred run; a tie
# shares the point.
_SCORES = {"A": (1.0, 0.0), "B": (0.0, 1.0), "tie": (0.5, 0.5)}


def default_pair(
    runs: Sequence[ls_schemas.Run], example: ls_schemas.Example | None
) -> dict[str, Any]:
    """The case of two runs as a pairwise judge sees it: the first run's output is A."""
    first, second = runs
    return {
        "inputs": example.inputs if example else first.inputs,
        "outputs": [first.outputs, second.outputs],
        "reference_outputs": example.outputs if example else None,
    }


def comparative_evaluator(
    judge: MemAlignJudge, *, prepare: PairPreparer | None = None
) -> Callable[[Sequence[ls_schemas.Run], ls_schemas.Example | None], ComparisonEvaluationResult]:
    """A pairwise judge as an evaluator of LangSmith's comparative experiments.

    ```python
    langsmith.evaluate(("experiment-a", "experiment-b"), evaluators=[comparative_evaluator(judge)])
    ```

    For each example the judge compares the two experiments' runs (the first run is
    output A) and scores the preferred run 1 and the other 0; a tie gives each 0.5.
    The judge's name is the feedback key and its rationale the comment. Pass
    `randomize_order=True` to `evaluate` to vary which run is shown first.

    Args:
        judge: A judge on the `"pairwise"` scale.
        prepare: Builds the judge's case from the two runs and their example; by
            default the example's inputs, the two runs' outputs and the example's
            outputs as reference.

    Raises:
        ValueError: The judge's scale is not pairwise; at evaluation time, the
            comparison holds other than two runs.
    """
    if judge.scale.kind != "pairwise":
        raise ValueError(
            f"comparative_evaluator needs a pairwise judge; {judge.config.name!r} grades "
            f"on a {judge.scale.kind} scale"
        )
    build = prepare or default_pair
    key = judge.config.name

    # LangSmith passes `runs` and `example` to a function with exactly these parameters.
    def compare(
        runs: Sequence[ls_schemas.Run], example: ls_schemas.Example | None
    ) -> ComparisonEvaluationResult:
        if len(runs) != 2:
            raise ValueError(f"a pairwise judge compares two runs; got {len(runs)}")
        result = judge.invoke(build(runs, example), {"run_name": key})
        a, b = _SCORES[label_of(result)]
        return ComparisonEvaluationResult(
            key=key,
            scores={runs[0].id: a, runs[1].id: b},
            comment=result.get("comment"),
        )

    compare.__name__ = key  # LangSmith names the evaluator's trace after the function
    return compare
