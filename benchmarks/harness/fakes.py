"""Offline stand-ins for the chat and embedding servers, to smoke-test the harness (no LLM).

`SchemaFakeChat` answers any structured-output request with a valid instance of the bound
schema, built from the schema alone (so prompt changes in the package do not break it):
enums and booleans are picked by a hash of the prompt, ids are taken from the prompt
(`id="..."`, `[g-...]`), texts from the experts' rationales in the prompt. Unbound calls
get a JSON text. `HashEmbeddings` is a deterministic bag-of-words embedding.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import BaseModel, ConfigDict, PrivateAttr

_WORD = re.compile(r"[a-z0-9']+")


def _h(text: str) -> int:
    return int(hashlib.md5(text.encode()).hexdigest(), 16)


class SchemaFakeChat(BaseChatModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    schema_: dict[str, Any] | None = None
    tool_name: str | None = None
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "schema-fake"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        tool = tools[0]
        if isinstance(tool, type) and issubclass(tool, BaseModel):
            schema, name = tool.model_json_schema(), tool.__name__
        else:
            schema, name = dict(tool), str(tool.get("title", "tool"))
        return self.model_copy(update={"schema_": schema, "tool_name": name})

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        prompt = "\n".join(str(m.content) for m in messages)
        if self.schema_ is not None:
            args = _instance(self.schema_, self.schema_, prompt, "")
            msg = AIMessage(
                content="",
                tool_calls=[
                    {
                        "name": self.tool_name or "tool",
                        "args": args,
                        "id": "c1",
                        "type": "tool_call",
                    }
                ],
            )
        else:
            msg = AIMessage(content=json.dumps({"rationale": "ok", "score": True}))
        n_in = len(prompt) // 4
        msg.usage_metadata = {"input_tokens": n_in, "output_tokens": 20, "total_tokens": n_in + 20}
        return ChatResult(generations=[ChatGeneration(message=msg)])


def _resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        path = node["$ref"].lstrip("#/").split("/")
        target: Any = root
        for part in path:
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _text(prompt: str, name: str) -> str:
    rationales = re.findall(r"(?:Expert rationale|Rationale|rationale): (.+)", prompt)
    if name in ("text", "guideline", "narrowed_text") and rationales:
        r = rationales[_h(prompt) % len(rationales)].strip()
        return f"When a case is like this one, grade by the rule: {r}"[:300]
    return "A short reason."


def _instance(node: dict[str, Any], root: dict[str, Any], prompt: str, name: str) -> Any:
    node = _resolve(node, root)
    for key in ("anyOf", "oneOf", "allOf"):
        if key in node:
            options = [o for o in node[key] if _resolve(o, root).get("type") != "null"]
            return _instance(options[0] if options else node[key][0], root, prompt, name)
    if "const" in node:
        return node["const"]
    if "enum" in node:
        return node["enum"][_h(prompt + name) % len(node["enum"])]
    kind = node.get("type")
    if kind == "object" or "properties" in node:
        props = node.get("properties", {})
        return {k: _instance(v, root, prompt, k) for k, v in props.items()}
    if kind == "array":
        item = node.get("items", {})
        if name.endswith("ids") or name.startswith(("merged", "source")):
            ids = re.findall(r'id="([^"]+)"', prompt) or re.findall(r"\[(g-[0-9a-f]+)\]", prompt)
            if "merged" in name:
                ids = re.findall(r"\[(g-[0-9a-f]+)\]", prompt) or ids
            return ids[:2]
        return [_instance(item, root, prompt, name)]
    if kind == "boolean":
        return bool(_h(prompt) % 2)
    if kind in ("integer", "number"):
        lo, hi = node.get("minimum", 1), node.get("maximum", 5)
        return int(lo + _h(prompt) % (int(hi) - int(lo) + 1))
    if kind == "string":
        return _text(prompt, name)
    return None


class HashEmbeddings(Embeddings):
    """Deterministic bag-of-words embeddings: texts that share words are close."""

    def __init__(self, size: int = 64, model: str = "hash-bow") -> None:
        self.size = size
        self.model = model

    def _vec(self, text: str) -> list[float]:
        v = np.zeros(self.size, dtype=np.float32)
        for w in _WORD.findall(text.lower()):
            h = _h(w)
            v[h % self.size] += 1.0 if (h >> 64) % 2 else -1.0
        if not v.any():
            v[0] = 1.0
        return (v / np.linalg.norm(v)).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vec(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vec(text)
