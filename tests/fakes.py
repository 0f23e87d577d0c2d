"""Scripted fake models for offline tests.

`ScriptedChatModel` answers with whatever a responder function returns for
the prompt; bound to a structured-output schema it answers with a tool call
named after that schema, as a real tool-calling model does. `HashEmbeddings`
is a deterministic bag-of-words embedding: texts that share words are close,
which is what retrieval tests need.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, Field, PrivateAttr

Responder = Callable[[list[BaseMessage]], Any]


class ScriptedChatModel(BaseChatModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    responder: Responder
    tool_name: str | None = None
    use_tools: bool = True
    calls: list[list[BaseMessage]] = Field(default_factory=list)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        tool = tools[0]
        name = tool.__name__ if isinstance(tool, type) else tool["title"]
        # A shallow copy shares the call log with the original.
        return self.model_copy(update={"tool_name": name if self.use_tools else None})

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        with self._lock:
            self.calls.append(list(messages))
        reply = self.responder(list(messages))
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, AIMessage):
            msg = reply
        elif isinstance(reply, str):
            msg = AIMessage(content=reply)
        elif self.tool_name:
            msg = AIMessage(
                content="",
                tool_calls=[
                    {"name": self.tool_name, "args": reply, "id": "call_1", "type": "tool_call"}
                ],
            )
        else:
            msg = AIMessage(content=json.dumps(reply))
        prompt = sum(len(str(m.content)) for m in messages) // 4
        msg.usage_metadata = {
            "input_tokens": prompt,
            "output_tokens": 10,
            "total_tokens": prompt + 10,
        }
        return ChatResult(generations=[ChatGeneration(message=msg)])


_WORD = re.compile(r"[a-z0-9']+")


class HashEmbeddings(Embeddings):
    """Deterministic bag-of-words embeddings that count their calls."""

    def __init__(self, size: int = 64, model: str = "hash-bow") -> None:
        self.size = size
        self.model = model
        self.calls = 0
        self.texts: list[str] = []
        self._lock = threading.Lock()

    def _vec(self, text: str) -> list[float]:
        v = np.zeros(self.size, dtype=np.float32)
        for w in _WORD.findall(text.lower()):
            h = int(hashlib.md5(w.encode()).hexdigest(), 16)
            v[h % self.size] += 1.0 if (h >> 64) % 2 else -1.0
        if not v.any():
            v[0] = 1.0
        return (v / np.linalg.norm(v)).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        with self._lock:
            self.calls += 1
            self.texts.extend(texts)
        return [self._vec(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


# -- a responder that plays every role ------------------------------------------------------


def _system(messages: list[BaseMessage]) -> str:
    return str(messages[0].content)


def _human(messages: list[BaseMessage]) -> str:
    return "\n".join(str(m.content) for m in messages[1:])


def feedback_ids_in(text: str) -> list[str]:
    """The handles (`F1`, ...) of the feedback blocks a prompt shows, in order."""
    return re.findall(r'<feedback id="([^"]+)">', text)


def handles_of(messages: Sequence[BaseMessage], items: Sequence[Any]) -> list[str]:
    """The handles a prompt gave these feedback items, told by their inputs and outputs.

    A prompt names feedback `F1`, `F2`, ..., never by id: a fake model that cites
    particular items finds their blocks by what they show.
    """
    human = "\n".join(str(m.content) for m in messages[1:])
    blocks = re.findall(r'<feedback id="([^"]+)">(.*?)</feedback>', human, re.DOTALL)
    out = []
    for item in items:
        wanted = (f"Inputs: {item.inputs}", f"Outputs: {item.outputs}")
        out += [h for h, body in blocks if all(w in body for w in wanted)][:1]
    return out


def default_judge_rule(case: str, memory: str) -> dict[str, Any]:
    """Pass unless the memory teaches empathy and the reply shows none."""
    if "acknowledge" in memory.lower() and "sorry" not in case.lower():
        return {"rationale": "It does not acknowledge the customer's feelings.", "score": False}
    return {"rationale": "The reply answers the question.", "score": True}


class RoleResponder:
    """Answers judge, reflection, re-derivation and consolidation prompts plausibly."""

    def __init__(self, judge_rule: Callable[[str, str], Any] = default_judge_rule) -> None:
        self.judge_rule = judge_rule
        self.fail_reflect = False
        self.narrowed_text = ""
        self.fail_next_reflections = 0  # fail this many reflections, then succeed
        self.check_word = ""  # set: rules become checks on this word (`write_check`)
        self.roles: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, messages: list[BaseMessage]) -> Any:
        system, human = _system(messages), _human(messages)
        if "could not be used" in human:  # a retry: answer the same way
            human = _human(messages[:-2])
        role = self._role(system)
        with self._lock:
            self.roles.append(role)
        if role == "judge":
            # The working memory is everything before the case: guidelines in the
            # system message and past cases as earlier turns ("turns" prompt), or a
            # <memory> block in the human message (the other prompts).
            memory, _, case = human.rpartition("<case>")
            return self.judge_rule(case, system + "\n" + memory)
        if role == "reflect":
            if self._reflection_fails():
                return "not json at all"
            out = []
            for block in re.findall(r'<feedback id="([^"]+)">(.*?)</feedback>', human, re.DOTALL):
                fid, body = block
                m = re.search(r"Expert rationale: (.*)", body)
                if m:
                    out.append({"text": f"Rule: {m.group(1).strip()}", "source_ids": [fid]})
            return {"guidelines": out}
        if role == "pair":
            if self._reflection_fails():
                return "not json at all"
            # The rule of a contrast pair: the reason given for the lower score (a fail
            # states what the experts require), else the first reason.
            scored = re.findall(r"Expert score: (.*)\nExpert rationale: (.*)", human)
            failed = [r for score, r in scored if score.strip().lower() in ("false", "0", "1")]
            reasons = failed or [r for _, r in scored]
            return {"rule": f"Rule: {reasons[0].strip()}" if reasons else ""}
        if role == "rederive":
            # The prompt names feedback by handles; the restatement names the cases it
            # was shown by their inputs, so a test can tell which ones.
            shown = re.findall(r"^Inputs: (.*)$", human, re.MULTILINE)
            return {"text": "Rule restated from " + ", ".join(shown) if shown else ""}
        if role == "narrow":
            return {"text": self.narrowed_text}
        if role == "write_checks":
            # Each rule as one question whose answer is yes when the reply lacks the rule's
            # last word (`self.check_words`: rule id -> word), for the rules listed there.
            ids = re.findall(r"^\[(G\d+)\]", human, re.MULTILINE)
            return {
                "checks": [self.write_check(i, human) for i in ids if self.write_check(i, human)]
            }
        if role == "ask_check":
            return self.answer_check(human)
        if role == "consolidate":
            ids = re.findall(r"^\[(G\d+)\]", human, re.MULTILINE)
            return {"guidelines": [{"text": "Consolidated rule.", "merged_from": ids}]}
        raise AssertionError(f"unexpected prompt: {system[:80]}")

    def write_check(self, rule_id: str, human: str) -> dict[str, Any] | None:
        """The check the fake writes for a rule: none unless `check_word` is set.

        With `check_word`, every rule is checked by "Does the reply leave out the word
        '<check_word>'?" (kept: "Does the reply contain ...?").
        """
        if not self.check_word:
            return None
        return {
            "rule_id": rule_id,
            "applies": "",
            "broken": f"Does the reply leave out the word '{self.check_word}'?",
            "kept": f"Does the reply contain the word '{self.check_word}'?",
            "exception": "",
        }

    def answer_check(self, human: str) -> dict[str, Any]:
        """Answers questions about a case literally: "contain"/"leave out" the word 'w'."""
        reply = human.split("Reply:\n", 1)[1].split("\n\nQuestion", 1)[0]
        reply = reply.split("\n\nAnswer each question", 1)[0].lower()
        answers = {}
        for n, q in re.findall(r"(?:^|\n)(?:q(\d+): |Question: )(.*)", human):
            m = re.search(r"'([^']+)'", q)
            has = bool(m) and m.group(1).lower() in reply
            answers[f"q{n}" if n else "answer"] = (not has) if "leave out" in q else has
        return answers

    def _reflection_fails(self) -> bool:
        """Whether this reflection call fails: always, or one of the next few."""
        with self._lock:
            fail_once = self.fail_next_reflections > 0
            self.fail_next_reflections -= fail_once
        return self.fail_reflect or fail_once

    @staticmethod
    def _role(system: str) -> str:
        if system.startswith("You are an expert evaluator"):
            return "judge"
        if system.startswith("You turn the grading rules"):
            return "write_checks"
        if system.startswith("Answer questions about the case"):
            return "ask_check"
        if "grading rules of a team of experts" in system:
            return "pair" if '{"rule"' in system else "reflect"
        if "been withdrawn" in system:
            return "rederive"
        if "grown too long" in system:
            return "consolidate"
        if "Narrow its condition" in system:
            return "narrow"
        return "unknown"
