"""Configuration of a judge, stored with its memory."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from langchain_memalign.scale import Scale

# The value (and default) of a similarity floor that is chosen by the judge's scale.
AUTO = "auto"
FLOORS = ("min_episode_similarity", "min_episode_similarity_with_rationale")


def default_floor(scale: Scale, *, with_rationale: bool = False) -> float | None:
    """The similarity floor for past cases when none is given: by the kind of scale.

    Past cases are shown only when they are near duplicates (0.9), since a small judge
    copies the verdicts it is shown whether or not the cases are alike; on bool scales
    past cases with a rationale are shown at any similarity, as worked examples of the
    rule (docs/decisions.md#past-cases-the-similarity-floor).
    """
    if with_rationale and scale.kind == "bool":
        return None
    return 0.9


class JudgeConfig(BaseModel):
    """Everything that defines a judge apart from its models and its memory."""

    name: str = Field(description="The feedback key the judge scores, e.g. 'helpfulness'.")
    instructions: str = Field(
        description="The judge prompt; `{inputs}`, `{outputs}` and `{reference_outputs}` "
        "are filled in with the case."
    )
    scale: Scale
    k: int = Field(default=5, ge=0, description="Episodes retrieved per judgment.")
    min_episode_similarity: float | None = Field(
        default=0.9, ge=-1.0, le=1.0,
        description="Cosine similarity below which a retrieved past case without a "
        "rationale is left out of the judge prompt. Default (or \"auto\"): 0.9, near "
        "duplicates only, since a small judge copies the verdicts it is shown; a case the "
        "experts graded retrieves itself at ~1.0 and is always kept. None shows the k "
        "nearest whatever their similarity. Past cases with a rationale have "
        "`min_episode_similarity_with_rationale`.",
    )  # fmt: skip
    min_episode_similarity_with_rationale: float | None = Field(
        default=0.9, ge=-1.0, le=1.0,
        description="The floor for past cases that carry the expert's rationale. Default "
        "(or \"auto\"): None (the k nearest, however far) on bool scales, where a verdict "
        "with its reason is a worked example of the rule; 0.9 on numeric, categorical and "
        "pairwise scales.",
    )  # fmt: skip
    embed: Literal["inputs", "inputs_outputs"] = Field(
        default="inputs",
        description="What text of a case is embedded, at write and query time alike.",
    )
    guideline_token_budget: int = Field(
        default=800, ge=50,
        description="Tokens of guidelines in a judge prompt; past it guidelines are "
        "consolidated, and only the most relevant are shown.",
    )  # fmt: skip
    episode_max_chars: int = Field(
        default=900, ge=100, description="Characters of one episode shown in a judge prompt."
    )
    embed_max_chars: int = Field(
        default=1500, ge=50,
        description="Characters embedded per case (embedding models have short contexts).",
    )  # fmt: skip
    reflect_batch_size: int = Field(
        default=8, ge=1, description="Feedback items distilled per reflection call."
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
    show_other_answers: bool = Field(
        default=True,
        description="Show past cases that have this case's inputs but other outputs "
        '(another answer to the same question). With `embed="inputs"` they are retrieved '
        "at similarity 1.0, as the case itself is, so no floor leaves them out; their "
        "verdict belongs to another answer. False leaves them out of judgments and of "
        "validation.",
    )
    reuse_expert_verdicts: bool = Field(
        default=True,
        description="Answer with the experts' verdict, without a model call, when the case "
        "is one they graded (same inputs, outputs and reference outputs) and every retrieved "
        "expert verdict on it agrees.",
    )
    max_retries: int = Field(
        default=2, ge=0, le=10, description="Retries when a model returns malformed output."
    )
    source_support: float | None = Field(
        default=0.4, ge=-1.0, le=1.0,
        description="Cosine similarity between a guideline and a cited feedback's rationale "
        "below which that feedback is not counted as a source (a guideline left with no "
        "source is rejected). The value suits MiniLM-like embeddings. None trusts the "
        "model's citations.",
    )  # fmt: skip
    validate_guidelines: Literal["off", "sources", "all"] = Field(
        default="off",
        description="After reflecting, grade seen cases with and without each new guideline "
        "(expert-verdict reuse off) and narrow or drop a guideline that breaks more verdicts "
        "than it fixes: 'sources' checks each guideline's sources and the nearest seen cases "
        "of other scores, 'all' every seen case, 'off' nothing.",
    )
    validate_require_fix: bool = Field(
        default=False,
        description="Keep a checked guideline only if it fixes more seen verdicts than it "
        "breaks. False (the default) keeps one that breaks no more than it fixes, a tie or "
        "no change included: a correct rule the judge already follows fixes nothing and "
        "stays.",
    )
    validate_max_calls: int = Field(
        default=16, ge=0, le=10_000,
        description="Most extra judge calls one align may spend on validation.",
    )  # fmt: skip
    calibrate_scores: bool = Field(
        default=True,
        description="On integer scales of up to 11 values: grade each newly aligned seen "
        "case as if unseen (its own past case left out) and keep the judge's score beside "
        "the expert's; a judgment with no past case in its prompt then gives the score the "
        "experts most often gave where the judge gave its own, once at least 3 seen cases "
        "say so by a margin of 2 (`memory.calibration`). One judge call per aligned item, "
        "at most `calibrate_max_calls` an align. Other scales are never calibrated.",
    )
    calibrate_max_calls: int = Field(
        default=64, ge=0, le=10_000,
        description="Most judge calls one align spends grading seen cases for calibration.",
    )  # fmt: skip
    reflection: Literal["pairs", "batch"] = Field(
        default="pairs",
        description="What reflection reads: 'pairs' (default), each feedback item beside the most "
        "similar case graded otherwise (one call a pair); 'batch', the feedback in "
        "batches of `reflect_batch_size` (one call a batch).",
    )
    reflect_contrast: int = Field(
        default=4, ge=0, le=32,
        description="Stored cases with other scores shown beside each reflection batch, so "
        "the model can say when a rule applies.",
    )  # fmt: skip
    judge_prompt: Literal["turns", "checklist", "plain", "block", "block_tags", "block_user"] = (
        Field(
            default="turns",
            description="How the working memory is laid out. 'turns': guidelines in the system "
            "message, each past case a user turn answered by the expert's verdict; 'checklist': "
            "a memory block before the case, and the judge names the guidelines whose condition "
            "the case meets before scoring; 'plain': the same block, a short rationale.",
        )
    )
    verdict_order: Literal["auto", "score_first", "rationale_first"] = Field(
        default="auto",
        description="Which the judge writes first, its score or its rationale. 'auto' "
        "(the default): the score first on numeric scales, where reasoning first drives a "
        "small judge to the ends of the scale; the rationale first on the others, where "
        "the score first collapses the verdicts. The 'checklist' prompt always reasons "
        "first.",
    )
    pairwise_mode: Literal["separate", "both_orders", "one_order"] = Field(
        default="separate",
        description="Pairwise scales, how the two outputs are compared. 'separate': rate "
        "each output alone from 1 to 10 and compare the ratings (equal is a tie), so no "
        "output is ever shown first; 'both_orders': judge them as given and swapped and "
        "reconcile (disagreement is a tie); 'one_order': one call, as given. 'separate' is "
        "the default because a judge that prefers whichever output it reads first ties "
        "nearly every case in 'both_orders'.",
    )

    @property
    def score_first(self) -> bool:
        """Whether the judge is asked for its score before its rationale (`verdict_order`)."""
        # The checklist prompt is a reasoning step before the score: it stays rationale-first.
        if self.judge_prompt == "checklist":
            return False
        if self.verdict_order == "auto":
            return self.scale.kind == "numeric"
        return self.verdict_order == "score_first"

    @model_validator(mode="before")
    @classmethod
    def _floors_by_scale(cls, data: Any) -> Any:
        # A default that depends on another field: pydantic's defaults cannot, so an unset
        # floor (or "auto") is filled in here, from the scale, before validation.
        if not isinstance(data, dict) or "scale" not in data:
            return data
        unset = [f for f in FLOORS if data.get(f, AUTO) == AUTO]
        if not unset:
            return data
        try:
            scale = Scale.of(data["scale"])
        except (TypeError, ValueError):
            return data  # the scale's own validator names the problem
        floors = {
            f: default_floor(scale, with_rationale=f == "min_episode_similarity_with_rationale")
            for f in unset
        }
        return {**data, **floors}

    @model_validator(mode="before")
    @classmethod
    def _legacy_pairwise_flag(cls, data: Any) -> Any:
        # Memories saved before `pairwise_mode` stored `pairwise_both_orders: bool`.
        if isinstance(data, dict) and "pairwise_both_orders" in data:
            data = dict(data)
            both = data.pop("pairwise_both_orders")
            data.setdefault("pairwise_mode", "both_orders" if both else "one_order")
        return data

    @field_validator("scale", mode="before")
    @classmethod
    def _scale_from_spec(cls, v: Any) -> Scale:
        return Scale.of(v)
