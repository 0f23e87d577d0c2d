"""HNSW against the exact index: recall@k on real embeddings, tombstones, rebuild, and 1M.

Part 1, real embeddings: the texts of /work/shared/data embedded by the local
MiniLM server (384-d), cached by `embed_real_texts.py` in `results/real_minilm.npz`.
The last `--queries` texts are held out as queries; the rest are the memory. For
each query, the top k of `EpisodicIndex` built as HNSW (the package's parameters:
M=32, efConstruction=80, efSearch=96, and an efSearch sweep) are compared with
the top k of the exact flat index: recall@k = |HNSW ∩ exact| / k, averaged.
Then deletions: 15% of the episodes are removed (tombstones, below the 20% rebuild
ratio: searches filter them out) and recall is measured against the exact index
over what remains, checking that no removed id is ever returned; then removals
past 20% trigger the rebuild, and recall is measured again.

Part 2, 1,000,000 episodes (synthetic TopicEmbeddings vectors, the memory of
`bench_judge_overhead.py --n 1000000`): recall@k of the saved HNSW index against
an exact search over the same stored vectors, and the search latency of both.

    .venv/bin/python benchmarks/scale/run.py embed-real-texts --n 6000   # once, slow
    .venv/bin/python benchmarks/scale/run.py hnsw-recall --queries 1000 --big-n 1000000
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import faiss
import numpy as np
from _common import RESULTS, loadavg, populate_memory, save_result, summarize

from langchain_memalign.memory.episodic import EpisodicIndex, as_matrix


def topk_exact(base: np.ndarray, ids: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    flat = faiss.IndexIDMap2(faiss.IndexFlatIP(base.shape[1]))
    flat.add_with_ids(base, ids)
    faiss.omp_set_num_threads(2)
    _, found = flat.search(queries, k)
    faiss.omp_set_num_threads(1)
    return found


def topk_index(index: EpisodicIndex, queries: np.ndarray, k: int) -> tuple[np.ndarray, list[float]]:
    out = np.full((len(queries), k), -1, dtype=np.int64)
    ts = []
    for r, q in enumerate(queries):
        t0 = time.perf_counter()
        hits = index.search(q, k)
        ts.append(time.perf_counter() - t0)
        out[r, : len(hits)] = [i for i, _ in hits]
    return out, ts


def recall(found: np.ndarray, exact: np.ndarray) -> float:
    k = exact.shape[1]
    return float(np.mean([len(set(f) & set(e)) / k for f, e in zip(found, exact, strict=True)]))


def part_real(queries_n: int, ks: list[int]) -> dict[str, Any]:
    z = np.load(RESULTS / "real_minilm.npz", allow_pickle=False)
    vecs = as_matrix(z["vectors"])
    n = len(vecs) - queries_n
    base, queries = vecs[:n], vecs[n:]
    ids = np.arange(1, n + 1, dtype=np.int64)
    print(f"real MiniLM embeddings: {n} in memory, {len(queries)} held-out queries")
    out: dict[str, Any] = {"memory": n, "queries": len(queries), "dim": int(vecs.shape[1])}
    kmax = max(ks)
    exact = topk_exact(base, ids, queries, kmax)
    sweep = {}
    for ef in (16, 32, 64, 96, 128):
        idx = EpisodicIndex.build(ids, base, hnsw_threshold=1, ef_search=ef)
        assert idx.kind == "hnsw"
        found, ts = topk_index(idx, queries, kmax)
        sweep[ef] = {f"recall@{k}": round(recall(found[:, :k], exact[:, :k]), 4) for k in ks}
        sweep[ef]["search"] = summarize(ts)
        print(
            f"  efSearch {ef:3d}: "
            + ", ".join(f"recall@{k} {sweep[ef][f'recall@{k}']:.4f}" for k in ks)
            + f", search median {sweep[ef]['search']['median_ms']:.3f} ms"
        )
    out["ef_search_sweep"] = sweep
    flat = EpisodicIndex.build(ids, base, hnsw_threshold=10**9)
    _, ts = topk_index(flat, queries, kmax)
    out["flat_search"] = summarize(ts)

    # Deletions: tombstones below the rebuild ratio, then past it.
    idx = EpisodicIndex.build(ids, base, hnsw_threshold=1)
    rng = np.random.default_rng(0)
    gone = rng.choice(ids, size=int(0.15 * n), replace=False)
    t0 = time.perf_counter()
    idx.remove(gone.tolist())
    t_remove = time.perf_counter() - t0
    keep = ~np.isin(ids, gone)
    exact_live = topk_exact(base[keep], ids[keep], queries, kmax)
    found, ts = topk_index(idx, queries, kmax)
    leaked = int(np.isin(found, gone).sum())
    tomb = {
        "removed": len(gone),
        "tombstones": idx.tombstones,
        "kind": idx.kind,
        "remove_s": round(t_remove, 4),
        "removed_ids_returned": leaked,
        "search": summarize(ts),
        **{f"recall@{k}": round(recall(found[:, :k], exact_live[:, :k]), 4) for k in ks},
    }
    more = rng.choice(ids[keep], size=int(0.08 * n), replace=False)
    t0 = time.perf_counter()
    idx.remove(more.tolist())
    t_rebuild = time.perf_counter() - t0
    gone2 = np.concatenate([gone, more])
    keep2 = ~np.isin(ids, gone2)
    exact2 = topk_exact(base[keep2], ids[keep2], queries, kmax)
    found2, ts2 = topk_index(idx, queries, kmax)
    rebuilt = {
        "removed_total": len(gone2),
        "tombstones_after": idx.tombstones,
        "kind": idx.kind,
        "remove_with_rebuild_s": round(t_rebuild, 3),
        "removed_ids_returned": int(np.isin(found2, gone2).sum()),
        "search": summarize(ts2),
        **{f"recall@{k}": round(recall(found2[:, :k], exact2[:, :k]), 4) for k in ks},
    }
    out["tombstones_15pct"] = tomb
    out["after_rebuild_23pct"] = rebuilt
    print(
        f"  15% removed (tombstones {tomb['tombstones']}): "
        + ", ".join(f"recall@{k} {tomb[f'recall@{k}']:.4f}" for k in ks)
        + f", removed ids returned {leaked}"
    )
    print(
        f"  23% removed (rebuild in {t_rebuild:.2f} s, tombstones now {idx.tombstones}): "
        + ", ".join(f"recall@{k} {rebuilt[f'recall@{k}']:.4f}" for k in ks)
        + f", removed ids returned {rebuilt['removed_ids_returned']}"
    )
    return out


def part_big(n: int, queries_n: int, ks: list[int]) -> dict[str, Any]:
    from _common import CaseGenerator, TopicEmbeddings

    from langchain_memalign.memory.store import MemoryStore

    folder, info = populate_memory(n, guidelines=60)
    t0 = time.perf_counter()
    idx = EpisodicIndex.read(str(folder / "episodes.faiss"))
    t_read = time.perf_counter() - t0
    store = MemoryStore.open(folder)
    ids, base = store.all_vectors()
    store.close()
    assert base is not None
    ids_arr = np.asarray(ids, dtype=np.int64)
    gen, emb = CaseGenerator(), TopicEmbeddings()
    queries = as_matrix(
        emb.embed_documents([gen.case(i, salt=7)["inputs"] for i in range(queries_n)])
    )
    kmax = max(ks)
    t0 = time.perf_counter()
    exact = topk_exact(base, ids_arr, queries, kmax)
    t_exact = time.perf_counter() - t0
    found, ts = topk_index(idx, queries, kmax)
    sweep = {}
    hnsw = faiss.downcast_index(idx._index.index)
    for ef in (96, 192, 384, 768):
        hnsw.hnsw.efSearch = ef
        f2, t2 = topk_index(idx, queries, kmax)
        sweep[ef] = {f"recall@{k}": round(recall(f2[:, :k], exact[:, :k]), 4) for k in ks}
        sweep[ef]["search"] = summarize(t2)
        print(
            f"  1M efSearch {ef:3d}: "
            + ", ".join(f"recall@{k} {sweep[ef][f'recall@{k}']:.4f}" for k in ks)
            + f", search median {sweep[ef]['search']['median_ms']:.3f} ms"
        )
    hnsw.hnsw.efSearch = 96
    out = {
        "ef_search_sweep": sweep,
        "memory": n,
        "queries": queries_n,
        "index_kind": idx.kind,
        "read_index_s": round(t_read, 2),
        "hnsw_search": summarize(ts),
        "exact_search_ms_per_query_2_threads": round(t_exact / queries_n * 1000, 2),
        "populate": info,
        **{f"recall@{k}": round(recall(found[:, :k], exact[:, :k]), 4) for k in ks},
    }
    print(
        f"{n:,} synthetic episodes ({idx.kind}): "
        + ", ".join(f"recall@{k} {out[f'recall@{k}']:.4f}" for k in ks)
        + f"; HNSW search median {out['hnsw_search']['median_ms']:.3f} ms, exact "
        f"{out['exact_search_ms_per_query_2_threads']} ms/query"
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, nargs="+", default=[5, 10])
    ap.add_argument("--big-n", type=int, default=1_000_000, help="0 skips part 2")
    ap.add_argument("--big-queries", type=int, default=200)
    args = ap.parse_args()
    la = loadavg()
    out: dict[str, Any] = {
        "loadavg": la,
        "package_hnsw": {"M": 32, "efConstruction": 80, "efSearch": 96, "rebuild_ratio": 0.2},
    }
    out["real_minilm"] = part_real(args.queries, args.k)
    if args.big_n:
        out["synthetic_big"] = part_big(args.big_n, args.big_queries, args.k)
    out["loadavg_end"] = loadavg()
    save_result("hnsw_recall", out)
