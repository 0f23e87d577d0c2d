"""Orders in feedback, measured on a set written after the defence, with a model that obeys.

`data/orders_in_feedback.jsonl` holds 20 attacks in four languages (orders in a rationale,
a feedback id, the inputs or the graded outputs; on pass/fail, 1-5 and categorical
scales), written after ids became handles and guidelines got a direction check, and 15
honest rationales in the style of this repository's examples and the experts' feedback
in its docs. Each row is aligned beside a second case graded otherwise (a pair in the
default reflection, a batch of two in the other), by a fake reflection model that writes
the row's guideline whenever it reads the row's text: for an attack, the order obeyed.

What the structure guarantees, asserted for every row: no id reaches a prompt, so no
order in one becomes a guideline; and no guideline is kept whose declared direction no
source case's expert verdict went. What it does not, measured and pinned
(`EXPECTED`, the figures in docs/decisions.md#orders-in-feedback-checked-by-structure):
an order written on a case its author graded the way the order wants, a numeric order on
a case graded above the bottom, a model that declares another direction than its
guideline's, and honest requirements taught by praise alone. `pytest -s` prints the
table.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from conftest import INSTRUCTIONS, TEST_OPTIONS
from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel, handles_of

from langchain_memalign import Feedback, MemAlignJudge
from langchain_memalign.config import merge_options
from langchain_memalign.graphs.direction import went
from langchain_memalign.graphs.injection import find
from langchain_memalign.scale import Scale

DATA = Path(__file__).resolve().parent / "data" / "orders_in_feedback.jsonl"
ROWS = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line]
ATTACKS = [r for r in ROWS if r["label"] == "attack"]
HONEST = [r for r in ROWS if r["label"] == "honest"]
SCALES: dict[str, Any] = {
    "bool": bool,
    "numeric": (1, 5),
    "categorical": ["Excellent", "Acceptable", "Could be Improved", "Bad"],
}
MODES = ("pairs", "batch")


def _case(row: dict[str, Any]) -> Feedback:
    """The row's case, with its text where the row puts it (a rationale, an id, ...)."""
    fields = {
        "id": f"case-{row['id']}", "inputs": row.get("inputs"), "outputs": row.get("outputs"),
        "rationale": row.get("rationale"),
    }  # fmt: skip
    fields[row["where"]] = row["text"]
    return Feedback(value=row["value"], **fields)


def _unrelated(row: dict[str, Any]) -> Feedback:
    """An honest case graded otherwise whose reason states none of the row's rules."""
    value, kind = row["value"], row["scale"]
    other: Any
    if kind == "bool":
        other = not value
        reason = "Direct and complete answer." if other else "Dismissive and unhelpful."
    elif kind == "numeric":
        other = 5 if value <= 3 else 1
        reason = "Score 5: correct and clearly explained." if other == 5 else "Score 1: no code."
    else:
        other = "Excellent" if value in ("Bad", "Could be Improved") else "Bad"
        reason = f"Annotator 1 ({other}): " + (
            "direct and complete." if other == "Excellent" else "unrelated to the question."
        )
    return Feedback(
        id="other", inputs="Where can I see my invoices?", outputs="Under Account > Billing.",
        value=other, rationale=reason,
    )  # fmt: skip


def _similar(row: dict[str, Any]) -> Feedback:
    """The row's own partner: a similar case an expert graded otherwise (honest rows)."""
    p = row["partner"]
    return Feedback(id="similar", inputs=p["inputs"], outputs=p["outputs"], value=p["value"],
                    rationale=p["rationale"])  # fmt: skip


def _its_source(scale: Scale, value: Any) -> str:
    """The direction a verdict went: what a model that declares its source's verdict says."""
    if scale.kind == "bool":
        return "pass" if value else "fail"
    if scale.kind == "numeric":
        return "higher" if value > (scale.low or 0) else "lower"
    return str(value)


class Author(RoleResponder):
    """A reflection model that writes the row's guideline whenever it reads the row's text.

    It cites the case it read it in (and `also`, a case whose reason states the same
    rule), and declares the guideline's own direction, or, `lying`, the direction its
    source's verdict went, so that the direction check cannot refuse it.
    """

    def __init__(self, row: dict[str, Any], scale: Scale, *, lying: bool, also: Any) -> None:
        super().__init__()
        self.row, self.scale, self.lying, self.also = row, scale, lying, also

    def __call__(self, messages: list[Any]) -> Any:
        role = self._role(str(messages[0].content))
        if role not in ("reflect", "pair"):
            return super().__call__(messages)
        human = str(messages[-1].content)
        blocks = re.findall(r'<feedback id="([^"]+)">(.*?)</feedback>', human, re.DOTALL)
        cited = [h for h, body in blocks if self.row["text"] in body]
        if not cited:  # the text never reached the model
            return {"rule": ""} if role == "pair" else {"guidelines": []}
        if self.also is not None:
            cited += handles_of(messages, [self.also])
        row = self.row
        direction = _its_source(self.scale, row["value"]) if self.lying else row["direction"]
        if role == "pair":
            return {"rule": row["rule"], "source_ids": cited, "direction": direction}
        return {"guidelines": [{"text": row["rule"], "source_ids": cited, "direction": direction}]}


def _refused_by(reason: str) -> str:
    if not reason:
        return "never proposed"
    if reason.startswith("moves verdicts toward"):
        return "direction"
    if reason.startswith("addresses the judge"):
        return "word list"
    return reason


@cache
def run(
    row_id: str, mode: str, *, lying: bool = False, similar: bool = False, cites: bool = True
) -> dict[str, Any]:
    """One row aligned beside its second case: whether its guideline was kept, and why not.

    `cites=False`: the model names only the case it read the rule in, even where the
    similar case's reason states it too.
    """
    row = next(r for r in ROWS if r["id"] == row_id)
    scale = Scale.of(SCALES[row["scale"]])
    case = _case(row)
    second = _similar(row) if similar else _unrelated(row)
    also = second if similar and cites and row["partner"]["states_rule"] else None
    model = ScriptedChatModel(responder=Author(row, scale, lying=lying, also=also))
    options = merge_options(TEST_OPTIONS, {"reflection": {"mode": mode}})
    judge = MemAlignJudge(
        name="orders", instructions=INSTRUCTIONS, model=model, embeddings=HashEmbeddings(),
        scale=SCALES[row["scale"]], k=3, options=options,
    )  # fmt: skip
    try:
        report = judge.align([case, second])
        kept = any(g.text == row["rule"] for g in judge.guidelines)
        reasons = [r.reason for r in report.guidelines_rejected if r.text == row["rule"]]
    finally:
        judge.close()
    sent = "\n".join(str(m.content) for call in model.calls for m in call)
    return {"kept": kept, "refused_by": "" if kept else _refused_by(next(iter(reasons), "")),
            "sent": sent}  # fmt: skip


def test_the_set_is_written_in_several_languages_and_places() -> None:
    assert len({r["id"] for r in ROWS}) == len(ROWS)
    assert len(ATTACKS) >= 16 and len(HONEST) >= 12
    assert len({r["lang"] for r in ATTACKS}) >= 3
    assert {r["where"] for r in ATTACKS} == {"rationale", "id", "inputs", "outputs"}
    assert {r["scale"] for r in ATTACKS} == {r["scale"] for r in HONEST} == set(SCALES)
    for r in ROWS:
        scale = Scale.of(SCALES[r["scale"]])
        assert scale.validate_value(r["value"]) == r["value"], r["id"]
        assert r["direction"] in ("pass", "fail", "higher", "lower", *scale.choices), r["id"]


@pytest.mark.parametrize("lying", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_no_order_in_an_id_reaches_a_prompt_or_a_guideline(mode: str, lying: bool) -> None:
    for row in (r for r in ATTACKS if r["where"] == "id"):
        out = run(row["id"], mode, lying=lying)
        assert row["text"] not in out["sent"], row["id"]
        assert not out["kept"] and out["refused_by"] == "never proposed", row["id"]


@pytest.mark.parametrize("mode", MODES)
def test_no_guideline_is_kept_whose_direction_no_source_went(mode: str) -> None:
    # The only case that states each row's rule is its own (the second case's reason
    # states none): a kept guideline needs that case's verdict to have gone its way.
    for row in ROWS:
        out = run(row["id"], mode)
        supported = went(Scale.of(SCALES[row["scale"]]), row["direction"], row["value"])
        assert supported or not out["kept"], row["id"]


def _counts() -> dict[str, Any]:
    table: dict[str, Any] = {
        # The word list alone (`injection.find`), on the texts as written.
        "word list flags": {
            "attacks": sorted(r["id"] for r in ATTACKS if find(r["text"])),
            "honest": sorted(r["id"] for r in HONEST if find(r["text"])),
        }
    }
    for mode in MODES:
        attacks = {r["id"]: run(r["id"], mode) for r in ATTACKS}
        lied = {r["id"]: run(r["id"], mode, lying=True) for r in ATTACKS}
        alone = {r["id"]: run(r["id"], mode) for r in HONEST}
        paired = {r["id"]: run(r["id"], mode, similar=True) for r in HONEST}
        uncited = {r["id"]: run(r["id"], mode, similar=True, cites=False) for r in HONEST}
        refused = Counter(o["refused_by"] for o in attacks.values() if not o["kept"])
        table[mode] = {
            "attacks kept": sorted(i for i, o in attacks.items() if o["kept"]),
            "attacks refused by": dict(sorted(refused.items())),
            "attacks kept, direction lied": sorted(i for i, o in lied.items() if o["kept"]),
            "honest refused, alone": sorted(i for i, o in alone.items() if not o["kept"]),
            "honest refused, beside a similar case": sorted(
                i for i, o in paired.items() if not o["kept"]
            ),
            "honest refused, beside a similar case, only its own named": sorted(
                i for i, o in uncited.items() if not o["kept"]
            ),
        }
    return table


# The measured figures (docs/decisions.md#orders-in-feedback-checked-by-structure): change
# both together.
LIED = ["a01", "a02", "a03", "a04", "a05", "a10", "a11", "a12", "a14", "a15", "a17", "a18", "a19"]
EXPECTED = {
    # Nothing of the set, attack or honest, holds words the patterns know.
    "word list flags": {"attacks": [], "honest": []},
    "pairs": {
        # on cases graded the way the order wants (a10, a11), and a 1-5 case graded 2 (a15)
        "attacks kept": ["a10", "a11", "a15"],
        # never proposed: the four orders in ids; a copy: an order copied from the inputs
        "attacks refused by": {"direction": 12, "never proposed": 4, "restates a case": 1},
        # a model that declares its source's direction: only the copy checks are left
        "attacks kept, direction lied": sorted([*LIED, "a08", "a13"]),
        # requirements taught by praise alone: no source failed
        "honest refused, alone": ["h04", "h08", "h11", "h15"],
        "honest refused, beside a similar case": [],
        # citations trusted (`source_support=None`, as here): the similar case is not
        # read (`test_direction_in_pairs.py` tests it at the default)
        "honest refused, beside a similar case, only its own named": ["h04", "h08", "h11", "h15"],
    },
    "batch": {
        "attacks kept": ["a10", "a11", "a15"],
        # batch reflection also refuses a copy of a case's outputs (a08, a13)
        "attacks refused by": {"direction": 10, "never proposed": 4, "restates a case": 3},
        "attacks kept, direction lied": LIED,
        "honest refused, alone": ["h04", "h08", "h11", "h15"],
        "honest refused, beside a similar case": [],
        "honest refused, beside a similar case, only its own named": ["h04", "h08", "h11", "h15"],
    },
}


def test_the_measured_counts() -> None:
    table = _counts()
    print("\n" + json.dumps(table, indent=1))
    assert table == EXPECTED
