"""Examples run end to end with scripted models, so they cannot rot."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def empathy_rule(case: str, memory: str) -> dict[str, Any]:
    """A generic judge: fails only rude replies, until memory teaches empathy."""
    rude = any(w in case.lower() for w in ("yourself", "whatever", "stupid", "don't care"))
    upset = any(w in case.lower() for w in ("frustrated", "disappointed"))
    if rude or ("acknowledge" in memory.lower() and upset and "sorry" not in case.lower()):
        return {"rationale": "Unhelpful.", "score": False}
    return {"rationale": "Helpful.", "score": True}


def test_quickstart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    quickstart = load_example("quickstart")
    model = ScriptedChatModel(responder=RoleResponder(empathy_rule))
    out = quickstart.main(["--memory-dir", str(tmp_path)], model=model, embeddings=HashEmbeddings())
    assert out["baseline"] == 0.8 and out["aligned"] == 1.0 and out["seen"] == 1.0
    assert out["after_unalign"] == 0.8
    assert all("sweater" not in g.source_ids for g in out["guidelines_after_unalign"])
    printed = capsys.readouterr().out
    assert "Baseline accuracy on 5 test cases: 80%" in printed
    assert "Guidelines still citing 'sweater': 0" in printed
    before_unalign = printed.split("Unaligned 'sweater'")[0]
    assert re.search(r"<- .*\bsweater\b", before_unalign)  # provenance shown before the unalign


def test_quickstart_says_what_to_set_without_a_model(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    quickstart = load_example("quickstart")
    with pytest.raises(SystemExit) as exc:
        quickstart.main([])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "OPENAI_API_KEY" in err and "OPENAI_BASE_URL" in err


def test_quickstart_runs_on_a_base_url_without_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:8000/v1")
    quickstart = load_example("quickstart")
    args, problem = quickstart.configure([])
    assert problem is None and args.base_url == "http://localhost:8000/v1"
    model, embeddings = quickstart.openai_compatible(
        args.chat_model, args.embedding_model, base_url=args.base_url, api_key=None
    )  # without a key the OpenAI client would raise: a placeholder key is given
    assert model is not None and embeddings is not None


@pytest.fixture
def _local_langsmith(monkeypatch: pytest.MonkeyPatch) -> None:
    """No LangSmith settings of the machine's leak into an example's local stand-in."""
    for name in ("LANGSMITH_RUNS_ENDPOINTS", "LANGCHAIN_ENDPOINT", "LANGSMITH_ENDPOINT",
                 "LANGSMITH_WORKSPACE_ID", "LANGSMITH_PROJECT"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("_local_langsmith")
def test_production_watch_runs_offline_and_judges_every_run_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import time

    example = load_example("production_watch")
    # CPU time, not wall time: a busy test machine must not fail the minute it promises.
    started = time.process_time()
    out = example.main(["--offline"])
    assert time.process_time() - started < 60
    printed = capsys.readouterr().out
    assert "Local LangSmith stand-in at http://127.0.0.1:" in printed
    first, second, *_ = out["cycles"]
    assert (len(first.verdicts), first.left) == (4, 2)
    assert "4 of 4 runs judged" in printed and "2 left for the next cycle" in printed
    assert second.accuracy == 0.5 and "judge agreed with 50% before learning" in printed
    # Every run, both waves, judged exactly once; the last cycle found nothing new.
    assert out["once"] and sorted(out["verdicts"]) == sorted(out["cases"])
    assert set(out["verdicts"].values()) == {1} and len(out["cases"]) == 10
    assert "Verdicts in LangSmith: 10 on 10 runs, each judged exactly once." in printed
    assert out["cycles"][-1].considered == 0
    # What the reviewers taught it shows on the runs judged afterwards.
    assert out["second_wave_right"] == 4


def test_production_watch_says_how_to_run_offline_without_a_model(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(SystemExit) as exc:
        load_example("production_watch").main([])
    assert exc.value.code == 2 and "Pass --offline" in capsys.readouterr().err
