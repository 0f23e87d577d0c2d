"""What the alignment graph's model calls return: the structured-output schemas.

Bounds are offered to the model's structured output (grammar-enforced on local servers),
so a small model cannot ramble past them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, Field, create_model

from langchain_memalign.limits import MAX_GUIDELINE_CHARS
from langchain_memalign.memory.semantic import GUIDELINE_MAX_CHARS

# The text of a guideline a model writes. The model is offered GUIDELINE_MAX_CHARS; a
# reply past the hard limit is unusable output (retried), never a stored guideline.
GuidelineText = Annotated[
    str, Field(max_length=MAX_GUIDELINE_CHARS, json_schema_extra={"maxLength": GUIDELINE_MAX_CHARS})
]


class ProposedGuideline(BaseModel):
    """A guideline distilled from feedback."""

    text: GuidelineText = Field(description="One short, general, imperative grading rule.")
    source_ids: list[str] = Field(description="Ids of the feedback it comes from.")
    existing_id: str = Field(default="", description="Id of the existing guideline it repeats.")


class Reflection(BaseModel):
    """Guidelines distilled from a batch of feedback."""

    guidelines: list[ProposedGuideline] = Field(json_schema_extra={"maxItems": 8})


def reflection_schema(batch_ids: Sequence[str]) -> type[Reflection]:
    """`Reflection` whose `source_ids` can only name feedback of this batch.

    Grammar-constrained servers then cannot invent ids; others are told the
    allowed values by the schema.
    """
    allowed: Any = cast(Any, Literal)[tuple(batch_ids)]
    item: Any = create_model(
        "ProposedGuideline",
        __base__=ProposedGuideline,
        source_ids=(list[allowed], Field(description="Ids of the feedback it comes from.")),
    )
    return create_model(
        "Reflection",
        __base__=Reflection,
        guidelines=(list[item], Field(json_schema_extra={"maxItems": 8})),
    )


class Rule(BaseModel):
    """The one rule behind a contrast pair; empty if the reasons state none."""

    rule: GuidelineText = Field(description="One general grading rule, or an empty string.")


class Rederived(BaseModel):
    """A guideline restated from its remaining sources; empty if none support it."""

    text: GuidelineText


class MergedGuideline(BaseModel):
    """A consolidated guideline and the ids of the guidelines it replaces."""

    text: GuidelineText
    merged_from: list[str]


class Consolidation(BaseModel):
    """The consolidated set of guidelines."""

    guidelines: list[MergedGuideline]
