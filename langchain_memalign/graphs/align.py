r"""The alignment graph: reflect on feedback in parallel, merge into memory, consolidate.

```
START -(Send per batch)-> reflect -> merge -> validate -> calibrate -(over budget?)-> consolidate
      \\-(nothing to reflect)-------/                              \\---------------------> END
consolidate -> END
```
Each step lives in the module named for it, as a part of `AlignNodes`: `reflect`
(guidelines distilled from each batch, in parallel), `merge` (episodes and checked
guidelines stored in one transaction), `consolidate` (overlapping guidelines merged
when they outgrow their budget) and `forget` (the unalign step: feedback removed and
every guideline that came from it re-derived). `validate` grades seen cases with and
without each new guideline and narrows or drops one that breaks more expert verdicts
than it fixes (`graphs.validate`). `calibrate`, on integer scales, grades the stored
cases as unseen and keeps the judge's score beside the expert's (`graphs.calibrate`).
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from langchain_memalign.graphs._weak import weak_node
from langchain_memalign.graphs.align_state import AlignState, ReflectInput
from langchain_memalign.graphs.calibrate import ScoreCalibrator
from langchain_memalign.graphs.consolidate import ConsolidateStep
from langchain_memalign.graphs.forget import ForgetStep
from langchain_memalign.graphs.merge import MergeStep
from langchain_memalign.graphs.reflect import ReflectStep
from langchain_memalign.graphs.validate import GuidelineValidator
from langchain_memalign.memory.judge_memory import JudgeMemory
from langchain_memalign.prompting.schemas import Consolidation, Rederived
from langchain_memalign.prompting.structured import StructuredCaller


class AlignNodes(ReflectStep, MergeStep, ConsolidateStep, ForgetStep):
    """The nodes of the alignment graph, bound to one judge's memory and reflection model."""

    def __init__(
        self,
        memory: JudgeMemory,
        model: BaseChatModel,
        validator: GuidelineValidator | None = None,
        calibrator: ScoreCalibrator | None = None,
    ) -> None:
        self.memory = memory
        retries = memory.config.options.max_retries
        self.reflection_model = model
        self.validator = validator
        self.calibrator = calibrator
        self.rederiver = StructuredCaller(
            model, Rederived, what="guideline re-derivation", retries=retries
        )
        self.consolidator = StructuredCaller(
            model, Consolidation, what="guideline consolidation", retries=retries
        )

    # -- validate -------------------------------------------------------------------------

    def validate(self, state: AlignState, config: RunnableConfig) -> dict[str, Any]:
        """Grade seen cases with and without each new guideline; narrow or drop bad ones."""
        new = state.get("new_guidelines") or []
        if self.validator is None or not new:
            return {}
        checks, usage, errors = self.validator.run(new, config)
        return {"validation": checks, "usages": [usage], "errors": errors}

    # -- calibrate ------------------------------------------------------------------------

    def calibrate(self, state: AlignState, config: RunnableConfig) -> dict[str, Any]:
        """On integer scales, grade the stored cases as unseen and keep calibration pairs."""
        if self.calibrator is None:
            return {}
        report = self.calibrator.run(state.get("to_store") or [], config)
        if report is None:
            return {}
        return {"calibration": report, "usages": [report.usage], "errors": report.errors}


def build_align_graph(
    nodes: AlignNodes, *, name: str | None = None
) -> CompiledStateGraph[AlignState, None, AlignState, AlignState]:
    """Compile the alignment graph on `nodes`, which the caller keeps (`graphs._weak`).

    With a validator in `nodes`, new guidelines are checked against seen cases after
    `merge`; with a calibrator, the stored cases are then graded for score calibration.
    """
    w = weak_node
    graph = StateGraph(AlignState)
    graph.add_node("reflect", w(nodes.reflect), input_schema=ReflectInput)
    graph.add_node("merge", w(nodes.merge))
    graph.add_node("validate", w(nodes.validate))
    graph.add_node("calibrate", w(nodes.calibrate))
    graph.add_node("consolidate", w(nodes.consolidate))
    graph.add_conditional_edges(START, w(nodes.route_batches), ["reflect", "merge"])
    graph.add_edge("reflect", "merge")
    graph.add_edge("merge", "validate")
    graph.add_edge("validate", "calibrate")
    graph.add_conditional_edges("calibrate", w(nodes.route_consolidation), ["consolidate", END])
    graph.add_edge("consolidate", END)
    return graph.compile(name=name or f"{nodes.memory.config.name}_align")
