"""LangSmith as the judge's feedback loop: feedback in, annotation queues, verdicts out.

One import for what a user calls:

- feedback in: `LangSmithFeedbackSource`, `FeedbackMapping`, `SyncReport`;
- annotation queues: `JudgeAnnotationQueue`, `CycleReport`;
- verdicts out: `JudgeRunEvaluator`, `judge_evaluator`, `ajudge_evaluator`,
  `invoke_and_log`, `write_verdicts`;
- comparing two experiments with a pairwise judge: `comparative_evaluator`;
- the judge as a LangSmith online evaluator: `export_evaluator`, `EvaluatorExport`
  (also `MemAlignJudge.to_langsmith_evaluator`);
- watching production traffic: `JudgeMonitor`, `MonitorCycle`.

The records those reports hold, the argument types, and the async and low-level
variants (`awrite_verdicts`, `ainvoke_and_log`, `evaluation_result`) are in
`langchain_memalign.langsmith.types`; the integration's error,
`FeedbackConfigMismatchError` (the workspace reads the judge's key on another scale), in
`langchain_memalign.errors`.
"""

from langchain_memalign.langsmith.comparative import comparative_evaluator
from langchain_memalign.langsmith.evaluator import (
    JudgeRunEvaluator,
    ajudge_evaluator,
    invoke_and_log,
    judge_evaluator,
    write_verdicts,
)
from langchain_memalign.langsmith.export import EvaluatorExport, export_evaluator
from langchain_memalign.langsmith.monitor import JudgeMonitor, MonitorCycle
from langchain_memalign.langsmith.queue import CycleReport, JudgeAnnotationQueue
from langchain_memalign.langsmith.source import (
    FeedbackMapping,
    LangSmithFeedbackSource,
    SyncReport,
)

__all__ = [
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
