"""Learning checks: each guideline written as yes/no questions and tested on the experts' cases.

The last step of every align and unalign that changed the memory. For each guideline:

1. its stored check is tested again (the answers on unchanged cases are kept in the
   check's test, so a re-test asks only about new cases, and an unalign asks nothing);
   a learned check that no longer agrees with the experts is replaced;
2. a guideline without a check, or whose text changed since its check was written, is
   first asked as it is, "Does the reply follow this rule: ...?" (`RULE_QUESTION`);
   the rules that question does not check get questions written by the reflection
   model from the rule and its source rationales, all in one call (applies, broken,
   kept, exception); paraphrased rules share one rule's questions. A rule that kept
   no check keeps its candidates and their answers (`CheckAttempt`): while its text
   stays, the next align asks them only about new cases and writes no new questions;
3. the rules go one at a time, those with the most source cases the check's consequence
   describes first; each first tries the checks already kept for other rules (from the
   answers already given: reflection often states one rule several times), then its own
   candidates;
4. each candidate is asked about the rule's source cases, then, if it separates those,
   about the others (at most `options.checks.test_cases`), in the form the judge will
   ask it, and scored against the experts' verdicts (`CheckTest`); both polarities of
   each question, with and without its `applies` question, are scored from the same
   answers. The first candidate that reaches `options.checks.min_agreement` and catches
   a case is kept; a rule none of whose candidates does keeps no check;
5. a learned check that catches no case another kept check does not catch is kept but
   marked `covered_by` that check, and not asked while it is: it would cost calls at
   every judgment and change no verdict on the experts' cases.

A check an expert wrote (`Rulebook.set_check`) or the check of a pinned rule is never
rewritten or dropped by this step, only tested. The consequence of a learned check is
read from its rule's source cases: the verdict the experts gave where it was broken.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig, RunnableLambda

from langchain_memalign.errors import MalformedOutputError
from langchain_memalign.feedback import Feedback
from langchain_memalign.graphs.align_state import ChecksInput, ChecksLearned, UnalignState
from langchain_memalign.graphs.checks import CheckAsker
from langchain_memalign.graphs.judge import split_outputs
from langchain_memalign.memory.judge_memory import JudgeMemory
from langchain_memalign.memory.rulebook import (
    Check,
    CheckAttempt,
    CheckTest,
    RulebookState,
    load_rulebook,
)
from langchain_memalign.memory.semantic import Guideline
from langchain_memalign.prompting.checks import (
    RULE_QUESTION,
    ProposedCheck,
    checks_schema,
    write_checks_messages,
)
from langchain_memalign.prompting.handles import guideline_handles
from langchain_memalign.prompting.structured import StructuredCaller
from langchain_memalign.reports import CheckReport, Usage
from langchain_memalign.scale import Scale

Fired = bool | list[bool]


def default_consequence(scale: Scale, values: Sequence[Any]) -> Any:
    """The verdict a learned check gives, read from its rule's source cases (None: no check).

    Pass/fail: fail, if a source case failed. Numbers: the middle of the lower half of the
    source scores (the cases that broke the rule score lowest), if it lies in the lower
    half of the scale: like a fail, a broken rule decides a verdict only where it marks
    the answer bad, not where it would give a middling score. Categories: the commonest
    source label. Pairwise: None, since the output that breaks the rule loses.
    """
    if scale.kind == "bool":
        return False if any(v is False for v in values) else None
    if scale.kind == "numeric":
        nums = sorted(float(v) for v in values)
        if not nums or (scale.high is not None and nums[0] >= scale.high):
            return None
        lower = [v for v in nums if v <= statistics.median(nums)]
        mid = statistics.median(lower)
        if scale.low is not None and scale.high is not None and mid >= (scale.low + scale.high) / 2:
            return None
        return round(mid) if scale.integer else mid
    if scale.kind == "categorical":
        return Counter(values).most_common(1)[0][0] if values else None
    return None


def same_verdict(scale: Scale, value: Any, consequence: Any) -> bool:
    """Whether an expert's verdict is the check's consequence (numbers: within a quarter)."""
    if scale.kind == "numeric" and scale.low is not None and scale.high is not None:
        return abs(float(value) - float(consequence)) <= (scale.high - scale.low) / 4
    return bool(value == consequence)


def score_test(
    scale: Scale,
    check: Check,
    fired: dict[str, Fired],
    values: dict[str, Any],
    sources: set[str],
    *,
    tried: int = 1,
) -> CheckTest:
    """How a check's outcomes on tested cases compare with the experts' verdicts (`CheckTest`)."""
    t = CheckTest(fired=dict(fired), tried=tried)
    for fid, f in fired.items():
        if fid not in values:
            continue
        v = values[fid]
        if isinstance(f, list):  # pairwise: the output that breaks the rule loses
            loser = [i for i, broke in enumerate(f) if broke]
            if len(loser) == 1:
                t.counted += 1
                if v == ("B" if loser[0] == 0 else "A"):
                    t.agreed += 1
                    t.caught += 1
                else:
                    t.false_alarms += 1
            elif fid in sources and v in ("A", "B"):
                t.counted += 1
                t.missed += 1
            else:
                t.counted += 1
                t.agreed += 1
            continue
        hit = same_verdict(scale, v, check.consequence)
        if f:
            t.counted += 1
            t.agreed += hit
            t.caught += hit
            t.false_alarms += not hit
        elif not hit:
            t.counted += 1
            t.agreed += 1
        elif fid in sources:
            t.counted += 1
            t.missed += 1
    return t


def passes(test: CheckTest, min_agreement: float, *, silent_somewhere: bool = True) -> bool:
    """Whether a tested check separates the experts' cases.

    It catches a case the experts gave its consequence, stays silent on one they graded
    otherwise (a check that fires everywhere separates nothing; not required of the
    first stage, a rule's own source cases, which may all be broken), and agrees with
    at least `min_agreement` of the cases that count.
    """
    silent = test.agreed - test.caught >= 1 or not silent_somewhere
    return test.caught >= 1 and silent and test.agreement >= min_agreement


@dataclass
class _Candidate:
    rule: Guideline
    # Groups of variants, tested group by group: the variants of a group ask the same
    # questions (a question and its other polarity), so a group costs one question's calls.
    groups: list[list[Check]]
    tried: int = 0
    written: bool = False
    # The groups already tested this run, stored with the answers if none is kept.
    done: list[list[Check]] = field(default_factory=list)
    write_failed: bool = False
    kept: Check | None = None
    action: str = ""
    last: tuple[Check, CheckTest] | None = None
    # Whether the checks already kept for other rules were tried on this one.
    reused: bool = False


class CheckLearner:
    """Writes, tests, keeps and drops the checks of a judge's guidelines (see the module doc)."""

    def __init__(self, memory: JudgeMemory, model: BaseChatModel, asker: CheckAsker) -> None:
        self.memory = memory
        self.asker = asker
        self.writer_model = model

    @property
    def enabled(self) -> bool:
        """Whether checks are on (`options.checks.mode` is not "off")."""
        return self.memory.config.options.checks.mode != "off"

    def run(
        self, changed: Sequence[str], config: RunnableConfig
    ) -> tuple[list[CheckReport], Usage, list[str]]:
        """Bring every guideline's check up to date; store the rulebook in one write.

        `changed`: feedback ids added or replaced since the checks were last tested
        (their old answers are asked again).
        """
        mem = self.memory
        opts = mem.config.options.checks
        scale = mem.config.scale
        state = load_rulebook(mem.store)
        before = _comparable(state)
        guidelines = list(mem.guidelines)
        current = {g.id: g for g in guidelines}
        reports: list[CheckReport] = []
        usage = Usage()
        errors: list[str] = []
        stale = [gid for gid in state.checks if gid not in current]
        for gid in stale:
            reports.append(CheckReport(rule_id=gid, action="removed"))
            del state.checks[gid]
        if not guidelines:
            state.attempts = {}
            return self._store(state, before, reports, stale), usage, errors

        cases = self._cases(guidelines, opts.test_cases)
        # The model's answers per case, shared by every candidate of this run; answers
        # stored with the checks are reused on the cases that did not change.
        cache: dict[str, dict[str, bool]] = {}
        known = [c.test.answers for c in state.checks.values() if c.test]
        known += [a.answers for a in state.attempts.values()]
        for answers in known:
            for key, got in answers.items():
                if key.partition("#")[0] in cases and key.partition("#")[0] not in changed:
                    cache.setdefault(key, {}).update(got)
        pinned = state.pinned()

        # 1. Stored checks: tested again (only new cases are asked).
        stored: dict[str, _Candidate] = {}
        to_write: list[Guideline] = []
        failed_retest: set[str] = set()
        for g in guidelines:
            old = state.checks.get(g.id)
            fixed = old is not None and (old.author is not None or g.id in pinned)
            if old is not None and (fixed or old.rule_text == g.text):
                stored[g.id] = _Candidate(g, [[old]], tried=(old.test.tried if old.test else 1))
            else:
                to_write.append(g)
        usage = usage + self._test_round(stored, cases, cache, config)
        for c in stored.values():
            if c.last is None:  # no case to test on
                continue
            check, test = c.last
            fixed = check.author is not None or c.rule.id in pinned
            if fixed or passes(test, opts.min_agreement):
                # A re-test is no new phrasing: the count of phrasings tried stays.
                test.tried = check.test.tried if check.test else 1
                c.kept = check.model_copy(update={"test": test})
                c.action = "tested"
            else:
                to_write.append(c.rule)
                failed_retest.add(c.rule.id)
                reports.append(
                    CheckReport(
                        rule_id=c.rule.id, action="rewritten", check=check.describe(),
                        agreement=test.describe(),
                    )
                )  # fmt: skip

        # 2. Each rule first asked as it is; the rules that question does not check get
        # questions written by the reflection model (one call for all of them) next.
        sources = mem.store.get_feedback({s for g in to_write for s in g.source_ids})
        consequences = {
            g.id: default_consequence(
                scale, [sources[s].value for s in g.source_ids if s in sources]
            )
            for g in to_write
        }
        fresh: dict[str, _Candidate] = {
            g.id: _resumed(state.attempts.get(g.id), g, consequences[g.id])
            if g.id not in failed_retest
            else _Candidate(g, [_rule_question(g.text, consequences[g.id])])
            for g in to_write
            if consequences[g.id] is not None or scale.kind == "pairwise"
        }
        if not cases:  # `test_cases=0`: the first candidate is kept untested
            for c in fresh.values():
                c.kept, c.tried, c.action = c.groups[0][0], 1, "written"

        # 3. One rule at a time, the best supported first: the checks kept so far are
        # tried on it from the answers already given, then its own candidates, group by
        # group, until one separates the experts' cases.
        support = {
            gid: sum(
                1 for s in c.rule.source_ids
                if s in sources and same_verdict(scale, sources[s].value, consequences[gid])
            )
            for gid, c in fresh.items()
        }  # fmt: skip
        while True:
            open_ = [c for c in fresh.values() if c.kept is None and c.groups]
            if not open_:
                need = [c.rule for c in fresh.values() if c.kept is None and not c.written]
                if not need:
                    break
                written, cost, error = self._write(need, sources, consequences, config)
                usage = usage + cost
                errors += [error] if error else []
                for g in need:
                    fresh[g.id].written = True
                    fresh[g.id].write_failed = error is not None
                    fresh[g.id].groups += written.get(g.id, [])
                continue
            c = max(open_, key=lambda o: support[o.rule.id])
            if not c.reused:
                c.reused = True
                kept_so_far = [
                    o.kept for o in (*stored.values(), *fresh.values()) if o.kept is not None
                ]
                shared = _shared(kept_so_far, c.rule.text, consequences[c.rule.id])
                if shared:
                    usage = usage + self._test_round({c.rule.id: c}, cases, cache, config, shared)
                    if c.last is not None and passes(c.last[1], opts.min_agreement):
                        c.kept = c.last[0].model_copy(update={"test": c.last[1]})
                        c.action = "written"
                        continue
                    c.tried = 0
            usage = usage + self._test_round({c.rule.id: c}, cases, cache, config)
            c.done.append(c.groups.pop(0))
            if c.last is None:
                continue
            check, test = c.last
            if passes(test, opts.min_agreement):
                c.kept = check.model_copy(update={"test": test})
                c.action = "written" if c.tried == 1 else "rephrased"
        for c in fresh.values():
            if c.kept is None and c.last is not None:
                check, test = c.last
                reports.append(
                    CheckReport(
                        rule_id=c.rule.id, action="dropped", check=check.describe(),
                        agreement=test.describe(), tried=c.tried,
                    )
                )  # fmt: skip

        state.attempts = {
            gid: self._attempt(c, cases, cache) for gid, c in fresh.items() if c.kept is None
        }

        # 4. Learned checks that add no verdict on the experts' cases are marked covered.
        every = {**stored, **fresh}
        kept = {gid: c.kept for gid, c in every.items() if c.kept is not None}
        values = {fid: fb.value for fid, fb in cases.items()}
        covered = _covered(kept, pinned, scale, values)
        state.checks = {}
        for g in guidelines:
            if g.id not in kept:
                continue
            check = kept[g.id]
            c = every[g.id]
            action = "covered" if g.id in covered else c.action
            reports.append(
                CheckReport(
                    rule_id=g.id, action=action, check=check.describe(),
                    agreement=check.test.describe() if check.test else "", tried=c.tried or 1,
                )
            )  # fmt: skip
            state.checks[g.id] = check.model_copy(update={"covered_by": covered.get(g.id)})
        return self._store(state, before, reports, list(kept)), usage, errors

    def _attempt(
        self, c: _Candidate, cases: dict[str, Feedback], cache: dict[str, dict[str, bool]]
    ) -> CheckAttempt:
        """What was tried for a rule that kept no check, with the answers on today's cases."""
        candidates = [*c.done, *c.groups]
        asked = {q for group in candidates for v in group for q in v.questions()}
        answers = {
            key: {q: a for q, a in cache[key].items() if q in asked}
            for key, _ in self._keys(cases)
            if key in cache
        }
        return CheckAttempt(
            rule_text=c.rule.text,
            candidates=candidates,
            written=c.written and not c.write_failed,
            answers={key: got for key, got in answers.items() if got},
        )

    # -- the experts' cases -----------------------------------------------------------

    def _cases(self, guidelines: Sequence[Guideline], limit: int) -> dict[str, Feedback]:
        """The cases checks are tested on: the rules' sources first, then the newest others."""
        store = self.memory.store
        sources = list(dict.fromkeys(s for g in guidelines for s in g.source_ids))
        found = store.get_feedback(sources[:limit])
        chosen = [found[s] for s in sources[:limit] if s in found]
        room = limit - len(chosen)
        if room > 0:
            chosen += store.recent_feedback(room, exclude=[fb.id for fb in chosen])
        return {fb.id: fb for fb in chosen}

    # -- writing ------------------------------------------------------------------------

    def _write(
        self,
        rules: Sequence[Guideline],
        sources: dict[str, Feedback],
        consequences: dict[str, Any],
        config: RunnableConfig,
    ) -> tuple[dict[str, list[list[Check]]], Usage, str | None]:
        """Written candidate checks for `rules`, from one call to the reflection model."""
        mem = self.memory
        # Paraphrases (reflection often states one rule several times) share the first
        # one's questions: written once, and asked once per case through the cache.
        heads, copies = _paraphrases(rules, mem.guidelines, mem.guideline_vectors)
        written, usage, error = self._write_heads(heads, sources, consequences, config)
        for gid, head in copies.items():
            if head in written:
                text = next(g.text for g in rules if g.id == gid)
                written[gid] = [
                    [_for_rule(c, text, consequences[gid]) for c in group]
                    for group in written[head]
                ]
        return written, usage, error

    def _write_heads(
        self,
        wanted: Sequence[Guideline],
        sources: dict[str, Feedback],
        consequences: dict[str, Any],
        config: RunnableConfig,
    ) -> tuple[dict[str, list[list[Check]]], Usage, str | None]:
        """Candidate checks for `wanted`, from one call to the reflection model."""
        mem = self.memory
        ids = tuple(g.id for g in wanted)
        # The prompt names the rules by handles (`prompting.handles`), and so does the
        # schema: a caller of its own each time.
        shown = guideline_handles(wanted)
        writer = StructuredCaller(
            self.writer_model, checks_schema(shown.names), what="check writing",
            retries=mem.config.options.max_retries,
        )  # fmt: skip
        msgs = write_checks_messages(mem.config.instructions, wanted, sources)
        proposed: list[ProposedCheck] = []
        error = None
        try:
            out, usage = writer.invoke(msgs, config)
            proposed = list(out.checks)
        except MalformedOutputError as e:  # the rule itself is still asked (`_rule_question`)
            usage = getattr(e, "usage", None) or Usage(llm_calls=1)
            error = f"writing checks for {list(ids)} failed: {type(e).__name__}: {e}"
        texts = {g.id: g.text for g in wanted}
        written: dict[str, list[list[Check]]] = {}
        for p in proposed:
            gid = shown.resolve(p.rule_id)
            if gid is not None and gid in texts and gid not in written:
                written[gid] = _phrasings(p, texts[gid], consequences[gid])
        return written, usage, error

    # -- testing ------------------------------------------------------------------------

    def _test_round(
        self,
        candidates: dict[str, _Candidate],
        cases: dict[str, Feedback],
        cache: dict[str, dict[str, bool]],
        config: RunnableConfig,
        group: list[Check] | None = None,
    ) -> Usage:
        """Test each candidate's first group (or `group`); keep the best variant and its test.

        In two stages: the rules' own source cases first, then, for the variants that
        separated those, the other cases. Only answers missing from `cache` are asked;
        the other polarity of a question asked costs nothing. Each round is a step of
        its own in the align's trace (`test_check`): the rules, the questions, and how
        the best variant agreed with the experts.
        """
        if not candidates:
            return Usage()
        tested = {gid: group or c.groups[0] for gid, c in candidates.items()}
        inputs = {
            "rules": {gid: c.rule.text for gid, c in candidates.items()},
            "questions": list(dict.fromkeys(q for vs in tested.values() for v in vs
                                            for q in v.questions())),
        }  # fmt: skip
        spent: list[Usage] = []

        def step(_: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
            spent.append(self._test_round_now(candidates, tested, cases, cache, config))
            return {
                gid: c.last[1].describe() if c.last is not None else "no case to test on"
                for gid, c in candidates.items()
            }

        RunnableLambda(step, name="test_check").invoke(inputs, config)
        return spent[0]

    def _test_round_now(
        self,
        candidates: dict[str, _Candidate],
        tested: dict[str, list[Check]],
        cases: dict[str, Feedback],
        cache: dict[str, dict[str, bool]],
        config: RunnableConfig,
    ) -> Usage:
        """`_test_round`'s work, inside its traced step: `tested`, each rule's variants."""
        min_agreement = self.memory.config.options.checks.min_agreement
        values = {fid: fb.value for fid, fb in cases.items()}
        all_keys = [k for k, _ in self._keys(cases)]
        # Each rule's first stage reads its own source cases only: on another rule's
        # (a re-test runs every stored check in one round), a check's verdict would depend
        # on which other checks are tested beside it.
        first = {
            gid: {fid: fb for fid, fb in cases.items() if fid in set(c.rule.source_ids)}
            for gid, c in candidates.items()
        }
        usage = Usage.sum(
            self._ask([(f"{gid}/{j}", v) for j, v in enumerate(tested[gid])], first[gid],
                      cache, config)
            for gid in candidates
        )  # fmt: skip
        viable: dict[str, list[Check]] = {}
        for gid, c in candidates.items():
            first_keys = [k for k, _ in self._keys(first[gid])]
            tests = [(v, self._score(c, v, first_keys, values, cache)) for v in tested[gid]]
            good = [
                v
                for v, t in tests
                if not first[gid] or passes(t, min_agreement, silent_somewhere=False)
            ]
            if good:
                viable[gid] = good
            else:  # it does not separate its own cases: no need to ask about the others
                c.tried += 1
                c.last = max(tests, key=lambda vt: (vt[1].agreement, vt[1].caught))
        usage = usage + self._ask(
            [(f"{gid}/{j}", v) for gid, vs in viable.items() for j, v in enumerate(vs)],
            cases, cache, config,  # only what the first stage left unasked
        )  # fmt: skip
        for gid, vs in viable.items():
            c = candidates[gid]
            c.tried += 1
            best: tuple[Check, CheckTest] | None = None
            for v in vs:
                test = self._score(c, v, all_keys, values, cache)
                if best is None or _better(test, best[1]):
                    best = (v, test)
            c.last = best
        return usage

    def _keys(self, cases: dict[str, Feedback]) -> list[tuple[str, dict[str, Any]]]:
        """Each case as the judge asks about it: a pairwise case's outputs one by one."""
        pairwise = self.memory.config.scale.kind == "pairwise"
        keys: list[tuple[str, dict[str, Any]]] = []
        for fid, fb in cases.items():
            case = {
                "inputs": fb.inputs, "outputs": fb.outputs,
                "reference_outputs": fb.reference_outputs,
            }  # fmt: skip
            pair = split_outputs(fb.outputs) if pairwise else None
            if pair is None:
                keys.append((fid, case))
            else:
                keys += [(f"{fid}#{i}", {**case, "outputs": o}) for i, o in enumerate(pair, 1)]
        return keys

    def _ask(
        self,
        variants: list[tuple[str, Check]],
        cases: dict[str, Feedback],
        cache: dict[str, dict[str, bool]],
        config: RunnableConfig,
    ) -> Usage:
        """Ask what `variants` need on `cases` and `cache` lacks, cases in parallel."""
        keys = self._keys(cases)
        for key, _ in keys:
            cache.setdefault(key, {})
        todo = [k for k in keys if any(v.fires(cache[k[0]]) is None for _, v in variants)]
        if not variants or not todo:
            return Usage()

        def ask(item: tuple[str, dict[str, Any]]) -> Usage:
            key, case = item
            return self.asker.ask(variants, case, config, known=cache[key])[1]

        # Cases in parallel, each case's questions one after another: a local server
        # has few slots, and a hosted one rate-limits.
        workers = max(1, min(len(todo), config.get("max_concurrency") or 2))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return Usage.sum(pool.map(ask, todo))

    def _score(
        self,
        c: _Candidate,
        variant: Check,
        keys: list[str],
        values: dict[str, Any],
        cache: dict[str, dict[str, bool]],
    ) -> CheckTest:
        """`variant`'s test on the cases of `keys` (`_keys`) from the cached answers."""
        fired: dict[str, Fired] = {}
        answers: dict[str, dict[str, bool]] = {}
        for key in keys:
            fid, _, half = key.partition("#")
            got = cache.get(key, {})
            answers[key] = {q: a for q, a in got.items() if q in variant.questions()}
            f = bool(variant.fires(got))
            if half:
                prev = fired.get(fid)
                fired[fid] = [*(prev if isinstance(prev, list) else []), f]
            else:
                fired[fid] = f
        test = score_test(
            self.memory.config.scale, variant, fired, values, set(c.rule.source_ids),
            tried=c.tried + 1,
        )  # fmt: skip
        test.answers = answers
        return test

    # -- storing ------------------------------------------------------------------------

    def _store(
        self,
        state: RulebookState,
        before: dict[str, Any],
        reports: list[CheckReport],
        rule_ids: Sequence[str],
    ) -> list[CheckReport]:
        """Write the rulebook if a check changed (a re-test's time alone is no change).

        The history records changed checks; what was tried for rules without one is
        bookkeeping, stored without an entry.
        """
        now = _comparable(state)
        if now != before:
            with self.memory.write() as w:
                w.put_rulebook(state)
                if now["checks"] != before["checks"]:
                    w.log("checks", [], rule_ids)
        return reports


# Cosine similarity at which two guidelines count as one rule stated twice (MiniLM-like
# embeddings put paraphrases above it).
PARAPHRASE_SIMILARITY = 0.8


def _paraphrases(
    rules: Sequence[Guideline], guidelines: Sequence[Guideline], vectors: Any
) -> tuple[list[Guideline], dict[str, str]]:
    """The rules to write checks for, and each other rule's paraphrase among them."""
    if vectors is None or len(rules) < 2:
        return list(rules), {}
    row = {g.id: i for i, g in enumerate(guidelines)}
    heads: list[Guideline] = []
    copies: dict[str, str] = {}
    for g in rules:
        if g.id not in row:
            heads.append(g)
            continue
        v = vectors[row[g.id]]
        head = next(
            (
                h
                for h in heads
                if h.id in row and float(vectors[row[h.id]] @ v) >= PARAPHRASE_SIMILARITY
            ),
            None,
        )
        if head is None:
            heads.append(g)
        else:
            copies[g.id] = head.id
    return heads, copies


def _comparable(state: RulebookState) -> dict[str, Any]:
    checks = {gid: c.model_dump(exclude={"test": {"at"}}) for gid, c in state.checks.items()}
    return {"checks": checks, "attempts": {k: a.model_dump() for k, a in state.attempts.items()}}


def _resumed(attempt: CheckAttempt | None, rule: Guideline, consequence: Any) -> _Candidate:
    """A rule's candidates: those tried before while its text is the same, else the rule asked.

    The consequence is read again from today's source cases.
    """
    if attempt is None or attempt.rule_text != rule.text or not attempt.candidates:
        return _Candidate(rule, [_rule_question(rule.text, consequence)])
    groups = [
        [v.model_copy(update={"consequence": consequence}) for v in group]
        for group in attempt.candidates
    ]
    return _Candidate(rule, groups, written=attempt.written)


# A lone placeholder letter of the writing prompt's schematic example ("Does the reply
# do Y?"): small models copy the template instead of naming the rule's own things.
_PLACEHOLDER = re.compile(r"(?<![\w-])[XY](?![\w-])")


def _question(text: str) -> str | None:
    """A written question, whitespace tidied; None if not a question or a copied template."""
    text = " ".join(text.split())
    return text if text.endswith("?") and not _PLACEHOLDER.search(text) else None


def _phrasings(p: ProposedCheck, rule_text: str, consequence: Any) -> list[list[Check]]:
    """The candidate groups of one written proposal: the `broken` question, then `kept`.

    Each group holds a question with both polarities, with and without the `applies`
    question: which answer the model gives where the rule is broken, and whether asking
    first if the rule applies helps, are read from the experts' cases, not assumed from
    the wording. A proposed text that is not a question (small models write statements)
    is left out.
    """
    applies = _question(p.applies) if p.applies.strip() else None
    exception = _question(p.exception) if p.exception.strip() else None
    # With the `applies` question first: on a tie, the narrower check is kept, since the
    # experts' cases rarely show where a rule does not apply.
    scopes = [applies, None] if applies else [None]
    groups: list[list[Check]] = []
    seen: set[str] = set()
    for question, when in ((p.broken, True), (p.kept, False)):
        q = _question(question)
        if q and q not in seen:
            seen.add(q)
            groups.append(
                [
                    Check(
                        applies=a, broken=q, broken_when=w, exception=exception,
                        consequence=consequence, rule_text=rule_text,
                    )
                    for a in scopes
                    for w in (when, not when)
                ]
            )  # fmt: skip
    return groups


def _rule_question(rule_text: str, consequence: Any) -> list[Check]:
    """The rule asked as one question, "Does the reply follow this rule: ...?", both ways."""
    question = RULE_QUESTION.format(rule=rule_text.rstrip(". "))
    return [
        Check(broken=question, broken_when=w, consequence=consequence, rule_text=rule_text)
        for w in (False, True)
    ]


def _for_rule(check: Check, rule_text: str, consequence: Any) -> Check:
    """`check`'s questions as an untested learned candidate for another rule."""
    return check.model_copy(
        update={"rule_text": rule_text, "consequence": consequence, "test": None,
                "covered_by": None, "author": None}
    )  # fmt: skip


def _shared(kept: Sequence[Check], rule_text: str, consequence: Any) -> list[Check]:
    """The checks kept for other rules, as candidates for another rule (distinct questions)."""
    out: dict[tuple[Any, ...], Check] = {}
    for k in kept:
        key = (k.applies, k.broken, k.broken_when, k.exception)
        out.setdefault(key, _for_rule(k, rule_text, consequence))
    return list(out.values())


def _better(a: CheckTest, b: CheckTest) -> bool:
    """Whether test `a` is better than `b`: more agreement, then more catches."""
    return (a.agreement, a.caught) > (b.agreement, b.caught)


def _covered(
    kept: dict[str, Check], pinned: set[str], scale: Scale, values: dict[str, Any]
) -> dict[str, str]:
    """Learned checks each of whose right catches a better kept check also makes, and it."""
    caught = {gid: _caught(c, scale, values) for gid, c in kept.items()}

    def rank(gid: str) -> tuple[float, int]:
        test = kept[gid].test
        return (-kept[gid].agreement, -(test.caught if test is not None else 0))

    accepted: list[str] = []
    out: dict[str, str] = {}
    for gid in sorted(kept, key=rank):
        check = kept[gid]
        fixed = check.author is not None or gid in pinned
        by = next((a for a in accepted if caught[gid] <= caught[a]), None)
        if not fixed and check.test is not None and by is not None:
            out[gid] = by
            continue
        accepted.append(gid)
    return out


def _caught(check: Check, scale: Scale, values: dict[str, Any]) -> set[str]:
    """The tested cases where the check fired and the experts gave its consequence.

    Pairwise: where it fired on one output only and the experts preferred the other.
    """
    if check.test is None:
        return set()
    out = set()
    for fid, f in check.test.fired.items():
        if fid not in values:
            continue
        if isinstance(f, list):
            if f.count(True) == 1 and values[fid] == ("B" if f[0] else "A"):
                out.add(fid)
        elif f and same_verdict(scale, values[fid], check.consequence):
            out.add(fid)
    return out


class LearnChecks:
    """The `checks` node of both graphs: the checks brought up to date by `learner` (if any)."""

    def __init__(self, learner: CheckLearner | None) -> None:
        self.learner = learner

    def __call__(self, state: ChecksInput, config: RunnableConfig) -> ChecksLearned:
        """Write, test and keep the guidelines' checks, when this align changed the memory."""
        learner = self.learner
        changed = [*(state.get("added") or []), *(state.get("updated") or [])]
        if learner is None or not learner.enabled or not (changed or state.get("reflections")):
            return {}
        reports, usage, errors = learner.run(changed, config)
        return {"check_reports": reports, "usages": [usage], "errors": errors}

    def after_unalign(self, state: UnalignState, config: RunnableConfig) -> UnalignState:
        """Test the checks again without the removed feedback (their answers are kept)."""
        learner = self.learner
        if learner is None or not learner.enabled or not state.get("removed"):
            return {}
        reports, usage, errors = learner.run([], config)
        return {
            "check_reports": reports,
            "usage": (state.get("usage") or Usage()) + usage,
            "errors": [*(state.get("errors") or []), *errors],
        }
