"""`memalign export langsmith`: the aligned judge as a LangSmith online evaluator."""

from __future__ import annotations

from langchain_memalign.cli.context import Context
from langchain_memalign.cli.io import echo, to_json
from langchain_memalign.cli.judge_file import EXIT_FAILED, EXIT_OK, CLIError
from langchain_memalign.errors import MemAlignError


def cmd_export_langsmith(ctx: Context) -> int:
    """Create or update the judge's online evaluator on a LangSmith project."""
    from langchain_memalign.langsmith import export_evaluator

    args = ctx.args
    judge = ctx.judge()
    try:
        export = export_evaluator(
            judge,
            project=args.langsmith_project,
            name=args.name,
            sampling_rate=args.sampling_rate,
            filter=args.filter,
            num_few_shot_examples=args.few_shot,
            model_config_id=args.model_config,
        )
    except MemAlignError:
        raise
    except ValueError as e:  # bad settings: nothing was written
        raise CLIError(str(e)) from e
    except Exception as e:
        raise CLIError(
            f"cannot export to LangSmith project {args.langsmith_project!r}: "
            f"{type(e).__name__}: {e} (LANGSMITH_API_KEY and LANGSMITH_ENDPOINT configure "
            "the client)",
            EXIT_FAILED,
        ) from e
    finally:
        judge.close()
    if args.json:
        echo(to_json(export.model_dump(mode="json") | {"changed": export.changed}))
    else:
        echo(export.summary())
        echo(f"  prompt {export.prompt}; run rule {export.rule_id}; corrections dataset "
             f"{export.dataset_id}")  # fmt: skip
    return EXIT_OK
