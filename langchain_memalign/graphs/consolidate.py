"""The consolidation step of the align graph: overlapping guidelines merged by the model.

Runs only when the guidelines outgrow their token budget
(`options.reflection.guideline_token_budget`); the merged guideline keeps the union
of its parts' provenance. Rules experts added, edited or pinned are left out.
"""

from __future__ import annotations

from langchain_core.runnables import RunnableConfig

from langchain_memalign import limits
from langchain_memalign._text import normalize
from langchain_memalign.errors import MalformedOutputError
from langchain_memalign.graphs.align_state import Costs
from langchain_memalign.memory.judge_memory import JudgeMemory
from langchain_memalign.memory.rulebook import load_rulebook
from langchain_memalign.memory.semantic import Guideline, new_guideline_id, total_tokens
from langchain_memalign.prompting.budget import shown_guidelines
from langchain_memalign.prompting.handles import guideline_handles
from langchain_memalign.prompting.prompts import consolidate_messages
from langchain_memalign.prompting.schemas import Consolidation
from langchain_memalign.prompting.structured import StructuredCaller
from langchain_memalign.reports import Usage


class Consolidate:
    """The `consolidate` node and the route to it (see the module doc).

    Neither reads the graph's state: the memory's guidelines say whether they outgrew
    their budget, and `consolidator` (the structured call that merges them) rewrites them.
    """

    def __init__(self, memory: JudgeMemory, consolidator: StructuredCaller[Consolidation]) -> None:
        self.memory = memory
        self.consolidator = consolidator

    def route(self, state: object) -> str:
        """Consolidate only when the guidelines outgrow their token budget."""
        budget = self.memory.config.options.reflection.guideline_token_budget
        over = total_tokens(self.memory.guidelines) > budget
        return "consolidate" if over else "checks"

    def __call__(self, state: object, config: RunnableConfig) -> Costs:
        """Merge overlapping guidelines with the model, keeping the union of their provenance."""
        mem = self.memory
        cfg = mem.config
        # Past the prompt budget, this consolidation merges the guidelines that fit;
        # the next one (still over the guideline budget) takes the rest.
        # Rules experts added, edited or pinned are theirs: never merged into another.
        protected = load_rulebook(mem.store).protected()
        mergeable = [g for g in mem.guidelines if g.id not in protected]
        if len(mergeable) < 2:
            return {}
        guidelines = shown_guidelines(mergeable, limits.prompt_budget_chars() // 2)
        max_words = max(30, int(cfg.options.reflection.guideline_token_budget * 0.45))
        try:
            out, usage = self.consolidator.invoke(
                consolidate_messages(cfg.instructions, guidelines, max_words), config
            )
        except MalformedOutputError as e:
            # The memory stays valid (only larger); judgments still fit the budget
            # because they select the most relevant guidelines. A provider error fails
            # the align instead (`graphs._failures`).
            return {
                "usages": [e.usage or Usage(llm_calls=1)],
                "errors": [f"consolidation failed, guidelines kept as they were: {e}"],
            }
        by_id = {g.id: g for g in guidelines}
        # The prompt named the guidelines by handles (`prompting.handles`): mapped back.
        shown = guideline_handles(guidelines)
        replaced: set[str] = set()
        created: list[Guideline] = []
        for item in out.guidelines:
            named = (shown.resolve(h) for h in dict.fromkeys(item.merged_from))
            ids = [i for i in named if i is not None and i in by_id and i not in replaced]
            text = " ".join(item.text.split())
            if not ids or not text:
                continue
            if len(ids) == 1 and normalize(text) == normalize(by_id[ids[0]].text):
                continue
            sources = list(dict.fromkeys(s for i in ids for s in by_id[i].source_ids))
            created.append(Guideline(id=new_guideline_id(), text=text, source_ids=tuple(sources)))
            replaced.update(ids)
        if not created:
            return {"usages": [usage]}
        vectors = mem.embed([g.text for g in created], usage)
        with mem.write() as w:
            position = w.next_position()
            w.delete_guidelines(replaced)
            for i, g in enumerate(created):
                w.put_guideline(g, vectors[i], position + i)
            w.log(
                "consolidate", [s for g in created for s in g.source_ids],
                sorted(replaced) + [g.id for g in created],
            )  # fmt: skip
        return {"usages": [usage]}
