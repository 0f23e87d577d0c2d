"""The judge file (TOML, YAML or JSON), the models it describes, and the exit codes."""

from __future__ import annotations

import importlib
import json
import os
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, get_args

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from langchain_memalign.config import JudgeConfig, JudgeOptions, nested_names
from langchain_memalign.memory.postgres import is_postgres_url
from langchain_memalign.models import (
    openai_compatible,
    resolve_chat_model,
    resolve_embeddings,
)
from langchain_memalign.scale import Scale

EXIT_OK = 0
"""Everything succeeded."""
EXIT_FAILED = 1
"""The work ran but some of it failed (a reflection, a judgment, a model call)."""
EXIT_USAGE = 2
"""Bad arguments, configuration or input files: nothing was changed."""

DEFAULT_CONFIG = "memalign.toml"
# TOML has no null: "off" turns off an option whose `None` means off (the similarity
# floors, `source_support`); options whose values include "off" keep it as a value.
OFF = "off"


def _nullable(info: FieldInfo) -> bool:
    return type(None) in get_args(info.annotation)


# (group, field) of every option that "off" turns off, derived from `JudgeOptions`.
_OFF_OPTIONS = frozenset(
    (group, name)
    for group, info in JudgeOptions.model_fields.items()
    if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)
    for name, field in info.annotation.model_fields.items()
    if _nullable(field)
)


def _off_to_none(options: dict[str, Any]) -> dict[str, Any]:
    out = dict(options)
    for group, name in _OFF_OPTIONS:
        values = out.get(group)
        if isinstance(values, dict) and values.get(name) == OFF:
            out[group] = {**values, name: None}
    return out


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
        default=None,
        description=(
            "The memory folder (default: memalign_memory/<name>), or a "
            "postgresql://host/db?judge=<name> URL."
        ),
    )
    k: int = Field(
        default=JudgeConfig.model_fields["k"].default,
        ge=0,
        description="Past cases retrieved per judgment.",
    )
    options: JudgeOptions = Field(
        default_factory=JudgeOptions,
        description="The judge options (`JudgeOptions`), as TOML tables such as "
        '`[options.validation]`; "off" turns off an option whose `None` means off.',
    )

    source: Path | None = Field(default=None, exclude=True, description="The file read.")

    @field_validator("scale")
    @classmethod
    def _valid_scale(cls, v: Any) -> Scale:
        return Scale.of(v)

    @model_validator(mode="before")
    @classmethod
    def _off_options(cls, data: Any) -> Any:
        # TOML has no null: "off" becomes None where None means off.
        if not isinstance(data, dict) or not isinstance(data.get("options"), dict):
            return data
        return {**data, "options": _off_to_none(data["options"])}

    @property
    def base_dir(self) -> Path:
        """The folder relative paths are resolved against."""
        return self.source.parent if self.source is not None else Path.cwd()

    def memory_path(self) -> Path | str:
        """The memory folder, or a `postgresql://` URL as written."""
        if is_postgres_url(self.memory):
            return str(self.memory)
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
            JudgeConfig(name=cfg.name, instructions="", scale=cfg.scale, options=cfg.options)
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


def _known_keys(loc: tuple[int | str, ...]) -> str:
    model: type[BaseModel] = JudgeFile
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        if field is None or not isinstance(field.annotation, type):
            break
        if not issubclass(field.annotation, BaseModel):
            break
        model = field.annotation
    return ", ".join(k for k in model.model_fields if k != "source")


def _validation_lines(e: ValidationError) -> str:
    lines = []
    for err in e.errors():
        where = ".".join(str(x) for x in err["loc"]) or "(file)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            # An option out of its place (a flat key of earlier versions, a group's field
            # at the top) is named with its place; any other key with the keys known there.
            places = (
                nested_names(str(err["loc"][-1])) if err["loc"][:-1] in ((), ("options",)) else ()
            )
            prefix = "options." if len(err["loc"]) == 1 else ""
            msg = (
                "unknown option; did you mean " + " or ".join(prefix + p for p in places) + "?"
                if places
                else f"unknown key (known keys: {_known_keys(err['loc'])})"
            )
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
# api_key_env = "OPENAI_API_KEY"                # where the API key is read from

# Or an OpenAI-compatible server (vLLM, llama.cpp, Ollama, a proxy), for example a
# local one; name the models as the server does:
# model = "my-chat-model"
# embeddings = "my-embedding-model"
# base_url = "http://localhost:8000/v1"
# embeddings_base_url = "http://localhost:8001/v1"   # if embeddings are served apart

memory = "memalign_memory/helpfulness"          # the memory folder, relative to this file
k = 5                                           # past cases retrieved per judgment

# Judge options, one table a concern (see docs/cli.md and JudgeOptions); unset keeps
# the default, and "off" turns off an option whose None means off. These tables come
# after every key above. For example:
# [options.retrieval]
# min_similarity = "off"                        # show bare verdicts too, however far
# [options.reflection]
# guideline_token_budget = 800
# [options.validation]
# mode = "all"                                  # check guidelines on every seen case
# [options.prompt]
# verdict_order = "rationale_first"             # default "auto": the score first on [low, high]
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


def factory_from_spec(spec: str) -> ModelFactory:
    """Import a model factory from `package.module:function`."""
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


def build_models(cfg: JudgeFile, factory: ModelFactory | None) -> Models:
    """The judge's models: from the factory if given, else from the file."""
    if factory is None:
        return default_models(cfg)
    made = factory(cfg)
    return made if isinstance(made, Models) else Models(*made)
