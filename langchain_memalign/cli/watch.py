"""`memalign watch`: the judge on a LangSmith project's traffic, in cycles."""

from __future__ import annotations

import datetime as dt

from langchain_memalign.cli.context import Context
from langchain_memalign.cli.io import echo, to_json
from langchain_memalign.cli.judge_file import EXIT_FAILED, EXIT_OK, CLIError
from langchain_memalign.cli.langsmith_env import require_api_key, unknown_project
from langchain_memalign.errors import MemAlignError


def cmd_watch(ctx: Context) -> int:
    """Judge new runs, queue some for review and learn from completed reviews.

    Exits `EXIT_FAILED` when a cycle did not do all its work (a judgment or a reflection
    failed, or the rate limit cut it short): cron's `--once` then reports it.
    """
    from langsmith import utils as ls_utils

    from langchain_memalign.langsmith import JudgeMonitor, MonitorCycle

    args = ctx.args
    require_api_key()  # before the judge opens its memory: nothing to undo
    judge = ctx.judge()
    try:
        monitor = JudgeMonitor(
            judge,
            project=args.langsmith_project,
            sampling_rate=args.sampling_rate,
            scan=args.scan,
            review_limit=args.review_limit,
            review_sample=args.review_sample,
            seed=args.seed,
            trace=args.trace,
            since=args.since,
            log_agreement=args.log_agreement,
        )
        try:  # a typo in the name is the user's to fix, not a failed cycle
            monitor.api.project(args.langsmith_project)
        except ls_utils.LangSmithNotFoundError as e:
            raise unknown_project(args.langsmith_project) from e

        troubled: list[MonitorCycle] = []

        def report(cycle: MonitorCycle) -> None:
            if not cycle.clean:
                troubled.append(cycle)
            if args.json:
                echo(to_json(cycle.model_dump(mode="json") | {"accuracy": cycle.accuracy}))
            else:
                echo(f"[{dt.datetime.now():%H:%M:%S}] {cycle.summary()}")

        monitor.watch(args.interval, cycles=1 if args.once else args.cycles, on_cycle=report)
    except (MemAlignError, KeyboardInterrupt):
        raise
    except ValueError as e:
        raise CLIError(str(e)) from e
    finally:
        judge.close()
    return EXIT_FAILED if troubled else EXIT_OK
