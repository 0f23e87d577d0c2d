"""`AlignReport.merge`: one report for successive align calls."""

from __future__ import annotations

from langchain_memalign import AlignReport
from langchain_memalign.reports import CalibrationReport, GuidelineCheck, RejectedGuideline, Usage


def test_merge_adds_up_and_keeps_only_what_still_fails() -> None:
    first = AlignReport(
        added=["a", "b"],
        guidelines_added=["g1", "g2"],
        failed=["b"],
        errors=["reflection of ['b'] failed"],
        usage=Usage(llm_calls=2, input_tokens=10),
        seconds=1.0,
    )
    # the second call retried b successfully; its consolidation replaced g2 by g3
    second = AlignReport(
        added=["c"],
        unchanged=["a"],
        guidelines_added=["g3"],
        guidelines_removed=["g2"],
        guidelines_updated=["g1"],
        usage=Usage(llm_calls=3, output_tokens=5),
        seconds=2.0,
    )
    merged = AlignReport.merge([first, second])
    assert merged.failed == []
    assert merged.added == ["a", "b", "c"] and merged.unchanged == ["a"]
    assert merged.guidelines_added == ["g1", "g3"] and merged.guidelines_removed == []
    assert merged.guidelines_updated == []  # g1 is new to the caller: added, not updated
    assert merged.errors == ["reflection of ['b'] failed"]
    assert (merged.llm_calls, merged.total_tokens, merged.seconds) == (5, 15, 3.0)


def test_merge_reports_a_failure_of_the_last_call() -> None:
    merged = AlignReport.merge([AlignReport(added=["a"]), AlignReport(added=["b"], failed=["b"])])
    assert merged.failed == ["b"]
    assert AlignReport.merge([]) == AlignReport()


def test_merge_keeps_every_call_s_rejections_and_checks_in_order() -> None:
    # the CLI aligns in batches and prints the merged report: a check lost here is a
    # rule dropped without the user being told
    first = AlignReport(
        guidelines_rejected=[RejectedGuideline(text="Apologise, that's not okay.", reason="x")],
        validation=[GuidelineCheck(guideline_id="g1", text="A", fixed=["a"], action="kept")],
    )
    second = AlignReport(
        validation=[GuidelineCheck(guideline_id="g2", text="B", broken=["b"], action="dropped")]
    )
    merged = AlignReport.merge([first, second])
    assert [r.text for r in merged.guidelines_rejected] == ["Apologise, that's not okay."]
    assert [(c.guideline_id, c.action) for c in merged.validation] == [
        ("g1", "kept"),
        ("g2", "dropped"),
    ]


def test_merge_adds_up_calibration_steps_and_keeps_the_last_remapping() -> None:
    first = AlignReport(
        calibration=CalibrationReport(
            graded=["a", "b"], past_case_shown=["c"], pairs=2, mapping={},
            usage=Usage(llm_calls=3),
        )
    )  # fmt: skip
    skipped = AlignReport()  # e.g. a call with nothing new to grade
    last = AlignReport(
        calibration=CalibrationReport(
            graded=["c", "d"], over_budget=["e"], pairs=4, mapping={"3": 4},
            errors=["calibration could not grade seen cases ['f']"], usage=Usage(llm_calls=3),
        )
    )  # fmt: skip
    merged = AlignReport.merge([first, skipped, last]).calibration
    assert merged is not None
    assert merged.graded == ["a", "b", "c", "d"]
    assert merged.past_case_shown == []  # "c" was graded later
    assert merged.over_budget == ["e"]
    assert (merged.pairs, merged.mapping) == (4, {"3": 4})
    assert merged.usage.llm_calls == 6 and len(merged.errors) == 1
    assert AlignReport.merge([skipped]).calibration is None
