"""examples/annotation_queue_loop.py end to end, with scripted models and the local server."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

_TESTS_DIR = str(Path(__file__).resolve().parents[2])
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel  # noqa: E402
from langsmith import Client  # noqa: E402
from langsmith_server import LangSmithTestServer  # noqa: E402

pytest_plugins = ["langsmith_fixtures"]
pytestmark = pytest.mark.usefixtures("langsmith_env")

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "annotation_queue_loop.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("example_annotation_queue_loop", EXAMPLE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def empathy_rule(case: str, memory: str) -> dict[str, Any]:
    """A generic judge: fails only rude replies, until the memory teaches empathy."""
    text = case.lower()
    rude = any(w in text for w in ("yourself", "whatever"))
    upset = any(w in text for w in ("frustrated", "disappointed", "upset", "angry"))
    if rude or ("acknowledge" in memory.lower() and upset and "sorry" not in text):
        return {"rationale": "Unhelpful.", "score": False}
    return {"rationale": "Helpful.", "score": True}


def model() -> ScriptedChatModel:
    return ScriptedChatModel(responder=RoleResponder(empathy_rule))


def test_example_cycle_raises_agreement(
    server: LangSmithTestServer, capsys: pytest.CaptureFixture[str]
) -> None:
    client = Client(api_url=server.url, api_key="test")
    out = load_example().main([], model=model(), embeddings=HashEmbeddings(), client=client)
    client.close(timeout=5)

    assert (out["before"], out["after"]) == (5 / 8, 1.0)
    assert (out["before_held_out"], out["after_held_out"]) == (0.5, 1.0)
    printed = capsys.readouterr().out
    assert "reviewed runs          3/4 -> 4/4" in printed
    assert "runs not reviewed yet  2/4 -> 4/4" in printed
    assert "all runs               5/8 -> 8/8" in printed
    assert "bob corrected the judge:" in printed
    assert "Pulling again adds nothing: 0 new, 0 changed." in printed
    # The series of the queue's reviews, each scored before it was learned, by align.
    history = out["history"]
    assert [(a.number, a.after) for a in history.aligns] == [(1, 4), (2, 8)]
    assert [(w.first, w.last) for w in history.windows] == [(1, 4), (5, 8)]
    assert history.windows[0].accuracy == 0.75  # the judge's verdicts on cycle 1's runs
    assert "align 2 after review 8: learned 4" in printed

    # What the cycle left in LangSmith: the queue with all runs, the reviewers' work
    items = server.queue_items[out["queue_id"]]
    assert len(items) == 8
    # Cycle 1's runs, then cycle 2's, reviewed and completed.
    assert all(i["status"] == "completed" for i in items)
    corrections = [f for f in server.feedback.values() if f["correction"]]
    assert len(corrections) >= 1 and corrections[0]["feedback_source"]["type"] == "model"
    assert out["pulled"].listed == 4 and len(out["pulled"].added) == 4
    judge = out["judge"]
    assert any("acknowledge" in g.text for g in judge.guidelines)
    annotators = {judge.get_feedback(i).annotator for i in judge.feedback_ids}
    assert {"alice", "bob"} <= annotators


def test_example_starts_the_local_server_itself(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = load_example().main(
        ["--memory-dir", str(tmp_path / "memory"), "--batch", "3"],
        model=model(),
        embeddings=HashEmbeddings(),
    )
    printed = capsys.readouterr().out
    assert "Local LangSmith test server at http://127.0.0.1:" in printed
    assert len(out["reviewed"]) == 3 and len(out["sent_next"]) == 3
    assert out["after"] >= out["before"]
    assert (tmp_path / "memory" / "memory.sqlite").is_file()


def test_example_says_what_to_set_without_a_model(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(SystemExit) as exc:
        load_example().main([])
    assert exc.value.code == 2
    assert "OPENAI_API_KEY" in capsys.readouterr().err
