r"""The align and unalign graphs, and `AlignNodes`: the whole of `align` and `unalign`.

```
START -> classify -(changed items?)-> forget -> batch -(Send per batch)-> reflect -> merge
                 \\-(none changed)-------------/     \\-(nothing to reflect)--------/
merge -> validate -> calibrate -(over budget?)-> consolidate -> checks -> END
                              \\-------------------------------/

START -> forget -> checks -> END            (the unalign graph)
```
Each step lives in the module named for it, as a part of `AlignNodes`: `classify`
(added, changed and unchanged feedback; a retag is stored at once), `forget` (what
changed feedback taught is re-derived; in the unalign graph, the feedback is removed),
`reflect` (`batch` groups what to reflect on, `reflect` distills guidelines from
each group, in parallel), `merge` (episodes and checked guidelines stored in one
transaction) and `consolidate` (overlapping guidelines merged when they outgrow
their budget). `validate` grades seen cases with and without each new guideline
and narrows or drops one that breaks more expert verdicts than it fixes
(`graphs.validate`). `calibrate`, on integer scales, grades the stored cases as
unseen and keeps the judge's score beside the expert's (`graphs.calibrate`). `checks`
writes each guideline as yes/no questions and tests them on the experts' cases
(`graphs.learn_checks`), after any align or unalign that changed the memory.

Every step that changes the memory writes through `JudgeMemory.write`. The graphs
run inside one `JudgeMemory.atomic` unit (`langchain_memalign.alignment`), which
makes an align or unalign one transaction, on a folder or a database.
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from langchain_memalign.graphs._weak import weak_node
from langchain_memalign.graphs.align_state import AlignState, ReflectInput, UnalignState
from langchain_memalign.graphs.calibrate import ScoreCalibrator
from langchain_memalign.graphs.classify import ClassifyStep, route_changed
from langchain_memalign.graphs.consolidate import ConsolidateStep
from langchain_memalign.graphs.forget import ForgetStep
from langchain_memalign.graphs.learn_checks import CheckLearner
from langchain_memalign.graphs.merge import MergeStep
from langchain_memalign.graphs.reflect import ReflectStep
from langchain_memalign.graphs.validate import GuidelineValidator
from langchain_memalign.memory.judge_memory import JudgeMemory
from langchain_memalign.prompting.schemas import Consolidation, Rederived, with_direction
from langchain_memalign.prompting.structured import StructuredCaller
from langchain_memalign.reports import Usage


class AlignNodes(ClassifyStep, ForgetStep, ReflectStep, MergeStep, ConsolidateStep):
    """The nodes of the align and unalign graphs, bound to one judge's memory and model."""

    def __init__(
        self,
        memory: JudgeMemory,
        model: BaseChatModel,
        validator: GuidelineValidator | None = None,
        calibrator: ScoreCalibrator | None = None,
        check_learner: CheckLearner | None = None,
    ) -> None:
        self.memory = memory
        self.check_learner = check_learner
        retries = memory.config.options.max_retries
        self.reflection_model = model
        self.validator = validator
        self.calibrator = calibrator
        # A re-derivation declares which way it moves verdicts, checked like a proposal's.
        self.rederiver = StructuredCaller(
            model, with_direction(Rederived, memory.config.scale),
            what="guideline re-derivation", retries=retries,
        )  # fmt: skip
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

    # -- checks ---------------------------------------------------------------------------

    def checks(self, state: AlignState, config: RunnableConfig) -> dict[str, Any]:
        """Write, test and keep the guidelines' checks, when this align changed the memory."""
        learner = self.check_learner
        changed = [*(state.get("added") or []), *(state.get("updated") or [])]
        if learner is None or not learner.enabled or not (changed or state.get("reflections")):
            return {}
        reports, usage, errors = learner.run(changed, config)
        return {"check_reports": reports, "usages": [usage], "errors": errors}

    def checks_after_unalign(self, state: UnalignState, config: RunnableConfig) -> dict[str, Any]:
        """Test the checks again without the removed feedback (their answers are kept)."""
        learner = self.check_learner
        if learner is None or not learner.enabled or not state.get("removed"):
            return {}
        reports, usage, errors = learner.run([], config)
        return {
            "check_reports": reports,
            "usage": (state.get("usage") or Usage()) + usage,
            "errors": [*(state.get("errors") or []), *errors],
        }


def build_align_graph(
    nodes: AlignNodes, *, name: str | None = None
) -> CompiledStateGraph[AlignState, None, AlignState, AlignState]:
    """Compile the align graph on `nodes`, which the caller keeps (`graphs._weak`).

    Its input is `{"feedback": [...]}`, validated (`MemAlignJudge.align`). With a
    validator in `nodes`, new guidelines are checked against seen cases after `merge`;
    with a calibrator, the stored cases are then graded for score calibration.
    """
    w = weak_node
    graph = StateGraph(AlignState)
    graph.add_node("classify", w(nodes.classify))
    graph.add_node("forget", w(nodes.forget_replaced))
    graph.add_node("batch", w(nodes.batch))
    graph.add_node("reflect", w(nodes.reflect), input_schema=ReflectInput)
    graph.add_node("merge", w(nodes.merge))
    graph.add_node("validate", w(nodes.validate))
    graph.add_node("calibrate", w(nodes.calibrate))
    graph.add_node("consolidate", w(nodes.consolidate))
    graph.add_node("checks", w(nodes.checks))
    graph.add_edge(START, "classify")
    graph.add_conditional_edges("classify", route_changed, ["forget", "batch"])
    graph.add_edge("forget", "batch")
    graph.add_conditional_edges("batch", w(nodes.route_batches), ["reflect", "merge"])
    graph.add_edge("reflect", "merge")
    graph.add_edge("merge", "validate")
    graph.add_edge("validate", "calibrate")
    graph.add_conditional_edges(
        "calibrate", w(nodes.route_consolidation), ["consolidate", "checks"]
    )
    graph.add_edge("consolidate", "checks")
    graph.add_edge("checks", END)
    return graph.compile(name=name or f"{nodes.memory.config.name}_align")


def build_unalign_graph(
    nodes: AlignNodes, *, name: str | None = None
) -> CompiledStateGraph[UnalignState, None, UnalignState, UnalignState]:
    """Compile the unalign graph on `nodes`, which the caller keeps (`graphs._weak`).

    Its input is `{"ids": [...]}`: distinct feedback ids, all stored or none removed.
    """
    graph = StateGraph(UnalignState)
    graph.add_node("forget", weak_node(nodes.unalign))
    graph.add_node("checks", weak_node(nodes.checks_after_unalign))
    graph.add_edge(START, "forget")
    graph.add_edge("forget", "checks")
    graph.add_edge("checks", END)
    return graph.compile(name=name or f"{nodes.memory.config.name}_unalign")
