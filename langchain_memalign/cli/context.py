"""What every command gets: parsed arguments, the judge file, the model factory."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from langchain_memalign.cli.judge_file import CLIError, JudgeFile, ModelFactory, build_models
from langchain_memalign.cli.progress import Progress
from langchain_memalign.errors import (
    EmbeddingMismatchError,
    MemoryFormatError,
)
from langchain_memalign.judge import MemAlignJudge
from langchain_memalign.memory.store import DB_FILE

if TYPE_CHECKING:
    pass


class Context:
    """What every command gets: parsed arguments, the judge file and the model factory."""

    def __init__(self, args: argparse.Namespace, factory: ModelFactory | None) -> None:
        self.args = args
        self.factory = factory
        self._cfg: JudgeFile | None = None

    @property
    def cfg(self) -> JudgeFile:
        """The judge file, read on first use."""
        if self._cfg is None:
            self._cfg = JudgeFile.read(self.args.config)
        return self._cfg

    def memory(self) -> Path:
        """The memory folder: `--memory`, else the judge file's."""
        if getattr(self.args, "memory", None):
            return Path(self.args.memory)
        return self.cfg.memory_path()

    def progress(self, total: int, label: str) -> Progress:
        """A progress bar as `--progress` asks."""
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
        models = build_models(cfg, self.factory)
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
