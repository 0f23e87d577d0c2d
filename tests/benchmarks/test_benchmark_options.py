"""Benchmarks name judge options flat on their command lines; the judge takes them nested."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import quality
import rules
from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel
from harness.options import judge_kwargs, option_value

from langchain_memalign import JudgeOptions

MODELS = (ScriptedChatModel(responder=RoleResponder()), None, HashEmbeddings())


def test_flat_names_become_keywords_and_nested_options() -> None:
    kwargs = judge_kwargs(
        {"k": 0, "reuse_expert_verdicts": False, "judge_prompt": "checklist"},
        {"validate_guidelines": "off", "validation.max_calls": 3, "reflection": "pairs"},
    )
    assert kwargs == {
        "k": 0,
        "options": {
            "retrieval": {"reuse_expert_verdicts": False},
            "prompt": {"layout": "checklist"},
            "validation": {"mode": "off", "max_calls": 3},
            "reflection": {"mode": "pairs"},
        },
    }
    assert judge_kwargs({}) == {}
    assert option_value({"validate_require_fix": True}, "validate_require_fix") is True
    assert option_value({"validation.require_fix": True}, "validate_require_fix") is True
    assert option_value({}, "validate_require_fix", False) is False
    with pytest.raises(ValidationError, match="judge_promt"):
        JudgeOptions.model_validate(judge_kwargs({"judge_promt": "plain"})["options"])


@pytest.mark.parametrize("name", sorted(quality.ABLATIONS))
def test_every_quality_ablation_is_a_valid_judge(name: str) -> None:
    args = SimpleNamespace(
        k=5, episode_max_chars=900, embed_max_chars=1500, reflect_batch_size=8,
        judge_options={"judge_prompt": "plain"},
    )  # fmt: skip
    spec = SimpleNamespace(name="j", instructions="{inputs} {outputs}", scale="pairwise")
    judge = quality.Bench(args, MODELS).new_judge(spec, quality.ABLATIONS[name])  # type: ignore[arg-type]
    options = judge.config.options
    assert options.retrieval.reuse_expert_verdicts is False
    flat = quality.ABLATIONS[name]
    (key, value), *_ = flat.items()
    assert option_value(flat, key) == value
    judge.close()


def test_a_rules_ablation_command_line_reaches_the_judge() -> None:
    ap: Any = SimpleNamespace(error=pytest.fail)
    name, opts = rules._ablation("plain:judge_prompt=plain;reflection=pairs;k=2", ap)
    args = SimpleNamespace(judge_options=dict([rules._option("validate_require_fix=true", ap)]))
    domain = SimpleNamespace(name="d", criterion="{inputs} {outputs}")
    judge = rules.Bench(args, MODELS).new_judge(domain, opts)  # type: ignore[arg-type]
    assert name == "plain" and judge.config.k == 2
    options = judge.config.options
    assert options.prompt.layout == "plain" and options.reflection.mode == "pairs"
    assert options.validation.require_fix is True
    assert options.retrieval.reuse_expert_verdicts is False
    judge.close()


def test_rules_merge_joins_domains_of_one_repeat_and_keeps_repeats_apart(tmp_path: Path) -> None:
    import json

    def result(name: str, runs: dict[str, dict[str, Any]]) -> Path:
        path = tmp_path / name
        path.write_text(json.dumps({"data_sha256": "x", "invocations": [], "runs": runs}))
        return path

    entry = {"test": [], "seen": []}
    first = result("a.json", {"ours_oracle#0": {"medication": entry}})
    second = result("b.json", {"ours_oracle#0": {"contracts": entry}})
    again = result("c.json", {"ours_oracle#0": {"medication": entry}})
    merged = rules.merge_results([first, second, again], tmp_path / "m.json")
    assert sorted(merged["runs"]) == ["ours_oracle#0", "ours_oracle#1"]
    assert sorted(merged["runs"]["ours_oracle#0"]) == ["contracts", "medication"]
    assert sorted(merged["runs"]["ours_oracle#1"]) == ["medication"]


def test_rules_learning_curve_puts_unaligned_at_0_and_averages_repeats(tmp_path: Path) -> None:
    def pooled(adv: int) -> dict[str, Any]:
        return {"pooled": {"adversarial": adv, "scope": 10, "plain": 12}}

    summary = {
        "runs": {
            "unaligned#0": pooled(16), "ours@4#0": pooled(20), "ours#0": pooled(29),
            "ours#1": pooled(30), "checks_oracle#0": pooled(30),
        }
    }  # fmt: skip
    points = rules.curve_points(summary)
    assert points["adversarial"] == [(0, 16), (4, 20), (8, 29.5)]
    rules.plot_curve(summary, str(tmp_path / "c.png"))
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
