"""Size limits on what is stored and on what goes into alignment prompts.

Oversized feedback (a 1 MB comment) is refused, a huge guideline is never stored, the
number of guidelines is capped, and a 200,000-character guideline already stored (as an
older version could store it) does not make later aligns fail on a model with ~32k
characters of context: every alignment prompt stays within its budget.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import HOURS, RUDE, SWEATER, fb
from fakes import ScriptedChatModel
from langchain_core.messages import HumanMessage, SystemMessage

from langchain_memalign import MemAlignJudge, limits
from langchain_memalign.alignment import AlignmentRun
from langchain_memalign.errors import LimitExceededError
from langchain_memalign.limits import fit_prompt, prompt_chars
from langchain_memalign.memory.semantic import Guideline, new_guideline_id
from langchain_memalign.memory.store import MemoryStore


@pytest.mark.parametrize(
    ("update", "field", "name"),
    [
        ({"rationale": "x" * 1_000_000}, "rationale", "MAX_RATIONALE_CHARS"),
        ({"id": "i" * 5_000}, "id", "MAX_ID_CHARS"),
        ({"annotator": "a" * 5_000}, "annotator", "MAX_ANNOTATOR_CHARS"),
        ({"metadata": {"blob": "m" * 100_000}}, "metadata", "MAX_METADATA_CHARS"),
        ({"outputs": "o" * 1_000_000}, "inputs/outputs/reference_outputs", "MAX_CASE_CHARS"),
    ],
)
def test_oversized_feedback_is_refused_before_any_model_call(
    make_judge: Any, model: Any, embeddings: Any, update: dict[str, Any], field: str, name: str
) -> None:
    judge = make_judge()
    judge.align([HOURS])
    calls, texts = len(model.calls), embeddings.calls
    big = SWEATER.model_copy(update=update)
    with pytest.raises(LimitExceededError, match=f"limits.{name}") as err:
        judge.align([RUDE, big])
    assert err.value.field == field and err.value.limit == getattr(limits, name)
    assert f"{err.value.limit:,}" in str(err.value)
    assert (len(model.calls), embeddings.calls) == (calls, texts)
    assert judge.feedback_ids == ["hours"]  # the valid item of the call is not stored either


def test_the_store_refuses_oversized_feedback_too() -> None:
    store = MemoryStore.create(None)
    with pytest.raises(LimitExceededError), store.transaction() as conn:
        store.put_feedback(conn, SWEATER.model_copy(update={"rationale": "r" * 10**6}),
                           reflected=False)  # fmt: skip
    assert store.count("feedback") == 0


def test_a_model_writing_a_huge_guideline_is_retried_and_nothing_huge_is_stored(
    make_judge: Any, responder: Any
) -> None:
    def huge(messages: Any) -> Any:
        if "grading rules of a team of experts" in str(messages[0].content):
            return {"guidelines": [{"text": "When " + "w" * 200_000, "source_ids": ["F1"]}]}
        return responder(messages)

    judge = make_judge(model=ScriptedChatModel(responder=huge))
    report = judge.align([SWEATER], raise_on_failure=False)
    assert report.failed == ["sweater"]
    assert "unusable output 3 time(s)" in " ".join(report.errors)
    assert "at most 1000 characters" in " ".join(report.errors)
    assert judge.guidelines == [] and judge.memory.pending_ids() == ["sweater"]
    store = judge.memory.store
    with pytest.raises(ValueError, match="MAX_GUIDELINE_CHARS"), store.transaction() as conn:
        store.put_guideline(conn, Guideline(id="g-x", text="y" * 200_000, source_ids=()), None, 0)


def test_the_number_of_guidelines_is_capped(
    make_judge: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "MAX_GUIDELINES", 2)
    judge = make_judge()
    items = [
        fb(f"f{i}", f"question {i}", f"answer {i}", bool(i % 2), f"Distinct reason number {i}.")
        for i in range(5)
    ]
    report = judge.align(items)
    assert len(judge.guidelines) == 2
    capped = [r for r in report.guidelines_rejected if "MAX_GUIDELINES" in r.reason]
    assert len(capped) == 3


def _prompt_sizes(model: Any) -> list[int]:
    return [sum(len(str(m.content)) for m in call) for call in model.calls]


def test_a_stored_200k_guideline_does_not_break_later_aligns(make_judge: Any, model: Any) -> None:
    """No reflection prompt shows the whole of a huge stored guideline."""
    judge = make_judge(options={"reflection": {"guideline_token_budget": 100_000}})
    judge.align([HOURS])
    legacy = Guideline(id=new_guideline_id(), text="When " + "z" * 200_000, source_ids=("hours",))
    store = judge.memory.store
    with store.transaction() as conn:  # as an older version could have stored it
        conn.execute(
            "INSERT INTO guidelines(id, text, vector, created_at, position) VALUES(?,?,?,?,?)",
            (legacy.id, legacy.text, None, legacy.created_at.isoformat(), 5),
        )
    judge.memory.refresh_guidelines()
    start = len(model.calls)
    judge.align([SWEATER, RUDE])
    sizes = _prompt_sizes(model)[start:]
    assert sizes and max(sizes) <= limits.prompt_budget_chars()


def test_reflection_prompts_stay_within_the_budget_with_huge_cases(
    make_judge: Any, model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "PROMPT_TOKEN_BUDGET", 1_500)
    judge = make_judge(
        options={
            "retrieval": {"episode_max_chars": 200_000},
            "reflection": {"batch_size": 8, "contrast": 4},
        }
    )
    items = [
        fb(f"big{i}", "q" * 50_000, "a " * 40_000, bool(i % 2), f"Reason {i}: " + "r" * 7_000)
        for i in range(8)
    ]
    judge.align(items[:4])
    judge.align(items[4:])
    sizes = _prompt_sizes(model)
    assert sizes and max(sizes) <= 1_500 * limits.CHARS_PER_TOKEN
    # Every batch item is still shown, by its handle, for the model to cite.
    reflect = [c for c in model.calls if "grading rules" in str(c[0].content)]
    assert all(f'id="F{i}"' in str(reflect[-1][1].content) for i in range(1, 5))
    assert all(f"Reason {i}: " in str(reflect[-1][1].content) for i in range(4, 8))


def test_consolidation_prompts_stay_within_the_budget(
    make_judge: Any, model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "PROMPT_TOKEN_BUDGET", 1_000)
    judge = make_judge(options={"reflection": {"guideline_token_budget": 50}})
    items = [
        # Rationales short enough to be shown whole: a copy of a cut one is rejected.
        fb(f"f{i}", f"question {i}", f"answer {i}", bool(i % 2), f"Rule {i} keeps replies short.")
        for i in range(12)
    ]
    judge.align(items)
    consolidate = [c for c in model.calls if "grown too long" in str(c[0].content)]
    assert consolidate
    assert max(_prompt_sizes(model)) <= 1_000 * limits.CHARS_PER_TOKEN


def test_fit_prompt_never_returns_more_than_the_budget() -> None:
    msgs = [SystemMessage(content="s" * 3_000), HumanMessage(content="h" * 50_000)]
    for budget in (100, 2_000, 10_000, 60_000):
        out = fit_prompt(msgs, budget)
        assert prompt_chars(out) <= budget
    assert fit_prompt(msgs, 10**6) == msgs


def test_judgments_show_the_case_whole(make_judge: Any, model: Any) -> None:
    """The budget is for alignment prompts: a judgment never grades a cut case."""
    judge: MemAlignJudge = make_judge()
    outputs = "word " * 20_000
    judge.invoke({"inputs": "q", "outputs": outputs})
    assert outputs.strip() in str(model.calls[-1][-1].content)
    assert isinstance(judge._run, AlignmentRun)
