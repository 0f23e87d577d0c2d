"""Resolving model specs (`"openai:gpt-4.1-mini"`) and identifying embedding models."""

from __future__ import annotations

import os
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel

# Public: building models; the rest resolves specs and fingerprints for the judge.
__all__ = ["openai_compatible", "resolve_chat_model", "resolve_embeddings"]


def _with_provider(spec: str) -> str:
    # A bare model name is an OpenAI model, as it always was here; init_embeddings
    # needs the provider spelled out.
    return spec if ":" in spec else f"openai:{spec}"


def resolve_chat_model(spec: str | BaseChatModel) -> BaseChatModel:
    """A chat model from an instance or a `"provider:model"` string (`init_chat_model`).

    A bare name (`"gpt-4.1-mini"`) is an OpenAI model. Judges grade at temperature 0.
    """
    if isinstance(spec, BaseChatModel):
        return spec
    if not isinstance(spec, str) or not spec:
        raise TypeError(f"model must be a BaseChatModel or a 'provider:model' string, got {spec!r}")
    from langchain.chat_models import init_chat_model

    model = init_chat_model(_with_provider(spec), temperature=0)
    if not isinstance(model, BaseChatModel):  # only a spec without a model is configurable
        raise TypeError(f"model {spec!r} did not resolve to a chat model")
    return model


def resolve_embeddings(spec: str | Embeddings) -> Embeddings:
    """Embeddings from an instance or a `"provider:model"` string (`init_embeddings`).

    A bare name (`"text-embedding-3-small"`) is an OpenAI model.
    """
    if isinstance(spec, Embeddings):
        return spec
    if not isinstance(spec, str) or not spec:
        raise TypeError(
            f"embeddings must be an Embeddings or a 'provider:model' string, got {spec!r}"
        )
    from langchain.embeddings import init_embeddings

    embeddings: Embeddings = init_embeddings(_with_provider(spec))
    return embeddings


_MODEL_ATTRS = ("model", "model_name", "model_id", "deployment", "size", "dimensions")


def embeddings_fingerprint(embeddings: Embeddings) -> str:
    """Identify an embedding model without calling it.

    Stored with a memory, so that opening it with another model is refused
    instead of silently comparing vectors from two different spaces.
    """
    cls = type(embeddings)
    parts = [f"{cls.__module__.split('.')[0]}.{cls.__qualname__}"]
    for attr in _MODEL_ATTRS:
        value: Any = getattr(embeddings, attr, None)
        if isinstance(value, str | int) and not isinstance(value, bool):
            parts.append(f"{attr}={value}")
    return ";".join(parts)


def openai_compatible(
    chat_model: str,
    embedding_model: str,
    *,
    base_url: str | None = None,
    embeddings_base_url: str | None = None,
    api_key: str | None = None,
    temperature: float = 0.0,
) -> tuple[BaseChatModel, Embeddings]:
    """A chat model and embeddings on OpenAI or any OpenAI-compatible server.

    With a `base_url` (llama.cpp, vLLM, a proxy), embeddings are sent as
    plain text: counting tokens would need a tokenizer download, which an
    offline server cannot serve and other models do not share. A server with
    no key given (here or in `OPENAI_API_KEY`) gets a placeholder key: local
    servers accept any, and the OpenAI client refuses to start without one.
    """
    from langchain_openai import ChatOpenAI, OpenAIEmbeddings
    from pydantic import SecretStr

    if api_key is None and (base_url or embeddings_base_url):
        api_key = os.environ.get("OPENAI_API_KEY") or "not-needed"
    key = SecretStr(api_key) if api_key else None
    chat = ChatOpenAI(model=chat_model, base_url=base_url, api_key=key, temperature=temperature)
    emb_url = embeddings_base_url or base_url
    embeddings = OpenAIEmbeddings(
        model=embedding_model,
        openai_api_base=emb_url,
        openai_api_key=key,
        check_embedding_ctx_length=emb_url is None,
    )
    return chat, embeddings
