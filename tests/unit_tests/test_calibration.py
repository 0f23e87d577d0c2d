"""Score calibration on integer scales: fitting, the align step, judgments, unalign, storage."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage

from langchain_memalign import Feedback, MemAlignJudge
from langchain_memalign.errors import MemoryFormatError, UnknownFeedbackError
from langchain_memalign.memory.calibration import CalibrationPair, ScoreCalibration, calibrates
from langchain_memalign.scale import Scale


def pairs(*triples: tuple[str, int, int]) -> list[CalibrationPair]:
    return [CalibrationPair(*t) for t in triples]


# -- fitting ----------------------------------------------------------------------------------


def test_a_score_is_remapped_where_enough_seen_cases_say_so() -> None:
    cal = ScoreCalibration.fit(pairs(("a", 3, 2), ("b", 3, 2), ("c", 3, 2), ("d", 3, 3)))
    assert dict(cal.mapping) == {3: 2}
    score, evidence = cal.apply(3)
    assert score == 2
    assert evidence == {"judge_score": 3, "seen_cases": 4, "expert_scores": {"2": 3, "3": 1}}
    assert cal.apply(4) == (4, None)  # no seen case the judge scored 4


def test_too_few_cases_or_too_small_a_margin_leave_the_score() -> None:
    two = ScoreCalibration.fit(pairs(("a", 3, 2), ("b", 3, 2)))
    assert dict(two.mapping) == {}  # below MIN_SUPPORT
    close = ScoreCalibration.fit(pairs(("a", 3, 2), ("b", 3, 2), ("c", 3, 3), ("d", 3, 5)))
    assert dict(close.mapping) == {}  # 2 against 1: a margin of 1
    spread = ScoreCalibration.fit(pairs(("a", 1, 4), ("b", 1, 4), ("c", 1, 5), ("d", 1, 5)))
    assert dict(spread.mapping) == {1: 4}  # a tie between 4 and 5 goes to the nearer score


def test_updated_replaces_a_feedback_s_pair_and_drops_removed_ones() -> None:
    cal = ScoreCalibration.fit(pairs(("a", 3, 2), ("b", 3, 2), ("c", 3, 2)))
    assert dict(cal.mapping) == {3: 2}
    again = cal.updated(pairs(("a", 3, 3)))
    assert sorted((p.feedback_id, p.expert) for p in again.pairs) == [
        ("a", 3), ("b", 2), ("c", 2),
    ]  # fmt: skip
    assert dict(again.mapping) == {}
    assert [p.feedback_id for p in cal.updated([], ["b"]).pairs] == ["a", "c"]


def test_only_narrow_integer_scales_are_calibrated() -> None:
    assert calibrates(Scale.of((1, 5))) and calibrates(Scale.of((0, 10)))
    assert not calibrates(Scale.of((0, 100)))
    assert not calibrates(Scale.of((0.0, 1.0)))
    assert not calibrates(Scale.of(bool))
    assert not calibrates(Scale.of(["good", "bad"]))
    assert not calibrates(Scale.of("pairwise"))


@pytest.mark.parametrize(
    ("stored", "problem"),
    [
        ("garbage", "not {'pairs'"),
        ({"pairs": [["a", 3]]}, "not \\[feedback id, judge score, expert score\\]"),
        ({"pairs": [["a", 3, 9]]}, "outside the 1–5 scale"),
        ({"pairs": [[7, 3, 2]]}, "not \\[feedback id"),
    ],
)
def test_a_corrupt_stored_calibration_names_the_problem(stored: Any, problem: str) -> None:
    with pytest.raises(MemoryFormatError, match=f"here: meta.calibration.*{problem}"):
        ScoreCalibration.from_json(stored, Scale.of((1, 5)), where="here")


# -- the align step and judgments -------------------------------------------------------------


def always(score: Any) -> Any:
    """A responder whose judge gives `score` to everything and whose reflection learns nothing."""

    def respond(messages: list[BaseMessage]) -> Any:
        if "expert evaluator" in str(messages[0].content):
            return {"rationale": "Fine.", "score": score}
        return {"guidelines": []}

    return respond


def items(*values: int) -> list[Feedback]:
    return [
        Feedback(id=f"c{i}", inputs=f"question {i}", outputs=f"answer {i}", value=v)
        for i, v in enumerate(values)
    ]


def judge_calls(model: Any) -> int:
    return sum("expert evaluator" in str(c[0].content) for c in model.calls)


@pytest.fixture
def numeric(make_judge: Any, model: Any) -> Any:
    model.responder = always(3)

    def make(**kw: Any) -> MemAlignJudge:
        # k=0: no past case in any prompt, so every grading and judgment is calibrated.
        judge: MemAlignJudge = make_judge(scale=(1, 5), k=0, **kw)
        return judge

    return make


def test_align_grades_each_case_as_unseen_and_judgments_use_the_experts_score(
    numeric: Any, model: Any
) -> None:
    judge = numeric()
    report = judge.align(items(2, 2, 2, 3))
    assert judge_calls(model) == 4  # one grading per aligned case, nothing else
    assert report.calibration is not None
    assert report.calibration.graded == ["c0", "c1", "c2", "c3"]
    assert report.calibration.pairs == 4 and report.calibration.mapping == {"3": 2}
    result = judge.invoke({"inputs": "a new question", "outputs": "a new answer"})
    assert result["score"] == 2
    assert result["metadata"]["calibration"] == {
        "judge_score": 3, "seen_cases": 4, "expert_scores": {"2": 3, "3": 1},
    }  # fmt: skip


def test_without_calibration_nothing_is_graded_or_remapped(numeric: Any, model: Any) -> None:
    judge = numeric(options={"calibration": {"enabled": False}})
    report = judge.align(items(2, 2, 2, 3))
    assert judge_calls(model) == 0 and report.calibration is None
    result = judge.invoke({"inputs": "a new question", "outputs": "a new answer"})
    assert result["score"] == 3 and "calibration" not in result["metadata"]


def test_a_bool_judge_spends_no_call_on_calibration(make_judge: Any, model: Any) -> None:
    model.responder = always(True)
    report = make_judge(k=0).align(
        [Feedback(id=f"b{i}", inputs=f"q {i}", outputs="a", value=False) for i in range(4)]
    )
    assert judge_calls(model) == 0 and report.calibration is None


def test_the_budget_caps_the_gradings(numeric: Any, model: Any) -> None:
    judge = numeric(options={"calibration": {"max_calls": 2}})
    report = judge.align(items(2, 2, 2, 3))
    assert judge_calls(model) == 2
    assert report.calibration is not None
    assert report.calibration.graded == ["c0", "c1"]
    assert report.calibration.over_budget == ["c2", "c3"]
    assert report.calibration.mapping == {}  # two pairs are below the support needed


def test_a_grading_that_shows_a_past_case_keeps_no_pair(make_judge: Any, model: Any) -> None:
    model.responder = always(3)
    # The test embeddings' floor is off (conftest): every grading shows other past cases,
    # and the calibration applies only to judgments that show none.
    judge = make_judge(scale=(1, 5), k=3)
    report = judge.align(items(2, 2, 2, 3))
    assert report.calibration is not None
    assert report.calibration.graded == [] and report.calibration.pairs == 0
    assert report.calibration.past_case_shown == ["c0", "c1", "c2", "c3"]


def test_unalign_removes_the_pairs_of_the_withdrawn_feedback(numeric: Any) -> None:
    judge = numeric()
    judge.align(items(2, 2, 2, 3))
    assert dict(judge.memory.calibration.mapping) == {3: 2}
    judge.unalign(["c0"])
    assert [p.feedback_id for p in judge.memory.calibration.pairs] == ["c1", "c2", "c3"]
    assert dict(judge.memory.calibration.mapping) == {}  # 2 against 1 is not enough
    assert judge.invoke({"inputs": "new", "outputs": "new"})["score"] == 3


def test_changed_feedback_is_graded_again(numeric: Any, model: Any) -> None:
    judge = numeric()
    judge.align(items(2, 2, 3, 3))
    assert dict(judge.memory.calibration.mapping) == {}
    changed = Feedback(id="c3", inputs="question 3", outputs="answer 3", value=2)
    report = judge.align([changed])
    assert report.updated == ["c3"] and report.calibration is not None
    assert report.calibration.graded == ["c3"] and judge_calls(model) == 5
    assert dict(judge.memory.calibration.mapping) == {3: 2}


def test_the_calibration_is_saved_with_the_memory(
    numeric: Any, model: Any, embeddings: Any, tmp_path: Path
) -> None:
    judge = numeric(path=tmp_path / "mem")
    judge.align(items(2, 2, 2, 3))
    judge.close()
    again = MemAlignJudge.load(tmp_path / "mem", model=model, embeddings=embeddings)
    assert dict(again.memory.calibration.mapping) == {3: 2}
    assert again.invoke({"inputs": "new", "outputs": "new"})["score"] == 2
    again.close()


def test_a_corrupt_calibration_in_a_folder_is_named_on_load(
    numeric: Any, model: Any, embeddings: Any, tmp_path: Path
) -> None:
    judge = numeric(path=tmp_path / "mem")
    judge.align(items(2, 2, 2, 3))
    judge.close()
    db = next((tmp_path / "mem").glob("*.sqlite*"))
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE meta SET value='{\"pairs\": 5}' WHERE key='calibration'")
    with pytest.raises(MemoryFormatError, match="meta.calibration is"):
        MemAlignJudge.load(tmp_path / "mem", model=model, embeddings=embeddings)


def test_a_failed_grading_keeps_no_pair_and_says_so(numeric: Any, model: Any) -> None:
    def respond(messages: list[BaseMessage]) -> Any:
        if "expert evaluator" in str(messages[0].content):
            return "not json" if "question 1" in str(messages[-1].content) else {
                "rationale": "Fine.", "score": 3,
            }  # fmt: skip
        return {"guidelines": []}

    model.responder = respond  # before the judge binds the model
    judge = numeric(options={"max_retries": 0})
    report = judge.align(items(2, 2, 2, 3))
    assert report.calibration is not None
    assert report.calibration.graded == ["c0", "c2", "c3"]
    assert any("calibration could not grade seen cases ['c1']" in e for e in report.errors)
    assert judge.feedback_ids == ["c0", "c1", "c2", "c3"]  # the feedback itself is stored


# -- calibrate(): grading the stored cases again ----------------------------------------------


def test_calibrate_grades_every_stored_case_with_the_memory_as_it_is(
    numeric: Any, model: Any
) -> None:
    judge = numeric(
        options={"calibration": {"max_calls": 0}}
    )  # align keeps no pair: a memory from before
    judge.align(items(2, 2, 2, 3))
    assert judge_calls(model) == 0 and not judge.memory.calibration.pairs
    report = judge.calibrate()
    assert report.graded == ["c0", "c1", "c2", "c3"] and report.usage.llm_calls == 4
    assert report.mapping == {"3": 2}
    assert judge.invoke({"inputs": "new", "outputs": "new"})["score"] == 2
    again = judge.calibrate(["c3", "c3"])  # an id once
    assert again.graded == ["c3"] and again.pairs == 4 and judge_calls(model) == 6


def test_calibrate_refuses_unknown_ids_and_scales_it_does_not_calibrate(
    numeric: Any, make_judge: Any, model: Any
) -> None:
    judge = numeric()
    judge.align(items(2, 2, 2, 3))
    calls = judge_calls(model)
    with pytest.raises(UnknownFeedbackError, match="nope"):
        judge.calibrate(["c0", "nope"])
    with pytest.raises(TypeError, match="not a string"):
        judge.calibrate("c0")
    assert judge_calls(model) == calls  # nothing graded
    with pytest.raises(ValueError, match="score calibration is off"):
        numeric(options={"calibration": {"enabled": False}}).calibrate()
    with pytest.raises(ValueError, match="up to 11 values, not a pass/fail scale"):
        make_judge().calibrate()


def test_the_comment_says_why_the_score_differs(numeric: Any) -> None:
    judge = numeric()
    judge.align(items(2, 2, 2, 3))
    result = judge.invoke({"inputs": "new", "outputs": "new"})
    assert result["comment"] == (
        "Fine. (Calibrated from 3: the experts gave 2 to 3 of the 4 seen cases this judge "
        "scored 3.)"
    )


def test_a_judgment_that_shows_a_past_case_is_not_calibrated(make_judge: Any, model: Any) -> None:
    model.responder = always(3)
    judge = make_judge(scale=(1, 5), k=3, options={"retrieval": {"reuse_expert_verdicts": False}})
    judge.align(items(2, 2, 2, 3))  # every grading showed past cases: no pair kept
    mem = judge.memory
    with mem.write() as w:
        w.put_calibration(ScoreCalibration.fit(pairs(("c0", 3, 2), ("c1", 3, 2), ("c2", 3, 2))))
    assert dict(mem.calibration.mapping) == {3: 2}
    result = judge.invoke({"inputs": "question 1", "outputs": "answer 9"})
    assert result["metadata"]["episode_ids"] and result["score"] == 3
    assert "calibration" not in result["metadata"]
