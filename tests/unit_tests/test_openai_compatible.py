"""The json_schema route against a real ChatOpenAI over HTTP (as on llama.cpp)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai_server import OpenAICompatibleServer

from langchain_memalign import Feedback, MalformedOutputError, MemAlignJudge
from langchain_memalign.models import openai_compatible


def test_judge_and_align_over_an_openai_compatible_server() -> None:
    def reply(body: dict[str, Any]) -> str:
        name = body["response_format"]["json_schema"]["name"]
        if name == "Rule":
            return json.dumps({"rule": "Acknowledge feelings first."})
        return json.dumps({"rationale": "Cold.", "score": False})

    with OpenAICompatibleServer(reply) as server:
        model, embeddings = openai_compatible(
            "local", "minilm", base_url=server.url, api_key="local"
        )
        judge = MemAlignJudge(
            name="helpfulness",
            instructions="{inputs} -> {outputs}",
            model=model,
            embeddings=embeddings,
            options={
                "validation": {"mode": "off"},  # this test counts the reflection call's tokens
                "checks": {"mode": "off"},  # (and no check's)
                # the fake server's vectors do not measure support
                "reflection": {"source_support": None},
            },
        )
        report = judge.align(
            [
                Feedback(
                    id="t1",
                    inputs="I'm upset",
                    outputs="Refunds in 5 days.",
                    value=False,
                    rationale="Too cold.",
                )
            ]
        )
        result = judge.invoke({"inputs": "I'm angry", "outputs": "Refunds in 5 days."})
    assert result["score"] is False and result["comment"] == "Cold."
    assert [g.text for g in judge.guidelines] == ["Acknowledge feelings first."]
    assert report.usage.input_tokens == 20 and report.usage.output_tokens == 5
    chats = [r["body"] for r in server.requests if r["path"].endswith("/chat/completions")]
    for body in chats:
        assert body["response_format"]["type"] == "json_schema"
        assert "tools" not in body and "tool_choice" not in body  # llama.cpp ignores these
    verdict_schema = chats[-1]["response_format"]["json_schema"]["schema"]
    assert list(verdict_schema["properties"]) == ["rationale", "score"]
    assert verdict_schema["properties"]["rationale"]["maxLength"] > 0
    embeds = [r["body"] for r in server.requests if r["path"].endswith("/embeddings")]
    assert all(isinstance(b["input"][0], str) for b in embeds)  # text, not token ids


def test_garbage_from_server_is_retried_then_raised() -> None:
    with OpenAICompatibleServer(lambda body: "I cannot answer that.") as server:
        model, embeddings = openai_compatible(
            "local", "minilm", base_url=server.url, api_key="local"
        )
        judge = MemAlignJudge(
            name="h",
            instructions="{inputs}",
            model=model,
            embeddings=embeddings,
            options={"max_retries": 1},
        )
        with pytest.raises(MalformedOutputError, match="judge 'h'.*I cannot answer that"):
            judge.invoke({"inputs": "x"})
    assert len(server.requests) == 2


def test_model_strings_resolve_through_langchain(monkeypatch: pytest.MonkeyPatch) -> None:
    from langchain_openai import ChatOpenAI, OpenAIEmbeddings

    from langchain_memalign.models import resolve_chat_model, resolve_embeddings

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # clients are built, never called
    for spec in ("openai:gpt-4.1-mini", "gpt-4.1-mini"):
        chat = resolve_chat_model(spec)
        assert isinstance(chat, ChatOpenAI) and chat.model_name == "gpt-4.1-mini"
        assert chat.temperature == 0
    for spec in ("openai:text-embedding-3-small", "text-embedding-3-small"):
        emb = resolve_embeddings(spec)
        assert isinstance(emb, OpenAIEmbeddings) and emb.model == "text-embedding-3-small"
    with pytest.raises(ValueError, match="nosuchprovider"):
        resolve_chat_model("nosuchprovider:model")


def test_a_server_without_an_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # OPENAI_BASE_URL set, no key: local servers take any key, the client needs one.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    def reply(body: dict[str, Any]) -> str:
        return json.dumps({"rationale": "Fine.", "score": True})

    with OpenAICompatibleServer(reply) as server:
        model, embeddings = openai_compatible("local", "minilm", base_url=server.url)
        judge = MemAlignJudge("h", "{inputs} -> {outputs}", model, embeddings)
        assert judge.invoke({"inputs": "q", "outputs": "a"})["score"] is True
    assert model.openai_api_key is not None  # a placeholder was sent
