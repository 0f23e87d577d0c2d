"""Rules as checks: written by reflection, tested on the experts' cases, run at judgment."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import fb
from fakes import RoleResponder

from langchain_memalign import AlignFailedError, MemAlignJudge
from langchain_memalign.errors import InvalidRuleError
from langchain_memalign.graphs.learn_checks import default_consequence, passes, score_test
from langchain_memalign.memory.rulebook import Check, load_rulebook
from langchain_memalign.scale import Scale

# The team's rule: a reply to an upset customer says "sorry". The fake judge passes every
# reply (`judge_rule`), so only a check can fail one.
TRAIN = [
    fb("a", "Refund please, I'm upset", "Refunds take 5 days.", False, "Say sorry first."),
    fb("b", "My order is late and I'm angry", "It ships soon.", False, "No apology at all."),
    fb("c", "I'm upset, the app crashed", "So sorry! Reinstall it.", True, "Apologises, good."),
    fb("d", "I'm angry, you charged me twice", "Sorry about that, refunded.", True, "Good."),
]
NEW_COLD = {"inputs": "I'm upset, my parcel is lost", "outputs": "Parcels arrive in 10 days."}
NEW_WARM = {"inputs": "I'm upset, my parcel is lost", "outputs": "Sorry! We resend it today."}


# The unit tests' judges have checks off (conftest.TEST_OPTIONS); these turn them on.
ON = {"mode": "separate"}


def passes_all(case: str, memory: str) -> dict[str, Any]:
    return {"rationale": "Looks helpful.", "score": True}


@pytest.fixture
def responder() -> RoleResponder:
    r = RoleResponder(passes_all)
    r.check_word = "sorry"
    return r


def roles(responder: RoleResponder, role: str) -> int:
    return sum(r == role for r in responder.roles)


# -- the check's logic ---------------------------------------------------------------------


def test_fires_needs_applies_broken_and_no_exception() -> None:
    c = Check(applies="A?", broken="B?", broken_when=False, exception="E?", rule_text="r")
    assert c.fires({"A?": False}) is False  # does not apply: the rest is not needed
    assert c.fires({"A?": True}) is None  # still open
    assert c.next_question({"A?": True}) == "B?"
    assert c.fires({"A?": True, "B?": True}) is False  # kept (broken when "no")
    assert c.fires({"A?": True, "B?": False}) is None  # broken, unless the exception
    assert c.fires({"A?": True, "B?": False, "E?": True}) is False
    assert c.fires({"A?": True, "B?": False, "E?": False}) is True


def test_a_check_that_fires_everywhere_separates_nothing() -> None:
    scale = Scale.of(bool)
    check = Check(broken="B?", consequence=False, rule_text="r")
    one = score_test(scale, check, {"f": True}, {"f": False}, {"f"})
    assert one.agreement == 1.0 and not passes(one, 0.75)  # caught, but silent nowhere
    two = score_test(scale, check, {"f": True, "p": False}, {"f": False, "p": True}, {"f"})
    assert passes(two, 0.75)


def test_score_test_counts_false_alarms_misses_and_leaves_other_failures_out() -> None:
    scale = Scale.of(bool)
    check = Check(broken="B?", consequence=False, rule_text="r")
    values = {"src_fail": False, "src_fail2": False, "pass": True, "other_fail": False}
    fired = {"src_fail": True, "src_fail2": False, "pass": True, "other_fail": False}
    t = score_test(scale, check, fired, values, {"src_fail", "src_fail2"})
    # caught src_fail; missed src_fail2 (a source); false alarm on pass; other_fail not counted
    assert (t.caught, t.missed, t.false_alarms, t.counted, t.agreed) == (1, 1, 1, 3, 1)


def test_consequence_is_read_from_the_source_cases() -> None:
    assert default_consequence(Scale.of(bool), [True, False]) is False
    assert default_consequence(Scale.of(bool), [True, True]) is None
    assert default_consequence(Scale.of((1, 5)), [5, 1, 2, 4]) == 2
    assert default_consequence(Scale.of((1, 5)), [5, 5]) is None
    # A middling score is no verdict a broken rule decides: 3 on 1-5 gives no check.
    assert default_consequence(Scale.of((1, 5)), [3, 4]) is None
    assert default_consequence(Scale.of((0, 10)), [2, 8]) == 2
    assert default_consequence(Scale.of(["good", "bad"]), ["bad", "bad", "good"]) == "bad"
    assert default_consequence(Scale.of("pairwise"), ["A"]) is None


# -- learning and judging ------------------------------------------------------------------


def test_align_learns_a_check_that_agrees_with_the_experts_and_judging_applies_it(
    make_judge: Any, responder: RoleResponder
) -> None:
    judge = make_judge(options={"checks": ON})
    report = judge.align(TRAIN)
    kept = [c for c in report.checks if c.action in ("written", "rephrased")]
    assert kept and all("4 of 4" in c.agreement for c in kept)
    rules = [r for r in judge.rules.list() if r.check is not None]
    assert rules and rules[0].check.test.agreement == 1.0
    assert rules[0].check.consequence is False

    cold = judge.invoke(NEW_COLD)
    assert cold["score"] is False
    assert cold["metadata"]["check_fired"] == rules[0].id
    assert "Breaks the rule" in cold["comment"] and "sorry" in cold["comment"]
    warm = judge.invoke(NEW_WARM)
    assert warm["score"] is True and "check_fired" not in warm["metadata"]
    assert warm["metadata"]["checks"][0]["fired"] is False


def test_a_fired_check_skips_the_holistic_judgment(
    make_judge: Any, responder: RoleResponder
) -> None:
    judge = make_judge(options={"checks": ON})
    judge.align(TRAIN)
    before = roles(responder, "judge")
    judge.invoke(NEW_COLD)
    assert roles(responder, "judge") == before
    judge.invoke(NEW_WARM)
    assert roles(responder, "judge") == before + 1


@pytest.mark.parametrize("settle", [True, False])
def test_a_silent_check_settles_its_rule_for_the_holistic_judgment(
    make_judge: Any, responder: RoleResponder, settle: bool
) -> None:
    seen: list[str] = []

    def records(case: str, memory: str) -> dict[str, Any]:
        seen.append(memory)
        return passes_all(case, memory)

    responder.judge_rule = records
    judge = make_judge(options={"checks": {**ON, "settle": settle}})
    judge.align(TRAIN)
    rule = next(r for r in judge.rules.list() if r.check is not None and not r.check.covered_by)
    out = judge.invoke(NEW_WARM)
    assert out["metadata"]["checks"][0]["fired"] is False
    caught = {fid for fid, f in rule.check.test.fired.items() if f}
    assert caught == {"a", "b"}
    memory = seen[-1]
    if settle:
        # Neither the rule's text nor the cases its check caught; the others stay.
        assert out["metadata"]["settled"] == sorted(
            r.id for r in judge.rules.list() if r.check is not None
        )
        assert rule.text not in memory
        assert "Refunds take 5 days." not in memory and "It ships soon." not in memory
        assert "So sorry! Reinstall it." in memory
        assert set(out["metadata"]["episode_ids"]) >= caught  # retrieved all the same
    else:
        assert "settled" not in out["metadata"]
        assert rule.text in memory and "Refunds take 5 days." in memory


def test_a_rule_tries_the_checks_already_kept_before_its_own(
    make_judge: Any, responder: RoleResponder
) -> None:
    judge = make_judge(options={"checks": ON})
    judge.align(TRAIN[:2] + TRAIN[2:3])
    first = {r.id for r in judge.rules.list() if r.check is not None}
    assert first
    asked = roles(responder, "ask_check")
    written = roles(responder, "write_checks")
    # A paraphrase of the rule, taught by a new case: the kept check already separates
    # its cases, so it is shared (and covered) without a question of its own.
    report = judge.align(
        [
            fb(
                "e",
                "I'm angry, refund?",
                "Refunds take 5 days.",
                False,
                "Apologise to an angry customer before anything else.",
            )
        ]
    )
    new = [c for c in report.checks if c.rule_id not in first]
    assert [(c.action, c.tried) for c in new] == [("covered", 1)]
    assert roles(responder, "write_checks") == written
    # Only the new case was asked about, for the kept check's questions.
    assert roles(responder, "ask_check") - asked <= 2


def test_a_rules_check_is_judged_on_its_own_source_cases_whatever_else_is_tested(
    make_judge: Any,
) -> None:
    # An align tests every stored check again in one round. A check's first stage must
    # read its own rule's source cases only: on another rule's, a check kept when it was
    # learned alone could fail its re-test with no case changed, and be rewritten.
    from langchain_memalign.graphs.learn_checks import _Candidate
    from langchain_memalign.memory.semantic import Guideline

    judge = make_judge(options={"checks": ON})
    learner = judge._align_nodes.check_learner
    cases = {
        f.id: f
        for f in [
            fb("a", "q", "r", False), fb("b", "q", "r", False), fb("c", "q", "r", True),
            fb("d", "q", "r", True), fb("e", "q", "r", True), fb("f", "q", "r", True),
        ]
    }  # fmt: skip
    # A's check fires on a (caught) and on d (a false alarm on a case of rule B):
    # 4 of 5 over every case, 2 of 2 on A's own sources.
    fires_a = {"a": True, "b": False, "c": False, "d": True, "e": False, "f": False}
    cache = {fid: {"QA?": fires_a[fid], "QB?": fid == "b"} for fid in cases}

    def candidates(*rules: str) -> dict[str, Any]:
        sources = {"A": ("a", "c"), "B": ("b", "d")}
        return {
            r: _Candidate(
                Guideline(id=r, text=f"rule {r}", source_ids=sources[r]),
                [[Check(broken=f"Q{r}?", consequence=False, rule_text=f"rule {r}")]],
            )
            for r in rules
        }

    alone, together = candidates("A"), candidates("A", "B")
    learner._test_round(alone, cases, {k: dict(v) for k, v in cache.items()}, {})
    learner._test_round(together, cases, {k: dict(v) for k, v in cache.items()}, {})
    assert alone["A"].last is not None and together["A"].last is not None
    assert alone["A"].last[1].describe() == together["A"].last[1].describe()
    assert passes(together["A"].last[1], 0.75)
    assert (together["A"].last[1].agreed, together["A"].last[1].counted) == (4, 5)


def test_written_questions_that_copy_the_template_are_left_out() -> None:
    from langchain_memalign.graphs.learn_checks import _question

    assert _question("Does the reply do Y?") is None
    assert _question("Is X the case in the user message?") is None
    assert _question("Does the reply mention X-rays?") == "Does the reply mention X-rays?"
    assert _question("The reply says sorry.") is None


def test_the_polarity_that_agrees_with_the_experts_is_kept(
    make_judge: Any, responder: RoleResponder
) -> None:
    # A model that reads "leave out" as "contain": the literal polarity never agrees.
    answer = responder.answer_check

    def misreads(human: str) -> dict[str, Any]:
        return {k: not v for k, v in answer(human).items()}

    responder.answer_check = misreads  # type: ignore[method-assign]
    judge = make_judge(options={"checks": ON})
    judge.align(TRAIN)
    check = next(r.check for r in judge.rules.list() if r.check is not None)
    assert check.broken_when is False and check.test.agreement == 1.0
    assert judge.invoke(NEW_COLD)["score"] is False


def test_a_check_that_does_not_separate_the_cases_is_dropped(
    make_judge: Any, responder: RoleResponder
) -> None:
    responder.check_word = "refund"  # has nothing to do with the experts' verdicts
    judge = make_judge(options={"checks": ON})
    report = judge.align(TRAIN)
    assert {c.action for c in report.checks} <= {"dropped", "none"}
    assert any(c.action == "dropped" for c in report.checks)
    assert all(r.check is None for r in judge.rules.list())
    asked = roles(responder, "ask_check")
    assert judge.invoke(NEW_COLD)["score"] is True
    assert roles(responder, "ask_check") == asked  # no check left to ask


def test_a_rule_that_kept_no_check_is_not_tried_again_from_the_start(
    make_judge: Any, responder: RoleResponder
) -> None:
    # Without its tried candidates and their answers kept, every later align would write
    # and ask everything again for each such rule, at a cost growing with its cases.
    responder.check_word = "refund"  # separates nothing: every rule keeps no check
    judge = make_judge(options={"checks": ON})
    judge.align(TRAIN)
    assert all(r.check is None for r in judge.rules.list())
    written, asked = roles(responder, "write_checks"), roles(responder, "ask_check")
    assert written == 1 and asked > 0
    about: list[str] = []
    answer = responder.answer_check

    def recording(human: str) -> dict[str, Any]:
        about.append(human.split("Reply:\n", 1)[1].split("\n\n", 1)[0])
        return answer(human)

    responder.answer_check = recording  # type: ignore[method-assign]
    report = judge.align([fb("e", "Where is my parcel?", "It ships today.", True)])
    assert roles(responder, "write_checks") == written
    assert set(about) <= {"It ships today."}  # only the new case is asked about
    assert any(c.action == "dropped" for c in report.checks)  # still reported, re-tested
    # What was kept of the tried candidates goes with the feedback it was asked about.
    assert any("a" in t.answers for t in load_rulebook(judge.memory.store).attempts.values())
    judge.unalign(["a"])
    assert all("a" not in t.answers for t in load_rulebook(judge.memory.store).attempts.values())


def test_a_rule_whose_check_writing_failed_gets_questions_at_the_next_align(
    make_judge: Any, responder: RoleResponder
) -> None:
    responder.check_word = "sorry"
    judge = make_judge(options={"checks": ON})
    real = responder.write_check
    # Unusable output (no question): the writing call fails after its retries.
    responder.write_check = lambda rule_id, human: {"rule_id": rule_id}  # type: ignore[method-assign]
    report = judge.align(TRAIN)  # the rule asked as it is does not separate the cases
    assert any(c.action == "dropped" for c in report.checks)
    assert all(r.check is None for r in judge.rules.list())
    written = roles(responder, "write_checks")
    responder.write_check = real  # type: ignore[method-assign]
    judge.align([fb("e", "Where is my parcel?", "It ships today.", True)])
    assert roles(responder, "write_checks") > written
    assert any(r.check is not None for r in judge.rules.list())


def test_grading_before_learning_runs_the_checks_as_judging_does(
    make_judge: Any, responder: RoleResponder
) -> None:
    # The prequential verdict (`align(score_first=True)`) is the judge's verdict: a check
    # that fires decides it, as it decides `invoke`; the holistic fake passes everything.
    judge = make_judge(options={"checks": ON})
    judge.align(TRAIN)
    cold = fb("cold", NEW_COLD["inputs"], NEW_COLD["outputs"], False, "Cold again.")
    warm = fb("warm", NEW_WARM["inputs"], NEW_WARM["outputs"], True, "Warm.")
    calls = len(responder.roles)
    report = judge.align([cold, warm], score_first=True)
    # Every call of the align, the checks' questions among them, is counted in its cost.
    assert report.usage.llm_calls == len(responder.roles) - calls
    points = {p.feedback_id: p.judge for p in judge.agreement_history().points}
    assert points == {"cold": False, "warm": True}


def test_checks_off_writes_and_asks_nothing(make_judge: Any, responder: RoleResponder) -> None:
    judge = make_judge(options={"checks": {"mode": "off"}})
    report = judge.align(TRAIN)
    assert report.checks == []
    judge.invoke(NEW_COLD)
    assert roles(responder, "write_checks") == roles(responder, "ask_check") == 0


def test_joint_mode_asks_every_question_of_a_case_in_one_call(
    make_judge: Any, responder: RoleResponder
) -> None:
    judge = make_judge(options={"checks": {"mode": "joint"}})
    judge.align(TRAIN)
    assert any(r.check is not None for r in judge.rules.list())
    asked = roles(responder, "ask_check")
    assert judge.invoke(NEW_COLD)["score"] is False
    assert roles(responder, "ask_check") == asked + 1


def test_unalign_retests_without_asking_and_drops_checks_of_removed_rules(
    make_judge: Any, responder: RoleResponder
) -> None:
    judge = make_judge(options={"checks": ON})
    judge.align(TRAIN)
    asked = roles(responder, "ask_check")
    report = judge.unalign(["d"])
    assert roles(responder, "ask_check") == asked  # answers on the other cases are kept
    for r in judge.rules.list():
        if r.check is not None:
            assert "d" not in r.check.test.fired and "d" not in r.check.test.answers
    judge.unalign(["a", "b", "c"])
    assert all(r.check is None for r in judge.rules.list())
    assert report.checks  # the re-test is reported


def test_new_feedback_is_asked_about_only_once(make_judge: Any, responder: RoleResponder) -> None:
    judge = make_judge(options={"checks": ON})
    judge.align(TRAIN[:3])
    asked = roles(responder, "ask_check")
    judge.align([TRAIN[3]])
    per_case = roles(responder, "ask_check") - asked
    # The new case, asked for the stored checks and the new rule's candidates; the
    # three stored cases only for the new rule's candidates.
    assert 0 < per_case < 4 * len(judge.guidelines) * 2


def test_an_expert_check_is_tested_but_never_rewritten(
    make_judge: Any, responder: RoleResponder
) -> None:
    judge = make_judge(options={"checks": ON})
    rule = judge.rules.add("Say sorry to upset customers.", author="dana")
    judge.rules.set_check(
        rule.id, broken="Does the reply contain the word 'refund'?", consequence=False,
        author="dana",
    )  # fmt: skip
    judge.align(TRAIN)
    check = judge.rules.get(rule.id).check
    assert check is not None and check.author == "dana"
    assert check.broken == "Does the reply contain the word 'refund'?"
    # Tested all the same: on every case, though it agrees on few of them.
    assert check.test is not None and set(check.test.fired) == {"a", "b", "c", "d"}
    assert judge.rules.history()[-1].action == "check"


def test_set_check_refuses_what_it_cannot_store(make_judge: Any) -> None:
    judge = make_judge(options={"checks": ON})
    rule = judge.rules.add("Say sorry.", author="dana")
    with pytest.raises(InvalidRuleError, match="consequence"):
        judge.rules.set_check(rule.id, broken="Q?", author="dana")
    with pytest.raises(InvalidRuleError, match="scale"):
        judge.rules.set_check(rule.id, broken="Q?", consequence="maybe", author="dana")
    with pytest.raises(InvalidRuleError, match="empty"):
        judge.rules.set_check(rule.id, broken=" ", consequence=False, author="dana")
    assert judge.rules.get(rule.id).check is None
    judge.rules.set_check(rule.id, broken="Q?", consequence=False, author="dana")
    judge.rules.remove_check(rule.id, author="dana")
    assert judge.rules.get(rule.id).check is None


def test_a_failed_check_test_rolls_the_whole_align_back(
    make_judge: Any, responder: RoleResponder
) -> None:
    judge = make_judge(options={"checks": ON})

    def down(human: str) -> Any:
        raise ConnectionError("provider down")

    responder.answer_check = down  # type: ignore[method-assign]
    with pytest.raises(AlignFailedError):
        judge.align(TRAIN)
    assert judge.guidelines == [] and judge.feedback_ids == []


def test_checks_survive_save_and_load(
    make_judge: Any, responder: RoleResponder, tmp_path: Any, model: Any, embeddings: Any
) -> None:
    judge = make_judge(path=tmp_path / "m", options={"checks": ON})
    judge.align(TRAIN)
    checks = {r.id: r.check for r in judge.rules.list() if r.check}
    judge.close()
    again = MemAlignJudge.load(tmp_path / "m", model, embeddings)
    assert {r.id: r.check for r in again.rules.list() if r.check} == checks
    assert again.invoke(NEW_COLD)["score"] is False
    again.close()


def test_pairwise_the_output_that_breaks_the_rule_loses(
    make_judge: Any, responder: RoleResponder
) -> None:
    responder.judge_rule = lambda case, memory: {"rationale": "Equal.", "score": "tie"}
    judge = make_judge(
        scale="pairwise", options={"_ablation": {"pairwise_mode": "one_order"}, "checks": ON}
    )
    pairs = [
        fb("p1", "I'm upset, refund?", ["Refund in 5 days.", "Sorry! Refund in 5 days."], "B",
           "The second apologises."),
        fb("p2", "I'm angry, late order", ["Sorry, it ships today.", "Ships today."], "A",
           "Only the first says sorry."),
        fb("p3", "I'm upset, wrong size", ["Sorry, swap it.", "Sorry! We swap it."], "tie",
           "Both apologise."),
    ]  # fmt: skip
    judge.align(pairs)
    assert any(r.check is not None for r in judge.rules.list())
    out = judge.invoke({"inputs": "I'm upset", "outputs": ["Resent.", "Sorry, resent."]})
    assert out["value"] == "B" and out["metadata"]["check_fired"]
    both = judge.invoke({"inputs": "I'm upset", "outputs": ["Sorry.", "Sorry!"]})
    assert both["value"] == "tie" and "check_fired" not in both["metadata"]


def test_numeric_scale_gives_the_source_cases_score(
    make_judge: Any, responder: RoleResponder
) -> None:
    responder.judge_rule = lambda case, memory: {"rationale": "Fine.", "score": 5}
    judge = make_judge(scale=(1, 5), options={"calibration": {"enabled": False}, "checks": ON})
    judge.align([fb(f.id, f.inputs, f.outputs, 1 if f.value is False else 5, f.rationale)
                 for f in TRAIN])  # fmt: skip
    assert judge.invoke(NEW_COLD)["score"] == 1
    assert judge.invoke(NEW_WARM)["score"] == 5


def test_each_candidate_test_is_a_step_of_the_align_trace(
    make_judge: Any, responder: RoleResponder, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_core.tracers.langchain import LangChainTracer
    from langsmith import Client
    from langsmith_server import LangSmithTestServer

    monkeypatch.setenv("LANGSMITH_DISABLE_RUN_COMPRESSION", "true")
    judge = make_judge(options={"checks": ON})
    with LangSmithTestServer() as server:
        client = Client(api_url=server.url, api_key="test")
        tracer = LangChainTracer(client=client, project_name="aligning")
        report = judge.align(TRAIN, config={"callbacks": [tracer]})
        tracer.wait_for_futures()
        client.flush()
        client.close(timeout=5)
        runs = list(server.runs.values())
    by_id = {r["id"]: r for r in runs}
    steps = [r for r in runs if r["name"] == "test_check"]
    assert steps and all(by_id[s["parent_run_id"]]["name"] == "checks" for s in steps)
    kept = next(c for c in report.checks if c.action in ("written", "rephrased"))
    # Each step shows the rules and questions it tested, and how they agreed.
    assert any(
        kept.rule_id in s["inputs"]["rules"] and s["outputs"].get(kept.rule_id) == kept.agreement
        for s in steps
    )
    assert all(s["inputs"]["questions"] for s in steps)
    # The questions asked are model calls inside the steps.
    assert any(r["run_type"] == "llm" and _has_ancestor(r, "test_check", by_id) for r in runs)


def _has_ancestor(run: dict[str, Any], name: str, by_id: dict[str, Any]) -> bool:
    parent = by_id.get(run.get("parent_run_id"))
    while parent is not None:
        if parent["name"] == name:
            return True
        parent = by_id.get(parent.get("parent_run_id"))
    return False
