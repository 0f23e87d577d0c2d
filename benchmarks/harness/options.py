"""Judge options named by their place, as the benchmarks' command lines and tables name them.

`--judge-option NAME=VALUE`, `--ablation NAME:OPT=VAL;...`, the `ABLATIONS` table of
`quality.py` and the variants of `judge_options.py` name each option by its dotted place in
`JudgeOptions` (`validation.mode=off`), beside `k` and `max_retries`; an ablation that is no
option is named by the place it had (`prompt.layout=plain`, `_ablation.PLACES`).
`judge_kwargs` turns such mappings into the keywords of `MemAlignJudge(...)` and
`MemAlignJudge.load(...)`: `k` stays a keyword, an ablation goes to the judge's private
hook (`options["_ablation"]`), every other name into `options`. A name that is no option,
or the flat name of earlier versions (`validate_guidelines`), is the judge's own options
error, naming it and, for a flat name, its place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_memalign import _ablation
from langchain_memalign.config import merge_options

# Options that are keywords of the constructor themselves.
KEYWORDS = ("k",)


def judge_kwargs(*mappings: Mapping[str, Any]) -> dict[str, Any]:
    """`MemAlignJudge` keywords from mappings of dotted option names, a later one winning."""
    out: dict[str, Any] = {}
    options: dict[str, Any] = {}
    for mapping in mappings:
        for key, value in mapping.items():
            if key in KEYWORDS:
                out[key] = value
                continue
            if key in _ablation.PLACES:
                group, field, dot = _ablation.KEY, _ablation.PLACES[key], "."
            else:
                group, dot, field = key.partition(".")
            options = merge_options(options, {group: {field: value}} if dot else {key: value})
    if options:
        out["options"] = options
    return out


def option_value(options: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """One option of `options` (dotted names) by its dotted name, else `default`."""
    value: Any = judge_kwargs(options).get("options", {})
    path = (_ablation.KEY, _ablation.PLACES[name]) if name in _ablation.PLACES else name.split(".")
    for part in path:
        if not isinstance(value, Mapping) or part not in value:
            return default
        value = value[part]
    return value
