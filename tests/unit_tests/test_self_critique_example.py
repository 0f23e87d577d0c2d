"""The self-critique example runs end to end with scripted models; every example has a test."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel
from langchain_core.messages import BaseMessage

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def empathy_rule(case: str, memory: str) -> dict[str, Any]:
    """Fails rude replies, and cold replies to upset customers once memory teaches empathy."""
    upset = any(w in case.lower() for w in ("frustrated", "disappointed"))
    if "acknowledge" in memory.lower() and upset and "sorry" not in case.lower():
        return {"rationale": "It does not acknowledge the customer's frustration.", "score": False}
    return {"rationale": "Helpful and accurate.", "score": True}


class SupportScript:
    """Plays the support agent; everything else goes to the judge's responder."""

    def __init__(self) -> None:
        self.judge = RoleResponder(empathy_rule)
        self.agent_prompts: list[list[BaseMessage]] = []

    def __call__(self, messages: list[BaseMessage]) -> Any:
        if not str(messages[0].content).startswith("You are a customer-support agent"):
            return self.judge(messages)
        self.agent_prompts.append(messages)
        question = str(messages[1].content)
        revising = len(messages) > 2
        if "charged twice" in question:
            if revising:
                return "I'm so sorry about the double charge! The refund takes 5-7 business days."
            return "Duplicate charges are refunded within 5-7 business days."
        return "Sure! Items can be returned within 30 days."


def test_self_critique_agent(capsys: pytest.CaptureFixture[str]) -> None:
    example = load_example("self_critique_agent")
    script = SupportScript()
    model = ScriptedChatModel(responder=script)
    out = example.main([], model=model, embeddings=HashEmbeddings())

    charged = out["outcomes"]["ticket-101"]
    assert len(charged["drafts"]) == 2 and "sorry" in charged["draft"]
    assert charged["critique"]["passed"] and charged["critique"]["round"] == 2
    # The revision prompt carried the judge's rationale.
    revision = script.agent_prompts[1]
    assert "does not acknowledge" in str(revision[-1].content)
    returns = out["outcomes"]["ticket-102"]
    assert returns["critique"]["passed"] and len(returns["drafts"]) == 1

    judge = out["judge"]
    assert judge.get_feedback("ticket-101").value is True  # confirmed
    corrected = judge.get_feedback("ticket-102")
    assert corrected.value is False and corrected.metadata["confirmed"] is False
    assert out["guidelines_after"] == out["guidelines_before"] + 1
    assert any("ticket-102" in g.source_ids for g in judge.guidelines)

    printed = capsys.readouterr().out
    assert "sent after 2 critique(s), passed" in printed
    assert "ticket-102 corrected (1 new guideline(s))" in printed


def test_self_critique_agent_keeps_memory_in_a_folder(tmp_path: Path) -> None:
    example = load_example("self_critique_agent")
    model = ScriptedChatModel(responder=SupportScript())
    example.main(
        ["--memory-dir", str(tmp_path), "--max-rounds", "0"],
        model=model,
        embeddings=HashEmbeddings(),
    )
    assert (tmp_path / "memory.sqlite").is_file()


def test_self_critique_agent_says_what_to_set_without_a_model(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    example = load_example("self_critique_agent")
    with pytest.raises(SystemExit) as exc:
        example.main([])
    assert exc.value.code == 2
    assert "OPENAI_API_KEY" in capsys.readouterr().err


def test_every_example_has_an_end_to_end_test() -> None:
    """Examples cannot rot: each `examples/NAME.py` is named by some unit test.

    A test names an example as a string (`load_example("NAME")`, `"NAME.py"`).
    """
    tests = "\n".join(p.read_text() for p in Path(__file__).parent.rglob("test_*.py"))
    named = set(re.findall(r"[\"'](\w+)(?:\.py)?[\"']", tests))
    examples = {p.stem for p in EXAMPLES.glob("*.py") if not p.name.startswith("_")}
    assert sorted(examples - named) == [], "examples without a test that runs them"
