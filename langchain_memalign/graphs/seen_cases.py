"""Grading a seen case as if the judge had not seen it.

Validation and calibration both ask what the judge does on a case like a seen one that
it has not seen. The case's own past case would hand the model the expert's verdict (a
small model copies it), so it is left out of the retrieval, and expert-verdict reuse is
never applied: what is measured is the model with the rest of the memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig

from langchain_memalign.feedback import Feedback
from langchain_memalign.memory.episodic import Episode
from langchain_memalign.memory.judge_memory import JudgeMemory
from langchain_memalign.memory.semantic import Guideline

if TYPE_CHECKING:
    from langchain_memalign.graphs.judge import JudgeNodes, Verdict


def grade_unseen(
    memory: JudgeMemory,
    judge_nodes: JudgeNodes,
    fb: Feedback,
    guidelines: list[Guideline],
    query_vector: Any,
    config: RunnableConfig,
) -> tuple[Verdict, list[Episode]]:
    """The model's grade of a seen case with its own episode left out, and the episodes shown.

    `query_vector` is the case's stored vector (None retrieves nothing).
    """
    case = {"inputs": fb.inputs, "outputs": fb.outputs, "reference_outputs": fb.reference_outputs}
    k = memory.config.k
    near = (
        memory.retrieve(query_vector, k=k + 1, case=(fb.inputs, fb.outputs))
        if query_vector is not None and k
        else []
    )
    episodes = [e for e in near if e.feedback_id != fb.id][:k]
    return judge_nodes.grade(case, guidelines, episodes, config), episodes
