"""Shared pieces of the scale benchmarks: fake models, synthetic memories, timing, results.

Nothing here is measured itself; the `bench_*.py` scripts import it.

* `LatencyChatModel`: an in-process chat model that sleeps a fixed latency
  (`time.sleep` in `_generate`, `asyncio.sleep` in `_agenerate`) and answers every
  role of the package (judge, reflect, consolidate, re-derive) with valid JSON.
  It supports `bind_tools`, so the judge uses the same tool-calling structured
  output route as for any non-OpenAI LangChain chat model. It records the time
  spent inside the model and the last prompt it saw.
* `JsonSchemaLatencyChat`: the same behaviour as a `ChatOpenAI` subclass whose
  `_generate` never touches the network: the judge then takes its `json_schema`
  route, the one used with OpenAI and with local llama.cpp/vLLM servers.
* `TopicEmbeddings`: deterministic 384-d bag-of-words embeddings (each word's vector
  is seeded by its CRC32), so texts that share topic words are close. It counts
  calls and texts and can add a fixed latency.
* `CaseGenerator`: synthetic support cases drawn from topic vocabularies, and the
  vectorised embedding of many cases for populating big memories.
* `populate_memory`: writes N episodes straight into a memory folder through
  `MemoryStore` transactions (`put_feedback`, `put_episode`), builds the FAISS index
  once through `MemAlignJudge.load` and saves its cache. Going through
  `judge.align` would cost per-item Python work that is not what these
  benchmarks measure (the align benchmark measures that path itself).

Big memories are cached under `$MEMALIGN_SCALE_DATA` (default `/tmp/memalign_scale`),
keyed by their parameters, so reruns reuse them.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, Field, PrivateAttr

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# Where results go: this folder's results/, or $MEMALIGN_SCALE_RESULTS (the smoke tests).
RESULTS = Path(os.environ.get("MEMALIGN_SCALE_RESULTS", HERE / "results"))
DATA = Path(os.environ.get("MEMALIGN_SCALE_DATA", "/tmp/memalign_scale"))
DIM = 384

if str(ROOT) not in sys.path:  # run from anywhere
    sys.path.insert(0, str(ROOT))

INSTRUCTIONS = (
    "Is the support reply helpful and appropriately empathetic?\n"
    "Customer: {inputs}\nReply: {outputs}"
)


# -- environment and results ------------------------------------------------------------------


def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded."""
    return [round(x, 2) for x in os.getloadavg()]


def rss_mb() -> float:
    """Resident memory of this process in MiB (from /proc, no psutil needed)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def env_info() -> dict[str, Any]:
    """What the figures were measured on."""
    import faiss
    import langchain_core
    import langgraph.version

    try:
        rev = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "langchain_memalign"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        rev, dirty = "", ""
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        # the cores this process may run on (a run pinned with taskset has fewer)
        "cpu_affinity": len(os.sched_getaffinity(0)),
        "cpu_model": _cpu_model(),
        "machine_label": os.environ.get("MEMALIGN_BENCH_MACHINE", "dev box"),
        "faiss": faiss.__version__,
        "faiss_omp_threads": faiss.omp_get_max_threads(),
        "langchain_core": langchain_core.__version__,
        "langgraph": langgraph.version.__version__,
        "git_rev": rev,
        "package_modified_files": dirty.splitlines(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def summarize(seconds: Sequence[float]) -> dict[str, float]:
    """Median, p90, p99, mean, min and max of durations, in milliseconds."""
    ms = sorted(s * 1000 for s in seconds)
    if not ms:
        return {}

    def pct(p: float) -> float:
        return ms[min(len(ms) - 1, round(p * (len(ms) - 1)))]

    return {
        "n": len(ms),
        "median_ms": round(statistics.median(ms), 4),
        "p90_ms": round(pct(0.9), 4),
        "p99_ms": round(pct(0.99), 4),
        "mean_ms": round(statistics.fmean(ms), 4),
        "min_ms": round(ms[0], 4),
        "max_ms": round(ms[-1], 4),
    }


def save_result(name: str, data: dict[str, Any], command: str | None = None) -> Path:
    """Write `results/<name>.json` with the environment and the command line."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {
        "benchmark": name,
        "command": command or " ".join([".venv/bin/python", *sys.argv]),
        "env": env_info(),
        **data,
    }
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(out, indent=2, default=_json_default) + "\n")
    print(f"saved {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return path


def _json_default(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    return str(o)


def wait_for_quiet(max_load: float, max_wait_s: float) -> list[float]:
    """Wait (up to `max_wait_s`) until the 1-minute load average is at most `max_load`."""
    deadline = time.monotonic() + max_wait_s
    while os.getloadavg()[0] > max_load and time.monotonic() < deadline:
        time.sleep(10)
    return loadavg()


def release_judges() -> None:
    """Free judges this process dropped (works around a leak found by these benchmarks).

    LangGraph's `add_node` reads `RunnableLambda.deps`, which calls langchain_core's
    `get_function_nonlocals`, an `lru_cache(maxsize=256)` keyed by the node function:
    the judge graph's bound methods (`JudgeNodes.embed_case`, ...) stay in that cache,
    and with them the judge's memory and FAISS index, after the judge is dropped.
    """
    from langchain_core.runnables.utils import get_function_nonlocals

    get_function_nonlocals.cache_clear()
    gc.collect()


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """(seconds, result) of one call."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


# -- fake chat models ---------------------------------------------------------------------------


def _system(messages: Sequence[BaseMessage]) -> str:
    return str(messages[0].content) if messages else ""


def default_reply(messages: Sequence[BaseMessage]) -> dict[str, Any]:
    """A valid answer for each of the package's prompts (decided by the system prompt)."""
    system = _system(messages)
    if system.startswith("You are an expert evaluator"):
        return {"rationale": "The reply answers the question.", "score": True}
    if '{"rule"' in system:
        # A contrast pair or a single case (the default reflection): one rule.
        return {"rule": "Acknowledge the customer's situation."}
    if system.startswith("You turn the grading rules"):
        # Check writing: each rule shown (by its handle) as a question and its inverse.
        human = "\n".join(str(m.content) for m in messages[1:])
        return {
            "checks": [
                {
                    "rule_id": handle,
                    "applies": "Is the customer upset?",
                    "broken": "Does the reply leave out an apology?",
                    "kept": "Does the reply apologize?",
                    "exception": "",
                }
                for handle in re.findall(r"^\[(G\d+)\]", human, re.MULTILINE)
            ]
        }
    if system.startswith("Answer questions about the case"):
        # A check's question about one case (or several, "q1".."qn"): a fixed answer
        # per case and question, like a model that reads the case.
        human = "\n".join(str(m.content) for m in messages[1:])
        n = human.count('"q')
        fields = [f"q{i}" for i in range(1, n + 1)] if n else ["answer"]
        return {f: zlib.crc32(f"{human}/{f}".encode()) % 2 == 0 for f in fields}
    if "grading rules of a team of experts" in system:
        human = "\n".join(str(m.content) for m in messages[1:])
        # A prompt names feedback by handles (F1, F2, ...): one rule per case, told
        # apart by what the case shows.
        blocks = re.findall(r'<feedback id="([^"]+)">(.*?)</feedback>', human, re.S)
        return {
            "guidelines": [
                {
                    "text": f"Acknowledge the customer's situation ({zlib.crc32(body.encode())}).",
                    "source_ids": [handle],
                }
                for handle, body in blocks
            ]
        }
    if "been withdrawn" in system:
        return {"text": "Acknowledge the customer's situation."}
    if "grown too long" in system:
        return {"guidelines": []}
    return {"rationale": "ok", "score": True}


class _ModelClock:
    """Time spent inside a fake model, and the last prompt it saw (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = 0
        self.seconds = 0.0
        self.last_messages: list[BaseMessage] = []

    def record(self, messages: list[BaseMessage], seconds: float) -> None:
        with self.lock:
            self.calls += 1
            self.seconds += seconds
            self.last_messages = messages

    def reset(self) -> None:
        with self.lock:
            self.calls, self.seconds, self.last_messages = 0, 0.0, []


def _usage(messages: Sequence[BaseMessage]) -> dict[str, int]:
    prompt = sum(len(str(m.content)) for m in messages) // 4
    return {"input_tokens": prompt, "output_tokens": 20, "total_tokens": prompt + 20}


class LatencyChatModel(BaseChatModel):
    """A tool-calling fake chat model with a fixed latency (see the module docstring)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    latency: float = 0.0
    reply: Callable[[list[BaseMessage]], Any] = Field(default=default_reply)
    tool_name: str | None = None
    clock: Any = None
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def model_post_init(self, context: Any) -> None:
        if self.clock is None:
            self.clock = _ModelClock()

    @property
    def _llm_type(self) -> str:
        return "latency-fake"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        tool = tools[0]
        name = tool.__name__ if isinstance(tool, type) else tool["title"]
        return self.model_copy(update={"tool_name": name})  # shares the clock

    def _message(self, messages: list[BaseMessage]) -> AIMessage:
        reply = self.reply(messages)
        if isinstance(reply, AIMessage):
            msg = reply.model_copy()
        elif self.tool_name:
            msg = AIMessage(
                content="",
                tool_calls=[
                    {"name": self.tool_name, "args": reply, "id": "call_1", "type": "tool_call"}
                ],
            )
        else:
            msg = AIMessage(content=json.dumps(reply))
        msg.usage_metadata = _usage(messages)  # type: ignore[assignment]
        return msg

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        t0 = time.perf_counter()
        if self.latency:
            time.sleep(self.latency)
        msg = self._message(messages)
        self.clock.record(messages, time.perf_counter() - t0)
        return ChatResult(generations=[ChatGeneration(message=msg)])

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        t0 = time.perf_counter()
        if self.latency:
            await asyncio.sleep(self.latency)
        msg = self._message(messages)
        self.clock.record(messages, time.perf_counter() - t0)
        return ChatResult(generations=[ChatGeneration(message=msg)])


def json_schema_chat(latency: float = 0.0, reply: Callable[..., Any] = default_reply) -> Any:
    """A `ChatOpenAI` that never calls the network: the judge takes its json_schema route."""
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    clock = _ModelClock()

    class JsonSchemaLatencyChat(ChatOpenAI):
        def _generate(
            self,
            messages: list[BaseMessage],
            stop: Any = None,
            run_manager: Any = None,
            **kw: Any,
        ) -> ChatResult:
            t0 = time.perf_counter()
            if latency:
                time.sleep(latency)
            msg = AIMessage(content=json.dumps(reply(messages)))
            msg.usage_metadata = _usage(messages)  # type: ignore[assignment]
            clock.record(messages, time.perf_counter() - t0)
            return ChatResult(generations=[ChatGeneration(message=msg)])

        async def _agenerate(
            self,
            messages: list[BaseMessage],
            stop: Any = None,
            run_manager: Any = None,
            **kw: Any,
        ) -> ChatResult:
            t0 = time.perf_counter()
            if latency:
                await asyncio.sleep(latency)
            msg = AIMessage(content=json.dumps(reply(messages)))
            msg.usage_metadata = _usage(messages)  # type: ignore[assignment]
            clock.record(messages, time.perf_counter() - t0)
            return ChatResult(generations=[ChatGeneration(message=msg)])

    model = JsonSchemaLatencyChat(model="gpt-4.1-mini", api_key=SecretStr("unused"))
    object.__setattr__(model, "_bench_clock", clock)
    return model


def clock_of(model: Any) -> _ModelClock:
    """The `_ModelClock` of either fake model."""
    clock = getattr(model, "clock", None) or getattr(model, "_bench_clock", None)
    assert clock is not None
    return clock


# -- deterministic embeddings -----------------------------------------------------------------

_WORD_CACHE: dict[str, np.ndarray] = {}
_WORD_LOCK = threading.Lock()


def word_vector(word: str, dim: int = DIM) -> np.ndarray:
    """A fixed pseudo-random vector per word (seeded by CRC32, stable across processes)."""
    v = _WORD_CACHE.get(word)
    if v is None:
        v = np.random.default_rng(zlib.crc32(word.encode())).standard_normal(dim)
        v = v.astype(np.float32)
        with _WORD_LOCK:
            _WORD_CACHE[word] = v
    return v


class TopicEmbeddings(Embeddings):
    """Deterministic bag-of-words embeddings of dimension 384 that count their calls."""

    def __init__(self, dim: int = DIM, latency: float = 0.0, model: str = "topic-bow-384"):
        self.dim = dim
        self.latency = latency
        self.model = model  # part of the fingerprint stored with a memory
        self.calls = 0
        self.texts = 0
        self.seconds = 0.0
        self.fail = False  # set to True to prove a code path makes no embedding call
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self.calls, self.texts, self.seconds = 0, 0, 0.0

    def _vec(self, text: str) -> list[float]:
        words = text.lower().split()
        v = np.zeros(self.dim, dtype=np.float32)
        for w in words:
            v += word_vector(w, self.dim)
        n = float(np.linalg.norm(v))
        if n == 0:
            v[0], n = 1.0, 1.0
        return (v / n).tolist()

    def _embed(self, texts: list[str]) -> list[list[float]]:
        if self.fail:
            raise AssertionError("an embedding call was made where none was expected")
        t0 = time.perf_counter()
        out = [self._vec(t) for t in texts]
        dt = time.perf_counter() - t0 + self.latency
        with self._lock:
            self.calls += 1
            self.texts += len(texts)
            self.seconds += dt
        return out

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.latency:
            time.sleep(self.latency)
        return self._embed(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.latency:
            await asyncio.sleep(self.latency)
        if len(texts) > 8:
            # A real embedding client awaits the network; computing a big batch here on
            # the event loop would be this fake's stall, not the judge's.
            return await asyncio.to_thread(self._embed, texts)
        return self._embed(texts)

    async def aembed_query(self, text: str) -> list[float]:
        return (await self.aembed_documents([text]))[0]


# -- synthetic cases ------------------------------------------------------------------------------

_SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "re",
    "tu",
    "sa",
    "no",
    "vi",
    "de",
    "ra",
    "po",
    "li",
    "ne",
    "ko",
    "ma",
    "ti",
    "ba",
    "zu",
    "fe",
    "go",
    "hi",
    "ju",
    "qua",
    "xe",
    "wo",
    "ye",
    "cha",
    "shi",
    "pra",
    "tre",
]


class CaseGenerator:
    """Synthetic customer-support cases drawn from topic vocabularies (deterministic)."""

    def __init__(
        self, topics: int = 200, topic_words: int = 40, common_words: int = 600, seed: int = 0
    ) -> None:
        rng = np.random.default_rng(seed)
        words: set[str] = set()
        vocab: list[str] = []
        while len(vocab) < topics * topic_words + common_words:
            w = "".join(rng.choice(_SYLLABLES, size=int(rng.integers(2, 4))))
            if w not in words:
                words.add(w)
                vocab.append(w)
        self.vocab = np.array(vocab)
        self.topics = topics
        self.topic_words = topic_words
        self.common = np.arange(topics * topic_words, len(vocab))
        self.seed = seed

    def _words(self, rng: np.random.Generator, topic: int, n: int) -> np.ndarray:
        base = topic * self.topic_words
        own = rng.integers(base, base + self.topic_words, size=n)
        other = rng.choice(self.common, size=n)
        return np.where(rng.random(n) < 0.6, own, other)

    def case_ids(self, i: int, salt: int = 0) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        """(topic, input word ids, output word ids, rationale word ids) of case `i`."""
        rng = np.random.default_rng((self.seed, salt, i))
        topic = int(rng.integers(self.topics))
        return (
            topic,
            self._words(rng, topic, int(rng.integers(25, 45))),
            self._words(rng, topic, int(rng.integers(30, 60))),
            self._words(rng, topic, int(rng.integers(10, 20))),
        )

    def text(self, ids: np.ndarray) -> str:
        return " ".join(self.vocab[ids])

    def case(self, i: int, salt: int = 0) -> dict[str, Any]:
        """One case: `inputs`, `outputs`, a boolean `value`, a `rationale` and its `topic`."""
        topic, a, b, c = self.case_ids(i, salt)
        return {
            "inputs": self.text(a),
            "outputs": self.text(b),
            "value": bool((i * 2654435761 + salt) % 3),
            "rationale": self.text(c),
            "topic": topic,
        }

    def word_matrix(self, dim: int = DIM) -> np.ndarray:
        """Vectors of the whole vocabulary, row-aligned with `vocab` (as TopicEmbeddings)."""
        return np.stack([word_vector(str(w), dim) for w in self.vocab])

    def embed_inputs(self, word_ids: Sequence[np.ndarray], matrix: np.ndarray) -> np.ndarray:
        """TopicEmbeddings of the cases' input texts, vectorised (normalised float32)."""
        out = np.empty((len(word_ids), matrix.shape[1]), dtype=np.float32)
        for r, ids in enumerate(word_ids):
            out[r] = matrix[ids].sum(axis=0)
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out


def guideline_texts(n: int, gen: CaseGenerator, seed: int = 1) -> list[tuple[str, int]]:
    """`n` guideline texts (about 20 tokens each) with their topic."""
    rng = np.random.default_rng(seed)
    out = []
    for j in range(n):
        topic = j % gen.topics
        words = gen.text(gen._words(rng, topic, 10))
        out.append((f"When the case is about {words}, acknowledge it first.", topic))
    return out


# -- populating big memories --------------------------------------------------------------------


def make_judge(
    model: Any,
    embeddings: Embeddings,
    path: str | os.PathLike[str] | None = None,
    options: dict[str, Any] | None = None,
) -> Any:
    """The benchmarks' judge; `options` as the judge takes them (`{"retrieval": {...}}`)."""
    from langchain_memalign import MemAlignJudge

    return MemAlignJudge(
        name="helpfulness",
        instructions=INSTRUCTIONS,
        model=model,
        embeddings=embeddings,
        scale=bool,
        path=path,
        options=options,
    )


def memory_folder(n: int, guidelines: int, seed: int, hnsw_threshold: int) -> Path:
    return DATA / f"mem_n{n}_g{guidelines}_s{seed}_h{hnsw_threshold}"


def populate_memory(
    n: int,
    *,
    guidelines: int = 60,
    seed: int = 0,
    hnsw_threshold: int = 50_000,
    chunk: int = 20_000,
    rebuild: bool = False,
    log: Callable[[str], None] = print,
) -> tuple[Path, dict[str, Any]]:
    """A saved memory folder with `n` episodes and `guidelines` guidelines (cached).

    Feedback and episodes are written with `MemoryStore.put_feedback` /
    `put_episode` in transactions of `chunk` items; vectors are the
    TopicEmbeddings of the case inputs (the judge's `embed="inputs"` text),
    computed in bulk. Then `MemAlignJudge.load` builds the index from the
    stored vectors and `save` writes the index cache, so later loads read it.
    """
    from langchain_memalign import Feedback

    folder = memory_folder(n, guidelines, seed, hnsw_threshold)
    info_file = folder / "populate.json"
    if info_file.is_file() and not rebuild:
        return folder, json.loads(info_file.read_text())
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    gen = CaseGenerator(seed=seed)
    emb = TopicEmbeddings()
    t_start = time.perf_counter()
    judge = make_judge(
        LatencyChatModel(), emb, folder, {"retrieval": {"hnsw_threshold": hnsw_threshold}}
    )
    mem = judge.memory
    matrix = gen.word_matrix()
    t_gen = t_sql = 0.0
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        t0 = time.perf_counter()
        ids = [gen.case_ids(i) for i in range(start, stop)]
        vectors = gen.embed_inputs([c[1] for c in ids], matrix)
        items = []
        for i, (_topic, a, b, c) in zip(range(start, stop), ids, strict=True):
            inputs = gen.text(a)
            fb = Feedback(
                id=f"fb-{i:07d}",
                inputs=inputs,
                outputs=gen.text(b),
                value=bool((i * 2654435761) % 3),
                rationale=gen.text(c),
            )
            items.append((fb, mem.text_hash(mem.case_text(inputs, fb.outputs))))
        t1 = time.perf_counter()
        with mem.store.transaction() as conn:
            for (fb, th), vec in zip(items, vectors, strict=True):
                mem.store.put_feedback(conn, fb, reflected=True)
                mem.store.put_episode(conn, fb.id, th, vec)
        t2 = time.perf_counter()
        t_gen += t1 - t0
        t_sql += t2 - t1
        log(f"  populated {stop:,}/{n:,} episodes ({t2 - t_start:.0f} s)")
    if guidelines:
        from langchain_memalign.memory.semantic import Guideline

        texts = guideline_texts(guidelines, gen)
        gvecs = np.asarray(emb.embed_documents([t for t, _ in texts]), dtype=np.float32)
        with mem.store.transaction() as conn:
            for j, ((text, _topic), vec) in enumerate(zip(texts, gvecs, strict=True)):
                g = Guideline(id=f"g-{j:06d}", text=text, source_ids=(f"fb-{j:07d}",))
                mem.store.put_guideline(conn, g, vec, j)
    judge.memory.store.close()
    t0 = time.perf_counter()
    from langchain_memalign import MemAlignJudge

    judge = MemAlignJudge.load(folder, model=LatencyChatModel(), embeddings=TopicEmbeddings())
    t_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    judge.save(folder)
    t_save = time.perf_counter() - t0
    kind = judge.memory.index.kind
    judge.memory.store.close()
    info = {
        "n": n,
        "guidelines": guidelines,
        "seed": seed,
        "hnsw_threshold": hnsw_threshold,
        "index_kind": kind,
        "generate_seconds": round(t_gen, 2),
        "sqlite_insert_seconds": round(t_sql, 2),
        "index_build_on_load_seconds": round(t_build, 2),
        "save_index_cache_seconds": round(t_save, 2),
        "total_seconds": round(time.perf_counter() - t_start, 2),
        "sqlite_mb": round((folder / "memory.sqlite").stat().st_size / 2**20, 1),
        "faiss_mb": round((folder / "episodes.faiss").stat().st_size / 2**20, 1),
        "loadavg": loadavg(),
    }
    info_file.write_text(json.dumps(info, indent=2))
    return folder, info


def query_cases(m: int, seed: int = 0, salt: int = 7) -> list[dict[str, Any]]:
    """`m` new cases (not in any populated memory) as judge inputs."""
    gen = CaseGenerator(seed=seed)
    out = []
    for i in range(m):
        c = gen.case(i, salt=salt)
        out.append({"inputs": c["inputs"], "outputs": c["outputs"]})
    return out
