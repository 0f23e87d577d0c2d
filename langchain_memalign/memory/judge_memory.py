"""The dual memory of one judge: SQLite store, FAISS episodes and guideline snapshot.

Readers (judgments) work on immutable snapshots and the thread-safe index,
so many threads can judge while an alignment writes: a writer commits to
SQLite first and then swaps the in-process views.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from langchain_memalign._text import render, stable_hash, truncate
from langchain_memalign.config import JudgeConfig
from langchain_memalign.errors import EmbeddingMismatchError, MemoryFormatError
from langchain_memalign.feedback import Feedback
from langchain_memalign.memory._files import write_atomic
from langchain_memalign.memory.episodic import Episode, EpisodicIndex, as_matrix
from langchain_memalign.memory.semantic import Guideline, select_guidelines, total_tokens
from langchain_memalign.memory.store import INDEX_FILE, MemoryStore
from langchain_memalign.models import embeddings_fingerprint
from langchain_memalign.reports import Usage

logger = logging.getLogger(__name__)


class JudgeMemory:
    """Semantic and episodic memory behind one judge."""

    def __init__(self, store: MemoryStore, embeddings: Embeddings, config: JudgeConfig) -> None:
        self.store = store
        self.embeddings = embeddings
        self.config = config
        # Serializes align/unalign/save; judgments never take it.
        self.write_lock = threading.RLock()
        self.index = EpisodicIndex(**self._index_options())
        self._guidelines: tuple[Guideline, ...] = ()
        self._guideline_vectors: np.ndarray | None = None
        # Every embedding call of this memory, for callers that report costs
        # (embedding models have no LangChain callbacks to count them with).
        self._embedding_lock = threading.Lock()
        self._embedding_calls = 0
        self._embedded_texts = 0

    # -- opening -------------------------------------------------------------------

    @classmethod
    def create(
        cls, folder: str | os.PathLike[str] | None, embeddings: Embeddings, config: JudgeConfig
    ) -> JudgeMemory:
        """Open (or start) the memory in `folder` for this config; `None` keeps it in process."""
        store = MemoryStore.create(folder)
        stored = store.get_meta("config")
        if stored is None:
            store.set_meta("config", config.model_dump(mode="json"))
            store.set_meta("embeddings", embeddings_fingerprint(embeddings))
        else:
            _check_identity(JudgeConfig.model_validate(stored), config, folder)
            store.set_meta("config", config.model_dump(mode="json"))
        memory = cls(store, embeddings, config)
        memory._check_embeddings()
        memory.reload()
        return memory

    @classmethod
    def load(
        cls, folder: str | os.PathLike[str], embeddings: Embeddings, **overrides: Any
    ) -> JudgeMemory:
        """Open a saved memory; makes no embedding call."""
        store = MemoryStore.open(folder)
        stored = store.get_meta("config")
        if stored is None:
            raise MemoryFormatError(f"{folder}: memory has no judge configuration")
        old = JudgeConfig.model_validate(stored)
        config = JudgeConfig.model_validate({**stored, **overrides})
        _check_identity(old, config, folder)
        memory = cls(store, embeddings, config)
        memory._check_embeddings()
        memory.reload()
        return memory

    def _check_embeddings(self) -> None:
        stored = self.store.get_meta("embeddings")
        current = embeddings_fingerprint(self.embeddings)
        if stored is not None and stored != current:
            raise EmbeddingMismatchError(
                f"this memory was built with embeddings {stored!r} but is opened with "
                f"{current!r}; vectors from different models cannot be compared. Open it with "
                "the original embedding model."
            )

    def reload(self) -> None:
        """Rebuild the in-process views from the store (index from cache or stored vectors)."""
        with self.write_lock:
            index = self._read_index_cache() or self._rebuild_index()
            guidelines, vectors = self.store.load_guidelines()
            self.index = index
            self._guidelines, self._guideline_vectors = tuple(guidelines), vectors

    def _index_options(self) -> dict[str, Any]:
        return {
            "hnsw_threshold": self.config.hnsw_threshold,
            "ef_search": self.config.hnsw_ef_search,
        }

    def _rebuild_index(self) -> EpisodicIndex:
        ids, vectors = self.store.all_vectors()
        return EpisodicIndex.build(ids, vectors, **self._index_options())

    def _read_index_cache(self) -> EpisodicIndex | None:
        folder = self.store.folder
        if folder is None or not (folder / INDEX_FILE).is_file():
            return None
        if self.store.get_meta("index_seq") != self.store.get_meta("change_seq"):
            logger.debug("%s: stale index cache, rebuilding it from the stored vectors", folder)
            return None
        try:
            index = EpisodicIndex.read(str(folder / INDEX_FILE), **self._index_options())
        except RuntimeError as e:  # a damaged cache is rebuilt, never trusted
            logger.warning("%s: damaged index cache (%s), rebuilding it", folder / INDEX_FILE, e)
            return None
        if len(index) != self.store.count("episodes"):
            logger.warning("%s: index cache out of step, rebuilding it", folder / INDEX_FILE)
            return None
        return index

    def save(self, folder: str | os.PathLike[str]) -> None:
        """Write the memory to `folder` atomically, with a fresh index cache."""
        target = Path(folder)
        with self.write_lock:
            if self.store.folder is None or target.resolve() != self.store.folder.resolve():
                self.store.backup_to(target)
            if not len(self.index):
                (target / INDEX_FILE).unlink(missing_ok=True)
            else:
                write_atomic(target / INDEX_FILE, self.index.write)
                # Stamp the copy (not only this store) so a load can trust the cache.
                copy = MemoryStore.open(target)
                try:
                    copy.set_meta("index_seq", copy.get_meta("change_seq"))
                finally:
                    copy.close()

    # -- embedding -------------------------------------------------------------------

    def case_text(self, inputs: Any, outputs: Any = None) -> str:
        """The text embedded for a case: identical for stored episodes and new cases."""
        text = render(inputs)
        if self.config.embed == "inputs_outputs" and outputs is not None:
            text = f"{text}\n{render(outputs)}"
        return truncate(text, self.config.embed_max_chars) or "(empty)"

    def embed(self, texts: Sequence[str], usage: Usage | None = None) -> np.ndarray:
        """Embed texts in one call."""
        vectors = self.embeddings.embed_documents(list(texts))
        self._count(usage, len(texts))
        return as_matrix(vectors)

    async def aembed(self, texts: Sequence[str], usage: Usage | None = None) -> np.ndarray:
        """Async twin of `embed`."""
        vectors = await self.embeddings.aembed_documents(list(texts))
        self._count(usage, len(texts))
        return as_matrix(vectors)

    def _count(self, usage: Usage | None, n: int) -> None:
        with self._embedding_lock:
            self._embedding_calls += 1
            self._embedded_texts += n
        if usage is not None:
            usage.embedding_calls += 1
            usage.embedded_texts += n

    def embedding_usage(self) -> Usage:
        """Embedding calls and texts embedded by this memory so far (all threads)."""
        with self._embedding_lock:
            return Usage(embedding_calls=self._embedding_calls, embedded_texts=self._embedded_texts)

    @staticmethod
    def text_hash(text: str) -> str:
        """Hash of an embedded text, to skip re-embedding unchanged cases."""
        return stable_hash(text)

    # -- reading ---------------------------------------------------------------------

    @property
    def guidelines(self) -> tuple[Guideline, ...]:
        """The current guidelines (an immutable snapshot)."""
        return self._guidelines

    @property
    def guideline_vectors(self) -> np.ndarray | None:
        """Vectors of the current guidelines, row-aligned with `guidelines`."""
        return self._guideline_vectors

    def needs_query_vector(self) -> bool:
        """Whether a judgment needs the case embedded (nothing to retrieve: no call)."""
        over_budget = total_tokens(self._guidelines) > self.config.guideline_token_budget
        return (len(self.index) > 0 and self.config.k > 0) or over_budget

    def select_guidelines(self, query_vector: Any) -> list[Guideline]:
        """Guidelines for a judgment's working memory, within the token budget."""
        guidelines, vectors = self._guidelines, self._guideline_vectors
        q = None if query_vector is None else np.asarray(query_vector, dtype=np.float32)
        return select_guidelines(guidelines, vectors, q, self.config.guideline_token_budget)

    def retrieve(self, query_vector: Any, k: int | None = None) -> list[Episode]:
        """The `k` most similar past cases."""
        k = self.config.k if k is None else k
        if query_vector is None or k <= 0:
            return []
        hits = self.index.search(query_vector, k)
        rows = self.store.episodes_by_rowid([i for i, _ in hits])
        episodes = []
        for rowid, score in hits:
            fb = rows.get(rowid)
            if fb is None:  # removed between search and fetch by a concurrent unalign
                continue
            episodes.append(
                Episode(
                    feedback_id=fb.id, inputs=fb.inputs, outputs=fb.outputs,
                    reference_outputs=fb.reference_outputs, value=fb.value,
                    rationale=fb.rationale, annotator=fb.annotator, similarity=score,
                )
            )  # fmt: skip
        return episodes

    def stored_ids(self, ids: Iterable[str]) -> set[str]:
        """Which of `ids` are stored feedback."""
        return set(self.store.feedback_state(ids))

    def feedback(self, ids: Iterable[str]) -> dict[str, Feedback]:
        """The stored feedback among `ids`, by id (unknown ids are left out)."""
        return self.store.get_feedback(ids)

    def pending_ids(self) -> list[str]:
        """Stored feedback whose reflection failed; the next `align` retries it."""
        return self.store.pending_reflection()

    # -- integrations' own state ---------------------------------------------------------

    @contextmanager
    def integration_state(self, namespace: str) -> Iterator[IntegrationState]:
        """Read and write an integration's own state, stored with the memory.

        An integration that feeds the judge (a feedback source, a queue) keeps
        what it has seen here, so that the state and the memory it describes
        are saved, copied and deleted together. The block holds the memory's
        write lock: no other align, unalign or save runs meanwhile, but the
        block itself may align and unalign (the lock is re-entrant).

        ```python
        with judge.memory.integration_state("my_source:project-1") as state:
            seen = state.get() or {}
            ...
            state.set(seen)  # saved at once: a later failure keeps it
        ```

        Args:
            namespace: The integration's key, e.g. `"langsmith_sync:<key>:<scope>"`;
                the memory's own keys (`config`, `embeddings`, ...) are refused.
        """
        if not namespace or namespace in _CORE_META:
            raise ValueError(f"{namespace!r} is not an integration namespace")
        with self.write_lock:
            yield IntegrationState(self.store, namespace)

    # -- swapping views after a committed write ------------------------------------------

    def refresh_guidelines(self) -> None:
        """Re-read guidelines after a committed write."""
        guidelines, vectors = self.store.load_guidelines()
        self._guidelines, self._guideline_vectors = tuple(guidelines), vectors


class IntegrationState:
    """One integration's state in the memory: a JSON value (see `integration_state`)."""

    def __init__(self, store: MemoryStore, namespace: str) -> None:
        self._store = store
        self.namespace = namespace

    def get(self) -> Any:
        """The stored value, or None."""
        return self._store.get_meta(self.namespace)

    def set(self, value: Any) -> None:
        """Store `value` (JSON-serializable) at once; `None` clears it."""
        self._store.set_meta(self.namespace, value)


# The memory's own meta keys, which no integration may overwrite.
_CORE_META = frozenset({"config", "embeddings", "schema_version", "change_seq", "index_seq"})

# What a stored memory is: changing these would make its guidelines or its
# vectors mean something else, so they cannot change on reopening.
_IDENTITY = ("name", "scale", "embed", "embed_max_chars")


def _check_identity(old: JudgeConfig, new: JudgeConfig, folder: Any) -> None:
    changed = [f for f in _IDENTITY if getattr(old, f) != getattr(new, f)]
    if changed:
        raise MemoryFormatError(
            f"{folder}: holds the memory of judge {old.name!r} ({old.scale.kind} scale); "
            f"it cannot be reopened with a different {', '.join(changed)}. Open it with "
            "MemAlignJudge.load, or use another folder."
        )
