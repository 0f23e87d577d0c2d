"""`memalign show`: the memory folder, read without any model."""

from __future__ import annotations

import json
import os
from typing import Any

from langchain_memalign.cli.context import Context
from langchain_memalign.cli.io import echo, shorten
from langchain_memalign.cli.judge_file import EXIT_OK, CLIError
from langchain_memalign.errors import (
    MemoryFormatError,
)
from langchain_memalign.memory.backends import open_store
from langchain_memalign.memory.location import describe_location


def memory_summary(
    folder: str | os.PathLike[str], *, history: int | None = 20, feedback: bool = False
) -> dict[str, Any]:
    """Everything `memalign show` prints, read from a memory folder without any model.

    Args:
        folder: The memory folder, or a `postgresql://` URL.
        history: How many of the latest history entries to include (None: all).
        feedback: Include the stored feedback items.
    """
    store = open_store(folder, create=False)
    try:
        guidelines, _ = store.load_guidelines()
        entries = store.history()
        counts = {t: store.count(t) for t in ("feedback", "episodes", "guidelines", "history")}
        out: dict[str, Any] = {
            "folder": describe_location(folder),
            "config": store.get_meta("config"),
            "embeddings": store.get_meta("embeddings"),
            "embedding_model": embedding_model(store.get_meta("embeddings")),
            "counts": counts,
            "pending_reflection": store.pending_reflection(),
            "guidelines": [
                {
                    "id": g.id,
                    "text": g.text,
                    "source_ids": list(g.source_ids),
                    "created_at": g.created_at.isoformat(),
                }
                for g in guidelines
            ],
            "history": entries if history is None else entries[-history:] if history else [],
        }
        if feedback:
            items = store.get_feedback(store.feedback_ids())
            out["feedback"] = [items[i].model_dump(mode="json") for i in store.feedback_ids()]
        return out
    finally:
        store.close()


def cmd_show(ctx: Context) -> int:
    """Show the memory: guidelines with their sources, counts and history. No model needed."""
    args = ctx.args
    if args.curve is not None:
        from langchain_memalign.cli.curve import show_curve

        return show_curve(ctx)
    folder = ctx.memory()
    try:
        info = memory_summary(
            folder, history=None if args.history < 0 else args.history, feedback=args.feedback
        )
    except MemoryFormatError as e:
        raise CLIError(str(e)) from e
    if args.json:
        echo(json.dumps(info, ensure_ascii=False, indent=2, default=str))
        return EXIT_OK
    cfg, counts = info["config"] or {}, info["counts"]
    scale = cfg.get("scale") or {}
    echo(f"Judge {cfg.get('name')!r} in {describe_location(folder)}")
    embeddings = info["embedding_model"]
    echo(f"  scale: {_describe_scale(scale)}; k={cfg.get('k')}; embeddings: {embeddings}")
    pending = info["pending_reflection"]
    echo(
        f"  {counts['feedback']} feedback, {counts['episodes']} episodes, "
        f"{counts['guidelines']} guidelines, {counts['history']} history entries"
        + (f"; {len(pending)} pending reflection ({', '.join(pending)})" if pending else "")
    )
    echo(f"\nGuidelines ({len(info['guidelines'])}):")
    for g in info["guidelines"]:
        echo(f"  [{g['id']}] {g['text']}")
        echo(f"      <- {', '.join(g['source_ids']) or '(no source)'}")
    if not info["guidelines"]:
        echo("  (none yet: align feedback with rationales to learn some)")
    if info["history"]:
        echo(f"\nHistory (latest {len(info['history'])} of {counts['history']}):")
        for h in info["history"]:
            fids = ", ".join(h["feedback_ids"]) or "-"
            gids = ", ".join(h["guideline_ids"]) or "-"
            echo(f"  #{h['seq']} {h['at'][:19]} {h['action']}: feedback {fids}; guidelines {gids}")
    if args.feedback:
        echo(f"\nFeedback ({len(info['feedback'])}):")
        for f in info["feedback"]:
            who = f" by {f['annotator']}" if f.get("annotator") else ""
            echo(f"  {f['id']}: {f['value']!r}{who}  {shorten(f.get('rationale') or '', 100)}")
    return EXIT_OK


def _describe_scale(scale: dict[str, Any]) -> str:
    kind = scale.get("kind", "?")
    if kind == "numeric":
        return f"numeric {scale.get('low')}–{scale.get('high')}"
    if kind in ("categorical", "pairwise"):
        return f"{kind} ({', '.join(scale.get('choices') or [])})"
    return str(kind)


def embedding_model(fingerprint: str | None) -> str | None:
    """The embedding model a memory was built with, from its stored fingerprint.

    The fingerprint lists the class and every model-like attribute
    (`langchain_openai.OpenAIEmbeddings;model=minilm;deployment=...`); the
    model is its `model` (or `model_name`, `model_id`), not a default
    `deployment` the client never sends.
    """
    if not fingerprint:
        return None
    cls, *parts = fingerprint.split(";")
    attrs = dict(p.split("=", 1) for p in parts if "=" in p)
    name = attrs.get("model") or attrs.get("model_name") or attrs.get("model_id")
    return f"{name} ({cls})" if name else cls
