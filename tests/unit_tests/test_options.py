"""The judge's options: one nested model, the constructor's, the stored config's and the CLI's.

Each option has one spelling: a flat name of earlier versions is an error naming its place.
Configurations stored flat by earlier versions still load, into the same places.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import HOURS, INSTRUCTIONS, SWEATER
from fakes import HashEmbeddings
from pydantic import ValidationError

from langchain_memalign import JudgeOptions, MemAlignJudge, _ablation
from langchain_memalign._ablation import Ablation
from langchain_memalign.config import (
    JudgeConfig,
    PromptOptions,
    ValidationOptions,
    merge_options,
    nested_names,
    upgrade_stored_config,
)
from langchain_memalign.memory.store import DB_FILE

# `JudgeConfig(name=..., instructions=..., scale=bool).model_dump_json()` as the flat
# configuration of the previous version wrote it (its defaults, the floors resolved for a
# bool scale), and the same for a 1-5 scale.
FLAT_BOOL = json.loads(
    '{"name":"helpfulness","instructions":"Is it helpful? {inputs} {outputs}","scale":'
    '{"kind":"bool","low":null,"high":null,"integer":false,"choices":[]},"k":5,'
    '"min_episode_similarity":0.9,"min_episode_similarity_with_rationale":null,'
    '"embed":"inputs","guideline_token_budget":800,"episode_max_chars":900,'
    '"embed_max_chars":1500,"reflect_batch_size":8,"hnsw_threshold":50000,'
    '"hnsw_ef_search":96,"show_other_answers":true,"reuse_expert_verdicts":true,'
    '"max_retries":2,"source_support":0.4,"validate_guidelines":"sources",'
    '"validate_require_fix":false,"validate_max_calls":16,"calibrate_scores":true,'
    '"calibrate_max_calls":64,"reflection":"batch","reflect_contrast":4,'
    '"judge_prompt":"turns","verdict_order":"auto","pairwise_mode":"separate"}'
)
FLAT_NUMERIC = json.loads(
    '{"name":"quality","instructions":"Rate {outputs}","scale":{"kind":"numeric","low":1.0,'
    '"high":5.0,"integer":true,"choices":[]},"k":5,"min_episode_similarity":0.9,'
    '"min_episode_similarity_with_rationale":0.9,"embed":"inputs",'
    '"guideline_token_budget":800,"episode_max_chars":900,"embed_max_chars":1500,'
    '"reflect_batch_size":8,"hnsw_threshold":50000,"hnsw_ef_search":96,'
    '"show_other_answers":true,"reuse_expert_verdicts":true,"max_retries":2,'
    '"source_support":0.4,"validate_guidelines":"sources","validate_require_fix":false,'
    '"validate_max_calls":16,"calibrate_scores":true,"calibrate_max_calls":64,'
    '"reflection":"batch","reflect_contrast":4,"judge_prompt":"turns",'
    '"verdict_order":"auto","pairwise_mode":"separate"}'
)
TOP = ("name", "instructions", "scale", "k")
# Where each flat name of the previous version went: this test's own record of the old
# format, so that a change to the package's reading of it fails here.
OLD_NAMES: dict[str, tuple[str, ...]] = {
    "min_episode_similarity": ("retrieval", "min_similarity"),
    "min_episode_similarity_with_rationale": ("retrieval", "min_similarity_with_rationale"),
    **{
        name: ("retrieval", name)
        for name in (
            "embed", "embed_max_chars", "episode_max_chars",
            "reuse_expert_verdicts", "hnsw_threshold", "hnsw_ef_search",
        )
    },
    # the benchmarks' ablations, options then: the private hook now (`_ablation`)
    "show_other_answers": ("_ablation", "show_other_answers"),
    "reflection": ("reflection", "mode"),
    "reflect_batch_size": ("reflection", "batch_size"),
    "reflect_contrast": ("reflection", "contrast"),
    "source_support": ("reflection", "source_support"),
    "guideline_token_budget": ("reflection", "guideline_token_budget"),
    "validate_guidelines": ("validation", "mode"),
    "validate_require_fix": ("_ablation", "require_fix"),
    "validate_max_calls": ("validation", "max_calls"),
    "calibrate_scores": ("calibration", "enabled"),
    "calibrate_max_calls": ("calibration", "max_calls"),
    "judge_prompt": ("_ablation", "layout"),
    "verdict_order": ("prompt", "verdict_order"),
    "pairwise_mode": ("_ablation", "pairwise_mode"),
    "max_retries": ("max_retries",),
}  # fmt: skip


def flat(config: JudgeConfig) -> dict[str, Any]:
    """A nested configuration written with the flat names of the previous version."""
    dumped = config.model_dump(mode="json")
    dumped["options"]["_ablation"] = _ablation.of(config).model_dump(mode="json")
    out = {k: dumped[k] for k in TOP}
    for name, path in OLD_NAMES.items():
        value: Any = dumped["options"]
        for part in path:
            value = value[part]
        out[name] = value
    return out


def test_every_old_flat_name_had_a_place_and_every_option_then_a_flat_name() -> None:
    places = set(OLD_NAMES.values())
    # Options added after they were nested (`checks`) never had a flat name.
    nested = {
        (group, field)
        for group, info in JudgeOptions.model_fields.items()
        if group not in ("max_retries", "checks")
        for field in info.annotation.model_fields  # type: ignore[union-attr]
    }
    ablations = {("_ablation", field) for field in Ablation.model_fields}
    assert places == nested | {("max_retries",)} | ablations
    assert set(OLD_NAMES) == set(FLAT_BOOL) - set(TOP)


@pytest.mark.parametrize("name", sorted(OLD_NAMES))
def test_a_flat_name_is_an_error_naming_its_place(
    name: str, model: Any, embeddings: Any, tmp_path: Path
) -> None:
    place = ".".join(OLD_NAMES[name])
    value = FLAT_BOOL[name]
    if OLD_NAMES[name][0] == "_ablation":  # no option now: named, with no place
        assert nested_names(name) == ()
        no_option = rf"'{name}': no longer an option"
        with pytest.raises(ValidationError, match=no_option):
            MemAlignJudge("h", INSTRUCTIONS, model, embeddings, options={name: value})
        with pytest.raises(ValidationError, match=no_option):
            JudgeConfig(name="h", instructions=INSTRUCTIONS, scale=bool, **{name: value})
        MemAlignJudge("h", INSTRUCTIONS, model, embeddings, path=tmp_path).close()
        with pytest.raises(ValidationError, match=no_option):
            MemAlignJudge.load(tmp_path, model, embeddings, **{name: value})
        return
    assert nested_names(name) == (place,)
    if name == "max_retries":  # a field of `JudgeOptions` itself: wrong only outside it
        assert JudgeOptions.model_validate({name: value}).max_retries == value
    else:
        # (the flat `reflection`, a string, is named as a group given a value)
        with pytest.raises(ValidationError, match=rf"option '{name}'.*; did you mean "
                           rf"{re.escape(place)}\?"):  # fmt: skip
            MemAlignJudge("h", INSTRUCTIONS, model, embeddings, options={name: value})
    with pytest.raises(
        ValidationError, match=rf"'{name}'; did you mean options\.{re.escape(place)}\?"
    ):
        JudgeConfig(name="h", instructions=INSTRUCTIONS, scale=bool, **{name: value})
    MemAlignJudge("h", INSTRUCTIONS, model, embeddings, path=tmp_path).close()
    with pytest.raises(
        ValidationError, match=rf"'{name}'; did you mean options\.{re.escape(place)}\?"
    ):
        MemAlignJudge.load(tmp_path, model, embeddings, **{name: value})


def test_a_misplaced_name_names_every_place_it_may_belong() -> None:
    with pytest.raises(ValidationError) as err:
        JudgeOptions.model_validate({"mode": "all", "reflection": "pairs", "settle": False})
    message = str(err.value)
    assert (
        "unknown option 'mode'; did you mean reflection.mode or validation.mode or checks.mode?"
        in message
    )
    assert (
        "option 'reflection' is a group of options, not a value; did you mean reflection.mode?"
        in message
    )
    assert "unknown option 'settle'; did you mean checks.settle?" in message
    assert nested_names("pairwise_both_orders") == ()  # an ablation's: no place
    assert nested_names("colour") == ()


@pytest.mark.parametrize("stored", [FLAT_BOOL, FLAT_NUMERIC])
def test_a_flat_config_of_the_previous_version_loads_into_its_groups(stored: Any) -> None:
    config = JudgeConfig.model_validate(upgrade_stored_config(stored))
    options = config.options
    assert options.retrieval.min_similarity == stored["min_episode_similarity"]
    assert (
        options.retrieval.min_similarity_with_rationale
        == stored["min_episode_similarity_with_rationale"]
    )
    assert options.retrieval.embed == "inputs" and options.retrieval.embed_max_chars == 1500
    assert options.retrieval.episode_max_chars == 900
    assert options.retrieval.hnsw_threshold == 50_000 and options.retrieval.hnsw_ef_search == 96
    assert options.retrieval.reuse_expert_verdicts
    assert _ablation.of(config) == Ablation()  # the stored ablations were the defaults
    assert options.reflection.mode == "batch" and options.reflection.batch_size == 8
    assert options.reflection.contrast == 4 and options.reflection.source_support == 0.4
    assert options.reflection.guideline_token_budget == 800
    assert options.validation == ValidationOptions(mode="sources", max_calls=16)
    assert options.calibration.enabled and options.calibration.max_calls == 64
    assert options.prompt == PromptOptions(verdict_order="auto")
    assert options.max_retries == 2
    # nothing lost or changed: written flat again, it is what was stored
    assert flat(config) == stored


@pytest.mark.parametrize("stored", [FLAT_BOOL, FLAT_NUMERIC])
def test_the_defaults_change_only_reflection_validation_and_the_bool_floor(stored: Any) -> None:
    new = JudgeConfig(
        name=stored["name"], instructions=stored["instructions"], scale=stored["scale"]
    )
    # docs/decisions.md: contrast-pair reflection, validation off, past cases with a
    # rationale shown on bool scales only when near duplicates; the rest as before
    assert stored["reflection"] == "batch" and stored["validate_guidelines"] == "sources"
    changed = {"reflection": "pairs", "validate_guidelines": "off",
               "min_episode_similarity_with_rationale": 0.9}  # fmt: skip
    assert flat(new) == {**stored, **changed}
    assert "min_episode_similarity" not in new.model_dump()  # stored nested


def test_stored_flat_values_land_in_their_groups() -> None:
    changed = {
        **FLAT_BOOL, "validate_guidelines": "all", "reflection": "pairs", "max_retries": 5,
        "judge_prompt": "checklist", "min_episode_similarity": None,
    }  # fmt: skip
    config = JudgeConfig.model_validate(upgrade_stored_config(changed))
    options = config.options
    assert options.validation.mode == "all" and options.reflection.mode == "pairs"
    assert options.max_retries == 5 and _ablation.of(config).layout == "checklist"
    assert options.retrieval.min_similarity is None
    # beside a nested group (never written so, but read whole): the flat value is read
    assert upgrade_stored_config(
        {"options": {"reflection": {"mode": "pairs", "contrast": 1}}, "reflection": "batch"}
    ) == {"options": {"reflection": {"mode": "batch", "contrast": 1}}}
    # Memories saved before pairwise_mode stored a boolean; they reopen with its meaning.
    assert upgrade_stored_config({"pairwise_both_orders": True}) == {
        "options": {"_ablation": {"pairwise_mode": "both_orders"}}
    }
    assert upgrade_stored_config({"pairwise_both_orders": False}) == {
        "options": {"_ablation": {"pairwise_mode": "one_order"}}
    }
    # Memories saved while the ablations were options stored them in their groups.
    stored = {"options": {"prompt": {"layout": "plain", "verdict_order": "auto"}}}
    assert upgrade_stored_config(stored) == {
        "options": {"prompt": {"verdict_order": "auto"}, "_ablation": {"layout": "plain"}}
    }
    nested = JudgeConfig(name="h", instructions="i", scale=bool).model_dump(mode="json")
    assert upgrade_stored_config(nested) == nested and upgrade_stored_config([1]) == [1]
    assert merge_options({"validation": {"mode": "all"}}, {"validation": {"max_calls": 3}}) == {
        "validation": {"mode": "all", "max_calls": 3}
    }


def test_the_constructor_takes_an_options_object_or_a_mapping(model: Any, embeddings: Any) -> None:
    def judge(options: Any) -> MemAlignJudge:
        return MemAlignJudge("h", INSTRUCTIONS, model, embeddings, options=options)

    given = JudgeOptions(validation=ValidationOptions(mode="all", max_calls=3))
    by_object = judge(given).config
    by_mapping = judge({"validation": {"mode": "all", "max_calls": 3}}).config
    assert by_object == by_mapping
    assert by_object.options.validation.mode == "all"
    assert by_object.options.retrieval.min_similarity == 0.9  # "auto": resolved, stored
    assert by_object.options.retrieval.min_similarity_with_rationale == 0.9
    assert given.retrieval.min_similarity == "auto"  # the caller's object is unchanged
    given.validation.mode = "off"
    assert by_object.options.validation.mode == "all"  # and not shared
    assert (
        judge(None).config.options
        == JudgeConfig(name="h", instructions=INSTRUCTIONS, scale=bool).options
    )


@pytest.mark.parametrize(
    ("options", "where"),
    [
        ({"validation": {"mode": "sometimes"}}, "options.validation.mode"),
        ({"validation": {"mde": "all"}}, "options.validation.mde"),
        ({"validate_guideline": "all"}, "options.validate_guideline"),
        ({"retrieval": {"min_similarity": 2.0}}, "options.retrieval.min_similarity"),
        ({"prompt": {"verdict_order": "sideways"}}, "options.prompt.verdict_order"),
        # an ablation is no option, in its old place or by its flat name
        ({"prompt": {"layout": "plain"}}, "options.prompt.layout"),
        (
            {"judge_prompt": "plain"},
            "options\n  unknown option 'judge_prompt': no longer an option",
        ),
    ],
)
def test_an_invalid_option_is_an_error_naming_it(
    model: Any, embeddings: Any, options: Any, where: str
) -> None:
    with pytest.raises(ValidationError, match=where.replace(".", r"\.")):
        MemAlignJudge("h", INSTRUCTIONS, model, embeddings, options=options)


def test_the_options_round_trip_through_save_and_load(
    make_judge: Any, model: Any, tmp_path: Path
) -> None:
    options = {
        "prompt": {"verdict_order": "rationale_first"},
        "reflection": {"batch_size": 2},
        "max_retries": 4,
    }
    judge = make_judge(path=tmp_path / "mem", options=options)
    judge.align([SWEATER, HOURS])
    judge.save(tmp_path / "copy")
    want = judge.config
    judge.close()
    for folder in ("mem", "copy"):
        with sqlite3.connect(tmp_path / folder / DB_FILE) as conn:
            (raw,) = conn.execute("SELECT value FROM meta WHERE key='config'").fetchone()
        assert json.loads(raw) == want.model_dump(mode="json")  # stored nested
        loaded = MemAlignJudge.load(tmp_path / folder, model=model, embeddings=HashEmbeddings())
        assert loaded.config == want
        loaded.close()
    # overrides replace the stored options field by field
    loaded = MemAlignJudge.load(
        tmp_path / "mem", model=model, embeddings=HashEmbeddings(), k=1,
        options=JudgeOptions(reflection={"contrast": 0}),
    )  # fmt: skip
    assert loaded.config.k == 1 and loaded.config.options.reflection.contrast == 0
    assert loaded.config.options.reflection.batch_size == 2  # kept
    assert loaded.config.options.prompt.verdict_order == "rationale_first"
    assert loaded.config.options.max_retries == 4
    loaded.close()
    loaded = MemAlignJudge.load(
        tmp_path / "mem", model=model, embeddings=HashEmbeddings(),
        options={"validation": {"max_calls": 5}, "max_retries": 1},
    )  # fmt: skip
    assert loaded.config.options.validation.max_calls == 5
    assert loaded.config.options.max_retries == 1
    assert loaded.config.options.prompt.verdict_order == "rationale_first"
    loaded.close()


def test_a_memory_stored_flat_reopens_with_its_options_and_is_stored_nested(
    make_judge: Any, model: Any, tmp_path: Path
) -> None:
    make_judge(path=tmp_path).close()
    old = {**FLAT_BOOL, "name": "helpfulness", "instructions": INSTRUCTIONS, "k": 3,
           "judge_prompt": "checklist", "reflect_batch_size": 3}  # fmt: skip
    with sqlite3.connect(tmp_path / DB_FILE) as conn:
        conn.execute("UPDATE meta SET value=? WHERE key='config'", (json.dumps(old),))
    judge = MemAlignJudge.load(tmp_path, model=model, embeddings=HashEmbeddings())
    assert _ablation.of(judge.config).layout == "checklist"
    assert judge.config.options.reflection.batch_size == 3
    assert flat(judge.config) == old
    judge.align([SWEATER])
    judge.close()
    # the constructor rewrites the stored configuration, nested, without the ablations
    make_judge(path=tmp_path, options={"_ablation": {"layout": "checklist"}}).close()
    with sqlite3.connect(tmp_path / DB_FILE) as conn:
        (raw,) = conn.execute("SELECT value FROM meta WHERE key='config'").fetchone()
    stored = json.loads(raw)
    assert "judge_prompt" not in stored and stored["options"]["reflection"]["batch_size"] == 8
    assert "_ablation" not in stored["options"] and "layout" not in stored["options"]["prompt"]


# The benchmarks' ablations: where each was an option, and the values the benchmarks give.
ABLATIONS = {
    ("prompt", "layout"): ("checklist", "plain"),
    ("prompt", "pairwise_mode"): ("both_orders", "one_order"),
    ("validation", "require_fix"): (True,),
    ("retrieval", "show_other_answers"): (False,),
}


@pytest.mark.parametrize(("place", "values"), sorted(ABLATIONS.items()))
def test_an_ablation_is_no_option_and_reaches_the_judge_through_the_private_hook(
    place: tuple[str, str], values: tuple[Any, ...], make_judge: Any
) -> None:
    group, field = place
    dotted = f"{group}.{field}"
    # not in the public schema, its reference or the judge file's known keys
    model = JudgeOptions.model_fields[group].annotation
    assert field not in model.model_fields  # type: ignore[union-attr]
    assert field not in json.dumps(JudgeOptions.model_json_schema())
    docs = Path(__file__).parents[2] / "docs"
    for page in [docs / "cli.md", *(docs / "api").glob("*.md")]:
        assert f"`{dotted}" not in page.read_text() and f"{field} =" not in page.read_text()
    with pytest.raises(ValidationError, match=re.escape(f"options.{dotted}")):
        make_judge(options={group: {field: values[0]}})
    for value in values:  # kept working for the benchmarks that regenerate figures with it
        hook = _ablation.PLACES[dotted]
        judge = make_judge(scale="pairwise", options={"_ablation": {hook: value}})
        assert getattr(_ablation.of(judge.config), hook) == value
        assert getattr(_ablation.of(judge.config), hook) != getattr(Ablation(), hook)
        judge.close()
