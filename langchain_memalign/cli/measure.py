"""Measuring the judge: `memalign evaluate` and `memalign curve`."""

from __future__ import annotations

import random
import time
from pathlib import Path

from langchain_memalign.cli.commands import _judge_cases
from langchain_memalign.cli.context import Context
from langchain_memalign.cli.io import echo, fmt_number, read_feedback, shorten, to_json, usage_line
from langchain_memalign.cli.judge_file import EXIT_FAILED, EXIT_OK, CLIError, build_models
from langchain_memalign.cli.progress import ascii_curve
from langchain_memalign.config import merge_options
from langchain_memalign.feedback import Feedback
from langchain_memalign.judge import MemAlignJudge


def cmd_evaluate(ctx: Context) -> int:
    """Measure the judge's agreement with human labels in a JSONL file."""
    from langchain_memalign.evaluation.agreement import agreement_report, embedding_usage
    from langchain_memalign.evaluation.usage import UsageCallbackHandler, with_callback

    args = ctx.args
    feedback = read_feedback(args.file, ctx.cfg.scale)
    if not feedback:
        raise CLIError(f"{args.file}: no labelled cases")
    judge = ctx.judge()
    try:
        started = time.perf_counter()
        cases = [
            {"inputs": f.inputs, "outputs": f.outputs, "reference_outputs": f.reference_outputs}
            for f in feedback
        ]
        counter = UsageCallbackHandler()
        embedded = embedding_usage(judge)
        results = _judge_cases(ctx, judge, cases, "evaluating", with_callback(None, counter))
        report = agreement_report(
            feedback,
            results,
            judge.scale,
            name=ctx.cfg.name,
            ordinal=True if args.ordinal else None,
            usage=counter.usage() + embedding_usage(judge, since=embedded),
            seconds=time.perf_counter() - started,
        )
    finally:
        judge.close()
    if args.output:
        try:
            Path(args.output).write_text(report.model_dump_json(indent=2), encoding="utf-8")
        except OSError as e:
            raise CLIError(f"cannot write {args.output}: {e}") from e
    if args.json:
        echo(to_json(report.summary()))
        return EXIT_OK
    echo(f"Agreement of {judge.name!r} with {args.file} ({report.n} case(s)):")
    echo(f"  accuracy        {fmt_number(report.accuracy, pct=True)}  ({report.n_scored} scored)")
    echo(f"  Cohen's kappa   {fmt_number(report.kappa)}")
    if report.weighted_kappa is not None:
        echo(f"  weighted kappa  {fmt_number(report.weighted_kappa)}")
    if report.mae is not None:
        echo(f"  MAE             {fmt_number(report.mae)}")
        echo(f"  CCC             {fmt_number(report.ccc)}")
    if report.inter_annotator is not None:
        ia = report.inter_annotator
        echo(
            f"  humans' Krippendorff alpha {fmt_number(ia.krippendorff_alpha)}; pairwise agreement "
            f"humans {fmt_number(ia.pairwise_agreement, pct=True)}, judge-human "
            f"{fmt_number(ia.judge_annotator_agreement, pct=True)}"
        )
    if report.confusion is not None:
        echo("  confusion (rows: human, columns: judge)")
        labels = [str(x) for x in report.confusion.labels]
        width = max(len(x) for x in labels) + 2
        echo("    " + " " * width + "".join(f"{x:>{width}}" for x in labels))
        for label, row in zip(labels, report.confusion.counts, strict=True):
            echo(f"    {label:>{width}}" + "".join(f"{c:>{width}}" for c in row))
    if report.disagreements and args.show > 0:
        echo(f"  disagreements ({len(report.disagreements)}, first {args.show}):")
        for d in report.disagreements[: args.show]:
            echo(f"    {d.id}: human {d.human!r}, judge {d.judge!r}")
            if d.judge_rationale:
                echo(f"      judge: {shorten(d.judge_rationale)}")
            if d.human_rationale:
                echo(f"      human: {shorten(d.human_rationale)}")
    echo(f"Cost: {usage_line(report.usage, report.seconds)}")
    if report.failed:
        echo(f"  {len(report.failed)} judgment(s) failed: {report.failed[0].error}")
        return EXIT_FAILED
    return EXIT_OK


def cmd_curve(ctx: Context) -> int:
    """Draw a learning curve: agreement on held-out cases as feedback grows."""
    from langchain_memalign.evaluation.learning_curve import DEFAULT_SHARDS, learning_curve

    args = ctx.args
    cfg = ctx.cfg
    data = read_feedback(args.file, cfg.scale)
    test_file = read_feedback(args.test_file, cfg.scale) if args.test_file else None
    pool = len(data) if test_file is not None else len(data) // 2
    n_train = min(args.train if args.train is not None else 50, pool)
    if n_train < 1 or (test_file is not None and not test_file):
        raise CLIError(f"{args.file}: too few labelled cases for a learning curve")
    shards = args.shards or sorted({s for s in DEFAULT_SHARDS if s < n_train} | {n_train})
    seeds = args.seeds or [0]

    def fixed_split(seed: int) -> tuple[list[Feedback], list[Feedback]]:
        train = list(data)
        random.Random(seed).shuffle(train)
        return train[:n_train], list(test_file or [])

    models = build_models(cfg, ctx.factory)
    prompt = cfg.prompt()

    def make_judge() -> MemAlignJudge:
        return MemAlignJudge(
            name=cfg.name,
            instructions=prompt,
            model=models.chat,
            embeddings=models.embeddings,
            scale=cfg.scale,
            reflection_model=models.reflection,
            k=cfg.k,
            # the model grades seen cases too: the curve shows what it learned from them
            options=merge_options(
                cfg.options.model_dump(), {"retrieval": {"reuse_expert_verdicts": False}}
            ),
        )

    points = [s for s in shards if s <= n_train]
    with ctx.progress(len(points) * len(seeds), "learning curve") as bar:
        curve = learning_curve(
            make_judge,
            data,
            n_train=n_train,
            n_test=args.test,
            shards=shards,
            seeds=seeds,
            ordinal=True if args.ordinal else None,
            evaluate_seen=not args.no_seen,
            max_concurrency=args.concurrency,
            split=fixed_split if test_file is not None else None,
            on_stage=lambda _: bar.advance(),
        )
    if args.output:
        curve.save(args.output)
    if args.plot:
        try:
            curve.plot(args.plot, metric=args.metric)
        except ImportError as e:
            raise CLIError(f"--plot: {e}", EXIT_FAILED) from e
    if args.json:
        echo(curve.model_dump_json(indent=2))
        return EXIT_OK
    means = curve.mean(args.metric, "test")
    echo(
        f"Learning curve of {curve.name!r}: {args.metric} on {curve.n_test} test case(s), "
        f"mean over {len(seeds)} seed(s)"
    )
    echo(ascii_curve(means, metric=args.metric))
    if args.output:
        echo(f"Saved to {args.output}")
    if args.plot:
        echo(f"Drawn to {args.plot}")
    return EXIT_OK
