"""The commands that change or use the memory: create, align, judge, unalign."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig

from langchain_memalign.cli.context import Context
from langchain_memalign.cli.io import (
    chunks,
    echo,
    open_text,
    parse_json_arg,
    read_cases,
    read_feedback,
    shorten,
    to_json,
    usage_line,
)
from langchain_memalign.cli.judge_file import EXIT_FAILED, EXIT_OK, TEMPLATE, CLIError
from langchain_memalign.cli.langsmith_env import require_api_key, unknown_project
from langchain_memalign.errors import (
    MemAlignError,
    UnknownFeedbackError,
)
from langchain_memalign.feedback import Feedback
from langchain_memalign.judge import MemAlignJudge
from langchain_memalign.memory.postgres import describe_location, memory_exists
from langchain_memalign.reports import AlignReport
from langchain_memalign.result import label_of

if TYPE_CHECKING:
    from langchain_memalign.langsmith import SyncReport


def cmd_create(ctx: Context) -> int:
    """Create (or update) the judge's memory folder from the judge file."""
    if ctx.args.template:
        sys.stdout.write(TEMPLATE)
        return EXIT_OK
    folder = ctx.memory()
    existed = memory_exists(folder)
    judge = ctx.judge(create=True)
    try:
        stats = judge.stats()
        verb = "Updated the configuration of" if existed else "Created"
        echo(
            f"{verb} judge {judge.name!r} ({judge.scale.kind} scale) in {describe_location(folder)}"
        )
        if existed:
            echo(
                f"  it holds {stats['feedback']} feedback item(s) and "
                f"{stats['guidelines']} guideline(s)"
            )
        echo(
            f"Next: memalign align -c {ctx.args.config} feedback.jsonl\n"
            f"      memalign judge -c {ctx.args.config} --inputs '...' --outputs '...'"
        )
    finally:
        judge.close()
    return EXIT_OK


def _sync_langsmith(ctx: Context, judge: MemAlignJudge) -> tuple[SyncReport, str | None]:
    """Align the judge with new or changed human feedback in LangSmith (incremental).

    Also where the project or experiment opens in the LangSmith app, when the client
    can say (for the agreement line).
    """
    from langsmith import utils as ls_utils

    from langchain_memalign.langsmith import LangSmithFeedbackSource
    from langchain_memalign.langsmith._agreement_log import session_url

    args = ctx.args
    require_api_key()
    where = (
        f"project {args.langsmith_project!r}"
        if args.langsmith_project
        else f"experiment {args.langsmith_experiment!r}"
    )
    try:
        source = LangSmithFeedbackSource(
            project=args.langsmith_project,
            experiment=args.langsmith_experiment,
            key=args.feedback_key,
            conflicts=args.conflicts,
            log_agreement=args.log_agreement,
        )
        name = args.langsmith_project or args.langsmith_experiment
        try:  # a typo in the name is the user's to fix, not a failed sync
            session = source.api.project(name)
        except ls_utils.LangSmithNotFoundError as e:
            raise unknown_project(name) from e
        return source.sync(judge), session_url(session)
    except MemAlignError:
        raise
    except CLIError:
        raise
    except Exception as e:
        raise CLIError(
            f"cannot sync feedback from LangSmith {where}: {type(e).__name__}: {e} "
            "(LANGSMITH_API_KEY and LANGSMITH_ENDPOINT configure the client)",
            EXIT_FAILED,
        ) from e


def cmd_align(ctx: Context) -> int:
    """Align the judge with feedback from JSONL files or LangSmith."""
    args = ctx.args
    from_langsmith = bool(args.langsmith_project or args.langsmith_experiment)
    if args.langsmith_project and args.langsmith_experiment:
        raise CLIError("give --langsmith-project or --langsmith-experiment, not both")
    if not args.files and not from_langsmith:
        raise CLIError("give feedback: one or more JSONL files, or --langsmith-project NAME")
    items: list[Feedback] = []
    seen: dict[str, str] = {}
    for path in args.files:
        for fb in read_feedback(path, ctx.cfg.scale):
            if fb.id in seen:
                raise CLIError(f"feedback id {fb.id!r} is in both {seen[fb.id]} and {path}")
            seen[fb.id] = path
            items.append(fb)
    if args.limit is not None:
        items = items[: args.limit]
    judge = ctx.judge()
    out: dict[str, Any] = {"files": None, "langsmith": None}
    failed: list[str] = []
    errors: list[str] = []
    try:
        if items:
            reports: list[AlignReport] = []
            done = 0
            for chunk in chunks(items, args.batch_size):
                # Each align names its steps as they run (reflect, validate, ...): an
                # item count would stay at 0% for as long as they take.
                label = f"aligning {done + 1}-{done + len(chunk)} of {len(items)}"
                with ctx.align_steps(label) as steps:
                    config = RunnableConfig(callbacks=[steps]) if steps is not None else None
                    reports.append(
                        judge.align(
                            chunk, config, raise_on_failure=False, score_first=args.score_first
                        )
                    )
                done += len(chunk)
            total = AlignReport.merge(reports)
            out["files"] = total
            failed, errors = total.failed, total.errors
            if not args.json:
                echo(
                    f"Aligned {len(items)} feedback item(s) with {judge.name!r}: "
                    f"{len(total.added)} added, {len(total.updated)} updated, "
                    f"{len(total.unchanged)} unchanged."
                )
                echo(
                    f"Guidelines: {len(total.guidelines_added)} added, "
                    f"{len(total.guidelines_removed)} removed; now {len(judge.guidelines)}."
                )
                _print_checks(total)
                if args.score_first:
                    _print_scored_first(judge, total)
                echo(f"Cost: {usage_line(total.usage, total.seconds)}")
        elif args.files:
            echo("No feedback in the files.", file=sys.stderr)
        if from_langsmith:
            sync, url = _sync_langsmith(ctx, judge)
            out["langsmith"] = sync
            if sync.align is not None:
                failed, errors = failed + sync.align.failed, errors + sync.align.errors
            if not args.json:
                _print_sync(sync, judge)
                _print_agreement(sync, judge, url, logged=args.log_agreement)
        if args.json:
            echo(
                json.dumps(
                    {k: None if v is None else v.model_dump(mode="json") for k, v in out.items()},
                    indent=2,
                )
            )
        if failed:
            echo(
                f"Reflection failed for {len(failed)} item(s) ({', '.join(failed)}); "
                "they are stored and retried by the next align. Errors:\n  " + "\n  ".join(errors),
                file=sys.stderr,
            )
            return EXIT_FAILED
    finally:
        judge.close()
    return EXIT_OK


def _print_scored_first(judge: MemAlignJudge, report: AlignReport) -> None:
    """How the judge did on the new items it graded before learning them (`--score-first`)."""
    points = judge.memory.store.prequential(report.agreement_recorded)
    agreed = sum(p["judge"] == p["expert"] for p in points)
    share = f": it agreed with {agreed} of {len(points)}" if points else ""
    echo(
        f"Scored first: {len(report.graded_first)} new item(s) judged before learning them"
        f"{share} (memalign show --curve for the series)"
    )


def _print_checks(report: AlignReport) -> None:
    """What the checks did to each proposed guideline: rejected, or graded on seen cases.

    The counts alone ("1 added") hide a rule the experts stated that validation dropped,
    which is what a user needs to see to trust or question the memory.
    """
    for r in report.guidelines_rejected:
        echo(f"  rejected ({r.reason}): {shorten(r.text)}")
    for c in report.validation:
        if c.action == "unchecked":
            echo(f"  unchecked (validation budget spent): {shorten(c.text)}")
            continue
        again = f"; {len(c.unconfirmed)} more broke once, not again" if c.unconfirmed else ""
        effect = f"fixed {len(c.fixed)}, broke {len(c.broken)} of {len(c.cases)} seen{again}"
        echo(f"  {c.action} ({effect}): {shorten(c.text)}")
        if c.narrowed_text:
            echo(f"    now: {shorten(c.narrowed_text)}")
    cal = report.calibration
    if cal is not None:
        # The remapping changes scores without a guideline saying so: worth a line.
        mapping = ", ".join(f"{k} -> {v}" for k, v in cal.mapping.items()) or "none yet"
        echo(
            f"  calibration: {len(cal.graded)} seen case(s) graded as unseen, "
            f"{cal.pairs} in all; the judge's scores given instead: {mapping}"
        )


def _print_sync(sync: SyncReport, judge: MemAlignJudge) -> None:
    echo(
        f"LangSmith: {sync.listed} human review(s) and correction(s) found; "
        f"{len(sync.added)} added, {len(sync.updated)} updated, "
        f"{len(sync.removed)} unaligned (deleted or overruled), {len(sync.skipped)} skipped, "
        f"{len(sync.conflicts)} conflict(s); {sync.seconds:.1f}s."
    )
    if sync.align is not None:
        echo(
            f"Guidelines: {len(sync.align.guidelines_added)} added; now {len(judge.guidelines)}. "
            f"Cost: {usage_line(sync.align.usage, sync.align.seconds)}"
        )
        _print_checks(sync.align)
    for fid, reason in list(sync.skipped.items())[:5]:
        echo(f"  skipped {fid}: {reason}", file=sys.stderr)


def _print_agreement(
    sync: SyncReport, judge: MemAlignJudge, url: str | None, *, logged: bool
) -> None:
    """One line: how the judge did on the reviews before learning them, and where to see it."""
    if not sync.agreement:
        return  # no new review on a run with the judge's verdict: nothing was measured
    from langchain_memalign.langsmith._agreement_log import agreement_key

    agreed = sum(a.agrees for a in sync.agreement)
    line = (
        f"Agreement: the judge agreed with {agreed} of {len(sync.agreement)} review(s) "
        "before learning them"
    )
    written = [fid for fid in sync.agreement_feedback_ids.values() if fid]
    key = agreement_key(judge.config.name)
    if not logged:
        where = "kept in the judge's memory only (--no-log-agreement)"
    elif written and url:  # the app's page of the project or experiment: its feedback
        where = f"in LangSmith as feedback {key!r} on {url}"
    elif written:  # no page the client can name: the record's id finds it
        where = f"in LangSmith as feedback {written[0]} ({key!r})"
    else:
        where = (
            "not written to LangSmith (refused: see the warning); kept in the judge's "
            "memory (memalign show --curve)"
        )
    echo(f"{line}; {where}")  # no full stop: it would stick to the link


def _judge_cases(
    ctx: Context,
    judge: MemAlignJudge,
    cases: Sequence[dict[str, Any]],
    label: str,
    config: RunnableConfig | None = None,
) -> list[Any]:
    results: list[Any] = []
    config = {**(config or {}), "max_concurrency": ctx.args.concurrency}
    with ctx.progress(len(cases), label) as bar:
        for chunk in chunks(cases, ctx.args.batch_size):
            results += judge.batch(list(chunk), config, return_exceptions=True)
            bar.advance(len(chunk))
    return results


def cmd_judge(ctx: Context) -> int:
    """Judge one case (--inputs/--outputs) or every case of a JSONL file."""
    args = ctx.args
    if args.file and args.inputs is not None:
        raise CLIError("give a JSONL file or --inputs/--outputs, not both")
    if args.file:
        cases = read_cases(args.file)
    elif args.inputs is not None:
        parse = parse_json_arg if args.json_values else (lambda s, _: s)
        case = {
            "inputs": parse(args.inputs, "--inputs"),
            "outputs": None if args.outputs is None else parse(args.outputs, "--outputs"),
            "reference_outputs": (
                None if args.reference is None else parse(args.reference, "--reference")
            ),
        }
        cases = [("case", case)]
    else:
        raise CLIError("give a case to judge: --inputs TEXT [--outputs TEXT], or a JSONL file")
    judge = ctx.judge()
    rows: list[dict[str, Any]] = []
    out: IO[str] = sys.stdout
    try:
        results = _judge_cases(ctx, judge, [c for _, c in cases], "judging")
        for (cid, _), res in zip(cases, results, strict=True):
            if isinstance(res, BaseException):
                rows.append({"id": cid, "error": ctx.explain(res)})
            else:
                rows.append({"id": cid, **res})
        if args.output:
            out = open(args.output, "w", encoding="utf-8")  # noqa: SIM115
        if args.output or not args.json:
            out.writelines(to_json(row) + "\n" for row in rows)
    except OSError as e:
        raise CLIError(f"cannot write {args.output}: {e}") from e
    finally:
        if out is not sys.stdout:
            out.close()
        judge.close()
    failed = sum("error" in r for r in rows)
    scores = [label_of(r) for r in results if isinstance(r, dict)]
    counts = {str(s): scores.count(s) for s in dict.fromkeys(scores)}
    if args.json:
        summary: dict[str, Any] = {"n": len(cases), "scores": counts, "failed": failed}
        if args.output:
            summary["output"] = args.output
        else:
            summary["results"] = rows
        echo(to_json(summary))
    elif len(cases) > 1 or args.output:
        summary_text = ", ".join(f"{k}: {v}" for k, v in counts.items())
        where = f" to {args.output}" if args.output else ""
        echo(
            f"Judged {len(cases)} case(s){where}; scores {summary_text or 'none'}; "
            f"{failed} failed.",
            file=sys.stderr,
        )
    if failed:
        first = next(r for r in results if isinstance(r, BaseException))
        echo(f"memalign: {failed} judgment(s) failed, e.g.: {ctx.explain(first)}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def cmd_unalign(ctx: Context) -> int:
    """Remove feedback and everything derived from it."""
    args = ctx.args
    ids = list(args.ids)
    if args.ids_file:
        fh = open_text(args.ids_file)
        try:
            ids += [line.strip() for line in fh if line.strip()]
        finally:
            if fh is not sys.stdin:
                fh.close()
    if not ids:
        raise CLIError("give the feedback ids to remove (or --ids-file FILE)")
    judge = ctx.judge()
    try:
        try:
            report = judge.unalign(ids)
        except UnknownFeedbackError as e:
            raise CLIError(f"{e}; nothing was removed (see `memalign show --feedback`)") from e
        if args.json:
            echo(report.model_dump_json(indent=2))
        else:
            echo(
                f"Removed {len(report.removed)} feedback item(s) from {judge.name!r}: "
                f"{len(report.guidelines_removed)} guideline(s) removed, "
                f"{len(report.guidelines_rederived)} re-derived from their remaining sources."
            )
            echo(f"Cost: {usage_line(report.usage, report.seconds)}")
        if report.errors:
            echo("Errors:\n  " + "\n  ".join(report.errors), file=sys.stderr)
            return EXIT_FAILED
    finally:
        judge.close()
    return EXIT_OK
