"""LangSmith as the judge's feedback loop: feedback in, annotation queues, verdicts out.

One import for the whole integration:

- feedback in: `LangSmithFeedbackSource`, `FeedbackMapping`, `SyncReport`, `Conflict`;
- annotation queues: `JudgeAnnotationQueue`, `SendReport`, `CycleReport`,
  `CompletedItems`;
- verdicts out: `JudgeRunEvaluator`, `judge_evaluator`, `ajudge_evaluator`,
  `invoke_and_log`, `write_verdicts`, `awrite_verdicts`, `Verdict`, `Verdicts`;
- comparing two experiments with a pairwise judge: `comparative_evaluator`;
- the judge as a LangSmith online evaluator: `export_evaluator`, `EvaluatorExport`
  (also `MemAlignJudge.to_langsmith_evaluator`);
- watching production traffic: `JudgeMonitor`, `MonitorCycle`, `ReviewAgreement`,
  `RunRecord` (what a `where` filter sees);
- errors: `FeedbackConfigMismatchError` (the workspace reads the judge's key on
  another scale).
"""

from langchain_memalign.errors import FeedbackConfigMismatchError
from langchain_memalign.langsmith._api import CompletedItems, RunRecord
from langchain_memalign.langsmith.comparative import PairPreparer, comparative_evaluator
from langchain_memalign.langsmith.evaluator import (
    JudgeRunEvaluator,
    Verdict,
    Verdicts,
    ainvoke_and_log,
    ajudge_evaluator,
    awrite_verdicts,
    evaluation_result,
    invoke_and_log,
    judge_evaluator,
    write_verdicts,
)
from langchain_memalign.langsmith.export import EvaluatorExport, export_evaluator
from langchain_memalign.langsmith.monitor import JudgeMonitor, MonitorCycle, ReviewAgreement
from langchain_memalign.langsmith.queue import (
    CycleReport,
    JudgeAnnotationQueue,
    SendReport,
)
from langchain_memalign.langsmith.source import (
    Conflict,
    ConflictPolicy,
    FeedbackMapping,
    LangSmithFeedbackSource,
    SyncReport,
    Vote,
)

__all__ = [
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
