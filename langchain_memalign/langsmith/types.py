"""The LangSmith integration's records and type aliases, and its less-used functions.

`langchain_memalign.langsmith` exports what a user calls: the feedback source, the
annotation queue, the monitor, the evaluators and their main reports. The types their
reports hold, the aliases their arguments take, and the async and low-level variants of
its functions live here:

- feedback in: `Conflict` and `Vote` (what `SyncReport.conflicts` holds), `ConflictPolicy`;
- annotation queues: `SendReport` (`JudgeAnnotationQueue.send`), `CompletedItems`;
- verdicts out: `Verdict` and `Verdicts` (what `write_verdicts` returns),
  `awrite_verdicts`, `ainvoke_and_log`, `evaluation_result`;
- comparing two experiments: `PairPreparer` (`comparative_evaluator`'s `prepare`);
- watching production traffic: `ReviewAgreement` (`MonitorCycle.agreement`),
  `RunRecord` (what a `JudgeMonitor` `where` filter sees).

The integration's error, `FeedbackConfigMismatchError`, is in `langchain_memalign.errors`.
"""

from langchain_memalign.langsmith._api import CompletedItems, RunRecord
from langchain_memalign.langsmith.comparative import PairPreparer
from langchain_memalign.langsmith.evaluator import (
    Verdict,
    Verdicts,
    ainvoke_and_log,
    awrite_verdicts,
    evaluation_result,
)
from langchain_memalign.langsmith.monitor import ReviewAgreement
from langchain_memalign.langsmith.queue import SendReport
from langchain_memalign.langsmith.source import Conflict, ConflictPolicy, Vote

__all__ = [
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
]
