"""`memalign export langsmith`: the aligned judge as a LangSmith online evaluator."""

from __future__ import annotations

from langchain_memalign.cli.context import Context
from langchain_memalign.cli.io import echo, to_json
from langchain_memalign.cli.judge_file import EXIT_FAILED, EXIT_OK, CLIError
from langchain_memalign.cli.langsmith_env import require_api_key, unknown_project
from langchain_memalign.errors import MemAlignError


def cmd_export_langsmith(ctx: Context) -> int:
    """Create or update the judge's online evaluator on a LangSmith project.

    No API key, or a project LangSmith does not know, exits 2 before anything is
    written (as `memalign watch` does); a failed call exits 1, naming the project.
    """
    from langsmith import Client
    from langsmith import utils as ls_utils

    from langchain_memalign.langsmith import export_evaluator
    from langchain_memalign.langsmith._api import LangSmithAPI

    args = ctx.args
    require_api_key()  # before the judge opens its memory: nothing to undo

    def failed(e: Exception) -> CLIError:
        return CLIError(
            f"cannot export to LangSmith project {args.langsmith_project!r}: "
            f"{type(e).__name__}: {e} (LANGSMITH_API_KEY and LANGSMITH_ENDPOINT configure "
            "the client)",
            EXIT_FAILED,
        )

    try:
        client = Client()
        # A typo in the name is the user's to fix, not a failed export: looked up before
        # the judge opens its memory and before anything is written.
        LangSmithAPI.of(client).project(args.langsmith_project)
    except ls_utils.LangSmithNotFoundError as e:
        raise unknown_project(args.langsmith_project) from e
    except Exception as e:
        raise failed(e) from e
    judge = ctx.judge()
    try:
        export = export_evaluator(
            judge,
            client=client,
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
        raise failed(e) from e
    finally:
        judge.close()
    if args.json:
        echo(to_json(export.model_dump(mode="json") | {"changed": export.changed}))
    else:
        echo(export.summary())
        echo(f"  prompt {export.prompt}; run rule {export.rule_id}; corrections dataset "
             f"{export.dataset_id}")  # fmt: skip
    return EXIT_OK
