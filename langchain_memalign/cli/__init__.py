r"""The `memalign` command line: create, align, judge, evaluate, unalign, show, curve.

A judge is described by a small TOML (or YAML, or JSON) file; its memory lives
in a folder next to it. `memalign --help` gives the workflow; every subcommand
has its own `--help` with an example.

Models come from the file (`model`, `embeddings`, optionally `base_url` and
`embeddings_base_url` for OpenAI-compatible servers). To use other models
(tests, custom clients), give a factory: `main(argv, models=factory)` in
process, or `--models package.module:factory` / `MEMALIGN_MODELS` on the
command line. A factory takes the `JudgeFile` and returns `Models` (or a
`(chat_model, embeddings)` tuple).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import random
import sys
import time
import tomllib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple, TextIO

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from langchain_memalign.config import JudgeConfig
from langchain_memalign.errors import (
    EmbeddingMismatchError,
    InvalidFeedbackError,
    MemAlignError,
    MemoryFormatError,
    UnknownFeedbackError,
)
from langchain_memalign.feedback import Feedback
from langchain_memalign.judge import MemAlignJudge
from langchain_memalign.memory.store import DB_FILE, MemoryStore
from langchain_memalign.models import (
    openai_compatible,
    resolve_chat_model,
    resolve_embeddings,
)
from langchain_memalign.reports import AlignReport, Usage
from langchain_memalign.scale import Scale

if TYPE_CHECKING:
    from langchain_memalign.langsmith import SyncReport

EXIT_OK = 0
"""Everything succeeded."""
EXIT_FAILED = 1
"""The work ran but some of it failed (a reflection, a judgment, a model call)."""
EXIT_USAGE = 2
"""Bad arguments, configuration or input files: nothing was changed."""

DEFAULT_CONFIG = "memalign.toml"
_JUDGE_OPTIONS = (
    "k",
    "embed",
    "guideline_token_budget",
    "episode_max_chars",
    "embed_max_chars",
    "reflect_batch_size",
    "max_retries",
)


class CLIError(Exception):
    """An error the user can fix: printed as `memalign: error: ...` with an exit code."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


# -- the judge file ----------------------------------------------------------------------------


class JudgeFile(BaseModel):
    """A judge described in a TOML, YAML or JSON file.

    Relative paths (`memory`, `instructions_file`) are relative to the file.
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    name: str = Field(description="The feedback key the judge scores, e.g. 'helpfulness'.")
    instructions: str | None = Field(
        default=None, description="The judge prompt with {inputs}, {outputs}, {reference_outputs}."
    )
    instructions_file: str | None = Field(
        default=None, description="A text file holding the prompt (instead of `instructions`)."
    )
    scale: Any = Field(
        default="bool",
        validate_default=True,
        description='"bool", [low, high], ["Best", ..., "Worst"] or "pairwise".',
    )
    model: str | None = Field(default=None, description='Chat model, e.g. "openai:gpt-4.1-mini".')
    embeddings: str | None = Field(
        default=None, description='Embedding model, e.g. "openai:text-embedding-3-small".'
    )
    reflection_model: str | None = Field(
        default=None, description="Model that distills guidelines (default: `model`)."
    )
    base_url: str | None = Field(
        default=None, description="OpenAI-compatible server for the chat model(s)."
    )
    embeddings_base_url: str | None = Field(
        default=None, description="OpenAI-compatible server for embeddings (default: base_url)."
    )
    api_key_env: str = Field(
        default="OPENAI_API_KEY", description="Environment variable holding the API key."
    )
    memory: str | None = Field(
        default=None, description="The memory folder (default: memalign_memory/<name>)."
    )
    k: int | None = None
    embed: str | None = None
    guideline_token_budget: int | None = None
    episode_max_chars: int | None = None
    embed_max_chars: int | None = None
    reflect_batch_size: int | None = None
    max_retries: int | None = None

    source: Path | None = Field(default=None, exclude=True, description="The file read.")

    @field_validator("scale")
    @classmethod
    def _valid_scale(cls, v: Any) -> Scale:
        return Scale.of(v)

    @property
    def base_dir(self) -> Path:
        """The folder relative paths are resolved against."""
        return self.source.parent if self.source is not None else Path.cwd()

    def memory_path(self) -> Path:
        """The memory folder."""
        return self.base_dir / (self.memory or f"memalign_memory/{self.name}")

    def prompt(self) -> str:
        """The judge instructions, from `instructions` or `instructions_file`."""
        if self.instructions and self.instructions_file:
            raise CLIError(f"{self.source}: give `instructions` or `instructions_file`, not both")
        if self.instructions_file:
            path = self.base_dir / self.instructions_file
            try:
                return path.read_text(encoding="utf-8")
            except OSError as e:
                raise CLIError(f"{self.source}: cannot read instructions_file {path}: {e}") from e
        if not self.instructions:
            raise CLIError(f"{self.source}: `instructions` (the judge prompt) is required")
        return self.instructions

    def options(self) -> dict[str, Any]:
        """The judge options set in the file (`k`, `guideline_token_budget`, ...)."""
        return {o: getattr(self, o) for o in _JUDGE_OPTIONS if getattr(self, o) is not None}

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> JudgeFile:
        """Read and validate a judge file (`.toml`, `.yaml`/`.yml` or `.json`)."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise CLIError(
                f"judge file {p} not found: pass -c FILE, or write one "
                "(`memalign create --template > memalign.toml`)"
            ) from None
        except OSError as e:
            raise CLIError(f"cannot read judge file {p}: {e}") from e
        data = _parse_config(p, text)
        if not isinstance(data, dict):
            raise CLIError(f"{p}: expected a table of keys (name, instructions, ...)")
        try:
            cfg = cls.model_validate({**data, "source": p})
            # Check the judge options now, not when a model is already built.
            JudgeConfig(name=cfg.name, instructions="", scale=cfg.scale, **cfg.options())
        except ValidationError as e:
            raise CLIError(f"{p}: invalid judge file:\n{_validation_lines(e)}") from None
        return cfg


def _parse_config(path: Path, text: str) -> Any:
    suffix = path.suffix.lower()
    try:
        if suffix in (".yaml", ".yml"):
            try:
                yaml = importlib.import_module("yaml")
            except ImportError:
                raise CLIError(f"{path}: YAML needs PyYAML (pip install pyyaml)") from None
            try:
                return yaml.safe_load(text)
            except yaml.YAMLError as e:
                raise CLIError(f"{path}: invalid YAML: {e}") from None
        if suffix == ".json":
            return json.loads(text)
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise CLIError(f"{path}: invalid TOML: {e}") from None
    except json.JSONDecodeError as e:
        raise CLIError(f"{path}: invalid JSON: {e}") from None


def _validation_lines(e: ValidationError) -> str:
    lines = []
    for err in e.errors():
        where = ".".join(str(x) for x in err["loc"]) or "(file)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            known = ", ".join(k for k in JudgeFile.model_fields if k != "source")
            msg = f"unknown key (known keys: {known})"
        lines.append(f"  {where}: {msg}")
    return "\n".join(lines)


TEMPLATE = '''\
# A MemAlign judge. Use it with: memalign <command> -c this-file.toml
name = "helpfulness"            # the feedback key the judge scores
scale = "bool"                  # "bool", [1, 5], ["Excellent", "Acceptable", "Bad"], "pairwise"
instructions = """
Is this customer-support reply helpful to the customer?
Customer: {inputs}
Reply: {outputs}
"""
# instructions_file = "prompt.txt"   # or keep the prompt in its own file

model = "openai:gpt-4.1-mini"                   # any "provider:model" string
embeddings = "openai:text-embedding-3-small"
# reflection_model = "openai:gpt-4.1"           # distills guidelines (default: model)
# base_url = "http://127.0.0.1:8013/v1"         # an OpenAI-compatible server
# embeddings_base_url = "http://127.0.0.1:8012/v1"
# api_key_env = "OPENAI_API_KEY"                # where the API key is read from

memory = "memalign_memory/helpfulness"          # the memory folder, relative to this file
k = 5                                           # past cases retrieved per judgment
# guideline_token_budget = 800
'''


# -- models ------------------------------------------------------------------------------------


class Models(NamedTuple):
    """The models a judge runs on."""

    chat: BaseChatModel
    embeddings: Embeddings
    reflection: BaseChatModel | None = None


ModelFactory = Callable[[JudgeFile], "Models | tuple[BaseChatModel, Embeddings]"]
"""Builds a judge's models from its file (see `default_models`)."""


def _openai_name(spec: str) -> str:
    provider, sep, name = spec.partition(":")
    if not sep:
        return spec
    if provider != "openai":
        raise CLIError(
            f"model {spec!r}: base_url/embeddings_base_url work with OpenAI-compatible "
            "models; write the model as 'openai:NAME' or just 'NAME'"
        )
    return name


def default_models(cfg: JudgeFile) -> Models:
    """Models from a judge file: `model`/`embeddings` strings, on `base_url` if given."""
    if not cfg.model or not cfg.embeddings:
        missing = " and ".join(k for k in ("model", "embeddings") if not getattr(cfg, k))
        raise CLIError(
            f'{cfg.source}: {missing} not set; add e.g. model = "openai:gpt-4.1-mini" and '
            'embeddings = "openai:text-embedding-3-small"'
        )
    api_key = os.environ.get(cfg.api_key_env)
    try:
        if cfg.base_url or cfg.embeddings_base_url:
            key = api_key or "not-needed"  # local servers accept any key
            chat, emb = openai_compatible(
                _openai_name(cfg.model),
                _openai_name(cfg.embeddings),
                base_url=cfg.base_url,
                embeddings_base_url=cfg.embeddings_base_url,
                api_key=key,
            )
            reflection = None
            if cfg.reflection_model:
                reflection, _ = openai_compatible(
                    _openai_name(cfg.reflection_model),
                    _openai_name(cfg.embeddings),
                    base_url=cfg.base_url,
                    embeddings_base_url=cfg.embeddings_base_url,
                    api_key=key,
                )
            return Models(chat, emb, reflection)
        return Models(
            resolve_chat_model(cfg.model),
            resolve_embeddings(cfg.embeddings),
            resolve_chat_model(cfg.reflection_model) if cfg.reflection_model else None,
        )
    except CLIError:
        raise
    except Exception as e:
        hint = ""
        if not api_key and not cfg.base_url:
            hint = (
                f" Set {cfg.api_key_env}, or base_url in {cfg.source} for an "
                "OpenAI-compatible server."
            )
        raise CLIError(f"cannot set up the models of {cfg.source}: {e}.{hint}") from e


def _factory_from_spec(spec: str) -> ModelFactory:
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise CLIError(f"--models {spec!r}: use 'package.module:function'")
    try:
        factory = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise CLIError(f"--models {spec!r}: cannot import it ({e})") from e
    if not callable(factory):
        raise CLIError(f"--models {spec!r} is not callable")
    return factory  # type: ignore[no-any-return]


def _models(cfg: JudgeFile, factory: ModelFactory | None) -> Models:
    if factory is None:
        return default_models(cfg)
    made = factory(cfg)
    return made if isinstance(made, Models) else Models(*made)


# -- input files -------------------------------------------------------------------------------


def _open_text(path: str) -> IO[str]:
    if path == "-":
        return sys.stdin
    try:
        return open(path, encoding="utf-8")  # closed by the caller
    except OSError as e:
        raise CLIError(f"cannot read {path}: {e.strerror or e}") from None


def _rows(path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    fh = _open_text(path)
    try:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise CLIError(f"{path}:{n}: not valid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise CLIError(f"{path}:{n}: expected a JSON object, got {type(row).__name__}")
            yield n, row
    finally:
        if fh is not sys.stdin:
            fh.close()


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(x) for x in err["loc"])
    return f"{where}: {err['msg']}" if where else str(err["msg"])


def read_feedback(path: str, scale: Scale) -> list[Feedback]:
    """Feedback from a JSONL file, with file:line in every error.

    A line is either `Feedback` JSON (`id`, `inputs`, `outputs`,
    `reference_outputs`, `value`, `rationale`, `annotator`, `metadata`) or a
    row of the shared data sets (`id`, `inputs`, `outputs`, `reference`,
    `label`, `feedback`, `criterion`, `meta`). Values are checked against the
    judge's scale; ids must be unique.
    """
    items: list[Feedback] = []
    seen: dict[str, int] = {}
    for n, row in _rows(path):
        try:
            if "value" in row:
                fb = Feedback.model_validate(row)
                value = scale.validate_value(fb.value, feedback_id=fb.id)
                fb = fb.model_copy(update={"value": value})
            elif "label" in row:
                if "id" not in row:
                    raise CLIError(f"{path}:{n}: missing 'id'")
                from langchain_memalign.evaluation.datasets import row_to_feedback

                fb = row_to_feedback(row, scale)
            else:
                raise CLIError(
                    f"{path}:{n}: no 'value' (the human score); a feedback line needs "
                    "at least id, inputs and value"
                )
        except ValidationError as e:
            raise CLIError(f"{path}:{n}: invalid feedback: {_first_error(e)}") from None
        except InvalidFeedbackError as e:
            raise CLIError(f"{path}:{n}: {e}") from None
        if fb.id in seen:
            raise CLIError(f"{path}:{n}: feedback id {fb.id!r} already used on line {seen[fb.id]}")
        seen[fb.id] = n
        items.append(fb)
    return items


def read_cases(path: str) -> list[tuple[str, dict[str, Any]]]:
    """Cases to judge from a JSONL file: `(id, {"inputs", "outputs", "reference_outputs"})`.

    `reference` is accepted for `reference_outputs`; other keys (labels,
    rationales) are ignored, so a feedback file can be judged as is. Cases
    without an `id` are named by their line number.
    """
    cases = []
    for n, row in _rows(path):
        if "inputs" not in row:
            raise CLIError(f"{path}:{n}: a case needs 'inputs' (and usually 'outputs')")
        ref = row.get("reference_outputs", row.get("reference"))
        case = {"inputs": row["inputs"], "outputs": row.get("outputs"), "reference_outputs": ref}
        cases.append((str(row.get("id", f"line-{n}")), case))
    return cases


# -- progress ----------------------------------------------------------------------------------


class Progress:
    """A one-line progress bar on stderr: `label [#####.....] 12/40 30% 0:05`.

    Drawn only when enabled (by default: when the stream is a terminal).
    """

    def __init__(
        self, total: int, label: str, *, enabled: bool | None = None, stream: TextIO | None = None
    ) -> None:
        self.total = max(total, 0)
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.done = 0
        self.started = time.monotonic()
        self._draw()

    def advance(self, n: int = 1) -> None:
        """Count `n` more items done."""
        self.done = min(self.total, self.done + n)
        self._draw()

    def _draw(self, end: str = "") -> None:
        if not self.enabled:
            return
        width = 30
        filled = width * self.done // self.total if self.total else width
        pct = 100 * self.done // self.total if self.total else 100
        secs = int(time.monotonic() - self.started)
        bar = "#" * filled + "." * (width - filled)
        self.stream.write(
            f"\r{self.label} [{bar}] {self.done}/{self.total} {pct}% {secs // 60}:{secs % 60:02d}"
            + end
        )
        self.stream.flush()

    def close(self) -> None:
        """Finish the line."""
        self._draw(end="\n")

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), max(size, 1)):
        yield items[i : i + size]


# -- output helpers ----------------------------------------------------------------------------


def _print(*parts: Any, file: TextIO | None = None) -> None:
    print(*parts, file=file or sys.stdout)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _fmt(x: Any, pct: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if pct:
        return f"{100 * x:.1f}%"
    return f"{x:.3f}" if isinstance(x, float) else str(x)


def _usage_line(usage: Usage, seconds: float) -> str:
    return (
        f"{usage.llm_calls} LLM call(s), {usage.total_tokens} tokens, "
        f"{usage.embedding_calls} embedding call(s); {seconds:.1f}s"
    )


# -- commands ----------------------------------------------------------------------------------


class _Context:
    """What every command gets: parsed arguments, the judge file and the model factory."""

    def __init__(self, args: argparse.Namespace, factory: ModelFactory | None) -> None:
        self.args = args
        self.factory = factory
        self._cfg: JudgeFile | None = None

    @property
    def cfg(self) -> JudgeFile:
        if self._cfg is None:
            self._cfg = JudgeFile.read(self.args.config)
        return self._cfg

    def memory(self) -> Path:
        if getattr(self.args, "memory", None):
            return Path(self.args.memory)
        return self.cfg.memory_path()

    def progress(self, total: int, label: str) -> Progress:
        return Progress(total, label, enabled=self.args.progress)

    def judge(self, *, create: bool = False, in_process: bool = False) -> MemAlignJudge:
        """The judge of the file, on its memory folder (or a fresh in-process memory)."""
        cfg = self.cfg
        folder = None if in_process else self.memory()
        if folder is not None and not create and not (folder / DB_FILE).is_file():
            raise CLIError(
                f"no judge memory at {folder}; create it first: "
                f"memalign create -c {self.args.config}"
            )
        models = _models(cfg, self.factory)
        try:
            return MemAlignJudge(
                name=cfg.name,
                instructions=cfg.prompt(),
                model=models.chat,
                embeddings=models.embeddings,
                scale=cfg.scale,
                reflection_model=models.reflection,
                path=folder,
                **cfg.options(),
            )
        except (MemoryFormatError, EmbeddingMismatchError) as e:
            raise CLIError(str(e)) from e


def cmd_create(ctx: _Context) -> int:
    """Create (or update) the judge's memory folder from the judge file."""
    if ctx.args.template:
        sys.stdout.write(TEMPLATE)
        return EXIT_OK
    folder = ctx.memory()
    existed = (folder / DB_FILE).is_file()
    judge = ctx.judge(create=True)
    try:
        stats = judge.stats()
        verb = "Updated the configuration of" if existed else "Created"
        _print(f"{verb} judge {judge.name!r} ({judge.scale.kind} scale) in {folder}")
        if existed:
            _print(
                f"  it holds {stats['feedback']} feedback item(s) and "
                f"{stats['guidelines']} guideline(s)"
            )
        _print(
            f"Next: memalign align -c {ctx.args.config} feedback.jsonl\n"
            f"      memalign judge -c {ctx.args.config} --inputs '...' --outputs '...'"
        )
    finally:
        judge.close()
    return EXIT_OK


def _sync_langsmith(ctx: _Context, judge: MemAlignJudge) -> SyncReport:
    """Align the judge with new or changed human feedback in LangSmith (incremental)."""
    from langchain_memalign.langsmith import LangSmithFeedbackSource

    args = ctx.args
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
        )
        return source.sync(judge)
    except MemAlignError:
        raise
    except Exception as e:
        raise CLIError(
            f"cannot sync feedback from LangSmith {where}: {type(e).__name__}: {e} "
            "(LANGSMITH_API_KEY and LANGSMITH_ENDPOINT configure the client)",
            EXIT_FAILED,
        ) from e


def cmd_align(ctx: _Context) -> int:
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
            with ctx.progress(len(items), "aligning") as bar:
                for chunk in _chunks(items, args.batch_size):
                    reports.append(judge.align(chunk, raise_on_failure=False))
                    bar.advance(len(chunk))
            total = _sum_reports(reports)
            out["files"] = total
            failed, errors = total.failed, total.errors
            if not args.json:
                _print(
                    f"Aligned {len(items)} feedback item(s) with {judge.name!r}: "
                    f"{len(total.added)} added, {len(total.updated)} updated, "
                    f"{len(total.unchanged)} unchanged."
                )
                _print(
                    f"Guidelines: {len(total.guidelines_added)} added, "
                    f"{len(total.guidelines_removed)} removed; now {len(judge.guidelines)}."
                )
                _print(f"Cost: {_usage_line(total.usage, total.seconds)}")
        elif args.files:
            _print("No feedback in the files.", file=sys.stderr)
        if from_langsmith:
            sync = _sync_langsmith(ctx, judge)
            out["langsmith"] = sync
            if sync.align is not None:
                failed, errors = failed + sync.align.failed, errors + sync.align.errors
            if not args.json:
                _print_sync(sync, judge)
        if args.json:
            _print(
                json.dumps(
                    {k: None if v is None else v.model_dump(mode="json") for k, v in out.items()},
                    indent=2,
                )
            )
        if failed:
            _print(
                f"Reflection failed for {len(failed)} item(s) ({', '.join(failed)}); "
                "they are stored and retried by the next align. Errors:\n  " + "\n  ".join(errors),
                file=sys.stderr,
            )
            return EXIT_FAILED
    finally:
        judge.close()
    return EXIT_OK


def _print_sync(sync: SyncReport, judge: MemAlignJudge) -> None:
    _print(
        f"LangSmith: {sync.listed} human review(s) and correction(s) found; "
        f"{len(sync.added)} added, {len(sync.updated)} updated, "
        f"{len(sync.removed)} unaligned (deleted or overruled), {len(sync.skipped)} skipped, "
        f"{len(sync.conflicts)} conflict(s); {sync.seconds:.1f}s."
    )
    if sync.align is not None:
        _print(
            f"Guidelines: {len(sync.align.guidelines_added)} added; now {len(judge.guidelines)}. "
            f"Cost: {_usage_line(sync.align.usage, sync.align.seconds)}"
        )
    for fid, reason in list(sync.skipped.items())[:5]:
        _print(f"  skipped {fid}: {reason}", file=sys.stderr)


def _sum_reports(reports: Sequence[AlignReport]) -> AlignReport:
    total = AlignReport()
    for r in reports:
        total.added += r.added
        total.updated += r.updated
        total.unchanged += r.unchanged
        total.guidelines_added += r.guidelines_added
        total.guidelines_removed += r.guidelines_removed
        total.guidelines_updated += r.guidelines_updated
        total.errors += r.errors
        total.usage = total.usage + r.usage
        total.seconds += r.seconds
    # A guideline added then removed by a later chunk's consolidation is gone.
    removed = set(total.guidelines_removed)
    added = set(total.guidelines_added)
    total.guidelines_added = sorted(added - removed)
    total.guidelines_removed = sorted(removed - added)
    total.failed = sorted(set(reports[-1].failed if reports else []))
    return total


def _judge_cases(
    ctx: _Context,
    judge: MemAlignJudge,
    cases: Sequence[dict[str, Any]],
    label: str,
    config: RunnableConfig | None = None,
) -> list[Any]:
    results: list[Any] = []
    config = {**(config or {}), "max_concurrency": ctx.args.concurrency}
    with ctx.progress(len(cases), label) as bar:
        for chunk in _chunks(cases, ctx.args.batch_size):
            results += judge.batch(list(chunk), config, return_exceptions=True)
            bar.advance(len(chunk))
    return results


def cmd_judge(ctx: _Context) -> int:
    """Judge one case (--inputs/--outputs) or every case of a JSONL file."""
    args = ctx.args
    if args.file and args.inputs is not None:
        raise CLIError("give a JSONL file or --inputs/--outputs, not both")
    if args.file:
        cases = read_cases(args.file)
    elif args.inputs is not None:
        parse = _parse_json_arg if args.json_values else (lambda s, _: s)
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
    failed = 0
    out: IO[str] = sys.stdout
    try:
        results = _judge_cases(ctx, judge, [c for _, c in cases], "judging")
        if args.output:
            out = open(args.output, "w", encoding="utf-8")  # noqa: SIM115
        for (cid, _), res in zip(cases, results, strict=True):
            if isinstance(res, BaseException):
                failed += 1
                row: dict[str, Any] = {"id": cid, "error": f"{type(res).__name__}: {res}"}
            else:
                row = {"id": cid, **res}
            out.write(_json(row) + "\n")
    except OSError as e:
        raise CLIError(f"cannot write {args.output}: {e}") from e
    finally:
        if out is not sys.stdout:
            out.close()
        judge.close()
    if len(cases) > 1 or args.output:
        scores = [r["score"] for r in results if isinstance(r, dict)]
        counts = {str(s): scores.count(s) for s in dict.fromkeys(scores)}
        summary = ", ".join(f"{k}: {v}" for k, v in counts.items())
        where = f" to {args.output}" if args.output else ""
        _print(
            f"Judged {len(cases)} case(s){where}; scores {summary or 'none'}; {failed} failed.",
            file=sys.stderr,
        )
    if failed:
        first = next(r for r in results if isinstance(r, BaseException))
        _print(f"memalign: {failed} judgment(s) failed, e.g.: {first}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _parse_json_arg(value: str, option: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise CLIError(f"{option}: not valid JSON ({e.msg}); drop --json-values for text") from None


def cmd_evaluate(ctx: _Context) -> int:
    """Measure the judge's agreement with human labels in a JSONL file."""
    from langchain_memalign.evaluation.metrics import (
        UsageCallbackHandler,
        agreement_report,
        with_callback,
    )

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
        results = _judge_cases(ctx, judge, cases, "evaluating", with_callback(None, counter))
        report = agreement_report(
            feedback,
            results,
            judge.scale,
            name=ctx.cfg.name,
            ordinal=True if args.ordinal else None,
            usage=counter.usage(),
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
        _print(_json(report.summary()))
        return EXIT_OK
    _print(f"Agreement of {judge.name!r} with {args.file} ({report.n} case(s)):")
    _print(f"  accuracy        {_fmt(report.accuracy, pct=True)}  ({report.n_scored} scored)")
    _print(f"  Cohen's kappa   {_fmt(report.kappa)}")
    if report.weighted_kappa is not None:
        _print(f"  weighted kappa  {_fmt(report.weighted_kappa)}")
    if report.mae is not None:
        _print(f"  MAE             {_fmt(report.mae)}")
        _print(f"  CCC             {_fmt(report.ccc)}")
    if report.inter_annotator is not None:
        ia = report.inter_annotator
        _print(
            f"  humans' Krippendorff alpha {_fmt(ia.krippendorff_alpha)}; pairwise agreement "
            f"humans {_fmt(ia.pairwise_agreement, pct=True)}, judge-human "
            f"{_fmt(ia.judge_annotator_agreement, pct=True)}"
        )
    if report.confusion is not None:
        _print("  confusion (rows: human, columns: judge)")
        labels = [str(x) for x in report.confusion.labels]
        width = max(len(x) for x in labels) + 2
        _print("    " + " " * width + "".join(f"{x:>{width}}" for x in labels))
        for label, row in zip(labels, report.confusion.counts, strict=True):
            _print(f"    {label:>{width}}" + "".join(f"{c:>{width}}" for c in row))
    if report.disagreements and args.show > 0:
        _print(f"  disagreements ({len(report.disagreements)}, first {args.show}):")
        for d in report.disagreements[: args.show]:
            _print(f"    {d.id}: human {d.human!r}, judge {d.judge!r}")
            if d.judge_rationale:
                _print(f"      judge: {_short(d.judge_rationale)}")
            if d.human_rationale:
                _print(f"      human: {_short(d.human_rationale)}")
    _print(f"Cost: {_usage_line(report.usage, report.seconds)}")
    if report.failed:
        _print(f"  {len(report.failed)} judgment(s) failed: {report.failed[0].error}")
        return EXIT_FAILED
    return EXIT_OK


def _short(text: str, n: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


def cmd_unalign(ctx: _Context) -> int:
    """Remove feedback and everything derived from it."""
    args = ctx.args
    ids = list(args.ids)
    if args.ids_file:
        fh = _open_text(args.ids_file)
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
            _print(report.model_dump_json(indent=2))
        else:
            _print(
                f"Removed {len(report.removed)} feedback item(s) from {judge.name!r}: "
                f"{len(report.guidelines_removed)} guideline(s) removed, "
                f"{len(report.guidelines_rederived)} re-derived from their remaining sources."
            )
            _print(f"Cost: {_usage_line(report.usage, report.seconds)}")
        if report.errors:
            _print("Errors:\n  " + "\n  ".join(report.errors), file=sys.stderr)
            return EXIT_FAILED
    finally:
        judge.close()
    return EXIT_OK


def memory_summary(
    folder: str | os.PathLike[str], *, history: int | None = 20, feedback: bool = False
) -> dict[str, Any]:
    """Everything `memalign show` prints, read from a memory folder without any model.

    Args:
        folder: The memory folder.
        history: How many of the latest history entries to include (None: all).
        feedback: Include the stored feedback items.
    """
    store = MemoryStore.open(folder)
    try:
        guidelines, _ = store.load_guidelines()
        entries = store.history()
        counts = {t: store.count(t) for t in ("feedback", "episodes", "guidelines", "history")}
        out: dict[str, Any] = {
            "folder": str(folder),
            "config": store.get_meta("config"),
            "embeddings": store.get_meta("embeddings"),
            "counts": counts,
            "pending_reflection": store.pending_reflection(),
            "guidelines": [
                {
                    "id": g.id,
                    "text": g.text,
                    "source_ids": list(g.source_ids),
                    "created_at": g.created_at.isoformat(),
                }
                for g in guidelines
            ],
            "history": entries if history is None else entries[-history:] if history else [],
        }
        if feedback:
            items = store.get_feedback(store.feedback_ids())
            out["feedback"] = [items[i].model_dump(mode="json") for i in store.feedback_ids()]
        return out
    finally:
        store.close()


def cmd_show(ctx: _Context) -> int:
    """Show the memory: guidelines with their sources, counts and history. No model needed."""
    args = ctx.args
    folder = ctx.memory()
    try:
        info = memory_summary(
            folder, history=None if args.history < 0 else args.history, feedback=args.feedback
        )
    except MemoryFormatError as e:
        raise CLIError(str(e)) from e
    if args.json:
        _print(json.dumps(info, ensure_ascii=False, indent=2, default=str))
        return EXIT_OK
    cfg, counts = info["config"] or {}, info["counts"]
    scale = cfg.get("scale") or {}
    _print(f"Judge {cfg.get('name')!r} in {folder}")
    _print(f"  scale: {_describe_scale(scale)}; k={cfg.get('k')}; embeddings: {info['embeddings']}")
    pending = info["pending_reflection"]
    _print(
        f"  {counts['feedback']} feedback, {counts['episodes']} episodes, "
        f"{counts['guidelines']} guidelines, {counts['history']} history entries"
        + (f"; {len(pending)} pending reflection ({', '.join(pending)})" if pending else "")
    )
    _print(f"\nGuidelines ({len(info['guidelines'])}):")
    for g in info["guidelines"]:
        _print(f"  [{g['id']}] {g['text']}")
        _print(f"      <- {', '.join(g['source_ids']) or '(no source)'}")
    if not info["guidelines"]:
        _print("  (none yet: align feedback with rationales to learn some)")
    if info["history"]:
        _print(f"\nHistory (latest {len(info['history'])} of {counts['history']}):")
        for h in info["history"]:
            fids = ", ".join(h["feedback_ids"]) or "-"
            gids = ", ".join(h["guideline_ids"]) or "-"
            _print(
                f"  #{h['seq']} {h['at'][:19]} {h['action']}: feedback {fids}; guidelines {gids}"
            )
    if args.feedback:
        _print(f"\nFeedback ({len(info['feedback'])}):")
        for f in info["feedback"]:
            who = f" by {f['annotator']}" if f.get("annotator") else ""
            _print(f"  {f['id']}: {f['value']!r}{who}  {_short(f.get('rationale') or '', 100)}")
    return EXIT_OK


def _describe_scale(scale: dict[str, Any]) -> str:
    kind = scale.get("kind", "?")
    if kind == "numeric":
        return f"numeric {scale.get('low')}–{scale.get('high')}"
    if kind in ("categorical", "pairwise"):
        return f"{kind} ({', '.join(scale.get('choices') or [])})"
    return str(kind)


def cmd_curve(ctx: _Context) -> int:
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

    models = _models(cfg, ctx.factory)
    prompt = cfg.prompt()

    def make_judge() -> MemAlignJudge:
        return MemAlignJudge(
            name=cfg.name,
            instructions=prompt,
            model=models.chat,
            embeddings=models.embeddings,
            scale=cfg.scale,
            reflection_model=models.reflection,
            # the model grades seen cases too: the curve shows what it learned from them
            **{**cfg.options(), "reuse_expert_verdicts": False},
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
        _print(curve.model_dump_json(indent=2))
        return EXIT_OK
    means = curve.mean(args.metric, "test")
    _print(
        f"Learning curve of {curve.name!r}: {args.metric} on {curve.n_test} test case(s), "
        f"mean over {len(seeds)} seed(s)"
    )
    _print(ascii_curve(means, metric=args.metric))
    if args.output:
        _print(f"Saved to {args.output}")
    if args.plot:
        _print(f"Drawn to {args.plot}")
    return EXIT_OK


def ascii_curve(points: dict[int, float], *, metric: str = "accuracy", width: int = 40) -> str:
    """A learning curve as a text bar chart: one row per feedback count."""
    lines = [f"  {'feedback':>8}  {metric:>9}"]
    values = [v for v in points.values() if not math.isnan(v)]
    low = min(0.0, *values) if values else 0.0
    high = max(1.0, *values) if values else 1.0
    for n, v in points.items():
        if math.isnan(v):
            lines.append(f"  {n:>8}  {'n/a':>9}")
            continue
        filled = round(width * (v - low) / (high - low)) if high > low else 0
        lines.append(f"  {n:>8}  {v:>9.3f}  " + "#" * filled + "." * (width - filled))
    return "\n".join(lines)


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
  memalign unalign -c judge.toml ID ...       forget feedback and what it taught
  memalign judge -c judge.toml --inputs "..." --outputs "..."
  memalign curve -c judge.toml labelled.jsonl how agreement grows with feedback
"""

FEEDBACK_FORMAT = """\
Feedback files are JSONL, one case a line:
  {"id": "t1", "inputs": "question", "outputs": "answer", "value": false,
   "rationale": "why the expert gave this score", "annotator": "ana"}
`value` is the expert's score on the judge's scale; `reference_outputs`,
`annotator` and `metadata` are optional. Rows of the shared data sets (`label`,
`feedback`, `reference`, `criterion`, `meta`) are read as well.
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
            help="the memory folder (default: `memory` in the judge file)",
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
        help="draw progress bars on stderr (default: when stderr is a terminal)",
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


def build_parser() -> argparse.ArgumentParser:
    """The `memalign` argument parser (all subcommands)."""
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="memalign", description=DESCRIPTION, epilog=EPILOG, formatter_class=fmt
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
    p.add_argument(
        "--limit", type=_positive, metavar="N", help="align at most N items from the files"
    )
    p.add_argument(
        "--batch-size",
        type=_positive,
        default=32,
        metavar="N",
        help="feedback items per align call; progress is shown per batch (default: 32)",
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
    p.add_argument("--json", action="store_true", help="print everything as JSON")
    _common(p, needs_models=False)
    p.set_defaults(func=cmd_show)

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
    return parser


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
    try:
        factory = models
        if factory is None and getattr(args, "models", None):
            factory = _factory_from_spec(args.models)
        code: int = args.func(_Context(args, factory))
        return code
    except CLIError as e:
        _print(f"memalign: error: {e}", file=sys.stderr)
        return e.code
    except (InvalidFeedbackError, UnknownFeedbackError, MemoryFormatError) as e:
        _print(f"memalign: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        _print("memalign: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if args.debug:
            raise
        _print(
            f"memalign: error: {type(e).__name__}: {e}\n(run again with --debug for a traceback)",
            file=sys.stderr,
        )
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
