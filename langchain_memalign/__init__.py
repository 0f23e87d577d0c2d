"""LLM judges that learn from human feedback through a dual memory (MemAlign).

The public surface: `MemAlignJudge` (a LangChain Runnable), its options
(`JudgeOptions` and its groups), `Feedback`, the reports every public method
returns, the scale, the memory records and the errors.
"""

from typing import TYPE_CHECKING, Any

from langchain_memalign.config import (
    CalibrationOptions,
    JudgeConfig,
    JudgeOptions,
    PromptOptions,
    ReflectionOptions,
    RetrievalOptions,
    ValidationOptions,
)
from langchain_memalign.critique import CritiqueState, SelfCritique
from langchain_memalign.errors import (
    AlignFailedError,
    EmbeddingMismatchError,
    InvalidFeedbackError,
    InvalidFeedbackIdError,
    InvalidJudgeInputError,
    InvalidRuleError,
    LimitExceededError,
    MalformedOutputError,
    MemAlignError,
    MemoryBusyError,
    MemoryFormatError,
    MemoryFullError,
    MemoryPermissionError,
    MemoryReadOnlyError,
    MemoryUnavailableError,
    ReflectionError,
    UnknownFeedbackError,
    UnknownRuleError,
)
from langchain_memalign.feedback import Feedback
from langchain_memalign.judge import MemAlignJudge
from langchain_memalign.memory.episodic import Episode
from langchain_memalign.memory.semantic import Guideline
from langchain_memalign.prequential import (
    AgreementHistory,
    AgreementWindow,
    AlignMarker,
    ReviewPoint,
)
from langchain_memalign.reports import AlignReport, CalibrationReport, UnalignReport, Usage
from langchain_memalign.result import JudgeResult
from langchain_memalign.rules import RejectedRule, Rule, Rulebook, RuleChange
from langchain_memalign.scale import Scale

if TYPE_CHECKING:
    from langchain_memalign.evaluation.report import AgreementReport
    from langchain_memalign.langsmith.export import EvaluatorExport

__all__ = [
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
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # `MemAlignJudge.agreement`'s report, imported on first use: the judge loads
    # without the evaluation toolkit.
    if name == "AgreementReport":
        from langchain_memalign.evaluation.report import AgreementReport

        return AgreementReport
    if name == "EvaluatorExport":  # `to_langsmith_evaluator`'s report, likewise
        from langchain_memalign.langsmith.export import EvaluatorExport

        return EvaluatorExport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
