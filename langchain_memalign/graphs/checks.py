"""Asking checks about a case, and the verdict a broken rule gives.

A `Check` (`memory.rulebook`) is a rule as literal yes/no questions. `CheckAsker` asks
them about one case with the judge's model, as `options.checks.mode` says: each question
in its own short call, a check's next question only while its outcome is open
(`"separate"`), or every question in one structured call (`"joint"`). A question asked
by two checks is asked once per case. `check_comment` says in the result why a check
decided the verdict.

The same asker runs when a check is tested on the experts' cases
(`graphs.learn_checks`) and when the judge grades a case, so a check is kept for how it
is answered in the form the judge will ask it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.rate_limiters import BaseRateLimiter
from langchain_core.runnables import RunnableConfig
from pydantic import BaseModel

from langchain_memalign.config import ChecksOptions
from langchain_memalign.errors import MalformedOutputError
from langchain_memalign.memory.rulebook import Check
from langchain_memalign.prompting.checks import (
    Answer,
    answers_schema,
    question_messages,
    questions_messages,
)
from langchain_memalign.prompting.prompts import format_value
from langchain_memalign.prompting.structured import StructuredCaller
from langchain_memalign.reports import Usage


@dataclass
class CheckOutcome:
    """One check asked about one case (or one output of a pair)."""

    rule_id: str
    fired: bool
    answers: dict[str, bool] = field(default_factory=dict)
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The outcome as a judgment's `metadata["checks"]` lists it."""
        out: dict[str, Any] = {"rule_id": self.rule_id, "fired": self.fired}
        out["answers"] = dict(self.answers)
        if self.error:
            out["error"] = self.error
        return out


class CheckAsker:
    """Asks checks' questions about cases with one chat model (see the module doc)."""

    def __init__(
        self,
        model: BaseChatModel,
        options: ChecksOptions,
        *,
        retries: int = 2,
        rate_limiter: BaseRateLimiter | None = None,
    ) -> None:
        self.model = model
        self.options = options
        self.retries = retries
        self.rate_limiter = rate_limiter
        self._one = self._caller(Answer)
        # Joint calls: one schema (q1..qn) per number of questions, built once.
        self._joint: dict[int, StructuredCaller[Any]] = {}

    def _caller(self, schema: type[BaseModel]) -> StructuredCaller[Any]:
        return StructuredCaller(
            self.model, schema, what="check question", retries=self.retries,
            rate_limiter=self.rate_limiter, budgeted=False,
        )  # fmt: skip

    def _joint_caller(self, n: int) -> StructuredCaller[Any]:
        if n not in self._joint:
            self._joint[n] = self._caller(answers_schema(n))
        return self._joint[n]

    # -- one case ----------------------------------------------------------------------

    def ask(
        self,
        checks: Sequence[tuple[str, Check]],
        case: dict[str, Any],
        config: RunnableConfig,
        known: dict[str, bool] | None = None,
    ) -> tuple[list[CheckOutcome], Usage]:
        """Ask `(rule_id, check)` pairs about one case; their outcomes, in order, and cost.

        `known`: answers already given about this case (not asked again); the new
        answers are added to it.
        """
        answers: dict[str, bool] = {} if known is None else known
        usage = Usage()
        errors: dict[str, str] = {}
        for questions in self._rounds(checks, answers, errors):
            got, cost, failed = self._answer(questions, case, config)
            answers.update(got)
            errors.update(failed)
            usage = usage + cost
        return self._outcomes(checks, answers, errors), usage

    async def aask(
        self,
        checks: Sequence[tuple[str, Check]],
        case: dict[str, Any],
        config: RunnableConfig,
    ) -> tuple[list[CheckOutcome], Usage]:
        """Async twin of `ask`: a round's questions are asked concurrently."""
        answers: dict[str, bool] = {}
        usage = Usage()
        errors: dict[str, str] = {}
        for questions in self._rounds(checks, answers, errors):
            got, cost, failed = await self._aanswer(questions, case, config)
            answers.update(got)
            errors.update(failed)
            usage = usage + cost
        return self._outcomes(checks, answers, errors), usage

    def _rounds(
        self,
        checks: Sequence[tuple[str, Check]],
        answers: dict[str, bool],
        errors: dict[str, str],
    ) -> Any:
        """The questions to ask, round by round, until every check's outcome is known."""
        if self.options.mode == "joint":
            questions = list(
                dict.fromkeys(q for _, c in checks for q in c.questions() if q not in answers)
            )
            if questions:
                yield questions
            return
        while True:
            pending = [
                q
                for _, c in checks
                if (q := c.next_question(answers)) is not None and q not in errors
            ]
            if not pending:
                return
            yield list(dict.fromkeys(pending))

    def _answer(
        self, questions: list[str], case: dict[str, Any], config: RunnableConfig
    ) -> tuple[dict[str, bool], Usage, dict[str, str]]:
        if self.options.mode == "joint":
            return self._answer_jointly(questions, case, config)
        # One after another: a judgment's concurrency is its batch's, not its questions'.
        return _merged([self._answer_one(q, case, config) for q in questions])

    async def _aanswer(
        self, questions: list[str], case: dict[str, Any], config: RunnableConfig
    ) -> tuple[dict[str, bool], Usage, dict[str, str]]:
        if self.options.mode == "joint":
            return await asyncio.to_thread(self._answer_jointly, questions, case, config)
        parts = await asyncio.gather(
            *(asyncio.to_thread(self._answer_one, q, case, config) for q in questions)
        )
        return _merged(list(parts))

    def _answer_one(
        self, question: str, case: dict[str, Any], config: RunnableConfig
    ) -> tuple[dict[str, bool], Usage, dict[str, str]]:
        msgs = question_messages(case, question, self.options.case_max_chars)
        try:
            out, usage = self._one.invoke(msgs, config)
        except MalformedOutputError as e:
            # An unusable answer leaves the check undecided, never the judgment failed.
            return {}, getattr(e, "usage", None) or Usage(llm_calls=1), {question: str(e)}
        return {question: bool(out.answer)}, usage, {}

    def _answer_jointly(
        self, questions: list[str], case: dict[str, Any], config: RunnableConfig
    ) -> tuple[dict[str, bool], Usage, dict[str, str]]:
        msgs = questions_messages(case, questions, self.options.case_max_chars)
        try:
            out, usage = self._joint_caller(len(questions)).invoke(msgs, config)
        except MalformedOutputError as e:
            usage = getattr(e, "usage", None) or Usage(llm_calls=1)
            return {}, usage, dict.fromkeys(questions, str(e))
        got = {q: bool(getattr(out, f"q{i}")) for i, q in enumerate(questions, 1)}
        return got, usage, {}

    @staticmethod
    def _outcomes(
        checks: Sequence[tuple[str, Check]], answers: dict[str, bool], errors: dict[str, str]
    ) -> list[CheckOutcome]:
        out = []
        for rule_id, check in checks:
            fired = check.fires(answers)
            asked = {q: answers[q] for q in check.questions() if q in answers}
            error = next((errors[q] for q in check.questions() if q in errors), None)
            out.append(CheckOutcome(rule_id, bool(fired), asked, error if fired is None else None))
        return out


def _merged(
    parts: list[tuple[dict[str, bool], Usage, dict[str, str]]],
) -> tuple[dict[str, bool], Usage, dict[str, str]]:
    answers: dict[str, bool] = {}
    errors: dict[str, str] = {}
    for got, _, failed in parts:
        answers.update(got)
        errors.update(failed)
    return answers, Usage.sum(u for _, u, _ in parts), errors


def check_comment(rule_text: str, check: Check, answers: dict[str, bool], *, who: str = "") -> str:
    """Why a check decided a verdict: the rule, each question with its answer, its record."""
    asked = "; ".join(f"{q} {'yes' if a else 'no'}" for q, a in answers.items())
    record = f" Its check {check.test.describe()}." if check.test and check.test.counted else ""
    verdict = (
        f" Verdict: {format_value(check.consequence)}." if check.consequence is not None else ""
    )
    return f"{who}Breaks the rule: {rule_text} ({asked}).{verdict}{record}".strip()
