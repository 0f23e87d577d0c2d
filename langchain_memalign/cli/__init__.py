r"""The `memalign` command line: create, align, judge, evaluate, unalign, show, curve.

A judge is described by a small TOML (or YAML, or JSON) file; its memory lives
in a folder next to it. `memalign --help` gives the workflow; every subcommand
has its own `--help` with an example.

Models come from the file (`model`, `embeddings`, optionally `base_url` and
`embeddings_base_url` for OpenAI-compatible servers). To use other models
(tests, custom clients), give a factory: `main(argv, models=factory)` in
process, or `--models package.module:factory` / `MEMALIGN_MODELS` on the
command line. A factory (`ModelFactory`) takes the `JudgeFile` and returns `Models`
(or a `(chat_model, embeddings)` tuple).

Public (`__all__`): `main` and that factory's contract (`JudgeFile`, `Models`,
`ModelFactory`). The modules are internal: `judge_file` (the judge file, its models,
exit codes), `io` (input files and output), `progress`, `context`, `commands` (create,
align, judge, unalign), `show`, `measure` (evaluate, curve), `parser` and `app` (`main`).
"""

from langchain_memalign.cli.app import main
from langchain_memalign.cli.judge_file import JudgeFile, ModelFactory, Models

__all__ = ["JudgeFile", "ModelFactory", "Models", "main"]
