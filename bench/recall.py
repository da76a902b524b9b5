"""Recall@10 of the store's HNSW search against exact search, per route, on the real-size bench KBs.

The KBs are ``bench/grounding_precision.py``'s (``bench/precision_kb.py``: the sample KB,
KnowYourMeme entries and up to 39,619 Moegirlpedia names, embedded once and cached), built with the
real import path, so an entity with nothing on a route has no vector there.  The queries are that
bench's query texts (negatives, held-out and calibration positives, catchphrase lines), each embedded
as a query and searched on every route vector the way grounding searches it: once per entity
language (``zh``, ``en``), plus the OCR route's fallback (the ``identity`` vectors of entities that
have no ``usage`` vector).

For every search the exact top 10 (``exact=True``: every point scored on its original vector) is
the reference; an HNSW hit counts when it is one of them or ties the exact 10th score (identical
vectors make several top 10s right).  Printed per size, route and ``ef`` (``hnsw_ef`` at search):
mean recall@10, the share of searches that miss at least one, and the p50 time of an HNSW and of
an exact search (µs); and grounding p50 per size (every query grounded at each size in turn).

``--m`` / ``--ef-construct`` build KB variants (``kb-<size>-m<M>-efc<E>``) with other HNSW graph
settings (``KAR_HNSW_M``, ``KAR_HNSW_EF_CONSTRUCT``); the default is the settings' own.

    python bench/recall.py --sizes 5000,40000 --work DIR --ef 32,64,128,256
    python bench/recall.py --sizes 40000 --m 16,32 --ef-construct 100,200 --ef 64,128
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from culturebase.settings import Settings  # noqa: E402
from culturebase.store import PayloadFilter  # noqa: E402
from grounding_precision import interleaved_latency, load_queries, open_kb  # noqa: E402
from precision_kb import CachedEmbedder  # noqa: E402
from retrieval.embedders import build_embedder  # noqa: E402
from retrieval.grounding.routes.dense import FALLBACK_VECTOR, ROUTE_VECTOR  # noqa: E402

log = logging.getLogger("bench.recall")
K = 10
#: scores this close count as a tie (the rescored HNSW score and the exact one are the same float32 dot product)
TIE = 1e-5


def recall_at_k(approx: list[Any], exact: list[Any], k: int = K) -> float | None:
    """Share of the exact top ``k`` that the approximate hits recover; a hit tying the exact ``k``-th
    score counts (identical vectors make several top-``k`` lists right).  None when exact found nothing."""
    ref = exact[:k]
    if not ref:
        return None
    ids = {h.id for h in ref}
    floor = ref[-1].score - TIE
    good = sum(1 for h in approx[:k] if h.id in ids or h.score >= floor)
    return min(good, len(ref)) / len(ref)


def searches(kb: Any) -> list[tuple[str, str, PayloadFilter | None]]:
    """(label, vector name, filter) of every search grounding makes per query: each route vector per
    entity language, and the OCR route's fallback vector among entities without a ``usage`` vector."""
    out: list[tuple[str, str, PayloadFilter | None]] = []
    languages = [lg for lg in ("zh", "en") if kb.store.count(language=lg) >= K]
    for route, name in ROUTE_VECTOR.items():
        for lg in languages:
            flt = PayloadFilter.of(language=lg)
            out.append((f"{name}/{lg}", name, flt))
            if route in FALLBACK_VECTOR:
                out.append((f"{FALLBACK_VECTOR[route]} without {name}/{lg}", FALLBACK_VECTOR[route], PayloadFilter.without_vectors(flt, name)))
    return out


def measure(kb: Any, vectors: np.ndarray, efs: list[int]) -> dict[str, Any]:
    """Recall@10 and search times per search kind and ef."""
    coll = kb.store.entities
    out: dict[str, Any] = {}
    for label, name, flt in searches(kb):
        exact_ms: list[float] = []
        refs = []
        for v in vectors:
            t = time.perf_counter()
            refs.append(coll.search(name, v, K, flt, exact=True))
            exact_ms.append((time.perf_counter() - t) * 1e6)
        points = sum(1 for r in refs if r)
        row: dict[str, Any] = {"searches": points, "exact_p50_us": round(float(np.percentile(exact_ms, 50)), 1), "by_ef": {}}
        for ef in efs:
            rec: list[float] = []
            ms: list[float] = []
            for v, ref in zip(vectors, refs):
                t = time.perf_counter()
                hits = coll.search(name, v, K, flt, hnsw_ef=ef)
                ms.append((time.perf_counter() - t) * 1e6)
                r = recall_at_k(hits, ref)
                if r is not None:
                    rec.append(r)
            row["by_ef"][str(ef)] = {
                "recall_at_10": round(float(np.mean(rec)), 4) if rec else None,
                "searches_missing_one": round(float(np.mean([r < 1.0 for r in rec])), 4) if rec else None,
                "hnsw_p50_us": round(float(np.percentile(ms, 50)), 1),
            }
        out[label] = row
    return out


def parse_args() -> argparse.Namespace:
    """The command line (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="5000,40000", help="comma-separated KB sizes")
    ap.add_argument("--real", type=Path, default=REPO.parent / "shared" / "data" / "real", help="the real data folder")
    ap.add_argument("--work", type=Path, default=REPO / "data" / "bench" / "grounding_precision", help="KBs and caches")
    ap.add_argument("--ef", default="", help="comma-separated hnsw_ef values at search (default: the settings' KAR_HNSW_EF)")
    ap.add_argument("--m", default="", help="comma-separated HNSW m values to build variants with (default: the settings')")
    ap.add_argument("--ef-construct", default="", help="comma-separated HNSW ef_construct values to build variants with")
    ap.add_argument(
        "--set", action="append", default=[], metavar="FIELD=VALUE",
        help="a store setting for every KB built here (e.g. large_kb_entities=1000: the int8, on-disk layout "
        "of a large KB at a smaller size); the KB folder is named after it",
    )
    ap.add_argument("--max-queries", type=int, default=0, help="use only the first N query texts (0: all)")
    ap.add_argument("--no-grounding", dest="grounding", action="store_false", help="skip the grounding p50 run")
    ap.add_argument("--label", default="", help="a label printed with the figures")
    return ap.parse_args()


def store_settings(items: list[str], settings: Settings) -> dict[str, Any]:
    """``--set FIELD=VALUE`` as store settings (typed like the field)."""
    extra: dict[str, Any] = {}
    for item in items:
        key, _, value = item.partition("=")
        if key not in Settings.model_fields or not value:
            sys.exit(f"--set {item!r}: expected FIELD=VALUE with a field of culturebase.settings.Settings")
        extra[key] = type(getattr(settings, key))(value) if getattr(settings, key) is not None else value
    return extra


def measure_variant(args: argparse.Namespace, size: int, m: int, efc: int, variant: str, ctx: dict[str, Any]) -> dict[str, Any]:
    """Open (or build) one KB variant and measure each route vector's recall@10 and HNSW latency per ef."""
    t = time.perf_counter()
    kb = open_kb(args.work, size, ctx["real"], ctx["embedder"], variant, hnsw_m=m, hnsw_ef_construct=efc, **ctx["extra"])
    try:
        coll = kb.store.entities
        entry = {
            "entities": kb.store.count(),
            "m": m,
            "ef_construct": efc,
            "layout": kb.store.layout_info().get("describe"),
            "vectors": {n: coll.count(PayloadFilter().lacking(n)) for n in ROUTE_VECTOR.values()},
            "open_or_build_s": round(time.perf_counter() - t, 1),
            "routes": measure(kb, ctx["vectors"], ctx["efs"]),
        }
        # points that carry each vector (the count above is of points lacking it)
        entry["vectors"] = {n: entry["entities"] - lacking for n, lacking in entry["vectors"].items()}
    finally:
        kb.close()
    return entry


def grounding_latency(args: argparse.Namespace, sizes: list[int], suffix: str, ctx: dict[str, Any], queries: list[dict]) -> dict[str, Any]:
    """Grounding p50 at every size, each query grounded at every size in turn."""
    kbs = {s: open_kb(args.work, s, ctx["real"], ctx["embedder"], suffix, **ctx["extra"]) for s in sizes}
    try:
        return interleaved_latency(kbs, queries, None, rounds=1)
    finally:
        for kb in kbs.values():
            kb.close()


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    real = args.real if args.real.is_absolute() else (Path.cwd() / args.real)
    if not (real / "moegirl" / "char2subject.json").exists():
        sys.exit(f"no real data at {args.real}: pass --real DIR (the folder holding moegirl/, kym-imkg/, kym-2023/)")
    settings = Settings()
    embedder = CachedEmbedder(build_embedder(settings), args.work / "embeddings")
    queries = load_queries()
    texts = list(dict.fromkeys(q["query"] for q in queries))
    if args.max_queries:
        texts = texts[: args.max_queries]
    efs = [int(x) for x in args.ef.split(",") if x] or [settings.hnsw_ef]
    ctx = {"real": real, "embedder": embedder, "vectors": embedder.encode_queries(texts).dense, "efs": efs}
    ms = [int(x) for x in args.m.split(",") if x] or [settings.hnsw_m]
    efcs = [int(x) for x in args.ef_construct.split(",") if x] or [settings.hnsw_ef_construct]
    result: dict[str, Any] = {"label": args.label, "embedder": embedder.name, "queries": len(texts), "k": K, "sizes": {}}
    defaults = (settings.hnsw_m, settings.hnsw_ef_construct)
    ctx["extra"] = extra = store_settings(args.set, settings)
    suffix = "".join(f"-{k}{v}" for k, v in sorted(extra.items()))
    for size in [int(s) for s in args.sizes.split(",") if s]:
        for m in ms:
            for efc in efcs:
                variant = ("" if (m, efc) == defaults else f"-m{m}-efc{efc}") + suffix
                entry = measure_variant(args, size, m, efc, variant, ctx)
                result["sizes"].setdefault(str(size), {})[f"m{m}-efc{efc}{suffix}"] = entry
                log.info("size %d m %d ef_construct %d: %s", size, m, efc, json.dumps(entry["routes"]))
    if args.grounding:
        result["grounding_latency"] = grounding_latency(args, [int(s) for s in result["sizes"]], suffix, ctx, queries)
    print(json.dumps(result, ensure_ascii=False, indent=2))


if __name__ == "__main__":
    main()
