"""The public surface: what `langchain_memalign` and its LangSmith module export.

Adding or removing a name here is an API change: update the docs and the changelog.
"""

from __future__ import annotations

import inspect
import uuid

import langsmith

import langchain_memalign
import langchain_memalign.langsmith
from langchain_memalign import JudgeConfig, MemAlignJudge

EXPECTED_ALL = [
    "AgreementHistory",
    "AgreementReport",
    "AgreementWindow",
    "AlignFailedError",
    "AlignMarker",
    "AlignReport",
    "CalibrationOptions",
    "CalibrationReport",
    "CritiqueState",
    "EmbeddingMismatchError",
    "Episode",
    "EvaluatorExport",
    "Feedback",
    "Guideline",
    "InvalidFeedbackError",
    "InvalidFeedbackIdError",
    "InvalidJudgeInputError",
    "InvalidRuleError",
    "JudgeConfig",
    "JudgeOptions",
    "JudgeResult",
    "LimitExceededError",
    "MalformedOutputError",
    "MemAlignError",
    "MemAlignJudge",
    "MemoryBusyError",
    "MemoryFormatError",
    "MemoryFullError",
    "MemoryPermissionError",
    "MemoryReadOnlyError",
    "MemoryUnavailableError",
    "PromptOptions",
    "ReflectionError",
    "ReflectionOptions",
    "RejectedRule",
    "RetrievalOptions",
    "ReviewPoint",
    "Rule",
    "RuleChange",
    "Rulebook",
    "Scale",
    "SelfCritique",
    "UnalignReport",
    "UnknownFeedbackError",
    "UnknownRuleError",
    "Usage",
    "ValidationOptions",
]

EXPECTED_LANGSMITH_ALL = [
    "CompletedItems",
    "Conflict",
    "ConflictPolicy",
    "CycleReport",
    "EvaluatorExport",
    "FeedbackConfigMismatchError",
    "FeedbackMapping",
    "JudgeAnnotationQueue",
    "JudgeMonitor",
    "JudgeRunEvaluator",
    "LangSmithFeedbackSource",
    "MonitorCycle",
    "PairPreparer",
    "ReviewAgreement",
    "RunRecord",
    "SendReport",
    "SyncReport",
    "Verdict",
    "Verdicts",
    "Vote",
    "ainvoke_and_log",
    "ajudge_evaluator",
    "awrite_verdicts",
    "comparative_evaluator",
    "evaluation_result",
    "export_evaluator",
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


def test_the_constructor_signature() -> None:
    params = inspect.signature(MemAlignJudge.__init__).parameters
    assert list(params) == [
        "self", "name", "instructions", "model", "embeddings",
        "scale", "k", "path", "reflection_model", "rate_limiter", "options",
    ]  # fmt: skip
    positional = [n for n, p in params.items() if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert positional == ["self", "name", "instructions", "model", "embeddings"]
    assert not any(p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) for p in params.values())
    assert params["k"].default == JudgeConfig.model_fields["k"].default
    assert params["options"].default is None


def test_every_public_return_type_is_exported() -> None:
    """What a public method of the judge returns can be imported from the package."""
    import typing

    exported = {getattr(langchain_memalign, n) for n in langchain_memalign.__all__}
    # the names the judge module imports only for type checking
    names = {
        **vars(langchain_memalign.judge),
        "AgreementReport": langchain_memalign.AgreementReport,
        "EvaluatorExport": langchain_memalign.EvaluatorExport,
        "Client": langsmith.Client,
        "uuid": uuid,
    }
    for name, member in inspect.getmembers(MemAlignJudge):
        if name.startswith("_") or name in ("load", "InputType", "OutputType"):
            continue
        if not inspect.isfunction(member) and not isinstance(member, property):
            continue
        func = member.fget if isinstance(member, property) else member
        if func.__qualname__.split(".")[0] != "MemAlignJudge":
            continue  # inherited from Runnable
        hints = typing.get_type_hints(func, names)
        returned = hints.get("return")
        for t in (returned, *typing.get_args(returned)):
            if isinstance(t, type) and t.__module__.startswith("langchain_memalign"):
                assert t in exported, (name, t)


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
