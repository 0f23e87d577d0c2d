"""The `memalign` argument parser: every subcommand, its options and help."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re

from langchain_memalign.cli.commands import cmd_align, cmd_create, cmd_judge, cmd_unalign
from langchain_memalign.cli.export import cmd_export_langsmith
from langchain_memalign.cli.judge_file import DEFAULT_CONFIG
from langchain_memalign.cli.measure import cmd_curve, cmd_evaluate
from langchain_memalign.cli.rules import AUTHOR_ENV, cmd_rules
from langchain_memalign.cli.show import cmd_show
from langchain_memalign.cli.watch import cmd_watch

# -- the parser --------------------------------------------------------------------------------

DESCRIPTION = """\
Align an LLM judge with human feedback (MemAlign), from the command line.

A judge is a small file (TOML, YAML or JSON): its name, instructions (the
prompt), scale, chat model and embedding model. What it learns lives in a
memory folder: guidelines distilled from the experts' rationales (each with
the feedback ids it came from) and past cases retrieved for every judgment.

Workflow:
  memalign create --template > judge.toml     write a commented example, edit it
  memalign create -c judge.toml               create the memory folder
  memalign evaluate -c judge.toml test.jsonl  agreement with humans, before...
  memalign align -c judge.toml train.jsonl    learn from expert feedback
  memalign evaluate -c judge.toml test.jsonl  ...and after
  memalign show -c judge.toml                 guidelines and where they came from
  memalign rules add -c judge.toml "..." --author dana
                                              state, fix, pin or reject a rule
  memalign unalign -c judge.toml ID ...       forget feedback and what it taught
  memalign judge -c judge.toml --inputs "..." --outputs "..."
  memalign curve -c judge.toml labelled.jsonl how agreement grows with feedback
  memalign watch -c judge.toml --langsmith-project support-bot
                                              judge production traffic, learn from reviews
  memalign export langsmith -c judge.toml --langsmith-project support-bot
                                              run the judge in LangSmith as an online evaluator
"""

FEEDBACK_FORMAT = """\
Feedback files are JSONL, one case a line:
  {"id": "t1", "inputs": "question", "outputs": "answer", "value": false,
   "rationale": "why the expert gave this score", "annotator": "ana"}
`id`, `inputs` and `value` (the expert's score on the judge's scale) are
required; `outputs`, `reference_outputs`, `rationale`, `annotator` and
`metadata` are optional. `rationale` is what guidelines are learned from.
Files of cases to judge need only `inputs` (and usually `outputs`).
"""

EPILOG = """\
Exit status: 0 success; 1 the work ran but some of it failed (a reflection, a
judgment); 2 bad arguments, configuration or input (nothing changed).
Run `memalign COMMAND --help` for a command's options and an example.
"""


def _common(
    p: argparse.ArgumentParser, *, needs_models: bool = True, needs_memory: bool = True
) -> None:
    g = p.add_argument_group("common options")
    g.add_argument(
        "-c",
        "--config",
        default=os.environ.get("MEMALIGN_CONFIG", DEFAULT_CONFIG),
        metavar="FILE",
        help="the judge file (default: $MEMALIGN_CONFIG or ./memalign.toml)",
    )
    if needs_memory:
        g.add_argument(
            "--memory",
            metavar="DIR",
            help="the memory folder or postgresql:// URL (default: `memory` in the judge file)",
        )
    if needs_models:
        g.add_argument(
            "--models",
            metavar="MODULE:FUNC",
            default=os.environ.get("MEMALIGN_MODELS"),
            help="a function building the models from the judge file, instead of its "
            "`model`/`embeddings` (default: $MEMALIGN_MODELS)",
        )
    g.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="draw progress bars on stderr (default: a bar on a terminal; elsewhere a "
        "line every 10 s while work runs)",
    )
    g.add_argument("--debug", action="store_true", help="show tracebacks of unexpected errors")


def _work_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--concurrency", type=int, default=4, metavar="N", help="parallel judgments (default: 4)"
    )
    p.add_argument(
        "--batch-size",
        type=_positive,
        default=32,
        metavar="N",
        help="cases per batch; progress is shown per batch (default: 32)",
    )


def _positive(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{value!r} must be at least 1")
    return n


_SPAN_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


def _since(value: str) -> dt.datetime | dt.timedelta:
    """A time (ISO 8601; UTC unless it says otherwise) or a span back (`30m`, `12h`, `7d`)."""
    span = re.fullmatch(r"\s*(\d+)\s*([mhd])\s*", value)
    if span:
        return dt.timedelta(**{_SPAN_UNITS[span[2]]: int(span[1])})
    try:
        at = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is neither a date nor a span: give e.g. 2025-01-31, "
            "2025-01-31T09:00:00Z, 12h or 7d"
        ) from None
    return at if at.tzinfo else at.replace(tzinfo=dt.UTC)


def _int_list(value: str) -> list[int]:
    try:
        items = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a comma-separated list of whole numbers"
        ) from None
    if not items or any(x < 0 for x in items):
        raise argparse.ArgumentTypeError(f"{value!r}: give whole numbers >= 0, e.g. 0,5,10")
    return items


def _rules_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    fmt: type[argparse.HelpFormatter],
) -> None:
    """`memalign rules` and its actions (`cli.rules`)."""
    p = sub.add_parser(
        "rules",
        help="list, add, edit, pin or reject the judge's rules as an expert",
        description="The rulebook: the judge's guidelines, learned or stated by experts. An "
        "expert can state a rule, fix one, pin one so that no align changes it, or reject "
        "one so that it is removed and never learned again. Every change is recorded with "
        f"who, when and why. --author defaults to ${AUTHOR_ENV}.",
        epilog="Examples:\n"
        "  memalign rules list -c judge.toml\n"
        '  memalign rules add -c judge.toml "Queries must read the certified views." '
        "--author dana\n"
        '  memalign rules edit -c judge.toml g-1a2b3c4d5e6f "..." --author dana --reason "..."\n'
        "  memalign rules pin -c judge.toml g-1a2b3c4d5e6f --author dana\n"
        '  memalign rules reject -c judge.toml g-1a2b3c4d5e6f --reason "too broad" '
        "--author dana\n"
        '  memalign rules check -c judge.toml g-1a2b3c4d5e6f --applies "Does the reply suggest '
        'a dose?" --broken "Does it tell the patient to confirm the dose with a pharmacist?" '
        "--broken-when no --consequence false --author dana",
        formatter_class=fmt,
    )
    actions = p.add_subparsers(dest="rules_action", metavar="ACTION", required=True)

    def author(q: argparse.ArgumentParser) -> None:
        q.add_argument(
            "--author",
            default=os.environ.get(AUTHOR_ENV),
            help=f"who makes the change (default: ${AUTHOR_ENV})",
        )

    def reason(q: argparse.ArgumentParser, *, required: bool = False) -> None:
        q.add_argument("--reason", required=required, help="why, for the history")

    q = actions.add_parser(
        "list", help="each rule's id, text, and its sources or author (no model needed)"
    )
    q.add_argument("--rejected", action="store_true", help="also list the rejected rules")
    q.add_argument("--history", action="store_true", help="also list every rulebook change")
    q.add_argument("--json", action="store_true", help="print everything as JSON")
    _common(q, needs_models=False)

    q = actions.add_parser("add", help="state a rule; its source is you")
    q.add_argument("text", help="the rule, one sentence")
    author(q)
    _common(q)

    q = actions.add_parser("edit", help="change a rule's text; its sources stay")
    q.add_argument("id", help="the rule's id (see `rules list`)")
    q.add_argument("text", help="the new text")
    author(q)
    reason(q)
    _common(q)

    for name, what in (
        ("pin", "keep a rule exactly as it is through every align and unalign"),
        ("unpin", "undo pin"),
    ):
        q = actions.add_parser(name, help=what)
        q.add_argument("id", help="the rule's id (see `rules list`)")
        author(q)
        reason(q)
        _common(q)

    q = actions.add_parser("reject", help="remove a rule; reflection will not learn it again")
    q.add_argument("id", help="the rule's id (see `rules list`)")
    reason(q, required=True)
    author(q)
    _common(q)

    q = actions.add_parser(
        "check",
        help="write a rule's check: yes/no questions the judge asks about each case",
        description="The judge asks --applies (if given), then --broken, then --exception "
        "(if given) about each case; the rule is broken when --applies is answered yes, "
        "--broken is answered --broken-when and --exception no, and the judge then gives "
        "--consequence. No align rewrites or drops your check; each align tests it on the "
        "experts' cases (`rules list` shows how it did).",
        formatter_class=fmt,
    )
    q.add_argument("id", help="the rule's id (see `rules list`)")
    q.add_argument("--broken", required=True, help="the question that shows the rule broken")
    q.add_argument("--applies", help="a question whose yes means the rule applies")
    q.add_argument("--exception", help="a question whose yes means an exception holds")
    q.add_argument(
        "--broken-when",
        choices=("yes", "no"),
        default="yes",
        help="the answer to --broken that means the rule is broken (default: yes)",
    )
    q.add_argument(
        "--consequence",
        help="the verdict when the rule is broken, on the judge's scale (not on pairwise)",
    )
    author(q)
    reason(q)
    _common(q)

    q = actions.add_parser("uncheck", help="remove a rule's check; the rule stays")
    q.add_argument("id", help="the rule's id (see `rules list`)")
    author(q)
    reason(q)
    _common(q)
    p.set_defaults(func=cmd_rules)


def build_parser() -> argparse.ArgumentParser:
    """The `memalign` argument parser (all subcommands)."""
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="memalign",
        description=DESCRIPTION,
        epilog=FEEDBACK_FORMAT + "\n" + EPILOG,
        formatter_class=fmt,
    )
    from langchain_memalign import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    p = sub.add_parser(
        "create",
        help="create a judge's memory folder from a judge file",
        description="Create the judge's memory folder from the judge file (or, run again "
        "after editing the file, update the stored instructions and options; the name "
        "and scale of a memory cannot change).",
        epilog="Example:\n  memalign create --template > judge.toml   # then edit it\n"
        "  memalign create -c judge.toml",
        formatter_class=fmt,
    )
    p.add_argument(
        "--template", action="store_true", help="print a commented example judge file and exit"
    )
    _common(p)
    p.set_defaults(func=cmd_create)

    p = sub.add_parser(
        "align",
        help="learn from expert feedback (JSONL files or a LangSmith project)",
        description="Align the judge with expert feedback: store the cases as episodes and "
        "distill guidelines from the rationales. Aligning the same feedback again costs "
        "nothing; an id with a new value or rationale replaces the old item.",
        epilog=FEEDBACK_FORMAT + "\nExample:\n  memalign align -c judge.toml feedback.jsonl\n"
        "  memalign align -c judge.toml --score-first new-reviews.jsonl\n"
        "  memalign align -c judge.toml --langsmith-project support-bot --conflicts majority",
        formatter_class=fmt,
    )
    p.add_argument("files", nargs="*", metavar="FILE", help="JSONL feedback files ('-': stdin)")
    ls = p.add_argument_group("LangSmith (LANGSMITH_API_KEY, LANGSMITH_ENDPOINT)")
    ls.add_argument(
        "--langsmith-project",
        metavar="NAME",
        help="sync human feedback on the project's runs (incremental: only new or changed "
        "reviews are aligned; deleted ones are unaligned)",
    )
    ls.add_argument(
        "--langsmith-experiment", metavar="NAME", help="sync human feedback on an experiment"
    )
    ls.add_argument(
        "--feedback-key",
        metavar="KEY",
        help="the LangSmith feedback key to read (default: the judge's name)",
    )
    ls.add_argument(
        "--conflicts",
        choices=["keep_all", "majority", "latest"],
        default="keep_all",
        help="reviews of one run that disagree: keep all (default), the majority "
        "label, or the latest label",
    )
    ls.add_argument(
        "--no-log-agreement",
        dest="log_agreement",
        action="store_false",
        help="do not write the judge's agreement with the reviews it learned as feedback "
        "on the project or experiment (default: written, key '<judge>_agreement')",
    )
    p.add_argument(
        "--limit", type=_positive, metavar="N", help="align at most N items from the files"
    )
    p.add_argument(
        "--batch-size",
        type=_positive,
        default=32,
        metavar="N",
        help="feedback items per align call; each call names its steps as they run (default: 32)",
    )
    p.add_argument(
        "--score-first",
        action="store_true",
        help="judge each new item from the files once before learning it, and record the "
        "verdict beside the expert's (one judge call each; see `memalign show --curve`). "
        "LangSmith reviews need no call: the judge's verdict on the run is used",
    )
    p.add_argument("--json", action="store_true", help="print the align report as JSON")
    _common(p)
    p.set_defaults(func=cmd_align)

    p = sub.add_parser(
        "judge",
        help="judge one case, or every case of a JSONL file",
        description="Judge a case with the aligned judge. Results are JSON lines on stdout "
        '(or --output): {"id", "key", "score", "comment", "metadata"}; the metadata names '
        "the guidelines and past cases the judge saw.",
        epilog="A case file has one JSON object a line with `inputs`, `outputs` and "
        "optionally `reference_outputs` and `id`; other keys are ignored, so a feedback "
        "file can be judged as is.\n\nExamples:\n"
        '  memalign judge -c judge.toml --inputs "I was charged twice!" \\\n'
        '      --outputs "Refunds take 5-7 days."\n'
        "  memalign judge -c judge.toml cases.jsonl -o results.jsonl",
        formatter_class=fmt,
    )
    p.add_argument("file", nargs="?", metavar="FILE", help="JSONL file of cases ('-': stdin)")
    p.add_argument("--inputs", metavar="TEXT", help="the case's inputs")
    p.add_argument("--outputs", metavar="TEXT", help="the output to judge")
    p.add_argument("--reference", metavar="TEXT", help="a reference output")
    p.add_argument(
        "--json-values",
        action="store_true",
        help="parse --inputs/--outputs/--reference as JSON instead of text",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write the results here")
    p.add_argument(
        "--json",
        action="store_true",
        help='print one JSON document {"n", "scores", "failed", "results"} instead of '
        "JSON lines (with --output: the results go to the file, the rest to stdout)",
    )
    _work_options(p)
    _common(p)
    p.set_defaults(func=cmd_judge)

    p = sub.add_parser(
        "evaluate",
        help="measure agreement with human labels",
        description="Judge every labelled case of a JSONL file and compare with the human "
        "labels: accuracy, Cohen's kappa (weighted for ordinal scales), MAE and CCC for "
        "numeric scales, a confusion matrix and the disagreements with both rationales. "
        "Evaluate on cases the judge was not aligned with.",
        epilog=FEEDBACK_FORMAT + "\nExample:\n  memalign evaluate -c judge.toml test.jsonl "
        "--output report.json",
        formatter_class=fmt,
    )
    p.add_argument("file", metavar="FILE", help="JSONL file of labelled cases ('-': stdin)")
    p.add_argument(
        "--ordinal",
        action="store_true",
        help="the categories are ordered (best first): adds the weighted kappa",
    )
    p.add_argument(
        "--show", type=int, default=5, metavar="N", help="disagreements to print (default: 5)"
    )
    p.add_argument("--output", metavar="FILE", help="write the full report as JSON")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    _work_options(p)
    _common(p)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser(
        "unalign",
        help="forget feedback and everything derived from it",
        description="Remove feedback by id: its episodes are deleted, guidelines left with "
        "no source disappear, and guidelines with other sources are re-distilled from "
        "those alone (this calls the reflection model). No text of the removed feedback "
        "is left in the memory folder.",
        epilog="Example:\n  memalign unalign -c judge.toml t1 t7\n"
        "  memalign unalign -c judge.toml --ids-file withdrawn.txt",
        formatter_class=fmt,
    )
    p.add_argument("ids", nargs="*", metavar="ID", help="feedback ids to remove")
    p.add_argument("--ids-file", metavar="FILE", help="a file with one id a line")
    p.add_argument("--json", action="store_true", help="print the unalign report as JSON")
    _common(p)
    p.set_defaults(func=cmd_unalign)

    p = sub.add_parser(
        "show",
        help="show guidelines with their sources, counts and history (no model needed)",
        description="Show what the judge has learned: its guidelines with the feedback ids "
        "they came from, the counts of feedback, episodes and guidelines, and the history "
        "of changes. Reads the memory folder only: no model or API key is needed.",
        epilog="Example:\n  memalign show -c judge.toml --feedback\n"
        "  memalign show -c judge.toml --curve agreement.png --window 10\n"
        "  memalign show --memory memalign_memory/helpfulness --json",
        formatter_class=fmt,
    )
    p.add_argument(
        "--history",
        type=int,
        default=20,
        metavar="N",
        help="latest history entries to show (default: 20; -1: all; 0: none)",
    )
    p.add_argument("--feedback", action="store_true", help="also list the stored feedback")
    p.add_argument(
        "--curve",
        nargs="?",
        const="",
        metavar="PNG",
        help="instead: is the judge getting better? Print its agreement with each review "
        "from before it learned it, by windows of reviews, with where each align happened, "
        "and draw it as a PNG (default: <judge>-agreement.png; needs the `plot` extra)",
    )
    p.add_argument(
        "--window",
        type=_positive,
        default=20,
        metavar="N",
        help="with --curve: reviews per window (default: 20)",
    )
    p.add_argument("--json", action="store_true", help="print everything as JSON")
    _common(p, needs_models=False)
    p.set_defaults(func=cmd_show)

    _rules_parser(sub, fmt)

    p = sub.add_parser(
        "curve",
        help="draw a learning curve: agreement as feedback grows",
        description="Measure how agreement grows with feedback: split the labelled cases "
        "into a training pool and a test set, align a fresh in-process judge on growing "
        "shards of the pool (0, 2, 5, 10, 20, 50 by default) and evaluate on the test set "
        "after each. The judge's memory folder is not touched.",
        epilog=FEEDBACK_FORMAT + "\nExample:\n  memalign curve -c judge.toml labelled.jsonl "
        "--train 20 --shards 0,5,10,20 --output curve.json\n"
        "  memalign curve -c judge.toml train.jsonl --test-file test.jsonl --plot curve.png",
        formatter_class=fmt,
    )
    p.add_argument("file", metavar="FILE", help="JSONL file of labelled cases")
    p.add_argument(
        "--test-file", metavar="FILE", help="a fixed test set (default: split FILE in two)"
    )
    p.add_argument("--train", type=int, metavar="N", help="training pool size (default: up to 50)")
    p.add_argument("--test", type=int, metavar="N", help="test set size (default: the rest)")
    p.add_argument(
        "--shards",
        type=_int_list,
        metavar="N,N,...",
        help="feedback counts to measure at (default: 0,2,5,10,20,50 up to --train)",
    )
    p.add_argument(
        "--seeds", type=_int_list, metavar="S,S,...", help="one run per seed (default: 0)"
    )
    p.add_argument(
        "--metric",
        default="accuracy",
        choices=["accuracy", "kappa", "weighted_kappa", "ccc", "mae", "strict_accuracy"],
        help="what to draw (default: accuracy)",
    )
    p.add_argument("--ordinal", action="store_true", help="the categories are ordered")
    p.add_argument(
        "--no-seen", action="store_true", help="skip re-evaluating the feedback seen so far"
    )
    p.add_argument(
        "--concurrency", type=int, default=4, metavar="N", help="parallel judgments (default: 4)"
    )
    p.add_argument("--output", metavar="FILE", help="save the curve as JSON")
    p.add_argument("--plot", metavar="FILE", help="draw the curve as a PNG (needs matplotlib)")
    p.add_argument("--json", action="store_true", help="print the curve as JSON")
    _common(p, needs_memory=False)
    p.set_defaults(func=cmd_curve)

    p = sub.add_parser(
        "watch",
        help="judge a LangSmith project's new runs and learn from their reviews",
        description="Each cycle: align on the reviews completed in the judge's annotation "
        "queue (reporting how often the judge had agreed with them before), judge the "
        "project's new root runs, write each verdict as model feedback, and send the "
        "runs the judge is least sure about to the queue. New runs are read oldest "
        "first from a cursor kept in the judge's memory, at most --scan a cycle, so "
        "every run is read however busy the project; a run is never judged twice, so "
        "a restart (or cron with --once) resumes where it stopped.",
        epilog="Example:\n  memalign watch -c judge.toml --langsmith-project support-bot "
        "--sampling-rate 0.2 --interval 600\n"
        "  memalign watch -c judge.toml --langsmith-project support-bot --once   # cron\n\n"
        "Exit status:\n"
        "  0    every cycle did all its work\n"
        "  1    in some cycle a judgment or a reflection failed, or the service's rate\n"
        "       limit cut the cycle short (its report says which; a failed run is judged\n"
        "       again by the next cycles, three times in all)\n"
        "  2    bad arguments or configuration: no LangSmith API key, an unknown project\n"
        "  130  interrupted",
        formatter_class=fmt,
    )
    ls = p.add_argument_group("LangSmith (LANGSMITH_API_KEY, LANGSMITH_ENDPOINT)")
    ls.add_argument("--langsmith-project", required=True, metavar="NAME", help="the project")
    p.add_argument("--once", action="store_true", help="run one cycle and exit (for cron)")
    p.add_argument(
        "--cycles", type=_positive, metavar="N", help="stop after N cycles (default: never)"
    )
    p.add_argument(
        "--interval",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="time between cycle starts (default: 300)",
    )
    p.add_argument(
        "--sampling-rate",
        type=float,
        default=1.0,
        metavar="R",
        help="share of new runs judged, 0 to 1, decided by run id (default: 1)",
    )
    p.add_argument(
        "--scan",
        type=_positive,
        default=100,
        metavar="N",
        help="new root runs read a cycle, oldest first from where the last cycle "
        "stopped (default: 100)",
    )
    p.add_argument(
        "--since",
        type=_since,
        metavar="WHEN",
        help="start reading runs from this time (2025-01-31, 2025-01-31T09:00:00Z) or "
        "this long before the first cycle (30m, 12h, 7d); a new value restarts the "
        "reading there, once (default: a day before the first cycle)",
    )
    p.add_argument(
        "--review-limit",
        type=int,
        default=5,
        metavar="N",
        help="runs sent for review a cycle, least sure first (default: 5)",
    )
    p.add_argument(
        "--review-sample",
        type=float,
        default=0.0,
        metavar="R",
        help="also send this share of the other judged runs, at random (default: 0)",
    )
    p.add_argument("--seed", type=int, metavar="S", help="seed of the sampling decisions")
    p.add_argument(
        "--trace",
        action="store_true",
        help="trace the judge's own calls to the 'evaluators' project (default: untraced)",
    )
    p.add_argument(
        "--no-log-agreement",
        dest="log_agreement",
        action="store_false",
        help="do not write each cycle's agreement with the reviews it learned as feedback "
        "on the project (default: written, key '<judge>_agreement')",
    )
    p.add_argument("--json", action="store_true", help="print each cycle's report as JSON")
    _common(p)
    p.set_defaults(func=cmd_watch)
    _export_parser(sub, fmt)
    return parser


def _export_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    fmt: type[argparse.HelpFormatter],
) -> None:
    """`memalign export` and its targets (`cli.export`)."""
    p = sub.add_parser(
        "export",
        help="export the aligned judge to run elsewhere (a LangSmith online evaluator)",
        description="Export the aligned judge to run outside this package.",
        formatter_class=fmt,
    )
    targets = p.add_subparsers(dest="export_target", metavar="TARGET", required=True)
    q = targets.add_parser(
        "langsmith",
        help="create or update the judge's LangSmith online evaluator on a project",
        description="LangSmith runs the judge on the project's runs: its prompt (the "
        "instructions, the rules, the checks' questions) is committed to the prompt hub, "
        "an LLM-as-judge evaluator runs it, a run rule attaches it to the project with a "
        "filter and a sampling rate, and every episode is an example of its corrections "
        "dataset, used as few-shot examples. Exporting again changes only what the "
        "memory changed (nothing, if nothing did). Corrections of its verdicts in "
        "LangSmith come back with `memalign align --langsmith-project`.",
        epilog="Example:\n  memalign export langsmith -c judge.toml --langsmith-project "
        "support-bot --sampling-rate 0.2 --filter 'eq(is_root, true)'\n\n"
        "Exit status:\n"
        "  0    exported (or nothing changed)\n"
        "  1    a LangSmith call failed (the error names it)\n"
        "  2    bad arguments or configuration: no LangSmith API key, an unknown project",
        formatter_class=fmt,
    )
    ls = q.add_argument_group("LangSmith (LANGSMITH_API_KEY, LANGSMITH_ENDPOINT)")
    ls.add_argument("--langsmith-project", required=True, metavar="NAME", help="the project")
    q.add_argument(
        "--name",
        metavar="NAME",
        help="the evaluator's name and prompt handle (default: memalign-<judge name>)",
    )
    q.add_argument(
        "--sampling-rate",
        type=float,
        default=1.0,
        metavar="R",
        help="share of the project's runs LangSmith grades, 0 to 1 (default: 1)",
    )
    q.add_argument("--filter", metavar="FILTER", help="grade only runs matching this filter")
    q.add_argument(
        "--few-shot",
        type=int,
        default=5,
        metavar="N",
        help="corrections LangSmith puts in each prompt (default: 5)",
    )
    q.add_argument(
        "--model-config",
        metavar="ID",
        help="a model configuration saved in the workspace for the evaluator to call",
    )
    q.add_argument("--json", action="store_true", help="print the export report as JSON")
    _common(q)
    q.set_defaults(func=cmd_export_langsmith)
