"""LLM judges that learn from human feedback through a dual memory (MemAlign).

The public surface: `MemAlignJudge` (a LangChain Runnable), `Feedback`, the
reports, the scale, the memory records and the errors.
"""

from langchain_memalign.config import JudgeConfig
from langchain_memalign.critique import CritiqueState, SelfCritique
from langchain_memalign.errors import (
    AlignFailedError,
    EmbeddingMismatchError,
    InvalidFeedbackError,
    LimitExceededError,
    MalformedOutputError,
    MemAlignError,
    MemoryFormatError,
    MemoryUnavailableError,
    ReflectionError,
    UnknownFeedbackError,
)
from langchain_memalign.feedback import Feedback
from langchain_memalign.judge import MemAlignJudge
from langchain_memalign.memory.episodic import Episode
from langchain_memalign.memory.semantic import Guideline
from langchain_memalign.reports import AlignReport, UnalignReport, Usage
from langchain_memalign.result import JudgeResult
from langchain_memalign.scale import Scale

__all__ = [
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
__version__ = "0.1.0"
