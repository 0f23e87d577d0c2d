"""The public surface: what `langchain_memalign` and its LangSmith module export.

Adding or removing a name here is an API change: update the docs and the changelog.
"""

from __future__ import annotations

import inspect

import langchain_memalign
import langchain_memalign.langsmith
from langchain_memalign import JudgeConfig, MemAlignJudge
from langchain_memalign.config import AUTO, FLOORS

EXPECTED_ALL = [
    "AlignFailedError",
    "AlignReport",
    "CritiqueState",
    "EmbeddingMismatchError",
    "Episode",
    "Feedback",
    "Guideline",
    "InvalidFeedbackError",
    "JudgeConfig",
    "JudgeResult",
    "LimitExceededError",
    "MalformedOutputError",
    "MemAlignError",
    "MemAlignJudge",
    "MemoryFormatError",
    "MemoryUnavailableError",
    "ReflectionError",
    "Scale",
    "SelfCritique",
    "UnalignReport",
    "UnknownFeedbackError",
    "Usage",
]

EXPECTED_LANGSMITH_ALL = [
    "CompletedItems",
    "Conflict",
    "ConflictPolicy",
    "CycleReport",
    "FeedbackConfigMismatchError",
    "FeedbackMapping",
    "JudgeAnnotationQueue",
    "JudgeRunEvaluator",
    "LangSmithFeedbackSource",
    "SendReport",
    "SyncReport",
    "Verdict",
    "Vote",
    "ainvoke_and_log",
    "ajudge_evaluator",
    "awrite_verdicts",
    "evaluation_result",
    "invoke_and_log",
    "judge_evaluator",
    "write_verdicts",
]


def test_all() -> None:
    assert sorted(langchain_memalign.__all__) == EXPECTED_ALL
    assert sorted(langchain_memalign.langsmith.__all__) == EXPECTED_LANGSMITH_ALL
    for module in (langchain_memalign, langchain_memalign.langsmith):
        for name in module.__all__:
            assert getattr(module, name) is not None, name


def test_cli_entry_point_exports_main_only() -> None:
    import langchain_memalign.cli as cli

    assert cli.__all__ == ["main"] and callable(cli.main)


def test_judge_options_are_keyword_only_with_the_config_defaults() -> None:
    params = inspect.signature(MemAlignJudge.__init__).parameters
    positional = [
        n
        for n, p in params.items()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and n != "self"
    ]
    assert positional == ["name", "instructions", "model", "embeddings"]
    assert not any(p.kind is p.VAR_KEYWORD for p in params.values())
    # every JudgeConfig option is a keyword of the constructor, with the same default
    # (the similarity floors: "auto", which JudgeConfig resolves from the scale)
    for field, info in JudgeConfig.model_fields.items():
        if field in ("name", "instructions", "scale"):
            continue
        assert params[field].kind is inspect.Parameter.KEYWORD_ONLY, field
        assert params[field].default == (AUTO if field in FLOORS else info.default), field


def test_the_core_loads_without_the_toolkits() -> None:
    # The judge needs neither the evaluation toolkit, the CLI, LangSmith's
    # integration nor matplotlib to load (they are imported when used).
    import subprocess
    import sys

    code = (
        "import sys, langchain_memalign; "
        "print(sorted(m for m in sys.modules if m.startswith(("
        "'langchain_memalign.evaluation', 'langchain_memalign.cli', "
        "'langchain_memalign.langsmith', 'matplotlib'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
