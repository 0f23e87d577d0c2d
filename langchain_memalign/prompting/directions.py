"""The directions a model may declare for a guideline, on each scale, and how it is told.

What a direction means, and the check of a guideline's sources against it, are in
`graphs.direction`; this is the vocabulary the prompts and the structured-output
schemas ask for, kept here so that `prompting` needs nothing from `graphs`.
"""

from __future__ import annotations

from langchain_memalign.scale import Scale

BOOL = ("pass", "fail")
NUMERIC = ("higher", "lower")


def directions(scale: Scale) -> tuple[str, ...]:
    """The directions a guideline on `scale` may declare; () where none is asked (pairwise)."""
    if scale.kind == "bool":
        return BOOL
    if scale.kind == "numeric":
        return NUMERIC
    if scale.kind == "categorical":
        return scale.choices
    return ()


def describe(scale: Scale) -> str:
    """What a model is told to declare, for a prompt: "" where none is asked."""
    if scale.kind == "bool":
        return (
            '"fail" if the rule makes the judge fail outputs (a requirement an output can '
            'break), "pass" if it makes the judge pass them (an exception, something allowed)'
        )
    if scale.kind == "numeric":
        return (
            '"lower" if the rule lowers scores (a requirement an output loses points for '
            'breaking), "higher" if it raises them (something that earns points or is allowed)'
        )
    if scale.kind == "categorical":
        return (
            "the score the rule leads the judge to give the outputs it decides (for a "
            "requirement, the score of an output that breaks it)"
        )
    return ""
