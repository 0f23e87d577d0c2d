"""Configuration of a judge, stored with its memory.

`JudgeOptions` holds every option of a judge, nested by concern: `retrieval` (which
past cases a judgment shows), `reflection` (how guidelines are distilled), `validation`
(how new guidelines are checked), `calibration` (score calibration on integer scales) and
`prompt` (what the judge writes first) and `checks` (learned rules asked as
questions about each case). `JudgeConfig` is what a memory stores: the
judge's name, instructions, scale, `k` and its options.

Each option has one spelling, its place in the groups (`validation.mode`). Before the
options were nested they were flat keys (`validate_guidelines`, `reflect_batch_size`, ...);
given now, such a name is an error naming its nested spelling (`nested_names`). Only a
configuration a memory stored flat before then is still read, by `upgrade_stored_config`.
The alternatives the benchmarks ablate (`langchain_memalign._ablation`) are no options:
`upgrade_stored_config` moves a stored one to that private hook.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from langchain_memalign import _ablation
from langchain_memalign.scale import Scale

# The option models; the helpers below are the package's own (loading, merging).
__all__ = [
    "CalibrationOptions",
    "ChecksOptions",
    "JudgeConfig",
    "JudgeOptions",
    "PromptOptions",
    "ReflectionOptions",
    "RetrievalOptions",
    "ValidationOptions",
]

# The value (and default) of a similarity floor resolved when the judge is made (`DEFAULT_FLOOR`).
AUTO: Literal["auto"] = "auto"
# The similarity floors of `RetrievalOptions`.
FLOORS = ("min_similarity", "min_similarity_with_rationale")

Floor = Annotated[float, Field(ge=-1.0, le=1.0)] | Literal["auto"] | None


# The similarity floor of past cases when none is given, on every scale: near duplicates
# only, since a small judge copies the verdicts it is shown whether or not the cases are
# alike; the rules the rationales teach reach it as guidelines and checks
# (docs/decisions.md#past-cases-the-similarity-floor).
DEFAULT_FLOOR = 0.9


class _Group(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RetrievalOptions(_Group):
    """Which past cases a judgment retrieves and shows, and how cases are embedded."""

    min_similarity: Floor = Field(
        default=AUTO,
        description="Cosine similarity below which a retrieved past case without a "
        "rationale is left out of the judge prompt. Default (or \"auto\"): 0.9, near "
        "duplicates only, since a small judge copies the verdicts it is shown; a case the "
        "experts graded retrieves itself at ~1.0 and is always kept. None shows the k "
        "nearest whatever their similarity. Past cases with a rationale have "
        "`min_similarity_with_rationale`.",
    )  # fmt: skip
    min_similarity_with_rationale: Floor = Field(
        default=AUTO,
        description="The floor for past cases that carry the expert's rationale. Default "
        "(or \"auto\"): 0.9, as `min_similarity`; None shows the k nearest, however far. "
        "A memory keeps the floors it was stored with.",
    )  # fmt: skip
    embed: Literal["inputs", "inputs_outputs"] = Field(
        default="inputs",
        description="What text of a case is embedded, at write and query time alike.",
    )
    embed_max_chars: int = Field(
        default=1500, ge=50,
        description="Characters embedded per case (embedding models have short contexts).",
    )  # fmt: skip
    episode_max_chars: int = Field(
        default=900, ge=100, description="Characters of one episode shown in a judge prompt."
    )
    reuse_expert_verdicts: bool = Field(
        default=True,
        description="Answer with the experts' verdict, without a model call, when the case "
        "is one they graded (same inputs, outputs and reference outputs) and every retrieved "
        "expert verdict on it agrees.",
    )
    hnsw_threshold: int = Field(
        default=50_000, ge=1,
        description="Episodes past which retrieval switches from an exact to an approximate "
        "(HNSW) index.",
    )  # fmt: skip
    hnsw_ef_search: int = Field(
        default=96, ge=1,
        description="Breadth of an HNSW search: higher is more exact and slower.",
    )  # fmt: skip


class ReflectionOptions(_Group):
    """How guidelines are distilled from feedback, checked against it, and kept in budget."""

    mode: Literal["pairs", "batch"] = Field(
        default="pairs",
        description="What reflection reads: 'pairs' (default), each feedback item beside "
        "the most similar case graded otherwise, one rule a pair (one call a pair; the pair "
        "is the rule's source); 'batch', the feedback in batches of `batch_size` (one call "
        "a batch), each guideline citing the feedback that supports it "
        "(docs/decisions.md#reflection-contrast-pairs).",
    )
    batch_size: int = Field(
        default=8, ge=1, description="Feedback items distilled per reflection call."
    )
    contrast: int = Field(
        default=4, ge=0, le=32,
        description="Stored cases with other scores shown beside each reflection batch, so "
        "the model can say when a rule applies.",
    )  # fmt: skip
    source_support: float | None = Field(
        default=0.4, ge=-1.0, le=1.0,
        description="Cosine similarity between a guideline and a cited feedback's rationale "
        "below which that feedback is not counted as a source (a guideline left with no "
        "source is rejected). The value suits MiniLM-like embeddings. None trusts the "
        "model's citations.",
    )  # fmt: skip
    guideline_token_budget: int = Field(
        default=800, ge=50,
        description="Tokens of guidelines in a judge prompt; past it guidelines are "
        "consolidated, and only the most relevant are shown.",
    )  # fmt: skip


class ValidationOptions(_Group):
    """How new guidelines are checked on seen cases after each align."""

    mode: Literal["off", "sources", "all"] = Field(
        default="off",
        description="Off by default (docs/decisions.md#validation-of-new-guidelines). "
        "After reflecting, grade seen cases with and without each new guideline "
        "(expert-verdict reuse off) and narrow or drop a guideline that breaks more verdicts "
        "than it fixes: 'sources' checks each guideline's sources and the nearest seen cases "
        "of other scores, 'all' every seen case, 'off' nothing.",
    )
    max_calls: int = Field(
        default=16, ge=0, le=10_000,
        description="Most extra judge calls one align may spend on validation.",
    )  # fmt: skip


class CalibrationOptions(_Group):
    """Score calibration on integer scales (`memory.calibration`)."""

    enabled: bool = Field(
        default=True,
        description="On integer scales of up to 11 values: grade each newly aligned seen "
        "case as if unseen (its own past case left out) and keep the judge's score beside "
        "the expert's; a judgment with no past case in its prompt then gives the score the "
        "experts most often gave where the judge gave its own, once at least 3 seen cases "
        "say so by a margin of 2 (`memory.calibration`). One judge call per aligned item, "
        "at most `max_calls` an align. Other scales are never calibrated.",
    )
    max_calls: int = Field(
        default=64, ge=0, le=10_000,
        description="Most judge calls one align spends grading seen cases for calibration.",
    )  # fmt: skip


class PromptOptions(_Group):
    """What the judge writes first."""

    verdict_order: Literal["auto", "score_first", "rationale_first"] = Field(
        default="auto",
        description="Which the judge writes first, its score or its rationale. 'auto' "
        "(the default): the score first on numeric scales, where reasoning first drives a "
        "small judge to the ends of the scale; the rationale first on the others, where "
        "the score first collapses the verdicts.",
    )


class ChecksOptions(_Group):
    """Learned rules as checks: yes/no questions about a case, tested on the experts' cases."""

    mode: Literal["separate", "joint", "off"] = Field(
        default="separate",
        description="How a check's questions are asked, at judgment and when it is tested: "
        "'separate' (the default), each question in its own short call, a check's next "
        "question only when the answer so far leaves it open; 'joint', every question of "
        "every check in one structured call per case (fewer calls, longer answers); 'off', "
        "no checks are written or run (docs/decisions.md#rules-as-checks-tested-on-the-"
        "experts-cases).",
    )
    min_agreement: float = Field(
        default=0.75, ge=0.0, le=1.0,
        description="Share of the experts' cases a learned check must agree with to be "
        "kept; a phrasing below it is replaced by the next candidate (the inverted "
        "question), and a rule none of whose phrasings reaches it keeps no check. Checks "
        "experts wrote are tested and kept whatever their agreement.",
    )  # fmt: skip
    test_cases: int = Field(
        default=16, ge=0, le=1000,
        description="Most of the experts' cases a check is tested on: its rule's source "
        "cases first, then the others. 0 keeps every written check untested.",
    )  # fmt: skip
    max_per_judgment: int = Field(
        default=4, ge=0, le=64,
        description="Most checks asked per judgment: those of the guidelines the judgment "
        "shows, best tested first.",
    )  # fmt: skip
    settle: bool = Field(
        default=True,
        description="A check asked about a case that stays silent settles its rule for "
        "that case: the holistic judgment then leaves out the rule's text and the past "
        "cases its check caught, so the rule is not judged a second time from its prose "
        "(docs/decisions.md#a-silent-check-settles-its-rule). False states every "
        "guideline and shows every retrieved case.",
    )
    case_max_chars: int = Field(
        default=2000, ge=100, le=200_000,
        description="Characters of each field of a case shown with a check's question.",
    )  # fmt: skip


class JudgeOptions(_Group):
    """Every option of a judge, nested by concern; all have defaults.

    `MemAlignJudge(..., options=...)` takes one, or a mapping of the same shape
    (`{"validation": {"mode": "all"}}`). An unknown name is an error naming it; a name
    that belongs in a group (`validate_guidelines`, `reuse_expert_verdicts`) is an error
    naming its place (`validation.mode`, `retrieval.reuse_expert_verdicts`).
    """

    retrieval: RetrievalOptions = Field(default_factory=RetrievalOptions)
    reflection: ReflectionOptions = Field(default_factory=ReflectionOptions)
    validation: ValidationOptions = Field(default_factory=ValidationOptions)
    calibration: CalibrationOptions = Field(default_factory=CalibrationOptions)
    prompt: PromptOptions = Field(default_factory=PromptOptions)
    checks: ChecksOptions = Field(default_factory=ChecksOptions)
    # Every structured model call retries: judgments, reflection, narrowing, consolidation.
    max_retries: int = Field(
        default=2, ge=0, le=10, description="Retries when a model returns malformed output."
    )
    # The benchmarks' ablations (`langchain_memalign._ablation`): no field, so neither the
    # schema, the dump nor a stored configuration has them; given under `_ablation`.
    _ablation: _ablation.Ablation = PrivateAttr(default=_ablation.DEFAULT)

    @model_validator(mode="wrap")
    @classmethod
    def _take_ablation(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        ablation = None
        if isinstance(data, Mapping) and _ablation.KEY in data:
            ablation = _ablation.Ablation.model_validate(data[_ablation.KEY])
            data = {k: v for k, v in data.items() if k != _ablation.KEY}
        options = handler(data)
        if ablation is not None:
            options._ablation = ablation
        return options

    @model_validator(mode="before")
    @classmethod
    def _refuse_flat_names(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            _refuse_misplaced(data, fields=cls.model_fields, prefix="")
        return data


# Each flat key a memory stored before the options were nested -> its place in
# `JudgeOptions` (or in the ablation hook, `_ablation.KEY`, for an alternative that is no
# option now). Read only from stored configurations (`upgrade_stored_config`); given
# anywhere else, a flat key is an error naming its place (`nested_names`).
_FLAT_NAMES: dict[str, tuple[str, ...]] = {
    "min_episode_similarity": ("retrieval", "min_similarity"),
    "min_episode_similarity_with_rationale": ("retrieval", "min_similarity_with_rationale"),
    "embed": ("retrieval", "embed"),
    "embed_max_chars": ("retrieval", "embed_max_chars"),
    "episode_max_chars": ("retrieval", "episode_max_chars"),
    "show_other_answers": (_ablation.KEY, "show_other_answers"),
    "reuse_expert_verdicts": ("retrieval", "reuse_expert_verdicts"),
    "hnsw_threshold": ("retrieval", "hnsw_threshold"),
    "hnsw_ef_search": ("retrieval", "hnsw_ef_search"),
    "reflection": ("reflection", "mode"),
    "reflect_batch_size": ("reflection", "batch_size"),
    "reflect_contrast": ("reflection", "contrast"),
    "source_support": ("reflection", "source_support"),
    "guideline_token_budget": ("reflection", "guideline_token_budget"),
    "validate_guidelines": ("validation", "mode"),
    "validate_require_fix": (_ablation.KEY, "require_fix"),
    "validate_max_calls": ("validation", "max_calls"),
    "calibrate_scores": ("calibration", "enabled"),
    "calibrate_max_calls": ("calibration", "max_calls"),
    "judge_prompt": (_ablation.KEY, "layout"),
    "verdict_order": ("prompt", "verdict_order"),
    "pairwise_mode": (_ablation.KEY, "pairwise_mode"),
    "max_retries": ("max_retries",),
}
# Memories saved before `pairwise_mode` stored `pairwise_both_orders: bool`.
_PAIRWISE_FLAG = "pairwise_both_orders"
# The option groups: the fields of `JudgeOptions` that are models themselves.
_GROUPS: dict[str, type[BaseModel]] = {
    name: f.annotation
    for name, f in JudgeOptions.model_fields.items()
    if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel)
}


def nested_names(key: str) -> tuple[str, ...]:
    """Where an option given by a name outside its group belongs, in `JudgeOptions`.

    A flat name of earlier versions (`validate_guidelines` -> `validation.mode`), or a
    field of one or more groups (`mode` -> `reflection.mode`, `validation.mode`, ...);
    `()` for a name that is no option (an ablation's among them: `judge_prompt`).
    """
    if key in _FLAT_NAMES:
        path = _FLAT_NAMES[key]
        return () if path[0] == _ablation.KEY else (".".join(path),)
    return tuple(f"{group}.{key}" for group, model in _GROUPS.items() if key in model.model_fields)


def _refuse_misplaced(data: Mapping[str, Any], *, fields: Mapping[str, Any], prefix: str) -> None:
    """Raise the options error for every key of `data` that is an option out of its place.

    `fields` are the keys that belong where `data` is read (they are left to the model);
    `prefix` is the path of `JudgeOptions` from there (`"options."` in a `JudgeConfig`).
    """
    problems = []
    for key, value in data.items():
        if key == "reflection" and "reflection" in fields and isinstance(value, str):
            # the flat `reflection` was the mode, a string; the name is now the group's
            problems.append(
                f"option '{prefix}reflection' is a group of options, not a value; did "
                f"you mean {prefix}reflection.mode?"
            )
        elif key not in fields and (places := nested_names(key)):
            problems.append(
                f"unknown option {key!r}; did you mean "
                + " or ".join(prefix + place for place in places)
                + "?"
            )
        elif key not in fields and (
            key == _PAIRWISE_FLAG or _FLAT_NAMES.get(key, ("",))[0] == _ablation.KEY
        ):
            # a benchmarks' ablation that was an option (`judge_prompt`): named, not ignored
            problems.append(f"unknown option {key!r}: no longer an option")
    if problems:
        # One error for all: a caller who wrote several flat names fixes them at once.
        raise PydanticCustomError("misplaced_option", " ".join(problems))


def upgrade_stored_config(data: Any) -> Any:
    """A configuration stored by a memory, in the shape `JudgeConfig` reads now.

    Memories written before the options were nested stored them flat
    (`"validate_guidelines": "sources"`, `"pairwise_both_orders": false`); each goes to its
    place in `options`, over a nested value there (so that it is checked as it is read).
    Memories written while the benchmarks' ablations were options stored them in their
    groups (`"prompt": {"layout": "turns", ...}`); each goes to the ablation hook
    (`options._ablation`), where the judge reads it. A configuration with neither, or that
    is not a mapping, is returned as it is, for the caller to check.
    """
    if not isinstance(data, Mapping):
        return data
    flat = {
        k: v
        for k, v in data.items()
        if k == _PAIRWISE_FLAG or (k in _FLAT_NAMES and (k != "reflection" or isinstance(v, str)))
    }
    out = {k: v for k, v in data.items() if k not in flat}
    stored = out.get("options")
    options = dict(stored) if isinstance(stored, Mapping) else {}
    moved = False
    for place, field in _ablation.PLACES.items():
        group, _, name = place.partition(".")
        current = options.get(group)
        if isinstance(current, Mapping) and name in current:
            options[group] = {k: v for k, v in current.items() if k != name}
            options[_ablation.KEY] = {**options.get(_ablation.KEY, {}), field: current[name]}
            moved = True
    if not flat and not moved:
        return dict(data)
    for key, value in flat.items():
        if key == _PAIRWISE_FLAG:
            group, field = _ablation.KEY, "pairwise_mode"
            value = "both_orders" if value else "one_order"
        elif len(path := _FLAT_NAMES[key]) == 1:
            options[path[0]] = value
            continue
        else:
            group, field = path
        current = options.get(group)
        options[group] = {**(current if isinstance(current, Mapping) else {}), field: value}
    out["options"] = options
    return out


def _group(out: dict[str, Any], name: str) -> dict[str, Any]:
    current = out.get(name)
    if isinstance(current, BaseModel):
        current = current.model_dump()
    group = dict(current) if isinstance(current, Mapping) else {}
    out[name] = group
    return group


def merge_options(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`override` over `base`, group by group: a group given replaces only its fields given."""
    out = dict(base)
    for key, value in override.items():
        if (key in _GROUPS or key == _ablation.KEY) and isinstance(value, Mapping):
            _group(out, key).update(value)
        else:
            out[key] = value
    return out


def options_mapping(options: BaseModel | Mapping[str, Any] | None) -> dict[str, Any]:
    """The options given to a judge as a nested mapping: a model's fields that were set."""
    if options is None:
        return {}
    if isinstance(options, BaseModel):
        out = options.model_dump(exclude_unset=True)
        if isinstance(options, JudgeOptions) and options._ablation != _ablation.DEFAULT:
            out[_ablation.KEY] = options._ablation.model_dump(exclude_defaults=True)
        return out
    return dict(options)


def config_with_overrides(
    stored: Mapping[str, Any], overrides: Mapping[str, Any]
) -> dict[str, Any]:
    """A stored configuration (nested) with `overrides` (`k`, `options`) over it.

    The options given override the stored ones field by field; the others are kept.
    """
    over = dict(overrides)
    options = over.pop("options", None)
    out = {**stored, **over}
    if options is not None:
        kept = stored.get("options")
        out["options"] = merge_options(
            kept if isinstance(kept, Mapping) else {}, options_mapping(options)
        )
    return out


class JudgeConfig(BaseModel):
    """Everything that defines a judge apart from its models and its memory.

    Stored with the memory, nested (`options.validation.mode`). An option given at the top
    (`validate_guidelines`, `max_retries`) is an error naming its place in `options`; a
    configuration a memory stored flat is read through `upgrade_stored_config`.
    """

    name: str = Field(description="The feedback key the judge scores, e.g. 'helpfulness'.")
    instructions: str = Field(
        description="The judge prompt; `{inputs}`, `{outputs}` and `{reference_outputs}` "
        "are filled in with the case."
    )
    scale: Scale
    k: int = Field(default=5, ge=0, description="Episodes retrieved per judgment.")
    options: JudgeOptions = Field(
        default_factory=JudgeOptions,
        description="Every other option, nested by concern (`JudgeOptions`).",
    )

    @property
    def score_first(self) -> bool:
        """Whether the judge is asked for its score before its rationale (`verdict_order`)."""
        prompt = self.options.prompt
        # The checklist prompt is a reasoning step before the score: it stays rationale-first.
        if self.options._ablation.layout == "checklist":
            return False
        if prompt.verdict_order == "auto":
            return self.scale.kind == "numeric"
        return prompt.verdict_order == "score_first"

    def floor(self, *, with_rationale: bool) -> float | None:
        """The similarity a past case needs to be shown (`RetrievalOptions`), resolved."""
        retrieval = self.options.retrieval
        value = (
            retrieval.min_similarity_with_rationale if with_rationale else retrieval.min_similarity
        )
        if isinstance(value, str):  # "auto": resolved on validation, unless set after
            return DEFAULT_FLOOR
        return value

    @model_validator(mode="before")
    @classmethod
    def _refuse_flat_options(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            _refuse_misplaced(data, fields=cls.model_fields, prefix="options.")
        return data

    @model_validator(mode="after")
    def _resolve_auto_floors(self) -> JudgeConfig:
        # An "auto" floor is resolved when the judge is made, so that the stored
        # configuration says which floor the judge uses: a later default changes no memory.
        retrieval = self.options.retrieval
        floors = {f: DEFAULT_FLOOR for f in FLOORS if getattr(retrieval, f) == AUTO}
        if floors:
            self.options = self.options.model_copy(
                update={"retrieval": retrieval.model_copy(update=floors)}
            )
        return self

    @field_validator("name")
    @classmethod
    def _name_storable(cls, v: str) -> str:
        # Refused on every memory alike: PostgreSQL text cannot hold NUL, and a
        # folder's judge may be saved to a database later.
        if "\x00" in v:
            raise ValueError(
                "the judge name holds a NUL character, which a PostgreSQL memory cannot store"
            )
        return v

    @field_validator("scale", mode="before")
    @classmethod
    def _scale_from_spec(cls, v: Any) -> Scale:
        return Scale.of(v)
