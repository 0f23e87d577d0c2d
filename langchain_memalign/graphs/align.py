r"""The align and unalign graphs and their steps (`AlignNodes`): the whole of `align` and `unalign`.

```
START -> classify -(changed items?)-> forget -> batch -(Send per batch)-> reflect -> merge
                 \\-(none changed)-------------/     \\-(nothing to reflect)--------/
merge -> validate -> calibrate -(over budget?)-> consolidate -> checks -> END
                              \\-------------------------------/

START -> forget -> checks -> END            (the unalign graph)
```
Each step is a small class in the module named for it, built by `AlignNodes` with only
what it uses (the memory, a model or a structured call, a validator...): `classify`
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

A step reads the state groups its signature names and returns the one it writes
(`graphs.align_state`: `Classified`, `Batched`, ...); steps share no attributes.

Every step that changes the memory writes through `JudgeMemory.write`. The graphs
run inside one `JudgeMemory.atomic` unit (`langchain_memalign.alignment`), which
makes an align or unalign one transaction, on a folder or a database.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.language_models import BaseChatModel
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from langchain_memalign.graphs._weak import weak_node
from langchain_memalign.graphs.align_state import AlignState, ReflectInput, UnalignState
from langchain_memalign.graphs.calibrate import Calibrate, ScoreCalibrator
from langchain_memalign.graphs.classify import Classify, route_changed
from langchain_memalign.graphs.consolidate import Consolidate
from langchain_memalign.graphs.forget import Forget
from langchain_memalign.graphs.learn_checks import CheckLearner, LearnChecks
from langchain_memalign.graphs.merge import Merge
from langchain_memalign.graphs.reflect import Batch, Reflect, route_batches
from langchain_memalign.graphs.validate import GuidelineValidator, Validate
from langchain_memalign.memory.judge_memory import JudgeMemory
from langchain_memalign.prompting.schemas import Consolidation, Rederived, with_direction
from langchain_memalign.prompting.structured import StructuredCaller


class AlignNodes:
    """The steps of the align and unalign graphs, each built with what it uses.

    The graphs hold the steps weakly (`graphs._weak`): whoever builds a graph keeps
    these (`MemAlignJudge` does). `validator`, `calibrator` and `check_learner` are
    optional: without one, its step does nothing.
    """

    def __init__(
        self,
        memory: JudgeMemory,
        model: BaseChatModel,
        validator: GuidelineValidator | None = None,
        calibrator: ScoreCalibrator | None = None,
        check_learner: CheckLearner | None = None,
    ) -> None:
        self.memory = memory
        # Kept beside their steps for callers that reach them (a benchmark relearns the
        # checks with the align's own learner, a test checks whose judge nodes grade).
        self.validator = validator
        self.calibrator = calibrator
        self.check_learner = check_learner
        retries = memory.config.options.max_retries
        self.classify = Classify(memory)
        # A re-derivation declares which way it moves verdicts, checked like a proposal's.
        rederiver = StructuredCaller(
            model, with_direction(Rederived, memory.config.scale),
            what="guideline re-derivation", retries=retries,
        )  # fmt: skip
        self.forget = Forget(memory, rederiver)
        self.batch = Batch(memory)
        self.reflect = Reflect(memory, model)
        self.merge = Merge(memory)
        self.validate = Validate(validator)
        self.calibrate = Calibrate(calibrator)
        consolidator = StructuredCaller(
            model, Consolidation, what="guideline consolidation", retries=retries
        )
        self.consolidate = Consolidate(memory, consolidator)
        self.checks = LearnChecks(check_learner)


def build_align_graph(
    nodes: AlignNodes, *, name: str | None = None
) -> CompiledStateGraph[AlignState, None, AlignState, AlignState]:
    """Compile the align graph on `nodes`, which the caller keeps (`graphs._weak`).

    Its input is `{"feedback": [...]}`, validated (`MemAlignJudge.align`). With a
    validator in `nodes`, new guidelines are checked against seen cases after `merge`;
    with a calibrator, the stored cases are then graded for score calibration.
    """
    graph = StateGraph(AlignState)

    def node(name: str, step: Callable[..., Any], **kwargs: Any) -> None:
        graph.add_node(name, weak_node(step, name), **kwargs)

    node("classify", nodes.classify)
    node("forget", nodes.forget.replaced)
    node("batch", nodes.batch)
    node("reflect", nodes.reflect, input_schema=ReflectInput)
    node("merge", nodes.merge)
    node("validate", nodes.validate)
    node("calibrate", nodes.calibrate)
    node("consolidate", nodes.consolidate)
    node("checks", nodes.checks)
    graph.add_edge(START, "classify")
    graph.add_conditional_edges("classify", route_changed, ["forget", "batch"])
    graph.add_edge("forget", "batch")
    graph.add_conditional_edges("batch", route_batches, ["reflect", "merge"])
    graph.add_edge("reflect", "merge")
    graph.add_edge("merge", "validate")
    graph.add_edge("validate", "calibrate")
    # A route's run is named for its function (`route_changed`, `route_batches`) in traces.
    route_consolidation = weak_node(nodes.consolidate.route, "route_consolidation")
    graph.add_conditional_edges("calibrate", route_consolidation, ["consolidate", "checks"])
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
    graph.add_node("forget", weak_node(nodes.forget.unalign, "forget"))
    graph.add_node("checks", weak_node(nodes.checks.after_unalign, "checks"))
    graph.add_edge(START, "forget")
    graph.add_edge("forget", "checks")
    graph.add_edge("checks", END)
    return graph.compile(name=name or f"{nodes.memory.config.name}_unalign")
