"""Resolving model specs (`"openai:gpt-4.1-mini"`) and identifying embedding models."""

from __future__ import annotations

from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel


def _split(spec: str) -> tuple[str, str]:
    provider, sep, name = spec.partition(":")
    return (provider, name) if sep else ("openai", spec)


def resolve_chat_model(spec: str | BaseChatModel) -> BaseChatModel:
    """A chat model from an instance or an `init_chat_model`-style string."""
    if isinstance(spec, BaseChatModel):
        return spec
    if not isinstance(spec, str) or not spec:
        raise TypeError(f"model must be a BaseChatModel or a 'provider:model' string, got {spec!r}")
    provider, name = _split(spec)
    if provider == "openai":
        from langchain_openai import ChatOpenAI

        return ChatOpenAI(model=name, temperature=0)
    try:
        from langchain.chat_models import init_chat_model  # type: ignore[import-not-found]
    except ImportError as e:
        raise ImportError(
            f"model {spec!r}: install `langchain` to use provider strings other than 'openai:', "
            "or pass a chat model instance"
        ) from e
    model: BaseChatModel = init_chat_model(spec, temperature=0)
    return model


def resolve_embeddings(spec: str | Embeddings) -> Embeddings:
    """Embeddings from an instance or an `init_embeddings`-style string."""
    if isinstance(spec, Embeddings):
        return spec
    if not isinstance(spec, str) or not spec:
        raise TypeError(
            f"embeddings must be an Embeddings or a 'provider:model' string, got {spec!r}"
        )
    provider, name = _split(spec)
    if provider == "openai":
        from langchain_openai import OpenAIEmbeddings

        return OpenAIEmbeddings(model=name)
    try:
        from langchain.embeddings import init_embeddings  # type: ignore[import-not-found]
    except ImportError as e:
        raise ImportError(
            f"embeddings {spec!r}: install `langchain` to use provider strings other than "
            "'openai:', or pass an Embeddings instance"
        ) from e
    embeddings: Embeddings = init_embeddings(spec)
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
    offline server cannot serve and other models do not share.
    """
    from langchain_openai import ChatOpenAI, OpenAIEmbeddings
    from pydantic import SecretStr

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
