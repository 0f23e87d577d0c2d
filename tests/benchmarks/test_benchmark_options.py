"""Benchmarks name judge options by their dotted place on their command lines; the judge
takes them nested."""

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
import scenario
from conftest import fb
from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel
from harness.options import judge_kwargs, option_value

from langchain_memalign import JudgeOptions, MemAlignJudge
from langchain_memalign import _ablation as ablation_hook

MODELS = (ScriptedChatModel(responder=RoleResponder()), None, HashEmbeddings())


def test_dotted_names_become_keywords_and_nested_options() -> None:
    kwargs = judge_kwargs(
        {"k": 0, "retrieval.reuse_expert_verdicts": False, "prompt.layout": "checklist"},
        {"validation.mode": "off", "validation.max_calls": 3, "max_retries": 1},
        {"reflection": {"mode": "pairs"}},  # nested, as `scenario.py --options` may be
    )
    assert kwargs == {
        "k": 0,
        "options": {
            "retrieval": {"reuse_expert_verdicts": False},
            # an ablation, no option: the judge's private hook
            "_ablation": {"layout": "checklist"},
            "validation": {"mode": "off", "max_calls": 3},
            "max_retries": 1,
            "reflection": {"mode": "pairs"},
        },
    }
    assert judge_kwargs({}) == {}
    assert option_value({"validation.require_fix": True}, "validation.require_fix") is True
    assert option_value({"_ablation": {"require_fix": True}}, "validation.require_fix") is True
    assert option_value({}, "validation.require_fix", False) is False
    with pytest.raises(ValidationError, match="prompt.layot"):
        JudgeOptions.model_validate(judge_kwargs({"prompt.layot": "plain"})["options"])


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("validate_guidelines", r"'validate_guidelines'; did you mean validation.mode\?"),
        # the flat name of an ablation names no place: the ablation is no option
        ("judge_prompt", r"unknown option 'judge_prompt': no longer an option"),
    ],
)
def test_a_flat_name_on_a_command_line_is_the_judge_error_naming_its_place(
    name: str, error: str
) -> None:
    ap: Any = SimpleNamespace(error=pytest.fail)
    args = SimpleNamespace(judge_options=dict([rules._option(f"{name}=off", ap)]))
    domain = SimpleNamespace(name="d", criterion="{inputs} {outputs}")
    with pytest.raises(ValidationError, match=error):
        rules.Bench(args, MODELS).new_judge(domain, {})  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(quality.ABLATIONS))
def test_every_quality_ablation_is_a_valid_judge(name: str) -> None:
    args = SimpleNamespace(
        k=5, episode_max_chars=900, embed_max_chars=1500, reflect_batch_size=8,
        judge_options={"prompt.layout": "plain"},
    )  # fmt: skip
    spec = SimpleNamespace(name="j", instructions="{inputs} {outputs}", scale="pairwise")
    judge = quality.Bench(args, MODELS).new_judge(spec, quality.ABLATIONS[name])  # type: ignore[arg-type]
    options = judge.config.options
    assert options.retrieval.reuse_expert_verdicts is False
    assert options.retrieval.episode_max_chars == 900 and options.reflection.batch_size == 8
    ablation = quality.ABLATIONS[name]
    (key, value), *_ = ablation.items()
    assert option_value(ablation, key) == value
    if key in ablation_hook.PLACES:  # reached the judge's private hook
        assert getattr(ablation_hook.of(judge.config), ablation_hook.PLACES[key]) == value
    else:  # reached the judge
        group, field = key.split(".")
        assert getattr(getattr(options, group), field) == value
    judge.close()


def test_a_rules_ablation_command_line_reaches_the_judge() -> None:
    ap: Any = SimpleNamespace(error=pytest.fail)
    name, opts = rules._ablation("plain:prompt.layout=plain;reflection.mode=pairs;k=2", ap)
    args = SimpleNamespace(judge_options=dict([rules._option("validation.require_fix=true", ap)]))
    domain = SimpleNamespace(name="d", criterion="{inputs} {outputs}")
    judge = rules.Bench(args, MODELS).new_judge(domain, opts)  # type: ignore[arg-type]
    assert name == "plain" and judge.config.k == 2
    options = judge.config.options
    ablation = ablation_hook.of(judge.config)
    assert ablation.layout == "plain" and options.reflection.mode == "pairs"
    assert ablation.require_fix is True
    assert options.retrieval.reuse_expert_verdicts is False
    judge.close()


def test_scenario_options_json_reaches_the_judge(monkeypatch: pytest.MonkeyPatch) -> None:
    # scenario.py builds its judge on the local servers; the judge it would build is checked
    made: dict[str, Any] = {}

    def fake_judge(**kwargs: Any) -> Any:
        made.update(kwargs)
        return SimpleNamespace()

    monkeypatch.setattr(scenario, "MemAlignJudge", fake_judge)
    args = SimpleNamespace(
        options='{"validation.require_fix": true, "retrieval": {"min_similarity": 0.5}}',
        k=5, chat_model="m", chat_url="http://x/v1", embedding_model="e",
        emb_url="http://x/v1", max_tokens=10, instructions="{inputs} {outputs}",
    )  # fmt: skip
    scenario.make_judge(args)  # type: ignore[arg-type]
    options = JudgeOptions.model_validate(made["options"])
    assert options._ablation.require_fix is True and options.retrieval.min_similarity == 0.5
    assert options.retrieval.reuse_expert_verdicts is False and made["k"] == 5
    assert option_value(scenario.judge_options(args), "validation.require_fix") is True  # type: ignore[arg-type]


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
    both = result("d.json", {"ours#0": {"medication": entry}, "unaligned#0": {"medication": entry}})
    picked = rules.merge_results([Path(f"{both}:unaligned"), first], tmp_path / "p.json")
    assert sorted(picked["runs"]) == ["ours_oracle#0", "unaligned#0"]


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


def test_rules_stream_aligns_step_by_step_and_judges_after_each_step() -> None:
    criterion = "Reply to a customer.\n{inputs}\n{outputs}\nAcceptable?"

    def row(i: int, split: str, label: bool) -> dict[str, Any]:
        return {
            "id": f"{split}-{i}", "domain": "d", "split": split, "kind": split,
            "criterion": criterion, "inputs": {"request": f"question {i}"},
            "outputs": f"answer {i}", "label": label, "feedback": f"reason {i}",
            "meta": {"rule": "r"},
        }  # fmt: skip

    rows = [row(i, "train", i % 2 == 0) for i in range(6)] + [row(9, "test", True)]
    domain = rules.Domain("d", rows)
    args = SimpleNamespace(judge_options={}, seen=True, max_concurrency=1)
    points = rules.Bench(args, MODELS).run_stream(domain, [4, 2, 6])  # type: ignore[arg-type]
    assert sorted(points) == [2, 4, 6]
    steps = [points[n]["align"]["step"] for n in (2, 4, 6)]
    assert [len(s) for s in steps] == [2, 2, 2]
    assert len({i for s in steps for i in s}) == 6  # each item aligned once
    assert points[4]["align"]["trained_on"] == steps[0] + steps[1]
    # costs add up along the stream; every point judges the test cases, the last the seen
    assert points[6]["align"]["llm_calls"] >= points[2]["align"]["llm_calls"]
    assert all(len(points[n]["test"]) == 1 for n in (2, 4, 6))
    assert "seen" not in points[4] and len(points[6]["seen"]) == 6


def test_rules_stream_points_put_unaligned_at_0(tmp_path: Path) -> None:
    def pooled(adv: int) -> dict[str, Any]:
        return {"pooled": {"adversarial": adv, "scope": 10, "plain": 12}}

    summary = {"runs": {"unaligned#0": pooled(16), "ours~2#0": pooled(20), "ours~8#0": pooled(25),
                        "ours#0": pooled(29)}}  # fmt: skip
    assert rules.stream_points(summary)["adversarial"] == [(0, 16), (2, 20), (8, 25)]
    assert rules.stream_points({"runs": {"ours#0": pooled(29)}}) == {}
    rules.plot_curve(summary, str(tmp_path / "c.png"))
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_relearn_checks_learns_a_saved_memorys_checks_again(tmp_path: Path) -> None:
    responder = RoleResponder(lambda case, memory: {"rationale": "Fine.", "score": True})
    responder.check_word = "sorry"
    model = ScriptedChatModel(responder=responder)
    options: dict[str, Any] = {"checks": {"mode": "separate"}, "validation": {"mode": "off"}}
    train = [
        fb("a", "Refund please, I'm upset", "Refunds take 5 days.", False, "Say sorry first."),
        fb("b", "My order is late, I'm angry", "It ships soon.", False, "No apology at all."),
        fb("c", "I'm upset, the app crashed", "So sorry! Reinstall it.", True, "Apologises."),
        fb("d", "I'm angry, charged twice", "Sorry about that, refunded.", True, "Good."),
    ]
    judge = MemAlignJudge(
        name="d", instructions="{inputs} {outputs}", model=model, embeddings=HashEmbeddings(),
        scale=bool, options=options,
    )  # fmt: skip
    judge.align(train)
    before = {r.id: r.check.describe() for r in judge.rules.list() if r.check is not None}
    assert before
    judge.save(tmp_path / "memory")
    judge.close()

    loaded = MemAlignJudge.load(tmp_path / "memory", model, HashEmbeddings())
    calls = len(responder.roles)
    got = rules.relearn_checks(loaded)
    # Learned again from scratch: every rule's questions asked anew, the same checks kept.
    assert got["llm_calls"] == len(responder.roles) - calls > 0
    assert got["input_tokens"] > 0 and not got["errors"]
    again = {r.id: r.check.describe() for r in loaded.rules.list() if r.check is not None}
    assert again == before
    assert {c["rule_id"] for c in got["checks"]} >= set(before)
    loaded.close()
