"""Prequential agreement: each review beside the judge's verdict from before it learned it.

The series is recorded by `align` (`score_first`, `prior_verdicts`; the LangSmith path is
tested in langsmith/test_monitor.py), read by `agreement_history` with numbers checked by
hand, removed with its feedback by `unalign`, kept by save and load on both backends,
added to memories of the previous format version when they are opened, and drawn by
`memalign show --curve`.
"""

from __future__ import annotations

import json
import math
import sqlite3
import struct
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import HOURS, INSTRUCTIONS, RUDE, SWEATER, fb
from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel

from langchain_memalign import (
    AlignFailedError,
    InvalidFeedbackError,
    MemAlignJudge,
    MemoryFormatError,
    Scale,
)
from langchain_memalign.cli import main
from langchain_memalign.evaluation import AgreementHistory
from langchain_memalign.memory._codec_prequential import SeriesRow
from langchain_memalign.memory.store import DB_FILE, SCHEMA_VERSION, MemoryStore
from langchain_memalign.prequential import history_of

LATE = fb(
    "late",
    "My order is two weeks late and I'm disappointed.",
    "It ships tomorrow.",
    False,
    "Acknowledge the disappointment before the facts.",
)


def judge_calls(responder: RoleResponder) -> int:
    return responder.roles.count("judge")


def review(fid: str, judge: Any, expert: Any, at: str = "2025-01-01T00:00:00+00:00") -> SeriesRow:
    return SeriesRow(
        seq=0, at=at, kind="review", feedback_id=fid, judge=judge, expert=expert,
        source="given", learned=None,
    )  # fmt: skip


def align_row(learned: int) -> SeriesRow:
    return SeriesRow(
        seq=0, at="2025-01-01T00:00:00+00:00", kind="align", feedback_id=None, judge=None,
        expert=None, source=None, learned=learned,
    )  # fmt: skip


# -- recording ------------------------------------------------------------------------------


def test_score_first_grades_each_new_item_once_before_learning_it(
    make_judge: Any, responder: RoleResponder
) -> None:
    judge = make_judge()
    report = judge.align([SWEATER, HOURS, RUDE], score_first=True)
    # One judgment per new item; the rest of the align (reflection) makes no judgment.
    assert judge_calls(responder) == 3
    assert report.graded_first == ["sweater", "hours", "rude"]
    assert report.agreement_recorded == ["sweater", "hours", "rude"]
    assert report.usage.llm_calls == len(responder.roles)  # the gradings are counted
    # Graded before learning: the fresh judge passes everything.
    history = judge.agreement_history()
    assert [(p.feedback_id, p.judge, p.expert, p.source) for p in history.points] == [
        ("sweater", True, False, "score_first"),
        ("hours", True, True, "score_first"),
        ("rude", True, False, "score_first"),
    ]
    assert [(a.number, a.after, a.learned) for a in history.aligns] == [(1, 3, 3)]

    # Known items are not graded again; a new one is graded by the judge that learned.
    again = judge.align([SWEATER, HOURS, RUDE, LATE], score_first=True)
    assert judge_calls(responder) == 4 and again.graded_first == ["late"]
    late = judge.agreement_history().points[-1]
    assert (late.feedback_id, late.judge, late.expert, late.agrees) == ("late", False, False, True)


def test_score_first_never_reuses_an_experts_verdict(
    make_judge: Any, responder: RoleResponder
) -> None:
    judge = make_judge(options={"retrieval": {"reuse_expert_verdicts": True}})
    judge.align([SWEATER])
    twin = SWEATER.model_copy(update={"id": "sweater-again"})
    # A judgment of the same case copies the experts' verdict, without a model call...
    assert judge.invoke({"inputs": twin.inputs, "outputs": twin.outputs})["score"] is False
    calls = judge_calls(responder)
    # ...the grading before learning asks the model.
    report = judge.align([twin], score_first=True)
    assert judge_calls(responder) == calls + 1 and report.graded_first == ["sweater-again"]


def test_without_score_first_nothing_is_graded_and_only_the_align_is_marked(
    make_judge: Any, responder: RoleResponder
) -> None:
    judge = make_judge()
    report = judge.align([SWEATER, HOURS])
    assert judge_calls(responder) == 0 and report.graded_first == []
    history = judge.agreement_history()
    assert history.points == () and history.windows == () and history.overall is None
    assert [(a.after, a.learned) for a in history.aligns] == [(0, 2)]
    judge.align([SWEATER, HOURS])  # nothing new: no align in the series
    assert len(judge.agreement_history().aligns) == 1


def test_prior_verdicts_are_recorded_without_a_call(
    make_judge: Any, responder: RoleResponder
) -> None:
    judge = make_judge()
    kept = judge.invoke({"inputs": RUDE.inputs, "outputs": RUDE.outputs})  # a JudgeResult
    calls = judge_calls(responder)
    report = judge.align(
        [RUDE, HOURS], prior_verdicts={"rude": kept, "hours": "false"}, score_first=True
    )
    assert judge_calls(responder) == calls  # both had a verdict: none graded
    assert report.graded_first == [] and report.agreement_recorded == ["rude", "hours"]
    points = judge.agreement_history().points
    assert [(p.feedback_id, p.judge, p.source) for p in points] == [
        ("rude", True, "given"),
        ("hours", False, "given"),
    ]
    # A changed review keeps its point and takes the new expert verdict.
    judge.align([HOURS.model_copy(update={"value": False, "rationale": "Too terse."})])
    assert judge.agreement_history().points[1].expert is False


def test_prior_source_labels_the_points_of_the_verdicts_given(make_judge: Any) -> None:
    """An integration that reads earlier verdicts names where they came from."""
    judge = make_judge()
    judge.align([RUDE], prior_verdicts={"rude": "false"}, prior_source="review_tool")
    (point,) = judge.agreement_history().points
    assert (point.feedback_id, point.judge, point.source) == ("rude", False, "review_tool")
    for bad in ("", None):
        with pytest.raises(TypeError, match="prior_source must be a non-empty string"):
            judge.align([HOURS], prior_verdicts={"hours": True}, prior_source=bad)
    assert judge.feedback_ids == ["rude"]  # refused before anything ran


async def test_aalign_passes_prior_source_on(make_judge: Any) -> None:
    judge = make_judge()
    await judge.aalign([RUDE], prior_verdicts={"rude": True}, prior_source="review_tool")
    assert [p.source for p in judge.agreement_history().points] == ["review_tool"]


def test_prior_verdicts_are_checked_before_anything_runs(make_judge: Any) -> None:
    judge = make_judge()
    with pytest.raises(InvalidFeedbackError, match="not in this align call"):
        judge.align([HOURS], prior_verdicts={"other": True})
    with pytest.raises(InvalidFeedbackError, match="hours"):
        judge.align([HOURS], prior_verdicts={"hours": "maybe"})
    assert judge.feedback_ids == []


def test_unalign_removes_the_point_and_keeps_the_align(make_judge: Any) -> None:
    judge = make_judge()
    judge.align([SWEATER, HOURS, RUDE], score_first=True)
    judge.unalign(["hours"])
    history = judge.agreement_history()
    assert [p.feedback_id for p in history.points] == ["sweater", "rude"]
    assert [p.index for p in history.points] == [1, 2]
    assert [(a.after, a.learned) for a in history.aligns] == [(2, 3)]


def test_a_failed_reflection_keeps_the_point_a_failed_align_records_nothing(
    make_judge: Any, responder: RoleResponder, monkeypatch: pytest.MonkeyPatch
) -> None:
    judge = make_judge()
    responder.fail_reflect = True
    report = judge.align([SWEATER], score_first=True, raise_on_failure=False)
    # A failed reflection keeps the feedback stored (retried later), and so its point.
    assert report.failed == ["sweater"]
    assert [p.feedback_id for p in judge.agreement_history().points] == ["sweater"]

    def down(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("embeddings are down")

    monkeypatch.setattr(judge.memory, "embed", down)
    responder.fail_reflect = False
    with pytest.raises(AlignFailedError):
        judge.align([RUDE], score_first=True)
    history = judge.agreement_history()  # rolled back whole: no point, no align
    assert [p.feedback_id for p in history.points] == ["sweater"] and len(history.aligns) == 1


# -- reading ----------------------------------------------------------------------------------


def test_windows_of_a_pass_fail_series_by_hand() -> None:
    rows = [
        align_row(3),
        # window 1: accuracy 3/4; kappa (0.75 - 0.5) / (1 - 0.5) = 0.5
        review("a", True, True), review("b", False, True),
        review("c", False, False), review("d", False, False),
        align_row(4),
        # window 2: all agree, both labels used: accuracy 1, kappa 1
        review("e", True, True), review("f", False, False),
        review("g", True, True), review("h", False, False),
        # window 3 (short): one label throughout: kappa undefined
        review("i", True, True),
        align_row(1),
        review("j", True, True),
    ]  # fmt: skip
    history = history_of(rows, Scale.of(bool), judge="helpfulness", window=4)
    assert isinstance(history, AgreementHistory) and history.metric == "accuracy"
    got = [(w.first, w.last, w.count, w.accuracy, w.kappa, w.mae) for w in history.windows]
    assert got == [
        (1, 4, 4, 0.75, pytest.approx(0.5), None),
        (5, 8, 4, 1.0, pytest.approx(1.0), None),
        (9, 10, 2, 1.0, None, None),
    ]
    assert [w.aligns for w in history.windows] == [0, 0, 1]
    marks = [(a.number, a.after, a.learned) for a in history.aligns]
    assert marks == [(1, 0, 3), (2, 4, 4), (3, 9, 1)]
    assert history.overall is not None and history.overall.count == 10
    assert history.overall.accuracy == 0.9
    # kappa over all ten: p_o 0.9; experts 6 True of 10, judge 5: p_e 0.5; (0.9-0.5)/0.5
    assert history.overall.kappa == pytest.approx(0.8)
    assert [p.agrees for p in history.points][:4] == [True, False, True, True]


def test_windows_of_numeric_and_categorical_series_by_hand() -> None:
    integer = history_of(
        [review("a", 4, 5), review("b", 3, 3), review("c", 3, 1)],
        Scale.of((1, 5)), judge="j", window=3,
    )  # fmt: skip
    (w,) = integer.windows
    assert integer.metric == "mae"
    assert w.mae == pytest.approx(1.0)  # (1 + 0 + 2) / 3
    assert w.accuracy == pytest.approx(1 / 3)
    # Quadratic weights ((i - j) / 4)^2: observed 15/144, expected 27/144.
    assert w.kappa == pytest.approx(1 - 15 / 27)

    continuous = history_of(
        [review("a", 0.5, 0.2), review("b", 0.8, 0.8)], Scale.of((0.0, 1.0)), judge="j"
    )
    (w,) = continuous.windows
    assert w.mae == pytest.approx(0.15) and w.accuracy is None and w.kappa is None

    labels = history_of(
        [review("a", "good", "good"), review("b", "bad", "ok"),
         review("c", "bad", "bad"), review("d", "ok", "bad")],
        Scale.of(["good", "ok", "bad"]), judge="j", window=10,
    )  # fmt: skip
    (w,) = labels.windows
    # p_o 0.5; marginals (0.25, 0.25, 0.5) on both sides: p_e 0.375; (0.5-0.375)/0.625
    assert w.accuracy == 0.5 and w.kappa == pytest.approx(0.2) and w.mae is None


@pytest.mark.parametrize("window", [0, -1, 1.5, True])
def test_a_window_must_be_a_positive_count(make_judge: Any, window: Any) -> None:
    with pytest.raises(ValueError, match="window"):
        make_judge().agreement_history(window=window)


def test_the_judges_history_through_its_aligns(make_judge: Any) -> None:
    judge = make_judge()
    judge.align([SWEATER, HOURS], prior_verdicts={"sweater": True, "hours": True})
    judge.align([RUDE, LATE], prior_verdicts={"rude": False, "late": True})
    history = judge.agreement_history(window=2)
    assert [(w.first, w.last, w.accuracy) for w in history.windows] == [(1, 2, 0.5), (3, 4, 0.5)]
    assert [(a.after, a.learned) for a in history.aligns] == [(2, 2), (4, 2)]
    assert history.judge == "helpfulness" and history.window == 2


# -- storage ------------------------------------------------------------------------------------


def _series(judge: MemAlignJudge) -> list[tuple[Any, ...]]:
    h = judge.agreement_history()
    return [(p.feedback_id, p.judge, p.expert, p.source, p.at) for p in h.points] + [
        (a.after, a.learned, a.at) for a in h.aligns
    ]


def test_the_series_round_trips_through_save_and_load(
    make_judge: Any, model: ScriptedChatModel, tmp_path: Path
) -> None:
    judge = make_judge()
    judge.align([SWEATER, HOURS], score_first=True)
    judge.align([RUDE], prior_verdicts={"rude": False})
    expected = _series(judge)
    judge.save(tmp_path / "copy")
    loaded = MemAlignJudge.load(tmp_path / "copy", model=model, embeddings=HashEmbeddings())
    assert _series(loaded) == expected
    loaded.close()


def test_the_series_round_trips_through_a_database(
    make_judge: Any, model: ScriptedChatModel, tmp_path: Path, pg_server: Any
) -> None:
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    url = f"{pg_server.new_database()}?judge=helpfulness"
    judge = make_judge(path=url)
    judge.align([SWEATER, HOURS], score_first=True)
    judge.unalign(["hours"])
    judge.align([RUDE], prior_verdicts={"rude": False})
    expected = _series(judge)
    assert [s[0] for s in expected[:2]] == ["sweater", "rude"]
    judge.save(tmp_path / "folder")  # database -> folder
    judge.close()
    folder = MemAlignJudge.load(tmp_path / "folder", model=model, embeddings=HashEmbeddings())
    assert _series(folder) == expected
    other = f"{url.rsplit('?', 1)[0]}?judge=copy"
    folder.save(other)  # folder -> database
    folder.close()
    copy = MemAlignJudge.load(other, model=model, embeddings=HashEmbeddings())
    assert _series(copy) == expected
    copy.close()


def _as_version_1(db: Path) -> None:
    """What this package wrote before the series: no table, format version 1."""
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE prequential")
        conn.execute("UPDATE meta SET value='1' WHERE key='schema_version'")


def test_a_version_1_folder_is_upgraded_when_opened(
    make_judge: Any, model: ScriptedChatModel, tmp_path: Path
) -> None:
    folder = tmp_path / "old"
    judge = make_judge(path=folder)
    judge.align([SWEATER, HOURS])
    judge.close()
    _as_version_1(folder / DB_FILE)
    loaded = MemAlignJudge.load(folder, model=model, embeddings=HashEmbeddings())
    assert loaded.memory.store.get_meta("schema_version") == SCHEMA_VERSION == 2
    assert loaded.agreement_history().points == ()
    loaded.align([RUDE], score_first=True)
    assert [p.feedback_id for p in loaded.agreement_history().points] == ["rude"]
    loaded.close()
    # The constructor on an old folder upgrades it too.
    _as_version_1(folder / DB_FILE)
    again = make_judge(path=folder)
    assert again.memory.store.get_meta("schema_version") == 2
    again.close()


def test_a_read_only_version_1_folder_still_opens(tmp_path: Path, make_judge: Any) -> None:
    folder = tmp_path / "old"
    make_judge(path=folder).close()
    _as_version_1(folder / DB_FILE)
    store = MemoryStore.open(folder)
    store.close()  # upgraded; make another old one and open it read-only
    _as_version_1(folder / DB_FILE)
    conn = sqlite3.connect(
        f"file:{folder / DB_FILE}?mode=ro", uri=True, isolation_level=None,
        check_same_thread=False,
    )  # fmt: skip
    store = MemoryStore(conn, folder)
    store._check_format()
    assert store.series_missing and store.prequential() == []
    assert store.dump().prequential == []
    store.close()


def test_a_version_2_folder_without_the_series_is_refused(make_judge: Any, tmp_path: Path) -> None:
    folder = tmp_path / "cut"
    make_judge(path=folder).close()
    with sqlite3.connect(folder / DB_FILE) as conn:
        conn.execute("DROP TABLE prequential")
    with pytest.raises(MemoryFormatError, match="missing prequential"):
        MemoryStore.open(folder)


def test_a_version_1_database_is_upgraded_when_opened(
    make_judge: Any, model: ScriptedChatModel, pg_server: Any
) -> None:
    psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    db = pg_server.new_database()
    url = f"{db}?judge=j{uuid.uuid4().hex[:6]}"
    judge = make_judge(path=url)
    judge.align([SWEATER])
    judge.close()
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DROP TABLE memalign_prequential")
        conn.execute("UPDATE memalign_schema SET version = 1")
    loaded = MemAlignJudge.load(url, model=model, embeddings=HashEmbeddings())
    loaded.align([HOURS], score_first=True)
    assert [p.feedback_id for p in loaded.agreement_history().points] == ["hours"]
    loaded.close()
    with psycopg.connect(db, autocommit=True) as conn:
        assert conn.execute("SELECT version FROM memalign_schema").fetchone() == (2,)


# -- memalign show --curve ------------------------------------------------------------------------


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _judge_file(tmp_path: Path, memory: str) -> Path:
    config = tmp_path / "judge.toml"
    config.write_text(
        'name = "helpfulness"\nscale = "bool"\n'
        f'instructions = """{INSTRUCTIONS}"""\n'
        'model = "openai:gpt-4.1-mini"\nembeddings = "openai:text-embedding-3-small"\n'
        f'memory = "{memory}"\n'
    )
    return config


@pytest.mark.parametrize("backend", ["folder", "postgres"])
def test_show_curve_prints_the_table_and_draws_a_png(
    make_judge: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
    backend: str,
) -> None:
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    if backend == "postgres":
        pytest.importorskip("psycopg", reason="the postgres extra is not installed")
        memory = f"{request.getfixturevalue('pg_server').new_database()}?judge=helpfulness"
    else:
        memory = str(tmp_path / "mem")
    judge = make_judge(path=memory)
    cases = [
        fb(f"case-{i}", f"question {i} about refunds", f"answer {i}", i % 3 != 0, f"Reason {i}.")
        for i in range(12)
    ]
    for start in (0, 5, 9):
        batch = cases[start : {0: 5, 5: 9, 9: 12}[start]]
        judge.align(batch, prior_verdicts={c.id: bool(int(c.id[5:]) % 2) for c in batch})
    judge.close()
    config = _judge_file(tmp_path, memory)
    png = tmp_path / "out" / "curve.png"
    capsys.readouterr()
    code = main(["show", "-c", str(config), "--curve", str(png), "--window", "4"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "12 review(s) in windows of 4, 3 align(s)" in out
    assert "1-4" in out and "5-8" in out and "9-12" in out and "all" in out
    assert "-- align 1 after review 5: learned 5 item(s)" in out
    assert f"Drawn to {png}" in out
    width, height = _png_size(png)
    assert width >= 800 and height >= 400 and png.stat().st_size > 20_000

    # --json for scripts; the same numbers.
    code = main(["show", "-c", str(config), "--curve", str(png), "--json", "--window", "4"])
    info = json.loads(capsys.readouterr().out)
    assert [w["count"] for w in info["windows"]] == [4, 4, 4]
    assert [a["after"] for a in info["aligns"]] == [5, 9, 12]
    assert info["metric"] == "accuracy" and info["scale"]["kind"] == "bool"
    agreed = sum((i % 2 == 1) == (i % 3 != 0) for i in range(12))
    assert math.isclose(info["overall"]["accuracy"], agreed / 12)


def test_show_curve_without_matplotlib_names_the_extra(
    make_judge: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    judge = make_judge(path=tmp_path / "mem")
    judge.align([HOURS], prior_verdicts={"hours": True})
    judge.close()
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # an import of it fails
    code = main(["show", "--memory", str(tmp_path / "mem"), "--curve", str(tmp_path / "c.png")])
    captured = capsys.readouterr()
    assert code != 0 and "langchain-memalign[plot]" in captured.err
    assert "1 review(s)" in captured.out  # the table needs nothing
    assert not (tmp_path / "c.png").exists()


def test_show_curve_on_a_memory_without_reviews(
    make_judge: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    judge = make_judge(path=tmp_path / "mem")
    judge.align([HOURS])
    judge.close()
    code = main(["show", "--memory", str(tmp_path / "mem"), "--curve"])
    out = capsys.readouterr().out
    assert code == 0 and "no reviews recorded yet" in out and "align 1 after review 0" in out
