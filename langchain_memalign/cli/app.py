"""`main`: parse the command line, run the command, map errors to exit codes."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from langchain_memalign._redact import redact
from langchain_memalign.cli.context import Context
from langchain_memalign.cli.io import echo
from langchain_memalign.cli.judge_file import (
    EXIT_FAILED,
    EXIT_USAGE,
    CLIError,
    ModelFactory,
    factory_from_spec,
)
from langchain_memalign.cli.parser import build_parser
from langchain_memalign.errors import (
    InvalidFeedbackError,
    MemoryFormatError,
    UnknownFeedbackError,
)


def main(argv: Sequence[str] | None = None, *, models: ModelFactory | None = None) -> int:
    """Run `memalign` with `argv` (default: the command line); returns the exit status.

    Args:
        argv: The arguments, without the program name.
        models: Builds the judge's models from its file, instead of the file's
            `model`/`embeddings` (for tests and custom clients); `--models` and
            `MEMALIGN_MODELS` do the same from the command line.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, usage errors
        return int(e.code) if isinstance(e.code, int) else EXIT_USAGE
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    ctx: Context | None = None
    try:
        factory = models
        if factory is None and getattr(args, "models", None):
            factory = factory_from_spec(args.models)
        ctx = Context(args, factory)
        code: int = args.func(ctx)
        return code
    except CLIError as e:
        echo(f"memalign: error: {_redacted(ctx, str(e))}", file=sys.stderr)
        return e.code
    except (InvalidFeedbackError, UnknownFeedbackError, MemoryFormatError) as e:
        echo(f"memalign: error: {_redacted(ctx, str(e))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        echo("memalign: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if args.debug:
            raise
        what = ctx.explain(e) if ctx is not None else f"{type(e).__name__}: {e}"
        echo(
            f"memalign: error: {_redacted(ctx, what)}\n(run again with --debug for a traceback)",
            file=sys.stderr,
        )
        return EXIT_FAILED


def _redacted(ctx: Context | None, text: str) -> str:
    """An error's text without credentials: of any URL in it, and of the memory's URL."""
    return ctx.redact(text) if ctx is not None else redact(text)
