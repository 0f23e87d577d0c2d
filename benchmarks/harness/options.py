"""Judge options named flat, as the benchmarks' command lines and tables name them.

`--judge-option NAME=VALUE`, `--ablation NAME:OPT=VAL;...`, the `ABLATIONS` table of
`quality.py` and the variants of `judge_options.py` name options flat
(`validate_guidelines=off`, `judge_prompt=plain`, `k=0`), as the judge took them before its
options were nested. `judge_kwargs` turns such mappings into the keywords of
`MemAlignJudge(...)` and `MemAlignJudge.load(...)`: `k` stays a keyword, every other name
goes into `options` through the package's own mapping of the flat names
(`langchain_memalign.config.LEGACY_OPTIONS`). A dotted name (`validation.mode=all`) and
the nested names are accepted too; an unknown name is the judge's error, naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_memalign.config import merge_options

# Options that are keywords of the constructor themselves.
KEYWORDS = ("k",)


def judge_kwargs(*mappings: Mapping[str, Any]) -> dict[str, Any]:
    """`MemAlignJudge` keywords from flat option mappings, a later mapping winning."""
    out: dict[str, Any] = {}
    options: dict[str, Any] = {}
    for mapping in mappings:
        for key, value in mapping.items():
            if key in KEYWORDS:
                out[key] = value
                continue
            group, dot, field = key.partition(".")
            options = merge_options(options, {group: {field: value}} if dot else {key: value})
    if options:
        out["options"] = options
    return out


def option_value(options: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """One option of flat `options` by its flat or nested name, else `default`."""
    nested = judge_kwargs(options).get("options", {})
    from langchain_memalign.config import LEGACY_OPTIONS

    value: Any = nested
    for part in LEGACY_OPTIONS.get(name, tuple(name.split("."))):
        if not isinstance(value, Mapping) or part not in value:
            return default
        value = value[part]
    return value
