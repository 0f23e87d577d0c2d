"""Ablation-only variants of the judge: the benchmarks' private hook, not options.

Each field is the alternative to a design choice the benchmarks measured against the
default (docs/decisions.md); none beat it beyond the noise, so none is an option. They
stay so that the published ablations can be regenerated: `benchmarks/harness/options.py`
passes them under `options={"_ablation": {...}}` (`KEY`), which `JudgeOptions` takes and
keeps off its schema, its dump and the memory's stored configuration. A memory that an
earlier version stored with one of them as an option still opens: `upgrade_stored_config`
moves the value here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from langchain_memalign.config import JudgeConfig

# The key of `JudgeOptions`' input (and of a migrated stored configuration's options).
KEY = "_ablation"


class Ablation(BaseModel):
    """The variants; the defaults are the judge's behaviour."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # docs/decisions.md#the-working-memory-layout-turns-checklist-plain: 'checklist', a
    # memory block before the case and the guidelines named before scoring; 'plain',
    # the same block and a short rationale.
    layout: Literal["turns", "checklist", "plain"] = "turns"
    # docs/decisions.md#pairwise-each-output-rated-alone: 'both_orders', judged as given
    # and swapped (disagreement is a tie); 'one_order', one call as given.
    pairwise_mode: Literal["separate", "both_orders", "one_order"] = "separate"
    # docs/decisions.md#validation-keeps-a-tie: keep a checked guideline only if it
    # fixes more seen verdicts than it breaks.
    require_fix: bool = False
    # docs/decisions.md#other-answers-to-the-same-question: False leaves out past cases
    # with this case's inputs and another output.
    show_other_answers: bool = True


DEFAULT = Ablation()

# Where each variant was an option (`prompt.layout`): the benchmarks' command lines name
# them so, and memories stored them there.
PLACES: dict[str, str] = {
    "prompt.layout": "layout",
    "prompt.pairwise_mode": "pairwise_mode",
    "validation.require_fix": "require_fix",
    "retrieval.show_other_answers": "show_other_answers",
}


def of(config: JudgeConfig) -> Ablation:
    """The variants a judge's configuration runs with (the defaults, unless ablated)."""
    return config.options._ablation
