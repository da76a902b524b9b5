"""Dense + lexical grounding routes on one embedded store vs numpy dense-only search (prints JSON).

The issue target: at 5k entities the store running what grounding runs for one cue (a dense
top-20 and a BM25 sparse top-20 on the ``lexical`` vector with Qdrant's IDF modifier) stays
within 2x of numpy's brute-force dense-only p50. The caption route's matching over the
candidates (pure Python, no store) is timed on its own. ``bench/grounding.py`` covers store
size, memory and concurrency.

    python bench/grounding_routes.py [--size 5000] [--queries 200]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from culturebase.settings import Settings  # noqa: E402
from culturebase.store import EmbedderInfo, PointRecord  # noqa: E402
from culturebase.store.base import CollectionSpec  # noqa: E402
from culturebase.store.edge import EdgeBackend  # noqa: E402

DIM = 1024
K = 10


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


def synthetic_entities(n: int, queries: int, rng: np.random.Generator) -> tuple[list, list[str], np.ndarray, list]:
    """The sample's entities, ``n`` entity texts (random mixes of the sample's lexical texts), their clustered
    vectors, and the queries (a catchphrase / alias of the sample with a random entity's vector)."""
    from culturebase.entity import Entity
    from retrieval.text import lexical as lex

    entities = [Entity.model_validate(json.loads(x)) for x in (REPO / "examples" / "culturebase_sample.jsonl").read_text("utf-8").splitlines() if x]
    texts = [lex.lexical_text(e) for e in entities]
    sentences = [s for t in texts for s in t.replace("。", "\n").replace(". ", "\n").splitlines() if s.strip()]
    docs = [" ".join(rng.choice(sentences, size=4)) for _ in range(n)]
    vectors = clustered(n, DIM, clusters=max(n // 500, 10), rng=rng)
    qtexts = [p for e in entities for p in lex.catchphrases(e)]
    picks = rng.integers(0, len(qtexts), size=queries)
    qs = [(qtexts[i], vectors[rng.integers(0, n)]) for i in picks]
    return entities, docs, vectors, qs


def fill_store(coll, docs: list[str], vectors: np.ndarray) -> float:  # type: ignore[no-untyped-def]
    """Upsert every entity's dense and lexical vectors; returns the seconds the lexical encoding took."""
    from retrieval.text import lexical as lex

    n = len(docs)
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
    return encode_s


def time_queries(coll, vectors: np.ndarray, qs: list, phrases: list, k: int = 20) -> dict[str, list[float]]:  # type: ignore[no-untyped-def]
    """Per query: numpy's dense top-k, the store's dense + lexical top-k, the lexical search alone, and the
    caption matching over 40 candidates (blocks of 25 queries, numpy first)."""
    from retrieval.text import lexical as lex

    for text, q in qs[:5]:
        coll.search("usage", q, k)
        coll.search_sparse("lexical", lex.encode_query(text), k)
        numpy_topk(vectors, q, k)
    lat: dict[str, list[float]] = {"numpy": [], "store": [], "lexical": [], "caption": []}
    for start in range(0, len(qs), 25):
        block = qs[start : start + 25]
        for _, q in block:
            t = time.perf_counter()
            numpy_topk(vectors, q, k)
            lat["numpy"].append(time.perf_counter() - t)
        for text, q in block:
            t = time.perf_counter()
            coll.search("usage", q, k)
            t1 = time.perf_counter()
            coll.search_sparse("lexical", lex.encode_query(text), k)
            t2 = time.perf_counter()
            lat["store"].append(t2 - t)
            lat["lexical"].append(t2 - t1)
            lines = lex.caption_lines(text)
            t = time.perf_counter()
            for i in range(40):  # two routes' candidates
                lex.caption_score(lines, phrases[i % len(phrases)])
            lat["caption"].append(time.perf_counter() - t)
    return lat


def bench_routes(n: int, queries: int, rng: np.random.Generator, workdir: Path) -> dict:
    """Dense + lexical (BM25 sparse, IDF) routes on one store of ``n`` entities vs numpy dense-only.

    Entity texts are random mixes of the sample's lexical texts (real zh/en tokens through our
    tokenizer); queries are catchphrases / aliases of the sample.  Per query the store runs what
    grounding runs against it for one cue: a top-20 dense search and a top-20 lexical search;
    the baseline is numpy's brute-force dense top-20 on the same vectors.  The caption route's
    matching over the candidates (pure Python, no store) is timed on its own.
    """
    from retrieval.text import lexical as lex

    entities, docs, vectors, qs = synthetic_entities(n, queries, rng)
    folder = workdir / f"routes-{n}"
    settings = Settings()
    backend = EdgeBackend(folder, hnsw_m=settings.hnsw_m, hnsw_ef_construct=settings.hnsw_ef_construct)
    spec = CollectionSpec("bench", dense=("usage",), sparse=("lexical",), idf_sparse=("lexical",))
    coll = backend.open_collection(spec, EmbedderInfo("synthetic", DIM))
    encode_s = fill_store(coll, docs, vectors)
    lat = time_queries(coll, vectors, qs, [lex.catchphrases(e) for e in entities])
    backend.close()
    shutil.rmtree(folder, ignore_errors=True)
    np_lat, store_lat = lat["numpy"], lat["store"]
    return {
        "entities": n,
        "queries": len(qs),
        "numpy_dense_only_p50_ms": round(pct(np_lat, 50), 3),
        "store_dense_plus_lexical_p50_ms": round(pct(store_lat, 50), 3),
        "store_dense_plus_lexical_p95_ms": round(pct(store_lat, 95), 3),
        "lexical_search_p50_ms": round(pct(lat["lexical"], 50), 3),
        "ratio_to_numpy_p50": round(pct(store_lat, 50) / pct(np_lat, 50), 2),
        "caption_matching_40_candidates_p50_ms": round(pct(lat["caption"], 50), 3),
        "lexical_encode_docs_per_s": round(n / encode_s, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=5000, help="Entities in the store.")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory(prefix="kar-bench-") as tmp:
        routes = bench_routes(args.size, args.queries, rng, Path(tmp))
    out = {
        "benchmark": "grounding_routes",
        "store": "qdrant-edge (embedded), dense + BM25 sparse (IDF modifier)",
        "baseline": "numpy brute force dense-only top-20",
        "routes": routes,
        "targets_met": {"dense_plus_lexical_within_2x_numpy_dense_only": routes["ratio_to_numpy_p50"] <= 2},
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
