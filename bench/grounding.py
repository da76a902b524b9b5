"""Grounding benchmark: exact numpy brute force (what the MemeBench release does) vs our store.

Per size, three processes so each side's memory is measured apart:

1. ``numpy``: the release's approach, one (n, dim) float32 matrix in RAM and ``matrix @ q`` +
   argpartition per query; its exact top-10 ids are the ground truth for recall;
2. ``build``: a bulk import of n entities with the real import path (four route vectors per
   entity like CultureBase, ``BulkWriter``: indexing deferred to the end, batched upserts) into
   an embedded store whose layout the settings choose for n (``KAR_QUANTIZATION``,
   ``KAR_ON_DISK``, ``KAR_HNSW_VECTORS``); build seconds (upsert + index; generating the
   synthetic vectors, which an import gets from its embedder, is timed apart as ``datagen_s``)
   and disk bytes;
3. ``query``: a fresh process opens the store (RSS after load), runs the queries on the
   ``identity`` route one at a time (concurrency 1) and from 8 threads at once (RSS sampled
   under that load), p50/p95 for each, recall@10 against the exact ids.

The numpy side is timed the same way (1 and 8 threads).  Vectors are clustered synthetic unit
vectors, generated chunk by chunk from the seed so no process but numpy's holds them all.
Prints one JSON document (per-size lines go to stderr as they finish).

    python bench/grounding.py                          # 5k, 100k, 1M (1M takes long on 2 cores)
    python bench/grounding.py --sizes 5000,100000      # a few minutes
    python bench/grounding.py --batch-sweep 20000      # upsert throughput by batch size
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

K = 10
ROUTES = ("full", "identity", "visual", "usage")
CHUNK = 20_000


# -- data (deterministic per chunk) ------------------------------------------------------------


def centres(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, n, 0])
    return rng.normal(size=(max(n // 500, 10), dim)).astype(np.float32)


def chunk_vectors(n: int, dim: int, seed: int, start: int, route: str, cents: np.ndarray) -> np.ndarray:
    """Unit vectors of entities ``start .. start+CHUNK`` on one route, around random cluster centres."""
    m = min(CHUNK, n - start)
    rng = np.random.default_rng([seed, n, start + 1, ROUTES.index(route)])
    idx = rng.integers(0, len(cents), size=m)
    block = cents[idx] + rng.normal(scale=0.6, size=(m, dim)).astype(np.float32)
    return block / np.linalg.norm(block, axis=1, keepdims=True)


def route_matrix(n: int, dim: int, seed: int, route: str) -> np.ndarray:
    cents = centres(n, dim, seed)
    out = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, CHUNK):
        out[start : start + CHUNK] = chunk_vectors(n, dim, seed, start, route, cents)
    return out


def queries(matrix: np.ndarray, count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, 99])
    picks = rng.integers(0, len(matrix), size=count)
    qs = matrix[picks] + rng.normal(scale=0.03, size=(count, matrix.shape[1])).astype(np.float32)
    return qs / np.linalg.norm(qs, axis=1, keepdims=True)


# -- measuring ---------------------------------------------------------------------------------


def rss_mb(field: str = "VmRSS") -> float:
    """Resident memory of this process (VmRSS = RssAnon + RssFile: mapped file pages count too)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def cpu_s() -> float:
    """CPU seconds this process used (all its threads): the work, whatever the machine's load."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def rss_parts() -> dict:
    return {"anon_mb": round(rss_mb("RssAnon"), 1), "file_mb": round(rss_mb("RssFile"), 1)}


def pct(values: list[float], p: float) -> float:
    return round(float(np.percentile(np.asarray(values) * 1000.0, p)), 3)


def timed_run(fn, qs: np.ndarray, threads: int) -> tuple[list[float], list, float]:
    """Latency of each query with ``threads`` concurrent callers; the highest RSS seen meanwhile."""
    lat: list[float] = [0.0] * len(qs)
    results: list = [None] * len(qs)
    peak = [rss_mb()]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], rss_mb())
            time.sleep(0.02)

    def one(i: int) -> None:
        t = time.perf_counter()
        results[i] = fn(qs[i])
        lat[i] = time.perf_counter() - t

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    if threads == 1:
        for i in range(len(qs)):
            one(i)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, range(len(qs))))
    stop.set()
    sampler.join()
    return lat, results, max(peak[0], rss_mb())


def numpy_topk(matrix: np.ndarray, q: np.ndarray, k: int = K) -> np.ndarray:
    """The release's approach: one matrix-vector product over every entity, then the top k."""
    scores = matrix @ q
    part = np.argpartition(-scores, k)[:k]
    return part[np.argsort(-scores[part])]


# -- the three processes -----------------------------------------------------------------------


def run_numpy(args: argparse.Namespace) -> dict:
    matrix = route_matrix(args.n, args.dim, args.seed, "identity")
    qs = queries(matrix, args.queries, args.seed)
    rss_load = rss_mb()
    for q in qs[:5]:
        numpy_topk(matrix, q)
    from threadpoolctl import threadpool_limits

    lat1, exact, _ = timed_run(lambda q: numpy_topk(matrix, q), qs, 1)
    with threadpool_limits(1):  # 8 callers x BLAS threads each would oversubscribe 2 cores
        t8 = time.perf_counter()
        lat8, _, rss8 = timed_run(lambda q: numpy_topk(matrix, q), qs, args.threads)
        qps8 = len(qs) / (time.perf_counter() - t8)
    np.save(args.out, np.stack(exact))
    np.save(str(args.out).replace(".npy", "") + ".queries.npy", qs)  # the query process reads them, not the matrix
    return {
        "rss_after_load_mb": round(rss_load, 1),
        "rss_under_load_mb": round(rss8, 1),
        "p50_ms_c1": pct(lat1, 50),
        "p95_ms_c1": pct(lat1, 95),
        f"p50_ms_c{args.threads}": pct(lat8, 50),
        f"p95_ms_c{args.threads}": pct(lat8, 95),
        f"queries_per_s_c{args.threads}": round(qps8, 1),
    }


def run_build(args: argparse.Namespace) -> dict:
    from culturebase.settings import Settings
    from culturebase.store import EmbedderInfo, PointRecord
    from culturebase.store.bulk import BulkWriter
    from culturebase.store.culturebase import entity_spec
    from culturebase.store.edge import EdgeBackend
    from culturebase.store.layout import LayoutPolicy

    settings = Settings()
    info = EmbedderInfo("synthetic", args.dim)
    backend = EdgeBackend(
        args.kb,
        hnsw_m=settings.hnsw_m,
        hnsw_ef_construct=settings.hnsw_ef_construct,
        layout_policy=LayoutPolicy.from_settings(settings),
        search_threads=settings.search_threads,
    )
    spec = entity_spec(info)
    coll = backend.open_collection(spec, info, expected_points=args.n)
    cents = centres(args.n, args.dim, args.seed)
    batch = args.batch or settings.upsert_batch_size
    t0 = time.perf_counter()
    load_s = 0.0
    datagen_s = 0.0  # the bench's own synthetic vectors (an import gets them from the embedder): not the store's time
    with BulkWriter(coll, total=args.n, disk_path=Path(args.kb), min_free_bytes=0) as writer:
        for start in range(0, args.n, CHUNK):
            g = time.perf_counter()
            vecs = {r: chunk_vectors(args.n, args.dim, args.seed, start, r, cents) for r in spec.dense}
            datagen_s += time.perf_counter() - g
            points = [
                PointRecord(id=str(start + i), dense={r: vecs[r][i] for r in spec.dense}, payload={"name": f"entity {start + i}"})
                for i in range(len(vecs["identity"]))
            ]
            for s in range(0, len(points), batch):
                writer.write(points[s : s + batch])
        load_s = time.perf_counter() - t0 - datagen_s
    build_s = time.perf_counter() - t0 - datagen_s
    layout = coll.layout.describe() if coll.layout else "?"
    backend.close()
    files = [f.stat() for f in Path(args.kb).rglob("*") if f.is_file()]
    disk = sum(st.st_blocks * 512 for st in files)  # allocated (the engine preallocates sparse files)
    apparent = sum(st.st_size for st in files)
    return {
        "build_s": round(build_s, 1),
        "datagen_s": round(datagen_s, 1),
        "build_with_datagen_s": round(build_s + datagen_s, 1),
        "build_cpu_s": round(cpu_s(), 1),
        "loadavg_1m_after": round(os.getloadavg()[0], 2),
        "upsert_s": round(load_s, 1),
        "index_s": round(build_s - load_s, 1),
        "entities_per_s": round(args.n / build_s, 1),
        "upsert_batch": batch,
        "disk_bytes": disk,
        "disk_apparent_bytes": apparent,
        "layout": layout,
        "peak_rss_mb": round(int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024, 1),
    }


def run_query(args: argparse.Namespace) -> dict:
    from culturebase.settings import Settings
    from culturebase.store import EmbedderInfo
    from culturebase.store.culturebase import entity_spec
    from culturebase.store.edge import EdgeBackend

    settings = Settings()
    info = EmbedderInfo("synthetic", args.dim)
    # the numpy process's queries and exact answers (this process never holds the vectors)
    qs = np.load(str(args.exact).replace(".npy", "") + ".queries.npy")
    exact = np.load(args.exact)
    base = rss_mb()
    backend = EdgeBackend(args.kb, hnsw_ef=settings.hnsw_ef)
    coll = backend.open_collection(entity_spec(info), info, create=False)
    rss_load = rss_mb()
    search = lambda q: coll.search("identity", q, K)  # noqa: E731
    for q in qs[:5]:
        search(q)
    lat1, hits, _ = timed_run(search, qs, 1)
    t8 = time.perf_counter()
    lat8, _, rss8 = timed_run(search, qs, args.threads)
    qps8 = len(qs) / (time.perf_counter() - t8)
    parts = rss_parts()

    def recall_of(found: list) -> float:
        return round(float(np.mean([len({int(h.id) for h in hs} & {int(i) for i in ex}) / K for hs, ex in zip(found, exact)])), 4)

    recall = recall_of(hits)
    sweep = []
    for pair in [p for p in (args.sweep or "").split(",") if p]:  # "ef:oversampling" pairs, query-time only
        ef, over = (float(x) for x in pair.split(":"))
        coll.hnsw_ef = int(ef)
        if coll.layout is not None:
            coll.layout = dataclasses.replace(coll.layout, oversampling=over)
        lat_s, hits_s, _ = timed_run(search, qs, 1)
        lat_s8, _, _ = timed_run(search, qs, args.threads)
        sweep.append({"hnsw_ef": int(ef), "oversampling": over, "recall_at_10": recall_of(hits_s), "p50_ms_c1": pct(lat_s, 50),
                      f"p50_ms_c{args.threads}": pct(lat_s8, 50), f"p95_ms_c{args.threads}": pct(lat_s8, 95)})
    backend.close()
    return {
        "rss_after_load_mb": round(rss_load, 1),
        "rss_under_load_mb": round(rss8, 1),
        "rss_before_open_mb": round(base, 1),
        "rss_after_run": parts,
        "p50_ms_c1": pct(lat1, 50),
        "p95_ms_c1": pct(lat1, 95),
        f"p50_ms_c{args.threads}": pct(lat8, 50),
        f"p95_ms_c{args.threads}": pct(lat8, 95),
        f"p99_ms_c{args.threads}": pct(lat8, 99),
        f"queries_per_s_c{args.threads}": round(qps8, 1),
        "recall_at_10": recall,
        "hnsw_ef": settings.hnsw_ef,
        "oversampling": settings.quantization_oversampling,
        **({"query_sweep": sweep} if sweep else {}),
    }


def child(role: str, **kw: object) -> dict:
    cmd = [sys.executable, __file__, "--role", role] + [f"--{k.replace('_', '-')}={v}" for k, v in kw.items()]
    res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    if res.returncode != 0:
        raise SystemExit(f"{role} process failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def bench_size(n: int, args: argparse.Namespace, work: Path) -> dict:
    exact = work / f"exact-{n}.npy"
    kb = work / f"kb-{n}"
    common = {"n": n, "dim": args.dim, "seed": args.seed, "queries": args.queries, "threads": args.threads}
    numpy_side = child("numpy", out=exact, **common)
    build = child("build", kb=kb, batch=args.batch, **common)
    store = child("query", kb=kb, exact=exact, sweep=args.sweep, **common)
    shutil.rmtree(kb, ignore_errors=True)
    c = args.threads
    return {
        "entities": n,
        "dim": args.dim,
        "vectors_per_entity": len(ROUTES),
        "queries": args.queries,
        "store": {**store, **build},
        "numpy": numpy_side,
        "ratios": {
            "numpy_over_store_p50_c1": round(numpy_side["p50_ms_c1"] / store["p50_ms_c1"], 2),
            f"numpy_over_store_p50_c{c}": round(numpy_side[f"p50_ms_c{c}"] / store[f"p50_ms_c{c}"], 2),
            "store_over_numpy_rss_under_load": round(store["rss_under_load_mb"] / numpy_side["rss_under_load_mb"], 2),
        },
    }


def batch_sweep(n: int, args: argparse.Namespace, work: Path) -> list[dict]:
    """Upsert throughput (entities/s, indexing excluded) by batch size, on n entities."""
    out = []
    for b in (64, 256, 1024, 4096):
        kb = work / f"sweep-{b}"
        r = child("build", kb=kb, batch=b, n=n, dim=args.dim, seed=args.seed, queries=1, threads=1)
        out.append({"batch": b, "upsert_entities_per_s": round(n / max(r["upsert_s"], 1e-9), 1), "upsert_s": r["upsert_s"]})
        shutil.rmtree(kb, ignore_errors=True)
    return out


def targets(results: list[dict], c: int) -> dict:
    t: dict[str, bool] = {}
    for r in results:
        s, npy = r["store"], r["numpy"]
        if r["entities"] == 5000:
            t["5k_store_p50_within_2x_numpy"] = s["p50_ms_c1"] <= 2 * npy["p50_ms_c1"]
        if r["entities"] == 100_000:
            t["100k_store_rss_under_load_le_600MB"] = s["rss_under_load_mb"] <= 600
        if r["entities"] == 1_000_000:
            t["1M_store_rss_under_load_le_3GB"] = s["rss_under_load_mb"] <= 3072
            t["1M_recall_at_least_0.95"] = s["recall_at_10"] >= 0.95
            t[f"1M_p95_c{c}_le_10ms"] = s[f"p95_ms_c{c}"] <= 10
            t["1M_build_le_600s"] = s["build_s"] <= 600
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="5000,100000,1000000")
    ap.add_argument("--queries", type=int, default=400)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=384, help="384: the bundled embedder; 1024: bge-m3")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=0, help="upsert batch (0: KAR_UPSERT_BATCH_SIZE)")
    ap.add_argument("--batch-sweep", type=int, default=0, help="measure upsert throughput by batch size on this many entities")
    ap.add_argument("--sweep", default="", help="query-time settings to try on the same store: 'ef:oversampling,...' (e.g. 128:2,256:2,256:3)")
    # child-process arguments
    ap.add_argument("--role", choices=("numpy", "build", "query"), help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--kb", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--exact", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role:
        fn = {"numpy": run_numpy, "build": run_build, "query": run_query}[args.role]
        print(json.dumps(fn(args)))
        return
    load = os.getloadavg()
    results = []
    sweep = None
    with tempfile.TemporaryDirectory(prefix="kar-bench-") as tmp:
        if args.batch_sweep:
            sweep = batch_sweep(args.batch_sweep, args, Path(tmp))
            print(json.dumps({"batch_sweep": sweep}), file=sys.stderr, flush=True)
        for n in [int(x) for x in args.sizes.split(",") if x]:
            results.append(bench_size(n, args, Path(tmp)))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    from culturebase.settings import Settings

    s = Settings()
    out = {
        "benchmark": "grounding",
        "store": "qdrant-edge (embedded), layout chosen by size from settings, built by BulkWriter",
        "baseline": "numpy brute force (matrix @ query, argpartition top-10), in its own process",
        "settings": {
            "quantization": s.quantization,
            "on_disk": s.on_disk,
            "large_kb_entities": s.large_kb_entities,
            "hnsw_vectors": s.hnsw_vectors,
            "hnsw_m": s.hnsw_m,
            "hnsw_ef_construct": s.hnsw_ef_construct,
            "hnsw_ef": s.hnsw_ef,
            "oversampling": s.quantization_oversampling,
            "search_threads": s.search_threads,
        },
        "machine": {"cpus": os.cpu_count(), "loadavg_at_start": [round(x, 2) for x in load], "loadavg_at_end": [round(x, 2) for x in os.getloadavg()]},
        "sizes": results,
        "batch_sweep": sweep,
        "targets_met": targets(results, args.threads),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
