"""What every command gets: parsed arguments, the judge file, the model factory."""

from __future__ import annotations

import argparse
import os
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from langchain_memalign._redact import redact
from langchain_memalign.cli.judge_file import (
    CLIError,
    JudgeFile,
    ModelFactory,
    Models,
    build_models,
)
from langchain_memalign.cli.progress import AlignSteps, Progress
from langchain_memalign.errors import (
    EmbeddingMismatchError,
    MemoryFormatError,
)
from langchain_memalign.judge import MemAlignJudge
from langchain_memalign.memory.postgres import describe_location, is_postgres_url, memory_exists


class Context:
    """What every command gets: parsed arguments, the judge file and the model factory."""

    def __init__(self, args: argparse.Namespace, factory: ModelFactory | None) -> None:
        self.args = args
        self.factory = factory
        self._cfg: JudgeFile | None = None
        self._models: Models | None = None

    @property
    def cfg(self) -> JudgeFile:
        """The judge file, read on first use."""
        if self._cfg is None:
            self._cfg = JudgeFile.read(self.args.config)
        return self._cfg

    def memory(self) -> Path | str:
        """The memory folder (or `postgresql://` URL): `--memory`, else the judge file's."""
        if getattr(self.args, "memory", None):
            given = str(self.args.memory)
            return given if is_postgres_url(given) else Path(given)
        return self.cfg.memory_path()

    def redact(self, text: str) -> str:
        """`text` without credentials, those of the memory's URL included."""
        sources = [str(getattr(self.args, "memory", None) or "")]
        if self._cfg is not None:
            sources.append(str(self._cfg.memory or ""))
        return redact(text, *(s for s in sources if s))

    def progress(self, total: int, label: str) -> Progress:
        """A progress bar as `--progress` asks."""
        return Progress(total, label, enabled=self.args.progress)

    def align_steps(self, label: str) -> AbstractContextManager[AlignSteps | None]:
        """Lines naming each align step as it runs, unless `--no-progress`."""
        if self.args.progress is False:
            return nullcontext(None)
        return AlignSteps(label)

    def judge(self, *, create: bool = False, in_process: bool = False) -> MemAlignJudge:
        """The judge of the file, on its memory folder (or a fresh in-process memory)."""
        cfg = self.cfg
        folder = None if in_process else self.memory()
        if folder is not None and not create and not memory_exists(folder):
            raise CLIError(
                f"no judge memory at {describe_location(folder)}; create it first: "
                f"memalign create -c {self.args.config}"
            )
        models = self._models = build_models(cfg, self.factory)
        try:
            return MemAlignJudge(
                name=cfg.name,
                instructions=cfg.prompt(),
                model=models.chat,
                embeddings=models.embeddings,
                scale=cfg.scale,
                reflection_model=models.reflection,
                path=folder,
                k=cfg.k,
                options=cfg.options,
            )
        except (MemoryFormatError, EmbeddingMismatchError) as e:
            raise CLIError(str(e)) from e

    def explain(self, error: BaseException) -> str:
        """`error` as one line; a connection failure names the servers it tried."""
        text = f"{type(error).__name__}: {error}"
        if is_connection_error(error):
            text += f" ({self.servers()})"
        return text

    def servers(self) -> str:
        """Where the judge's models are served, for error messages."""
        models = self._models
        if models is None:
            return "the models were not built"
        chat, emb = redact(endpoint(models.chat)), redact(endpoint(models.embeddings))
        if chat == emb:
            return f"model server: {chat}"
        return f"chat model at {chat}, embeddings at {emb}"


_CONNECTION_ERRORS = {
    "APIConnectionError",
    "APITimeoutError",
    "ConnectError",
    "ConnectTimeout",
    "OpenAIConnectionError",
}


def is_connection_error(error: BaseException) -> bool:
    """Whether `error` (or what caused it) is a failure to reach a server."""
    seen: BaseException | None = error
    for _ in range(5):  # the cause chain, not forever
        if seen is None:
            return False
        if isinstance(seen, ConnectionError) or type(seen).__name__ in _CONNECTION_ERRORS:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def endpoint(model: Any) -> str:
    """The URL a model sends its requests to, as far as it says."""
    for attr in ("openai_api_base", "base_url", "api_base", "endpoint"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    if type(model).__module__.startswith("langchain_openai"):
        return os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
    return f"{type(model).__name__} (its default endpoint)"
