"""What the alignment graph's model calls return: the structured-output schemas.

Bounds are offered to the model's structured output (grammar-enforced on local servers),
so a small model cannot ramble past them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, create_model

from langchain_memalign.limits import MAX_GUIDELINE_CHARS
from langchain_memalign.memory.semantic import GUIDELINE_MAX_CHARS
from langchain_memalign.prompting.directions import describe, directions
from langchain_memalign.scale import Scale

# The text of a guideline a model writes. The model is offered GUIDELINE_MAX_CHARS; a
# reply past the hard limit is unusable output (retried), never a stored guideline.
GuidelineText = Annotated[
    str, Field(max_length=MAX_GUIDELINE_CHARS, json_schema_extra={"maxLength": GUIDELINE_MAX_CHARS})
]


# What a model declares about its guideline (`graphs.direction`): offered as required, so
# a model fills it in, and read as optional, so that a model (or a test's fake) that leaves
# it out is not failed for it; such a guideline is only not direction-checked.
_DECLARED = ("direction", "source_ids")


def _offer_declared(schema: dict[str, Any]) -> None:
    """Offer the declared fields as required, without the `null` their default allows."""
    props = schema.get("properties", {})
    required = schema.setdefault("required", [])
    for name in _DECLARED:
        if name not in props:
            continue
        prop = props[name]
        options = prop.pop("anyOf", None)
        if options:
            prop.update(next(o for o in options if o.get("type") != "null"))
        prop.pop("default", None)
        if name not in required:
            required.append(name)


class Declares(BaseModel):
    """An answer that declares what its rule does (`direction`, `source_ids`), if asked.

    The schema offers those fields as required; a reply without them is read with none.
    """

    model_config = ConfigDict(json_schema_extra=_offer_declared)


class ProposedGuideline(Declares):
    """A guideline distilled from feedback."""

    text: GuidelineText = Field(description="One short, general, imperative grading rule.")
    source_ids: list[str] = Field(description="Ids of the feedback it comes from.")
    existing_id: str = Field(default="", description="Id of the existing guideline it repeats.")


class Reflection(BaseModel):
    """Guidelines distilled from a batch of feedback."""

    guidelines: list[ProposedGuideline] = Field(json_schema_extra={"maxItems": 8})


def _direction_field(scale: Scale | None) -> dict[str, Any]:
    """The `direction` field on `scale` (`graphs.direction`); none where it has none."""
    allowed = directions(scale) if scale is not None else ()
    if scale is None or not allowed:
        return {}
    choice: Any = cast(Any, Literal)[allowed]
    return {"direction": (choice | None, Field(default=None, description=describe(scale)))}


def declared_direction(answer: BaseModel) -> str | None:
    """The direction a guideline's author declared, if its schema asked for one."""
    value = getattr(answer, "direction", None)
    return value if isinstance(value, str) else None


def reflection_schema(batch_ids: Sequence[str], scale: Scale | None = None) -> type[Reflection]:
    """`Reflection` whose `source_ids` can only name feedback of this batch.

    Grammar-constrained servers then cannot invent ids; others are told the
    allowed values by the schema. With `scale`, each guideline also declares which way
    it moves verdicts (`graphs.direction`), one of the directions the scale allows.
    """
    allowed: Any = cast(Any, Literal)[tuple(batch_ids)]
    item: Any = create_model(
        "ProposedGuideline",
        __base__=ProposedGuideline,
        source_ids=(list[allowed], Field(description="Ids of the feedback it comes from.")),
        **_direction_field(scale),
    )
    return create_model(
        "Reflection",
        __base__=Reflection,
        guidelines=(list[item], Field(json_schema_extra={"maxItems": 8})),
    )


class Rule(Declares):
    """The one rule behind a contrast pair; empty if the reasons state none."""

    rule: GuidelineText = Field(description="One general grading rule, or an empty string.")


def rule_schema(case_ids: Sequence[str], scale: Scale) -> type[Rule]:
    """`Rule` for a prompt that shows `case_ids`: its direction, and which cases state it.

    The rule declares which way it moves verdicts (`graphs.direction`) where the scale
    has directions, and, of two cases, the ones whose reason states it (`source_ids`);
    a single case is the rule's source by construction.
    """
    fields: dict[str, Any] = _direction_field(scale)
    if len(case_ids) > 1:
        allowed: Any = cast(Any, Literal)[tuple(case_ids)]
        description = "Ids of the cases whose reason states or follows the rule."
        fields["source_ids"] = (list[allowed], Field(default_factory=list, description=description))
    return create_model("Rule", __base__=Rule, __doc__=Rule.__doc__, **fields)


class Rederived(Declares):
    """A guideline restated from its remaining sources; empty if none support it."""

    text: GuidelineText


M = TypeVar("M", bound="Declares")


def with_direction(schema: type[M], scale: Scale) -> type[M]:
    """`schema` with the `direction` its answer declares on `scale` (`graphs.direction`).

    The schema itself where the scale has no directions (pairwise).
    """
    field = _direction_field(scale)
    if not field:
        return schema
    return create_model(schema.__name__, __base__=schema, __doc__=schema.__doc__, **field)


class MergedGuideline(BaseModel):
    """A consolidated guideline and the ids of the guidelines it replaces."""

    text: GuidelineText
    merged_from: list[str]


class Consolidation(BaseModel):
    """The consolidated set of guidelines."""

    guidelines: list[MergedGuideline]
