"""The store contract: one suite that every backend of a judge's memory passes.

Every test runs on each backend in `BACKENDS` (SQLite in a folder, SQLite in
process, PostgreSQL on the server of the `pg_server` fixture), as LangChain's
standard tests run one suite on every chat model. Each abstract method of
`langchain_memalign.memory.base.Store` is exercised here with assertions a
wrong backend fails: orders (`feedback_ids` oldest first, `recent_feedback`
newest first), rollbacks, versions, reads as of an older version, deletes,
history, meta, counts and vectors. What differs between backends is asked of
the store's capability attributes (`shared`, `supports_atomic`, `folder`),
never of its class.

A new backend joins the suite with one more entry in `BACKENDS` and a branch
in the `backend` fixture.
"""

from __future__ import annotations

import contextvars
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from langchain_memalign import Feedback, InvalidFeedbackError, MemoryFormatError, limits
from langchain_memalign.memory.backends import open_store
from langchain_memalign.memory.base import COUNTED_TABLES, Store
from langchain_memalign.memory.semantic import Guideline
from langchain_memalign.memory.store import SCHEMA_VERSION, MemoryStore

BACKENDS = ["sqlite-folder", "sqlite-in-process", "postgres"]
DIM = 8


@dataclass
class Backend:
    """How to make fresh memories of one backend, and what its stores must declare."""

    name: str
    root: Path | str | None  # a parent folder, or a database URL, or None (in process)
    shared: bool
    opened: list[Store] = field(default_factory=list)

    def new_location(self) -> str | Path | None:
        """A location where no memory exists yet."""
        name = "j" + uuid.uuid4().hex[:10]
        if isinstance(self.root, Path):
            return self.root / name
        if isinstance(self.root, str):
            return f"{self.root}?judge={name}"
        return None

    def create(self, location: str | Path | None) -> Store:
        store = open_store(location, create=True)
        self.opened.append(store)
        return store

    def open(self, location: str | Path) -> Store:
        store = open_store(location, create=False)
        self.opened.append(store)
        return store

    def persistent(self) -> bool:
        return self.root is not None


@pytest.fixture(scope="module")
def contract_db(pg_server: Any) -> str:
    """One database for this module; each test's memory is a judge of its own in it."""
    url: str = pg_server.new_database()
    return url


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite-folder":
        b = Backend(request.param, tmp_path / "memories", shared=False)
    elif request.param == "sqlite-in-process":
        b = Backend(request.param, None, shared=False)
    else:
        pytest.importorskip("psycopg", reason="the postgres extra is not installed")
        b = Backend(request.param, request.getfixturevalue("contract_db"), shared=True)
    try:
        yield b
    finally:
        for store in b.opened:
            if not store.closed:
                store.close()


@pytest.fixture
def location(backend: Backend) -> str | Path | None:
    return backend.new_location()


@pytest.fixture
def store(backend: Backend, location: str | Path | None) -> Store:
    return backend.create(location)


# -- helpers ------------------------------------------------------------------------------


def item(fid: str, rationale: str | None = "Because.", **kw: Any) -> Feedback:
    return Feedback(
        id=fid, inputs=f"question {fid}", outputs=f"answer {fid}", value=True,
        rationale=rationale, **kw,
    )  # fmt: skip


def vec(seed: int) -> np.ndarray:
    """A float32 vector with exact values (no rounding in a round trip)."""
    return (np.arange(DIM, dtype=np.float32) - seed) * np.float32(0.25) + np.float32(seed)


def put(store: Store, *items: Feedback, reflected: bool = True, episodes: bool = False) -> None:
    """Store feedback (and an episode each) in one transaction."""
    with store.transaction() as conn:
        for i, fb in enumerate(items):
            store.put_feedback(conn, fb, reflected=reflected)
            if episodes:
                store.put_episode(conn, fb.id, f"hash-{fb.id}", vec(i))


def guideline(gid: str, *sources: str, text: str | None = None) -> Guideline:
    created = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    return Guideline(id=gid, text=text or f"Rule {gid}.", source_ids=sources, created_at=created)


def populate(store: Store) -> None:
    """A small memory with something in every table."""
    store.set_meta("config", {"name": "helpfulness", "k": 3})
    put(store, item("a"), item("b"), item("c", rationale=None), episodes=True)
    with store.transaction() as conn:
        store.set_reflected(conn, ["b"], False)
        store.put_guideline(conn, guideline("g0", "a", "b"), vec(10), 0)
        store.put_guideline(conn, guideline("g1", "c"), vec(11), 1)
        store.log(conn, "align", ["a", "b", "c"], ["g0", "g1"])
        store.record_review(conn, "a", True, judge=False, source="langsmith")
        store.record_review(conn, "b", "B", judge="tie", source="score_first")
        store.mark_align(conn, 3)
    with store.transaction() as conn:
        store.log(conn, "validate", ["b"], [])


def series(store: Store) -> list[tuple[Any, ...]]:
    """The agreement series without its row numbers and times (they are the store's)."""
    return [
        (r["kind"], r["feedback_id"], r["judge"], r["expert"], r["source"], r["learned"])
        for r in store.prequential()
    ]


def ids(feedback: list[Feedback]) -> list[str]:
    return [fb.id for fb in feedback]


def entries(store: Store) -> list[tuple[str, list[str], list[str]]]:
    return [(h["action"], h["feedback_ids"], h["guideline_ids"]) for h in store.history()]


def vectors_by_feedback(store: Store) -> dict[str, bytes]:
    keys = store.episode_keys(store.feedback_ids())
    return {fid: v.tobytes() for fid, v in store.episode_vectors(keys).items()}


def assert_same_content(copy: Store, original: Store) -> None:
    assert copy.feedback_ids() == original.feedback_ids()
    assert copy.get_feedback(copy.feedback_ids()) == original.get_feedback(original.feedback_ids())
    assert copy.feedback_state(copy.feedback_ids()) == original.feedback_state(
        original.feedback_ids()
    )
    assert copy.pending_reflection() == original.pending_reflection()
    assert vectors_by_feedback(copy) == vectors_by_feedback(original)
    (g_copy, v_copy), (g_orig, v_orig) = copy.load_guidelines(), original.load_guidelines()
    assert g_copy == g_orig
    assert v_copy is not None and v_orig is not None and np.array_equal(v_copy, v_orig)
    assert entries(copy) == entries(original)
    assert series(copy) == series(original)
    assert [r["at"] for r in copy.prequential()] == [r["at"] for r in original.prequential()]
    assert copy.get_meta("config") == original.get_meta("config")
    for table in COUNTED_TABLES:
        assert copy.count(table) == original.count(table), table


# -- identity, lifetime and location ------------------------------------------------------


def test_store_declares_its_capabilities(
    backend: Backend, store: Store, location: str | Path | None
) -> None:
    assert isinstance(store, Store)
    assert store.shared is backend.shared
    assert store.folder == (location if isinstance(location, Path) else None)
    assert isinstance(store.staleness, float) and store.staleness >= 0
    assert isinstance(store.supports_atomic, bool)
    assert store.in_atomic is False


def test_a_new_memory_is_empty_at_version_zero(store: Store) -> None:
    assert store.change_seq() == 0
    identity = store.identity()
    assert isinstance(identity["memory_id"], str) and identity["memory_id"]
    assert identity["change_seq"] == 0
    assert store.get_meta("schema_version") == SCHEMA_VERSION
    assert store.feedback_ids() == [] and store.recent_feedback(5) == []
    assert store.pending_reflection() == [] and store.history() == []
    assert store.prequential() == []
    assert store.all_vectors() == ([], None)
    assert store.episode_rowids() == [] and store.episode_dim() is None
    assert store.load_guidelines() == ([], None)
    assert store.next_position() == 0
    assert {t: store.count(t) for t in COUNTED_TABLES} == dict.fromkeys(COUNTED_TABLES, 0)


def test_close_and_describe(store: Store) -> None:
    assert store.closed is False
    assert store.describe() and store.describe() in repr(store)
    assert type(store).__name__ in repr(store)
    store.close()
    assert store.closed is True


def test_is_at_names_only_its_own_location(
    backend: Backend, store: Store, location: str | Path | None
) -> None:
    if location is not None:
        assert store.is_at(location)
        assert store.is_at(str(location))
    else:
        assert not store.is_at(None)  # an in-process memory is nowhere
    assert not store.is_at(backend.new_location())
    assert not store.is_at(Path("/nonexistent/memory"))
    assert not store.is_at("postgresql://nobody@127.0.0.1:1/elsewhere?judge=other")


def test_reopening_sees_every_commit(
    backend: Backend, store: Store, location: str | Path | None
) -> None:
    if location is None:
        pytest.skip("an in-process memory cannot be opened again")
    populate(store)
    before = store.dump()
    identity = store.identity()
    store.close()
    again = backend.open(location)
    assert again.identity() == identity
    assert again.dump() == before


def test_opening_a_missing_memory_fails(backend: Backend) -> None:
    if not backend.persistent():
        with pytest.raises(ValueError, match="create=True"):
            open_store(None, create=False)
        return
    location = backend.new_location()
    assert location is not None
    with pytest.raises(MemoryFormatError):
        backend.open(location)


# -- meta ---------------------------------------------------------------------------------


def test_meta_round_trips_json_values(store: Store) -> None:
    values: dict[str, Any] = {
        "config": {"name": "tone", "scale": {"kind": "numeric", "low": 1, "high": 5}},
        "ints": 3,
        "float": 2.5,
        "flag": True,
        "text": "héllo ✓",
        "list": [1, "2", None, {"x": []}],
    }
    assert store.get_meta("never-set") is None
    for key, value in values.items():
        store.set_meta(key, value)
    for key, value in values.items():
        got = store.get_meta(key)
        assert got == value and type(got) is type(value), key
    store.set_meta("ints", 4)
    assert store.get_meta("ints") == 4
    store.set_meta("text", None)
    assert store.get_meta("text") is None
    assert store.get_meta("flag") is True


def test_meta_written_in_a_transaction_commits_and_rolls_back_with_it(store: Store) -> None:
    with store.transaction():
        store.set_meta("state", {"seen": 1})
    assert store.get_meta("state") == {"seen": 1}
    with pytest.raises(RuntimeError, match="undo"), store.transaction():
        store.set_meta("state", {"seen": 2})
        store.set_meta("other", "x")
        raise RuntimeError("undo")
    assert store.get_meta("state") == {"seen": 1}
    assert store.get_meta("other") is None


# -- versions, transactions and locks -----------------------------------------------------


def test_each_commit_is_a_new_version(store: Store) -> None:
    first = store.identity()
    with store.transaction():
        pass
    second = store.identity()
    put(store, item("a"))
    third = store.identity()
    assert [first["change_seq"], second["change_seq"], third["change_seq"]] == [0, 1, 2]
    assert first["memory_id"] == second["memory_id"] == third["memory_id"]
    versions = [second["content_version"], third["content_version"]]
    assert all(versions) and len(set(versions)) == 2
    assert first["content_version"] not in versions


def test_a_failed_transaction_changes_nothing(store: Store) -> None:
    populate(store)
    before, identity = store.dump(), store.identity()

    class Boom(Exception):
        pass

    with pytest.raises(Boom), store.transaction() as conn:
        store.put_feedback(conn, item("new"), reflected=False)
        store.put_episode(conn, "new", "h", vec(5))
        store.put_episode(conn, "a", "h2", vec(6))  # replaces a's episode
        store.put_feedback(conn, item("a", rationale="Changed."), reflected=True)
        store.set_reflected(conn, ["b"], True)
        store.delete_feedback(conn, ["c"])
        store.put_guideline(conn, guideline("g9", "new"), vec(7), store.next_position())
        store.delete_guidelines(conn, ["g0"])
        store.log(conn, "align", ["new"], ["g9"])
        store.set_meta("config", {"name": "changed"})
        raise Boom
    assert store.dump() == before
    assert store.identity() == identity
    put(store, item("d"))  # and the store keeps working
    assert store.change_seq() == identity["change_seq"] + 1
    assert store.feedback_ids() == ["a", "b", "c", "d"]


def test_consistent_reads_see_one_version(store: Store) -> None:
    put(store, item("a"))
    committed = threading.Event()

    def writer() -> None:
        put(store, item("b"))
        committed.set()

    thread = threading.Thread(target=writer)
    with store.consistent():
        seq, seen = store.change_seq(), store.feedback_ids()
        thread.start()
        # A backend either keeps the commit out of the block or lets it commit
        # unseen: the block reads one version either way.
        committed.wait(1.0)
        assert store.change_seq() == seq
        assert store.feedback_ids() == seen == ["a"]
    thread.join(30)
    assert committed.is_set()
    assert store.change_seq() == seq + 1 and store.feedback_ids() == ["a", "b"]


def test_atomic_is_one_unit_where_supported(
    backend: Backend, store: Store, location: str | Path | None
) -> None:
    put(store, item("a"))
    start = store.change_seq()
    other = backend.open(location) if store.shared and location is not None else None
    seen: dict[str, Any] = {}

    def read_elsewhere() -> None:  # a thread the unit did not start
        seen["ids"], seen["in_atomic"] = store.feedback_ids(), store.in_atomic

    with pytest.raises(RuntimeError, match="midway"), store.atomic():
        assert store.in_atomic is store.supports_atomic
        put(store, item("b"))
        put(store, item("c"))
        # The unit's thread sees each step as it completes, with a version of its own,
        # and so do the threads it starts with its context (as LangGraph's workers do).
        assert store.feedback_ids() == ["a", "b", "c"]
        assert store.change_seq() == start + 2
        assert contextvars.copy_context().run(store.feedback_ids) == ["a", "b", "c"]
        if store.shared:
            # Everyone else reads the version before the unit: another thread, another
            # process (and a reader there needs no lock).
            thread = threading.Thread(target=read_elsewhere)
            thread.start()
            thread.join(30)
            assert seen == {"ids": ["a"], "in_atomic": False}
            assert other is not None
            assert other.feedback_ids() == ["a"] and other.change_seq() == start
        raise RuntimeError("midway")
    assert store.in_atomic is False
    if store.supports_atomic:
        assert store.feedback_ids() == ["a"]
        assert store.change_seq() == start
    else:  # each step committed on its own
        assert store.feedback_ids() == ["a", "b", "c"]
        assert store.change_seq() == start + 2
    with store.atomic():
        put(store, item("d"))
        with store.atomic():  # a nested unit joins the outer one
            put(store, item("e"))
        if other is not None:
            assert other.feedback_ids()[-2:] != ["d", "e"]
    assert store.feedback_ids()[-2:] == ["d", "e"]
    if other is not None:  # committed at once, for everyone
        assert other.feedback_ids()[-2:] == ["d", "e"]
        assert other.change_seq() == store.change_seq()


def test_a_failed_step_inside_a_unit_undoes_only_itself_until_the_unit_ends(
    store: Store,
) -> None:
    put(store, item("a"))
    start = store.change_seq()
    with store.atomic():
        with pytest.raises(RuntimeError, match="step"), store.transaction() as conn:
            store.put_feedback(conn, item("b"), reflected=False)
            raise RuntimeError("step")
        assert store.feedback_ids() == ["a"]
        put(store, item("c"))
    assert store.feedback_ids() == ["a", "c"]
    assert store.change_seq() > start


def test_lock_writers_excludes_the_writers_of_other_processes(
    backend: Backend, store: Store, location: str | Path | None
) -> None:
    with store.lock_writers():
        put(store, item("a"))  # writes go on while the lock is held
    assert store.feedback_ids() == ["a"]
    if not store.shared:
        return  # one process writes such a memory: nothing to exclude
    assert location is not None
    other = backend.open(location)
    acquired = threading.Event()

    def second_writer() -> None:
        with other.lock_writers():
            acquired.set()

    with store.lock_writers():
        thread = threading.Thread(target=second_writer)
        thread.start()
        assert not acquired.wait(0.5)
    assert acquired.wait(30)
    thread.join(30)


# -- feedback -----------------------------------------------------------------------------


def test_feedback_round_trips_with_its_state(store: Store) -> None:
    a = item("a", annotator="ann", metadata={"source": "queue", "n": [1, 2]})
    b = item("b", rationale=None, reference_outputs={"ideal": "x"})
    put(store, a, reflected=True)
    put(store, b, reflected=False)
    assert store.get_feedback(["b", "a", "missing"]) == {"a": a, "b": b}
    assert store.get_feedback([]) == {}
    assert store.feedback_state(["a", "b", "missing"]) == {
        "a": (a.content_hash(), True),
        "b": (b.content_hash(), False),
    }


def test_feedback_ids_are_oldest_first_and_replacing_keeps_the_place(store: Store) -> None:
    put(store, item("b"), item("a"))
    put(store, item("c"))
    assert store.feedback_ids() == ["b", "a", "c"]
    changed = item("b", rationale="Another reason.")
    put(store, changed)
    assert store.feedback_ids() == ["b", "a", "c"]
    assert store.get_feedback(["b"]) == {"b": changed}
    assert store.feedback_state(["b"])["b"][0] == changed.content_hash()


def test_recent_feedback_is_newest_first(store: Store) -> None:
    put(store, item("f0"), item("f1"), item("f2"))
    put(store, item("f3"), item("f4"), item("f5"))
    assert ids(store.recent_feedback(3)) == ["f5", "f4", "f3"]
    assert ids(store.recent_feedback(10)) == ["f5", "f4", "f3", "f2", "f1", "f0"]
    assert ids(store.recent_feedback(2, exclude=["f5", "f3"])) == ["f4", "f2"]
    assert ids(store.recent_feedback(2, exclude={"nothing"})) == ["f5", "f4"]
    assert store.recent_feedback(0) == []
    put(store, item("f0", rationale="Replaced."))  # replacing keeps the item's place
    assert ids(store.recent_feedback(1)) == ["f5"]
    assert store.recent_feedback(6)[-1] == item("f0", rationale="Replaced.")


def test_pending_reflection_follows_set_reflected(store: Store) -> None:
    put(store, item("a"), reflected=False)
    put(store, item("b"), reflected=True)
    put(store, item("c"), reflected=False)
    assert store.pending_reflection() == ["a", "c"]
    with store.transaction() as conn:
        store.set_reflected(conn, ["a"], True)
    assert store.pending_reflection() == ["c"]
    with store.transaction() as conn:
        store.set_reflected(conn, ["c", "b", "missing"], False)
    assert store.pending_reflection() == ["b", "c"]  # oldest first
    assert store.feedback_state(["a", "b"]) == {
        "a": (item("a").content_hash(), True),
        "b": (item("b").content_hash(), False),
    }


def test_delete_feedback_removes_it_and_its_episode(store: Store) -> None:
    put(store, item("a"), item("b"), item("c"), episodes=True)
    keys = store.episode_keys(["a", "b", "c"])
    with store.transaction() as conn:
        store.delete_feedback(conn, ["b", "missing"])
    assert store.feedback_ids() == ["a", "c"]
    assert store.get_feedback(["b"]) == {} and store.feedback_state(["b"]) == {}
    assert set(store.episode_keys(["a", "b", "c"])) == {"a", "c"}
    assert set(store.episode_vectors(["a", "b", "c"])) == {"a", "c"}
    assert store.episode_rowids() == sorted([keys["a"][0], keys["c"][0]])
    assert sorted(store.all_vectors()[0]) == store.episode_rowids()
    assert store.episodes_by_rowid([keys["b"][0]]) == {}
    assert store.count("feedback") == 2 and store.count("episodes") == 2


def test_count_counts_each_table_and_refuses_other_names(store: Store) -> None:
    populate(store)
    assert {t: store.count(t) for t in COUNTED_TABLES} == {
        "feedback": 3, "episodes": 3, "guidelines": 2, "history": 2,
    }  # fmt: skip
    for name in ("meta", "guideline_sources", "feedback; DROP TABLE feedback"):
        with pytest.raises(ValueError, match="is not one of"):
            store.count(name)
    assert store.count("feedback") == 3


def test_unstorable_feedback_writes_nothing(store: Store) -> None:
    bad = Feedback.model_construct(id="bad", inputs=float("nan"), outputs="o", value=True)
    with pytest.raises(InvalidFeedbackError), store.transaction() as conn:
        store.put_feedback(conn, item("good"), reflected=True)
        store.put_feedback(conn, bad, reflected=True)
    assert store.feedback_ids() == [] and store.change_seq() == 0


# -- episodes -----------------------------------------------------------------------------


def test_put_episode_gives_fresh_ids_that_are_never_reused(store: Store) -> None:
    put(store, item("a"), item("b"), item("c"))
    with store.transaction() as conn:
        first, replaced = store.put_episode(conn, "a", "h1", vec(1))
    assert replaced is None
    assert store.episode_keys(["a", "missing"]) == {"a": (first, "h1")}
    with store.transaction() as conn:
        second, replaced = store.put_episode(conn, "a", "h2", vec(2))
        third, _ = store.put_episode(conn, "b", "hb", vec(3))
    assert replaced == first and second > first and third > second
    assert store.episode_keys(["a", "b"]) == {"a": (second, "h2"), "b": (third, "hb")}
    assert np.array_equal(store.episode_vectors(["a"])["a"], vec(2))
    with store.transaction() as conn:
        store.delete_feedback(conn, ["b"])
    with store.transaction() as conn:
        fourth, _ = store.put_episode(conn, "c", "hc", vec(4))
    assert fourth > third
    assert store.episode_rowids() == [second, fourth]
    assert store.episode_dim() == DIM


def test_vectors_round_trip_exactly(store: Store) -> None:
    exact = {
        "a": np.array([1.5, -2.25, 0.0, 1e-30, 3.4e38, -0.0, 7.0, 0.125], dtype=np.float32),
        "b": vec(3),
        "c": np.linspace(-1, 1, DIM, dtype=np.float32),
    }
    put(store, *(item(fid) for fid in exact))
    with store.transaction() as conn:
        rowids = {fid: store.put_episode(conn, fid, f"h{fid}", v)[0] for fid, v in exact.items()}
    got = store.episode_vectors(["c", "a", "b", "missing"])
    assert set(got) == set(exact)
    for fid, v in exact.items():
        assert got[fid].dtype == np.float32 and got[fid].tobytes() == v.tobytes(), fid
    all_ids, matrix = store.all_vectors()
    assert matrix is not None and matrix.shape == (3, DIM) and matrix.dtype == np.float32
    by_id = {i: matrix[row].tobytes() for row, i in enumerate(all_ids)}
    assert by_id == {rowids[fid]: v.tobytes() for fid, v in exact.items()}
    assert store.episode_rowids() == sorted(rowids.values())


def test_episodes_are_read_as_of_a_version(store: Store) -> None:
    a, b, c = item("a"), item("b"), item("c")
    put(store, a, b, c, episodes=True)
    rowid = {fid: key[0] for fid, key in store.episode_keys(["a", "b", "c"]).items()}
    everything = [rowid["a"], rowid["b"], rowid["c"]]
    assert store.episodes_by_rowid(everything) == {rowid["a"]: a, rowid["b"]: b, rowid["c"]: c}
    assert store.episodes_by_rowid([]) == {}
    assert store.episodes_by_rowid([max(everything) + 1000]) == {}
    old = store.change_seq()
    changed = item("a", rationale="A later reason.")
    put(store, changed)  # same episode, newer feedback
    with store.transaction() as conn:
        store.delete_feedback(conn, ["b"])
    newest = {rowid["a"]: changed, rowid["c"]: c}
    assert store.episodes_by_rowid(everything) == newest
    assert store.episodes_by_rowid(everything, as_of=store.change_seq()) == newest
    on_old = store.episodes_by_rowid(everything, as_of=old)
    # An older version's reader gets that version's episodes or nothing, never newer text.
    assert on_old[rowid["c"]] == c
    assert on_old.get(rowid["a"]) in (None, a)
    assert on_old.get(rowid["b"]) in (None, b)
    store.forget_versions(store.change_seq())
    assert store.episodes_by_rowid(everything, as_of=store.change_seq()) == newest


def test_episode_changes_report_what_other_writers_did(store: Store) -> None:
    if not store.shared:
        put(store, item("a"), episodes=True)
        assert store.episode_changes(0) is None  # tracks nothing: only its own writes
        return
    start = store.change_seq()
    put(store, item("a"), item("b"), episodes=True)
    keys = store.episode_keys(["a", "b"])
    changes = store.episode_changes(start)
    assert changes is not None
    removed, added, vectors = changes
    assert removed == [] and added == sorted([keys["a"][0], keys["b"][0]])
    assert vectors is not None
    assert {i: vectors[row].tobytes() for row, i in enumerate(added)} == {
        keys["a"][0]: vec(0).tobytes(), keys["b"][0]: vec(1).tobytes(),
    }  # fmt: skip
    middle = store.change_seq()
    with store.transaction() as conn:
        new_a, old_a = store.put_episode(conn, "a", "h-new", vec(9))
        store.delete_feedback(conn, ["b"])
    changes = store.episode_changes(middle)
    assert changes is not None
    removed, added, vectors = changes
    assert sorted(removed) == sorted([keys["a"][0], keys["b"][0]]) and old_a == keys["a"][0]
    assert added == [new_a] and vectors is not None and vectors[0].tobytes() == vec(9).tobytes()
    assert store.episode_changes(store.change_seq()) == ([], [], None)


# -- guidelines ---------------------------------------------------------------------------


def test_guidelines_load_in_order_with_sources_and_vectors(store: Store) -> None:
    with store.transaction() as conn:
        store.put_guideline(conn, guideline("g1", "b", "a"), vec(1), 1)
        store.put_guideline(conn, guideline("g0", "c"), vec(0), 0)
        store.put_guideline(conn, guideline("g2"), vec(2), 1)  # same position: later
    loaded, vectors = store.load_guidelines()
    assert [g.id for g in loaded] == ["g0", "g1", "g2"]
    assert loaded == [guideline("g0", "c"), guideline("g1", "b", "a"), guideline("g2")]
    assert loaded[1].source_ids == ("b", "a")  # provenance keeps its order
    assert loaded[0].created_at == datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    assert vectors is not None and vectors.dtype == np.float32
    assert [row.tobytes() for row in vectors] == [vec(i).tobytes() for i in (0, 1, 2)]
    assert store.next_position() == 2
    with store.transaction() as conn:
        store.put_guideline(conn, guideline("g3"), None, 7)
    loaded, vectors = store.load_guidelines()
    assert [g.id for g in loaded] == ["g0", "g1", "g2", "g3"] and vectors is None
    assert store.next_position() == 8


def test_replacing_a_guideline_keeps_its_place_and_vector(store: Store) -> None:
    with store.transaction() as conn:
        store.put_guideline(conn, guideline("g0", "a"), vec(0), 0)
        store.put_guideline(conn, guideline("g1", "b"), vec(1), 1)
    replacement = guideline("g0", "a", "c", text="A sharper rule.")
    with store.transaction() as conn:
        store.put_guideline(conn, replacement, None, 5)
    loaded, vectors = store.load_guidelines()
    assert loaded == [replacement, guideline("g1", "b")]
    assert vectors is not None and vectors[0].tobytes() == vec(0).tobytes()
    assert store.next_position() == 2
    with store.transaction() as conn:
        store.put_guideline(conn, guideline("g0", "c"), vec(7), 0)
    loaded, vectors = store.load_guidelines()
    assert loaded[0].source_ids == ("c",) and loaded[0].text == "Rule g0."
    assert vectors is not None and vectors[0].tobytes() == vec(7).tobytes()


def test_delete_guidelines_removes_them_and_their_provenance(store: Store) -> None:
    with store.transaction() as conn:
        for i in range(3):
            store.put_guideline(conn, guideline(f"g{i}", f"f{i}", "shared"), vec(i), i)
    with store.transaction() as conn:
        store.delete_guidelines(conn, ["g1", "missing"])
    loaded, vectors = store.load_guidelines()
    assert [g.id for g in loaded] == ["g0", "g2"]
    assert vectors is not None and len(vectors) == 2
    assert store.dump().sources == [("g0", "f0"), ("g0", "shared"), ("g2", "f2"), ("g2", "shared")]
    assert store.count("guidelines") == 2


def test_a_guideline_over_the_size_limit_is_refused(store: Store) -> None:
    too_long = guideline("g0", text="x" * (limits.MAX_GUIDELINE_CHARS + 1))
    with pytest.raises(ValueError, match="over the limit"), store.transaction() as conn:
        store.put_guideline(conn, guideline("ok"), None, 0)
        store.put_guideline(conn, too_long, None, 1)
    assert store.load_guidelines() == ([], None) and store.change_seq() == 0


# -- history ------------------------------------------------------------------------------


def test_history_is_oldest_first_with_sorted_distinct_ids(store: Store) -> None:
    with store.transaction() as conn:
        store.log(conn, "align", ["b", "a", "b"], ["g2", "g1", "g2"])
    with pytest.raises(RuntimeError), store.transaction() as conn:
        store.log(conn, "rolled back", ["x"])
        raise RuntimeError
    with store.transaction() as conn:
        store.log(conn, "unalign", iter(["a"]))
    history = store.history()
    assert [(h["action"], h["feedback_ids"], h["guideline_ids"]) for h in history] == [
        ("align", ["a", "b"], ["g1", "g2"]),
        ("unalign", ["a"], []),
    ]
    assert history[0]["seq"] == 1 and history[1]["seq"] > history[0]["seq"]
    for h in history:
        assert datetime.fromisoformat(h["at"]).tzinfo is not None
    assert history[0]["at"] <= history[1]["at"]


# -- the agreement series -----------------------------------------------------------------


def test_the_agreement_series_records_reviews_and_aligns_in_order(store: Store) -> None:
    put(store, item("a"), item("b"), item("c"))
    with store.transaction() as conn:
        # A review with the judge's earlier verdict gets a point; one without none.
        assert store.record_review(conn, "a", True, judge=False, source="langsmith")
        assert not store.record_review(conn, "b", True)
        store.mark_align(conn, 2)
    with pytest.raises(RuntimeError), store.transaction() as conn:
        store.record_review(conn, "c", 3.5, judge=2.0, source="given")
        raise RuntimeError  # rolled back with the transaction
    with store.transaction() as conn:
        store.record_review(conn, "c", 3.5, judge=2.0, source="given")
        # A changed review keeps its place and the judge's earlier verdict.
        assert store.record_review(conn, "a", False, judge=True, source="score_first")
        store.mark_align(conn, 2)
    assert series(store) == [
        ("review", "a", False, False, "langsmith", None),
        ("align", None, None, None, None, 2),
        ("review", "c", 2.0, 3.5, "given", None),
        ("align", None, None, None, None, 2),
    ]
    rows = store.prequential()
    assert [r["seq"] for r in rows] == sorted(r["seq"] for r in rows)
    assert len({r["seq"] for r in rows}) == 4
    for r in rows:
        assert datetime.fromisoformat(r["at"]).tzinfo is not None
    assert [r["feedback_id"] for r in store.prequential(["c", "a", "zz"])] == ["a", "c"]
    assert store.prequential([]) == []


def test_a_review_point_goes_with_its_feedback(store: Store) -> None:
    put(store, item("a"), item("b"))
    with store.transaction() as conn:
        store.record_review(conn, "a", True, judge=True, source="given")
        store.record_review(conn, "b", True, judge=False, source="given")
        store.mark_align(conn, 2)
    with store.transaction() as conn:
        store.delete_feedback(conn, ["a"])
    # The align stays: it happened; the review of withdrawn feedback is gone.
    assert series(store) == [
        ("review", "b", False, True, "given", None),
        ("align", None, None, None, None, 2),
    ]
    with store.transaction() as conn:  # the id learned again is a new review, at the end
        store.put_feedback(conn, item("a"), reflected=True)
        store.record_review(conn, "a", False, judge=False, source="given")
    assert [r["feedback_id"] for r in store.prequential()] == ["b", None, "a"]


# -- copies -------------------------------------------------------------------------------


def test_dump_holds_every_row_in_order(store: Store) -> None:
    populate(store)
    d = store.dump()
    assert [row[0] for row in d.feedback] == ["a", "b", "c"]
    assert [(row[0], row[3]) for row in d.feedback] == [("a", True), ("b", False), ("c", True)]
    keys = store.episode_keys(["a", "b", "c"])
    assert [(e[0], e[1], e[2]) for e in d.episodes] == [
        (keys[f][0], f, keys[f][1]) for f in ("a", "b", "c")
    ]
    assert [e[3] for e in d.episodes] == [vec(i).tobytes() for i in range(3)]
    assert [(g[0], g[4]) for g in d.guidelines] == [("g0", 0), ("g1", 1)]
    assert d.guidelines[0][2] == vec(10).tobytes()
    assert d.sources == [("g0", "a"), ("g0", "b"), ("g1", "c")]
    assert [h[2] for h in d.history] == ["align", "validate"]
    assert [(r[2], r[3], r[4], r[5], r[6], r[7]) for r in d.prequential] == [
        ("review", "a", "false", "true", "langsmith", None),
        ("review", "b", '"tie"', '"B"', "score_first", None),
        ("align", None, None, None, None, 3),
    ]
    assert d.meta["config"] == {"name": "helpfulness", "k": 3}
    assert d.meta["memory_id"] == store.identity()["memory_id"]
    assert d.meta["change_seq"] == store.change_seq()


def test_replace_with_makes_a_copy_in_one_new_version(backend: Backend, store: Store) -> None:
    populate(store)
    copy = backend.create(backend.new_location())
    copy.set_meta("leftover", 1)
    put(copy, item("old"), episodes=True)
    with copy.transaction() as conn:
        copy.put_guideline(conn, guideline("g-old", "old"), vec(3), 0)
        copy.log(conn, "align", ["old"])
    seq = copy.change_seq()
    copy.replace_with(store.dump())
    assert copy.change_seq() == seq + 1
    assert copy.identity()["memory_id"] == store.identity()["memory_id"]
    assert copy.get_meta("leftover") is None
    assert_same_content(copy, store)
    # Any backend reads this backend's dump.
    in_process = MemoryStore.create(None)
    try:
        in_process.replace_with(store.dump())
        assert_same_content(in_process, store)
    finally:
        in_process.close()


def test_backup_to_writes_a_sqlite_memory_with_the_same_ids(store: Store, tmp_path: Path) -> None:
    populate(store)
    folder = tmp_path / "backup"
    MemoryStore.create(folder).close()  # an older memory there is replaced
    store.backup_to(folder)
    copy = MemoryStore.open(folder)
    try:
        assert_same_content(copy, store)
        assert copy.episode_rowids() == store.episode_rowids()
        assert copy.episode_keys(["a", "b", "c"]) == store.episode_keys(["a", "b", "c"])
        assert copy.history() == store.history()
        assert copy.identity()["memory_id"] == store.identity()["memory_id"]
    finally:
        copy.close()
