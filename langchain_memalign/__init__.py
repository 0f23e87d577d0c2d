"""LLM judges that learn from human feedback through a dual memory (MemAlign).

The top level is what a first judge needs: `MemAlignJudge` (a LangChain Runnable),
`JudgeOptions`, `Feedback`, `Scale`, `JudgeResult`, `SelfCritique`, the reports the
judge's methods return, the base error and the errors callers catch. The rest lives in
public modules, each with its own `__all__`:

- `langchain_memalign.config`: `JudgeOptions`' groups and `JudgeConfig`;
- `langchain_memalign.errors`: every error;
- `langchain_memalign.reports`: the reports and what they hold (`Usage`, ...);
- `langchain_memalign.rules`: the rulebook (`Rulebook`, `Rule`, ...);
- `langchain_memalign.memory`: the memory records (`Guideline`, `Episode`);
- `langchain_memalign.evaluation`: agreement reports and series, learning curves;
- `langchain_memalign.critique`: self-critique in agent graphs;
- `langchain_memalign.langsmith`: the LangSmith integration;
- `langchain_memalign.models`: building models for a local or proxied endpoint.
"""

from typing import TYPE_CHECKING, Any

from langchain_memalign.config import JudgeOptions
from langchain_memalign.critique import SelfCritique
from langchain_memalign.errors import (
    AlignFailedError,
    InvalidFeedbackError,
    InvalidJudgeInputError,
    MalformedOutputError,
    MemAlignError,
    MemoryBusyError,
    MemoryFormatError,
    UnknownFeedbackError,
)
from langchain_memalign.feedback import Feedback
from langchain_memalign.judge import MemAlignJudge
from langchain_memalign.reports import AlignReport, CalibrationReport, UnalignReport
from langchain_memalign.result import JudgeResult
from langchain_memalign.scale import Scale

if TYPE_CHECKING:
    from langchain_memalign.evaluation.report import AgreementReport

__all__ = [
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
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # `MemAlignJudge.agreement`'s report, imported on first use: the judge loads
    # without the evaluation toolkit.
    if name == "AgreementReport":
        from langchain_memalign.evaluation.report import AgreementReport

        return AgreementReport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
