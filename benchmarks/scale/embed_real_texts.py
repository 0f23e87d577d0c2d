"""Embed real texts from /work/shared/data with the local MiniLM server, once, and cache them.

The HNSW recall benchmark (`bench_hnsw_recall.py`) needs real embeddings; the
server embeds about 3-90 texts a second depending on load and length, so the
vectors are cached in `results/real_minilm.npz` (git-ignored), with the texts.
Resumable: a partial cache is extended, not redone.

    .venv/bin/python benchmarks/scale/run.py embed-real-texts --n 6000
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
from _common import RESULTS, loadavg

from langchain_memalign._text import render, truncate

CACHE = RESULTS / "real_minilm.npz"


def corpus(max_chars: int, seed: int) -> list[str]:
    """Unique rendered inputs and outputs of every shared data set, shuffled (deterministic)."""
    texts: dict[str, None] = {}
    for f in sorted(glob.glob("/work/shared/data/*.jsonl")):
        for line in Path(f).read_text(encoding="utf-8").splitlines():
            d = json.loads(line)
            for part in (d.get("inputs"), d.get("outputs")):
                t = truncate(" ".join(render(part).split()), max_chars)
                if len(t) > 20:
                    texts[t] = None
    out = sorted(texts, key=lambda t: hashlib.sha256(f"{seed}:{t}".encode()).hexdigest())
    return out


def embed(url: str, model: str, texts: list[str]) -> list[list[float]]:
    body = json.dumps({"model": model, "input": texts}).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        data = json.loads(r.read())["data"]
    return [d["embedding"] for d in sorted(data, key=lambda d: d["index"])]


def embed_safe(url: str, model: str, texts: list[str]) -> list[list[float]]:
    """Embed; a text over the server's 256-token context is cut shorter and retried."""
    try:
        return embed(url, model, texts)
    except urllib.error.HTTPError as e:
        if e.code != 400:
            raise
    out = []
    for t in texts:
        while True:
            try:
                out.extend(embed(url, model, [t]))
                break
            except urllib.error.HTTPError as e:
                if e.code != 400 or len(t) < 50:
                    raise
                t = t[: int(len(t) * 0.8)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=6000)
    ap.add_argument("--max-chars", type=int, default=500)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--url", default="http://127.0.0.1:8012/v1/embeddings")
    ap.add_argument("--model", default="minilm")
    args = ap.parse_args()
    texts = corpus(args.max_chars, args.seed)[: args.n]
    done: list[str] = []
    vecs: list[np.ndarray] = []
    if CACHE.is_file():
        z = np.load(CACHE, allow_pickle=False)
        done, vecs = list(z["texts"]), list(z["vectors"])
        if done != texts[: len(done)]:
            print("cache holds other texts; starting over")
            done, vecs = [], []
    print(f"{len(texts)} texts, {len(done)} cached; load average {loadavg()}")
    started = time.perf_counter()
    i = first = len(done)
    while i < len(texts):
        batch = texts[i : i + args.batch]
        vecs.extend(np.asarray(embed_safe(args.url, args.model, batch), dtype=np.float32))
        done.extend(batch)
        i += len(batch)
        if i % (args.batch * 8) == 0 or i >= len(texts):
            tmp = Path(str(CACHE) + ".partial.npz")
            np.savez(tmp, texts=np.array(done), vectors=np.stack(vecs))
            tmp.replace(CACHE)
            rate = (i - first) / max(1e-9, time.perf_counter() - started)
            print(
                f"  {i}/{len(texts)} embedded ({time.perf_counter() - started:.0f} s, "
                f"~{rate:.1f} texts/s, load {loadavg()})",
                flush=True,
            )
    print(f"done: {CACHE}")
