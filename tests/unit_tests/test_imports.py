"""The public surface: what `langchain_memalign` and its public modules export.

Adding or removing a name here is an API change: update the docs and the changelog
(CHANGELOG.md). The API reference (docs/api/*.md) documents exactly these names.
"""

from __future__ import annotations

import importlib
import inspect
import re
import uuid
from pathlib import Path
from typing import Any

import langsmith
import pytest

import langchain_memalign
import langchain_memalign.langsmith
from langchain_memalign import MemAlignJudge
from langchain_memalign.config import JudgeConfig

# What a user types in the first hour: the judge, its options, feedback, the scale, a
# judgment's result, the reports its methods return, the base error and the errors
# callers catch. openevals exports 8 names, langmem 10, langchain-openai 7.
EXPECTED_ALL = [
    "AgreementReport",
    "AlignFailedError",
    "AlignReport",
    "CalibrationReport",
    "Feedback",
    "InvalidFeedbackError",
    "InvalidJudgeInputError",
    "JudgeOptions",
    "JudgeResult",
    "MalformedOutputError",
    "MemAlignError",
    "MemAlignJudge",
    "MemoryBusyError",
    "MemoryFormatError",
    "Scale",
    "SelfCritique",
    "UnalignReport",
    "UnknownFeedbackError",
]

EXPECTED_LANGSMITH_ALL = [
    "CycleReport",
    "EvaluatorExport",
    "FeedbackMapping",
    "JudgeAnnotationQueue",
    "JudgeMonitor",
    "JudgeRunEvaluator",
    "LangSmithFeedbackSource",
    "MonitorCycle",
    "SyncReport",
    "ajudge_evaluator",
    "comparative_evaluator",
    "export_evaluator",
    "invoke_and_log",
    "judge_evaluator",
    "write_verdicts",
]

# Every public module but the two above, with its `__all__`: where the names the top
# level leaves out live.
EXPECTED_MODULE_ALL = {
    "langchain_memalign.config": [
        "CalibrationOptions",
        "ChecksOptions",
        "JudgeConfig",
        "JudgeOptions",
        "PromptOptions",
        "ReflectionOptions",
        "RetrievalOptions",
        "ValidationOptions",
    ],
    "langchain_memalign.errors": [
        "AlignFailedError",
        "EmbeddingMismatchError",
        "FeedbackConfigMismatchError",
        "InvalidFeedbackError",
        "InvalidFeedbackIdError",
        "InvalidJudgeInputError",
        "InvalidRuleError",
        "LimitExceededError",
        "MalformedOutputError",
        "MemAlignError",
        "MemoryBusyError",
        "MemoryFormatError",
        "MemoryFullError",
        "MemoryPermissionError",
        "MemoryReadOnlyError",
        "MemoryUnavailableError",
        "ReflectionError",
        "UnknownFeedbackError",
        "UnknownRuleError",
    ],
    "langchain_memalign.reports": [
        "AlignReport",
        "CalibrationReport",
        "CheckReport",
        "GuidelineCheck",
        "RejectedGuideline",
        "UnalignReport",
        "Usage",
    ],
    "langchain_memalign.result": ["JudgeResult", "label_of"],
    "langchain_memalign.rules": ["RejectedRule", "Rule", "RuleChange", "Rulebook"],
    "langchain_memalign.memory": ["Episode", "Guideline"],
    "langchain_memalign.critique": [
        "CritiqueState",
        "NOTE_MESSAGE_NAME",
        "Route",
        "SelfCritique",
        "case_from_messages",
        "default_case",
        "default_note",
        "default_passed",
        "note_as_message",
    ],
    "langchain_memalign.models": ["openai_compatible", "resolve_chat_model", "resolve_embeddings"],
    "langchain_memalign.cli": ["JudgeFile", "ModelFactory", "Models", "main"],
    "langchain_memalign.evaluation": [
        "AgreementHistory",
        "AgreementReport",
        "AgreementWindow",
        "AlignMarker",
        "LearningCurve",
        "ReviewPoint",
        "aevaluate_agreement",
        "evaluate_agreement",
        "learning_curve",
    ],
    "langchain_memalign.evaluation.agreement": [
        "ANNOTATOR_LABELS_KEY",
        "AgreementReport",
        "BatchJudge",
        "CaseResult",
        "ConfusionMatrix",
        "Disagreement",
        "InterAnnotatorAgreement",
        "aevaluate_agreement",
        "agreement_report",
        "embedding_usage",
        "evaluate_agreement",
    ],
    "langchain_memalign.evaluation.report": [
        "AgreementReport",
        "CaseResult",
        "ConfusionMatrix",
        "Disagreement",
        "InterAnnotatorAgreement",
    ],
    "langchain_memalign.evaluation.metrics": [
        "accuracy",
        "ccc",
        "cohen_kappa",
        "confusion_matrix",
        "fleiss_kappa",
        "krippendorff_alpha",
        "label_order",
        "mae",
        "pairwise_agreement",
    ],
    "langchain_memalign.evaluation.usage": ["UsageCallbackHandler", "with_callback"],
    "langchain_memalign.evaluation.learning_curve": [
        "AlignableJudge",
        "DEFAULT_SHARDS",
        "LearningCurve",
        "StageResult",
        "learning_curve",
        "split_train_test",
    ],
    "langchain_memalign.evaluation.plots": ["plot_agreement_history", "plot_curves"],
    "langchain_memalign.langsmith.pairwise": [
        "PreferenceRead",
        "SkippedPreference",
        "read_preferences",
        "read_queue_preferences",
    ],
    "langchain_memalign.langsmith.types": [
        "CompletedItems",
        "Conflict",
        "ConflictPolicy",
        "PairPreparer",
        "ReviewAgreement",
        "RunRecord",
        "SendReport",
        "Verdict",
        "Verdicts",
        "Vote",
        "ainvoke_and_log",
        "awrite_verdicts",
        "evaluation_result",
    ],
}

PUBLIC_MODULES = {
    "langchain_memalign": EXPECTED_ALL,
    "langchain_memalign.langsmith": EXPECTED_LANGSMITH_ALL,
    **EXPECTED_MODULE_ALL,
}


def test_all() -> None:
    assert sorted(langchain_memalign.__all__) == EXPECTED_ALL
    assert sorted(langchain_memalign.langsmith.__all__) == EXPECTED_LANGSMITH_ALL
    # the bounds of issue #45: a first hour's worth at the top, a short integration
    assert len(EXPECTED_ALL) <= 20 and len(EXPECTED_LANGSMITH_ALL) <= 15


@pytest.mark.parametrize("name", sorted(PUBLIC_MODULES))
def test_public_module_all(name: str) -> None:
    module = importlib.import_module(name)
    assert sorted(module.__all__) == sorted(PUBLIC_MODULES[name])
    for member in module.__all__:
        assert getattr(module, member) is not None, member


def test_every_top_level_name_has_a_home() -> None:
    """Each name the top level exports is also in its own module's `__all__`."""
    homes = {
        id(getattr(importlib.import_module(m), n))
        for m in EXPECTED_MODULE_ALL
        for n in PUBLIC_MODULES[m]
    }
    missing = {n for n in EXPECTED_ALL if id(getattr(langchain_memalign, n)) not in homes}
    assert missing == {"Feedback", "MemAlignJudge", "Scale"}, missing


# -- the API reference documents exactly the exported names ------------------------------

DOCS_API = Path(__file__).resolve().parents[2] / "docs" / "api"


def _directives() -> list[tuple[str, str, list[str] | None]]:
    """Each `::: target` of docs/api/*.md: (page, target, its `members:` list or None)."""
    found = []
    for page in sorted(DOCS_API.glob("*.md")):
        lines = page.read_text().splitlines()
        for i, line in enumerate(lines):
            if not line.startswith("::: "):
                continue
            members: list[str] | None = None
            j = i + 1
            while j < len(lines) and (lines[j].startswith(" ") or not lines[j].strip()):
                if lines[j].strip() == "members:":
                    members = []
                elif members is not None and (m := re.fullmatch(r"\s+- (\w+)", lines[j])):
                    members.append(m.group(1))
                elif members is not None and lines[j].strip():
                    break
                j += 1
            found.append((page.name, line[4:].strip(), members))
    return found


def _resolve(target: str) -> tuple[str, str | None]:
    """A directive's target as (module, member), member None for a module."""
    try:
        importlib.import_module(target)
        return target, None
    except ModuleNotFoundError:
        module, _, member = target.rpartition(".")
        return module, member


def _rendered() -> list[tuple[str, str, str]]:
    """Every object the API reference renders: (page, module, name)."""
    out = []
    for page, target, members in _directives():
        module, member = _resolve(target)
        if member is not None:
            out.append((page, module, member))
        else:
            # A module's page lists its members: the default would render what griffe
            # finds public, which need not be the module's `__all__`.
            assert members, f"{page}: ::: {target} lists no members"
            out.extend((page, module, m) for m in members)
    return out


def test_the_api_reference_renders_only_exported_names() -> None:
    for page, module, name in _rendered():
        assert module in PUBLIC_MODULES, f"{page}: {module} is not a public module"
        assert name in importlib.import_module(module).__all__, f"{page}: {module}.{name}"


def test_every_exported_name_is_documented() -> None:
    documented: set[int] = set()
    for _, module, name in _rendered():
        documented.add(id(getattr(importlib.import_module(module), name)))
    undocumented = [
        f"{module}.{name}"
        for module, names in PUBLIC_MODULES.items()
        for name in names
        if id(getattr(importlib.import_module(module), name)) not in documented
    ]
    assert undocumented == []


def test_every_object_is_rendered_once() -> None:
    seen: dict[int, str] = {}
    for page, module, name in _rendered():
        obj: Any = getattr(importlib.import_module(module), name)
        if isinstance(obj, str | int | tuple):
            continue  # constants are values: equal ones may share an identity
        assert id(obj) not in seen, f"{page}: {module}.{name} also at {seen[id(obj)]}"
        seen[id(obj)] = f"{page}: {module}.{name}"


def test_cli_exports_the_entry_point_and_the_model_factory_contract() -> None:
    import langchain_memalign.cli as cli
    from langchain_memalign.cli import judge_file

    assert callable(cli.main)
    assert (cli.JudgeFile, cli.Models) == (judge_file.JudgeFile, judge_file.Models)


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
    """What a public method of the judge returns is exported by a public module."""
    import typing

    exported = {
        getattr(importlib.import_module(m), n) for m, names in PUBLIC_MODULES.items() for n in names
    }
    # the names the judge module imports only for type checking
    names = {
        **vars(langchain_memalign.judge),
        "AgreementReport": langchain_memalign.AgreementReport,
        "EvaluatorExport": langchain_memalign.langsmith.EvaluatorExport,
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
