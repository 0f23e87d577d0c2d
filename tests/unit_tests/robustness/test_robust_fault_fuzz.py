"""Fault-injection fuzz of every public call of the judge, on every backend (issue 47).

A seeded sequence of the judge's public calls (`CALLS`: align, unalign, calibrate and
their async twins, every rulebook action and view, save, the integrations' state,
every kind of judgment, agreement, the LangSmith export, and closing and reopening)
runs on one judge per backend (in process, a folder, a PostgreSQL judge) whose scale
and step modes are drawn from the seed (`draw_setup`). Each call gets a fault planned at a
random point: the chat model or the embedding model fails at its n-th call since the
call started, once (a blip) or from then on (an outage), with a connection error, a
timeout or an SDK-style error that is no `OSError`; or the chat model answers garbage,
once or from then on; or the process is interrupted (`KeyboardInterrupt`). Around every
call the memory is taken whole (`_whole`: every row, the version number, the index,
the pending items, and what judgments read: guidelines and their vectors, calibration,
checks), and on a folder the bytes of `memory.sqlite`, on PostgreSQL the rows another
connection reads. The properties:

- every exception is one the call documents (docs/errors.md), and a provider's error
  reaches the caller as documented: the `__cause__` of `AlignFailedError` for `align`,
  `unalign` and `calibrate`, unchanged for judgments and for the embedding call of
  `rules.add` / `rules.edit`; an interrupt is raised as it is;
- a call that raised changes nothing, byte for byte (only `ReflectionError` commits, as
  documented); a call that only reads changes nothing whatever happens;
- a fault that fired is never swallowed by a call that then returns as if nothing
  happened: the call raises, or its report names what failed (`AlignReport.failed`, an
  agreement report's failed cases, a batch's exceptions);
- after every call the memory is consistent (episodes = feedback = index entries, the
  index holds the stored vectors bit for bit, every guideline cites stored feedback).

Sized for CI (`ROUNDS` calls per backend, then every call once: about 10 s in all);
`MEMALIGN_FAULT_FUZZ_ROUNDS` and `MEMALIGN_FAULT_FUZZ_SEEDS` (comma-separated) scale it
up, `MEMALIGN_FUZZ_REPORT=1` prints the outcomes (the figures of docs/persistence.md).
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import hashlib
import os
import random
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import INSTRUCTIONS
from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel
from langchain_core.messages import BaseMessage
from test_robust_atomic import dump
from test_robust_faults import _invariants as stored_rows_agree

from langchain_memalign import (
    AlignFailedError,
    AlignReport,
    Feedback,
    MalformedOutputError,
    MemAlignJudge,
    MemoryFormatError,
    UnknownFeedbackError,
)
from langchain_memalign.errors import (
    FeedbackConfigMismatchError,
    InvalidRuleError,
    ReflectionError,
    UnknownRuleError,
)
from langchain_memalign.memory.backends import open_store
from langchain_memalign.memory.store import DB_FILE, INDEX_FILE

BACKENDS = ["in-process", "folder", "postgres"]
ROUNDS = int(os.environ.get("MEMALIGN_FAULT_FUZZ_ROUNDS", "150"))
SEEDS = [int(s) for s in os.environ.get("MEMALIGN_FAULT_FUZZ_SEEDS", "47").split(",")]
OUTCOMES: Counter[str] = Counter()
if os.environ.get("MEMALIGN_FUZZ_REPORT"):
    atexit.register(lambda: print("\nfault fuzz outcomes:", *sorted(OUTCOMES.items()), sep="\n  "))


# -- the providers and their faults ------------------------------------------------------------


class ProviderDown(ConnectionError):
    """A provider that cannot be reached."""


class ProviderTimeout(TimeoutError):
    """A provider call that timed out."""


class RateLimited(Exception):
    """An SDK's own error that is no `OSError` (as `openai.RateLimitError` is not)."""


FAULT_TYPES: list[type[BaseException]] = [ProviderDown, ProviderTimeout, RateLimited]


@dataclass
class Fault:
    """What goes wrong during one public call (`which` None: nothing)."""

    which: str | None = None  # "chat" or "emb"
    at: int = 1  # the n-th call of that provider since the public call started
    # "once": a blip; "down": from then on; "garbage": one unusable answer; "garbage down":
    # unusable answers from then on; "interrupt": the process is interrupted (Ctrl-C).
    kind: str = "once"
    error: type[BaseException] = ProviderDown
    fired: list[BaseException] = field(default_factory=list)
    garbled: int = 0

    def describe(self) -> str:
        if self.which is None:
            return "no fault"
        return f"{self.which} #{self.at} {self.kind} {self.error.__name__}"


class Providers:
    """Counts the calls of both fake providers and applies the planned fault."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = {"chat": 0, "emb": 0}
        self.fault = Fault()

    def arm(self, fault: Fault) -> None:
        with self.lock:
            self.calls = {"chat": 0, "emb": 0}
            self.fault = fault

    def tick(self, which: str) -> BaseException | str | None:
        """This call's fate: an error to raise, "garbage" to answer, or None."""
        with self.lock:
            self.calls[which] += 1
            n, f = self.calls[which], self.fault
            persistent = f.kind in ("down", "garbage down")
            if f.which != which or n < f.at or (n > f.at and not persistent):
                return None
            if f.kind.startswith("garbage"):
                f.garbled += 1
                return "garbage"
            kind = KeyboardInterrupt if f.kind == "interrupt" else f.error
            error = kind(f"{which} provider failed at call {n} ({f.kind})")
            f.fired.append(error)
            return error


@dataclass(frozen=True)
class Setup:
    """The judge of one run: its scale and options, drawn from the run's seed."""

    scale: Any
    labels: tuple[Any, ...]  # the scale's value for the experts' 1 (worst) ... 5 (best)
    options: dict[str, Any]

    def value(self, grade: int) -> Any:
        return self.labels[grade - 1]

    def judge_rule(self, case: str, memory: str) -> dict[str, Any]:
        """Worst when the memory teaches empathy and the reply shows none; else by the case."""
        if "acknowledge" in memory.lower() and "sorry" not in case.lower():
            return {"rationale": "It does not acknowledge the feelings.", "score": self.value(1)}
        digest = int(hashlib.md5(case.encode()).hexdigest(), 16)
        return {"rationale": "The reply answers the question.", "score": self.value(3 + digest % 3)}


SCALES: list[tuple[Any, tuple[Any, ...]]] = [
    ((1, 5), (1, 2, 3, 4, 5)),  # integer: calibrated
    (bool, (False, False, True, True, True)),
    (["good", "fair", "poor"], ("poor", "poor", "fair", "good", "good")),
]


# Not named `setup`: pytest 8.0 (our lowest) calls a module-level `setup` as nose's.
def draw_setup(rng: random.Random) -> Setup:
    """A judge configuration: every scale kind but pairwise, and the steps' modes."""
    scale, labels = rng.choice(SCALES)
    options = {
        "reflection": {
            "mode": rng.choice(["pairs", "batch"]),
            "source_support": rng.choice([None, 0.1]),
            "guideline_token_budget": 60,  # consolidation runs
        },
        "validation": {"mode": rng.choice(["sources", "all", "off"]), "max_calls": 4},
        "calibration": {"max_calls": 4},
        "checks": {
            "mode": rng.choice(["separate", "joint", "off"]),
            "test_cases": 3,
            "max_per_judgment": 2,
        },
        "_ablation": {"layout": rng.choice(["turns", "checklist", "plain"])},
        "retrieval": {"min_similarity": None, "min_similarity_with_rationale": None},
        "max_retries": 1,
    }
    return Setup(scale, labels, options)


class FaultyEmbeddings(HashEmbeddings):
    def __init__(self, providers: Providers) -> None:
        super().__init__()
        self.providers = providers

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        fate = self.providers.tick("emb")
        if isinstance(fate, BaseException):
            raise fate
        return super().embed_documents(texts)


def faulty_chat(providers: Providers, judge_rule: Callable[[str, str], Any]) -> ScriptedChatModel:
    responder = RoleResponder(judge_rule=judge_rule)
    responder.check_word = "sorry"  # learned rules get checks, asked at judgments

    def respond(messages: list[BaseMessage]) -> Any:
        fate = providers.tick("chat")
        if isinstance(fate, Exception):
            return fate  # ScriptedChatModel raises it
        if isinstance(fate, BaseException):
            raise fate  # an interrupt, which ScriptedChatModel would answer with
        if fate == "garbage":
            return "not json at all"
        return responder(messages)

    return ScriptedChatModel(responder=respond)


# -- the data the calls are drawn from ---------------------------------------------------------

TOPICS = [
    ("refunds", "Where is my refund?", "It was sent.", 2, "Must state the refund window."),
    ("parcel", "Where is my parcel?", "Lost.", 1, "Must apologise and give the tracking status."),
    ("hours", "When do you open?", "At nine, Monday to Saturday.", 5, "Direct and complete."),
    ("reset", "How do I reset my password?", "Figure it out.", 1, "Dismissive: link the page."),
    ("sweater", "The sweater looks odd, I'm sad.", "Colors vary.", 2,
     "Cold: acknowledge the disappointment first."),
    ("abroad", "Do you ship abroad?", "Yes, to most countries.", 4, None),
    ("sizes", "Do you have it in XL?", "Sorry, only M and L.", 3, None),
    ("late", "My order is late.", "Sorry about that, it ships tomorrow.", 5,
     "Apologises and says when: good."),
]  # fmt: skip
RULE_TEXTS = [
    "Replies to complaints must apologise first.",
    "A refund answer must state the refund window.",
    "Shipping answers must give a delivery date.",
    "Replies must link the help page when one exists.",
    "Replies to complaints must apologise first.",  # a duplicate: refused
]
AUTHORS = ["dana", "lee"]


def feedback(rng: random.Random, i: int, on: Setup) -> Feedback:
    """Item `i` of the pool on the run's scale, sometimes with another value, rationale or
    metadata."""
    fid, inputs, outputs, grade, rationale = TOPICS[i]
    value = on.value(grade)
    variant = rng.random()
    if variant < 0.15:
        rationale = f"Changed: {rng.choice(RULE_TEXTS)}"
    elif variant < 0.25:
        value = on.value(rng.randint(1, 5))
    elif variant < 0.35:
        return Feedback(
            id=fid, inputs=inputs, outputs=outputs, value=value, rationale=rationale,
            metadata={"ticket": rng.randint(1, 9)},
        )  # fmt: skip
    return Feedback(id=fid, inputs=inputs, outputs=outputs, value=value, rationale=rationale)


def case(rng: random.Random) -> dict[str, Any]:
    _, inputs, outputs, _, _ = rng.choice(TOPICS)
    if rng.random() < 0.5:  # an unseen case
        outputs = rng.choice(["No idea.", "Sorry, we will check today.", "See our website."])
    return {"inputs": inputs, "outputs": outputs}


# -- one backend's run -------------------------------------------------------------------------


@dataclass
class Run:
    """The judge under test, where it lives, and what the calls need."""

    where: Path | str | None
    providers: Providers
    setup: Setup
    judge: MemAlignJudge
    rng: random.Random
    targets: dict[str, Path | str]
    other: Any = None  # a second store on the same database (PostgreSQL): what others read
    tally: Counter[str] = field(default_factory=Counter)  # this run's outcomes
    langsmith: Any = None  # a client of the local LangSmith server (the export)

    def rule_id(self) -> str:
        rules = self.judge.rules.list()
        if not rules or self.rng.random() < 0.08:
            return "g-000000000000"  # unknown
        return self.rng.choice(rules).id

    def known_ids(self, most: int) -> list[str]:
        ids = self.judge.feedback_ids
        picked = self.rng.sample(ids, min(len(ids), self.rng.randint(1, most))) if ids else []
        if self.rng.random() < 0.1:
            picked.append("never-aligned")
        return picked


def _align_kwargs(run: Run) -> dict[str, Any]:
    picked = run.rng.sample(range(len(TOPICS)), run.rng.randint(1, 3))
    items = [feedback(run.rng, i, run.setup) for i in picked]
    kwargs: dict[str, Any] = {"feedback": items}
    r = run.rng.random()
    if r < 0.2:
        kwargs["score_first"] = True
    elif r < 0.3:
        kwargs["prior_verdicts"] = {items[0].id: run.setup.value(run.rng.randint(1, 5))}
    if run.rng.random() < 0.3:
        kwargs["raise_on_failure"] = False
    return kwargs


def _save_target(run: Run) -> tuple[Path | str, bool]:
    """Where to save: a copy, the memory's own location, or another judge's memory."""
    choice = run.rng.choice(sorted(run.targets) + (["self"] if run.where is not None else []))
    if choice == "self":
        assert run.where is not None
        return run.where, False
    return run.targets[choice], choice.startswith("foreign") and run.rng.random() < 0.3


# Each public call: name -> (what it does, whether it may change the memory).
Call = Callable[[Run], Any]


def _calls() -> dict[str, tuple[Call, bool]]:
    def rules_add(r: Run) -> Any:
        return r.judge.rules.add(r.rng.choice(RULE_TEXTS), author=r.rng.choice(AUTHORS))

    def rules_edit(r: Run) -> Any:
        return r.judge.rules.edit(
            r.rule_id(), r.rng.choice(RULE_TEXTS) + f" ({r.rng.randint(1, 3)})",
            author=r.rng.choice(AUTHORS), reason="clearer",
        )  # fmt: skip

    def set_check(r: Run) -> Any:
        return r.judge.rules.set_check(
            r.rule_id(), broken="Does the reply leave out an apology?",
            consequence=r.setup.value(r.rng.randint(1, 2)), author=r.rng.choice(AUTHORS),
        )  # fmt: skip

    def save(r: Run) -> Any:
        target, overwrite = _save_target(r)
        return r.judge.save(target, overwrite=overwrite)

    def state(r: Run) -> None:
        with r.judge.memory.integration_state("fuzz:source") as s:
            s.set({"seen": r.rng.randint(0, 99)})

    def agreement(r: Run) -> Any:
        items = [feedback(r.rng, i, r.setup) for i in r.rng.sample(range(len(TOPICS)), 2)]
        return r.judge.agreement(items, max_concurrency=1)

    def aagreement(r: Run) -> Any:
        items = [feedback(r.rng, i, r.setup) for i in r.rng.sample(range(len(TOPICS)), 2)]
        return asyncio.run(r.judge.aagreement(items, max_concurrency=1))

    one = {"max_concurrency": 1}
    return {
        # Calls that change the memory.
        "align": (lambda r: r.judge.align(**_align_kwargs(r)), True),
        "aalign": (lambda r: asyncio.run(r.judge.aalign(**_align_kwargs(r))), True),
        "unalign": (lambda r: r.judge.unalign(r.known_ids(2)), True),
        "aunalign": (lambda r: asyncio.run(r.judge.aunalign(r.known_ids(2))), True),
        "calibrate": (
            lambda r: r.judge.calibrate(None if r.rng.random() < 0.5 else r.known_ids(3)),
            True,
        ),
        "rules.add": (rules_add, True),
        "rules.edit": (rules_edit, True),
        "rules.pin": (lambda r: r.judge.rules.pin(r.rule_id(), author="dana"), True),
        "rules.unpin": (lambda r: r.judge.rules.unpin(r.rule_id(), author="dana"), True),
        "rules.set_check": (set_check, True),
        "rules.remove_check": (
            lambda r: r.judge.rules.remove_check(r.rule_id(), author="lee"),
            True,
        ),
        "rules.reject": (
            lambda r: r.judge.rules.reject(r.rule_id(), reason="too broad", author="lee"),
            True,
        ),
        "integration_state": (state, True),
        "save": (save, True),  # writes its target; its own folder's cache when saved there
        # Calls that only read.
        "invoke": (lambda r: r.judge.invoke(case(r.rng)), False),
        "call": (lambda r: r.judge(**case(r.rng)), False),
        "ainvoke": (lambda r: asyncio.run(r.judge.ainvoke(case(r.rng))), False),
        "batch": (
            lambda r: r.judge.batch(
                [case(r.rng) for _ in range(2)], one, return_exceptions=r.rng.random() < 0.5
            ),
            False,
        ),
        "abatch": (
            lambda r: asyncio.run(r.judge.abatch([case(r.rng) for _ in range(2)], one)),
            False,
        ),
        "stream": (lambda r: list(r.judge.stream(case(r.rng))), False),
        # Writes to LangSmith (the local test server), reads the memory only.
        "to_langsmith_evaluator": (
            lambda r: r.judge.to_langsmith_evaluator(
                project="prod", client=r.langsmith, sampling_rate=r.rng.choice([0.5, 1.0])
            ),
            False,
        ),
        "agreement": (agreement, False),
        "aagreement": (aagreement, False),
        "agreement_history": (lambda r: r.judge.agreement_history(window=2), False),
        "get_feedback": (
            lambda r: r.judge.get_feedback(r.rng.choice([*r.judge.feedback_ids, "never"])),
            False,
        ),
        "feedback_ids": (lambda r: r.judge.feedback_ids, False),
        "guidelines": (lambda r: r.judge.guidelines, False),
        "history": (lambda r: r.judge.history(), False),
        "stats": (lambda r: r.judge.stats(), False),
        "config": (lambda r: (r.judge.config, r.judge.scale), False),
        "rules.list": (lambda r: r.judge.rules.list(), False),
        "rules.get": (lambda r: r.judge.rules.get(r.rule_id()), False),
        "rules.rejected": (lambda r: r.judge.rules.rejected(), False),
        "rules.history": (lambda r: r.judge.rules.history(), False),
    }


CALLS = _calls()
REOPEN = "close+load"  # folders and databases only: close the judge and open it again

# What each call may raise besides the injected provider errors (docs/errors.md).
DOCUMENTED: dict[str, tuple[type[BaseException], ...]] = {
    "align": (AlignFailedError, ReflectionError),
    "unalign": (AlignFailedError, UnknownFeedbackError),
    "calibrate": (AlignFailedError, UnknownFeedbackError, ValueError),  # not integer
    "rules": (InvalidRuleError, UnknownRuleError),
    "judgment": (MalformedOutputError,),
    "save": (MemoryFormatError,),  # a target holding another judge, without overwrite
    "get_feedback": (UnknownFeedbackError,),
    # A workspace reading the judge's key on another scale (the export's docstring).
    "to_langsmith_evaluator": (FeedbackConfigMismatchError,),
}
# Calls where a provider error reaches the caller unchanged (docs/errors.md).
RAW_PROVIDER_ERRORS = {
    "invoke", "call", "ainvoke", "batch", "abatch", "stream", "rules.add", "rules.edit",
}  # fmt: skip


def _family(name: str) -> str:
    if name in ("align", "aalign"):
        return "align"
    if name in ("unalign", "aunalign"):
        return "unalign"
    if name.startswith("rules."):
        return "rules"
    if name in ("invoke", "call", "ainvoke", "batch", "abatch", "stream"):
        return "judgment"
    return name


def _whole(judge: MemAlignJudge) -> dict[str, Any]:
    """`dump` (every row, the version, the index ids, the pending items) and everything
    a judgment reads: the published version's guidelines with their vectors, its
    calibration and its checks."""
    view = judge.memory.snapshot()
    vectors = view.guideline_vectors
    return {
        **dump(judge),
        "version": view.seq,
        "guideline vectors": None if vectors is None else vectors.tobytes(),
        "calibration": (view.calibration.pairs, sorted(view.calibration.mapping.items())),
        "checks": sorted((rule, repr(check)) for rule, check in view.checks.items()),
    }


def _invariants(judge: MemAlignJudge) -> None:
    stored_rows_agree(judge)
    # What judgments search is the stored vectors, bit for bit.
    episodes = judge.memory.store.dump().episodes
    stored = (
        np.stack([np.frombuffer(v, dtype=np.float32) for *_, v in episodes]) if episodes else None
    )
    assert judge.memory.snapshot().index.holds([e[0] for e in episodes], stored)


def _outside(run: Run) -> Any:
    """The memory as another reader sees it: the folder's bytes, the database's rows."""
    if isinstance(run.where, Path):
        return (run.where / DB_FILE).read_bytes()
    if run.other is not None:
        return dataclasses.asdict(run.other.dump())
    return None


def _fault(rng: random.Random, name: str) -> Fault:
    if name in ("save", "integration_state", "to_langsmith_evaluator", REOPEN):
        return Fault()  # no provider call to fail
    if rng.random() < 0.3:
        return Fault()
    return Fault(
        which=rng.choice(["chat", "emb"]),
        at=rng.choice([1, 1, 2, 3, 5]),
        kind=rng.choice(["once", "once", "down", "garbage", "garbage down", "interrupt"]),
        error=rng.choice(FAULT_TYPES),
    )


def _swallowed(name: str, result: Any, fault: Fault) -> bool:
    """Whether a call that returned let a provider error that fired pass unnoticed."""
    if not fault.fired:
        return False
    if isinstance(result, AlignReport):  # reflection failures are reported, not raised
        return not result.failed
    if name in ("agreement", "aagreement"):  # a failed judgment is a failed case
        return not result.failed
    if name == "batch" and isinstance(result, list):  # return_exceptions=True
        return not any(isinstance(x, BaseException) for x in result)
    return True


def _check_error(name: str, e: BaseException, fault: Fault) -> str:
    """The outcome's label if `e` is documented for `name`, else an assertion error."""
    family = _family(name)
    if fault.fired and isinstance(e, tuple(FAULT_TYPES)):
        assert name in RAW_PROVIDER_ERRORS, f"{name}: a raw provider error: {e!r}"
        assert any(e is f for f in fault.fired), f"{name}: not the injected error: {e!r}"
        return "provider error"
    assert isinstance(e, DOCUMENTED.get(family, ())), (
        f"{name}: undocumented {type(e).__name__}: {e}"
    )
    if isinstance(e, AlignFailedError):
        assert fault.fired, f"{name}: AlignFailedError without a fault: {e}"
        assert any(e.__cause__ is f for f in fault.fired), f"{name}: cause {e.__cause__!r}"
    return type(e).__name__


def _step(run: Run, name: str, log: list[str]) -> None:
    judge = run.judge
    changes = CALLS[name][1] if name in CALLS else False
    fault = _fault(run.rng, name)
    before, outside = _whole(judge), _outside(run)
    run.providers.arm(fault)
    log.append(f"{name} [{fault.describe()}]")
    result: Any = None
    try:
        if name == REOPEN:
            judge.close()
            run.judge = MemAlignJudge.load(
                run.where, model=judge.model, embeddings=judge.memory.embeddings
            )
            judge = run.judge
        else:
            result = CALLS[name][0](run)
    except KeyboardInterrupt as e:
        # Raised as it is, never wrapped, and whatever it interrupted is rolled back.
        assert any(e is f for f in fault.fired), f"{name}: not the injected interrupt: {e!r}"
        outcome = "KeyboardInterrupt"
        assert _whole(judge) == before, f"{name} was interrupted and changed the memory"
        assert _outside(run) == outside, f"{name} was interrupted; others see a change"
    except Exception as e:
        outcome = _check_error(name, e, fault)
        if isinstance(e, ReflectionError):
            assert e.report.failed  # it committed, and says what is pending
        else:
            assert _whole(judge) == before, f"{name} raised {e!r} and changed the memory"
            assert _outside(run) == outside, f"{name} raised {e!r}; others see a change"
    else:
        assert not _swallowed(name, result, fault), (
            f"{name} returned normally though {fault.fired[0]!r} fired"
        )
        outcome = "ok"
        if not changes:
            assert _whole(judge) == before, f"{name} only reads, yet changed the memory"
            assert _outside(run) == outside, f"{name} only reads; others see a change"
    finally:
        run.providers.arm(Fault())
    fired = "fault fired" if fault.fired else ("garbage" if fault.garbled else "no fault")
    OUTCOMES[f"{name}: {fired}: {outcome}"] += 1
    OUTCOMES["calls"] += 1
    OUTCOMES["faults fired"] += bool(fault.fired)
    run.tally[outcome] += 1
    run.tally["faults fired"] += bool(fault.fired)
    log[-1] += f" -> {outcome} ({fired})"
    _invariants(judge)


def _judge(
    where: Path | str | None, providers: Providers, on: Setup, name: str = "tone"
) -> MemAlignJudge:
    return MemAlignJudge(
        name=name,
        instructions=INSTRUCTIONS,
        model=faulty_chat(providers, on.judge_rule),
        embeddings=FaultyEmbeddings(providers),
        scale=on.scale,
        k=2,
        path=where,
        options=on.options,
    )


@pytest.fixture(scope="module")
def langsmith_client() -> Iterator[Any]:
    """A LangSmith client of the local test server, for `to_langsmith_evaluator`."""
    from langsmith import Client
    from langsmith_server import LangSmithTestServer

    with pytest.MonkeyPatch.context() as env, LangSmithTestServer() as server:
        for name in ("LANGSMITH_RUNS_ENDPOINTS", "LANGCHAIN_ENDPOINT", "LANGSMITH_WORKSPACE_ID"):
            env.delenv(name, raising=False)
        env.setenv("LANGSMITH_DISABLE_RUN_COMPRESSION", "true")
        server.add_project("prod")
        client = Client(api_url=server.url, api_key="test", auto_batch_tracing=False)
        yield client
        client.close(timeout=5)


@pytest.fixture(scope="module")
def fuzz_db(pg_server: Any) -> str:
    url: str = pg_server.new_database()
    return url


# An interrupt during `abatch` leaves the batch's other coroutines unawaited: Python warns.
@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_public_call_under_provider_faults(
    backend: str, seed: int, tmp_path: Path, request: pytest.FixtureRequest,
    langsmith_client: Any,
) -> None:  # fmt: skip
    rng = random.Random(f"{seed}-{backend}")
    where: Path | str | None
    targets: dict[str, Path | str] = {"copy folder": tmp_path / "copy"}
    if backend == "in-process":
        where = None
    elif backend == "folder":
        where = tmp_path / "mem"
    else:
        pytest.importorskip("psycopg", reason="the postgres extra is not installed")
        db = request.getfixturevalue("fuzz_db")
        tag = uuid.uuid4().hex[:8]
        where = f"{db}?judge=fuzz{tag}"
        targets["copy judge"] = f"{db}?judge=copy{tag}"
        targets["foreign judge"] = f"{db}?judge=foreign{tag}"
    targets["foreign folder"] = tmp_path / "foreign"
    providers, on = Providers(), draw_setup(rng)
    for name in ("foreign folder", "foreign judge"):
        if name in targets:  # a memory of another judge: saving over it needs overwrite
            _judge(targets[name], providers, on, name="other").close()
    # A name of its own: the LangSmith workspace of the export is the module's.
    name = f"tone-{backend}-{seed}"
    run = Run(where, providers, on, _judge(where, providers, on, name), rng, targets)
    run.langsmith = langsmith_client
    if isinstance(where, str):
        run.other = open_store(where, create=False)
    names = sorted(CALLS) + ([REOPEN] if where is not None else [])
    log: list[str] = []
    try:
        run.judge.align([feedback(random.Random(0), i, on) for i in range(4)])
        for _ in range(ROUNDS):
            _step(run, rng.choice(names), log)
        # Every call ran at least once, whatever the draw.
        for name in names:
            _step(run, name, log)
    except AssertionError as e:
        calls = "\n".join(log[-12:])
        raise AssertionError(f"seed {seed}, {backend}, call #{len(log)}, {on}: {e}\n{calls}") from e
    finally:
        if run.other is not None:
            run.other.close()
        run.judge.close()
    if isinstance(where, Path):
        assert {p.name for p in where.iterdir()} <= {DB_FILE, INDEX_FILE}
    # The run did what it is for: faults fired, and calls failed and were compared.
    assert run.tally["faults fired"] >= 10, run.tally
    assert run.tally["AlignFailedError"] + run.tally["provider error"] >= 5, run.tally
