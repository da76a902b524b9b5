"""Grounding precision at real size: false grounding of ordinary text, top-1 of labelled queries.

KBs of about 200, 5,000 and 40,000 entities are built from real name lists
(``bench/precision_kb.py``: the sample KB, KnowYourMeme entries, Moegirlpedia characters from
``../shared/data/real``) once, in ``--work`` (default ``data/bench/grounding_precision``), with
every text's embedding cached on disk, and reused by later runs.

Queries (labelled, split before any tuning by the parity of sha1(query), field ``split``):

- ``bench/queries/grounding_precision.jsonl``: 305 negatives (Chinese and English captions,
  chat lines and headlines naming no entity, grounded as ``kar kb search`` does: the text is
  every cue) and 60 cross-lingual descriptions (an English description of a Chinese entity or
  the reverse, as a visual handle);
- ``examples/grounding_queries.jsonl``: the calibration set of the sample KB (alias, ocr as
  rapidocr writes it, catchphrase, nickname, visual, cross-lingual names, and its negatives);
- ``bench/queries/catchphrase_lines.jsonl``: 70 caption texts in which one OCR line is, as a whole,
  a sample entity's catchphrase or alias that is also an ordinary word or phrase (``Yes.``, ``真香``,
  ``STONKS``, an attribution line ``—— 鲁迅``; kind ``catchphrase-line``), and 12 sentences holding
  the same words inside them (negatives); written before the whole-line rule was tuned.

Printed per size and per split (``calibration``, ``held-out``): the share of negatives with a
hit above τ (zh / en), top-1 at τ of the positives by kind and by language (the expected entity
is the top hit and passes τ; a hit whose name equals the expected name counts, a Moegirl
namesake included), top-1 by rank alone, and grounding latency p50/p95 (query embeddings are
cached, so latency is the store's searches plus fusion, the part that grows with the KB).
Then every size's KB is opened at once and each query grounded at each size in turn
(``latency_side_by_side``: p50/p95 per size and the p50 ratio to the smallest size, the figure the
issue caps at 1.5× for 40,000 entities; a shared machine's load touches every size alike; beside them
the same run's CPU time of the grounding thread, ``cpu_p50_ms`` and its ratio, which that load stretches less).
``--baseline FILE`` (a JSON this script printed) adds ``ratio_to_baseline`` beside each figure.
``--dump`` writes each query's top candidates with their route scores.

    python bench/grounding_precision.py --sizes 200,5000            # builds once, then cached
    python bench/grounding_precision.py --sizes 200,5000,40000 --baseline data/bench/gp-baseline.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from culturebase.settings import Settings  # noqa: E402
from precision_kb import CachedEmbedder, build_kb, entities_for_size  # noqa: E402
from retrieval.embedders import build_embedder  # noqa: E402
from retrieval.grounding import EntityCue, EntityGrounder, GroundingCues  # noqa: E402
from retrieval.knowledge_base import KnowledgeBase  # noqa: E402

log = logging.getLogger("bench.grounding_precision")
QUERIES = REPO / "bench" / "queries" / "grounding_precision.jsonl"
SAMPLE_QUERIES = REPO / "examples" / "grounding_queries.jsonl"
CATCHPHRASE_LINES = REPO / "bench" / "queries" / "catchphrase_lines.jsonl"


def cues_for(route: str, text: str) -> GroundingCues:
    """The cue a labelled query stands for: a name guess, OCR text, a visual handle, or a free-text search."""
    if route == "search":
        return GroundingCues.from_text(text)
    if route == "name":
        return GroundingCues(entities=[EntityCue(name=text, confidence="high")])
    if route == "ocr":
        return GroundingCues(ocr_text=text)
    return GroundingCues(visual_handle=text)


def split_of(query: str) -> str:
    """The labelled split, fixed before tuning: parity of the query's sha1."""
    return "calibration" if int(hashlib.sha1(query.encode()).hexdigest()[:8], 16) % 2 == 0 else "held-out"


def load_queries() -> list[dict[str, Any]]:
    """The bench's own queries and the sample's calibration queries, each with ``kind``, ``lang``, ``split``."""
    rows = [json.loads(x) for x in QUERIES.read_text("utf-8").splitlines() if x.strip()]
    for x in SAMPLE_QUERIES.read_text("utf-8").splitlines():
        if x.strip():
            q = json.loads(x)
            q["kind"] = q.get("kind") or ("negative" if not q.get("expected") else q["route"])
            q["split"] = split_of(q["query"])
            q["set"] = "sample"
            rows.append(q)
    if CATCHPHRASE_LINES.exists():
        for x in CATCHPHRASE_LINES.read_text("utf-8").splitlines():
            if x.strip():
                q = json.loads(x)
                q["split"] = split_of(q["query"])
                q["set"] = "catchphrase-lines"
                rows.append(q)
    return rows


def open_kb(work: Path, size: int, real: Path, embedder: CachedEmbedder, variant: str = "", **overrides: Any) -> KnowledgeBase:
    """The KB of ``size`` entities in ``work/kb-<size><variant>``, built on first use (``overrides``:
    overrides of the store's settings, e.g. ``hnsw_m``, for a variant)."""
    entities = entities_for_size(REPO, real, size)
    path = work / f"kb-{size}{variant}"
    settings = Settings().model_copy(
        update={"kb_path": path, "qdrant_url": None, "data_dir": work / f"data-{size}{variant}", **overrides}
    )
    kb = KnowledgeBase.open(settings, embedder=embedder)
    if kb.store.count() != len(entities):
        log.info("building kb-%d (%d entities)", size, len(entities))
        t = time.perf_counter()
        if kb.store.count():
            kb.close()
            import shutil

            shutil.rmtree(path)
            kb = KnowledgeBase.open(settings, embedder=embedder)
        build_kb(kb, entities)
        kb.optimize()
        log.info("built kb-%d in %.0f s", size, time.perf_counter() - t)
    return kb


def run_size(
    kb: KnowledgeBase, queries: list[dict[str, Any]], tau: float | None, crosslingual: bool = True
) -> tuple[list[dict[str, Any]], float, list[str]]:
    """Ground every query; rows carry the top candidates for re-scoring offline.

    A negative whose whole text is the name or alias of an entity of this KB (the sample's "林黛玉"
    among Moegirl characters) or of a work of this KB's entities (``蜡笔小新``: its source work, or the
    ``《work》`` a Moegirl character's description names) is no negative here: it names something the KB
    holds, so it is left out and listed (``named_in_kb``)."""
    from culturebase.entity import normalize_text

    keys: set[str] = set()
    for e in kb.store.iter_entities():
        keys.update(normalize_text(n) for n in e.names)
        keys.update(normalize_text(w) for w in (e.source_work, *re.findall(r"《([^《》]+)》", e.description)) if w)
    named = [q["query"] for q in queries if not q.get("expected") and normalize_text(q["query"]) in keys]
    queries = [q for q in queries if q.get("expected") or normalize_text(q["query"]) not in keys]
    if named:
        log.info("left out %d negatives naming an entity or work of this KB: %s", len(named), ", ".join(named))
    grounder = EntityGrounder(kb.store, kb.embedder, tau=tau, top_k=5, candidates=20, crosslingual=crosslingual)
    # warm the query-embedding cache and the store's pages
    kb.embedder.encode_queries([q["query"] for q in queries])
    for q in queries[:20]:
        grounder.ground(cues_for(q["route"], q["query"]))
    rows = []
    for q in queries:
        t = time.perf_counter()
        res = grounder.ground(cues_for(q["route"], q["query"]))
        ms = (time.perf_counter() - t) * 1000
        top = res.candidates[0] if res.candidates else None
        hit = res.hits[0] if res.hits else None
        rows.append(
            q
            | {
                "top": top.entity.name if top else None,
                "top_id": top.entity.id if top else None,
                "score": round(top.score, 4) if top else 0.0,
                "accepted": hit.entity.name if hit else None,
                "accepted_route": hit.route if hit else None,
                "ms": ms,
                "candidates": [
                    {"name": c.entity.name, "language": c.entity.language, "score": round(c.score, 4), "route": c.route, "height": round(c.height, 4), "route_scores": {k: round(v, 4) for k, v in c.route_scores.items()}}
                    for c in res.candidates[:5]
                ],
            }
        )
    return rows, grounder.tau, named


def interleaved_latency(
    kbs: dict[int, KnowledgeBase], queries: list[dict[str, Any]], tau: float | None, crosslingual: bool = True, rounds: int = 2
) -> dict[str, Any]:
    """Grounding latency of every size measured side by side: each query grounded at each size in turn, so
    that the machine's load changes touch every size alike; p50/p95 per size and p50 over the smallest size's."""
    grounders = {
        s: EntityGrounder(kb.store, kb.embedder, tau=tau, top_k=5, candidates=20, crosslingual=crosslingual) for s, kb in kbs.items()
    }
    times: dict[int, list[float]] = {s: [] for s in kbs}
    cpu: dict[int, list[float]] = {s: [] for s in kbs}
    for rnd in range(rounds + 1):  # round 0 warms the caches and pages
        for q in queries:
            for s, g in grounders.items():
                t, c = time.perf_counter(), time.thread_time()
                g.ground(cues_for(q["route"], q["query"]))
                if rnd:
                    times[s].append((time.perf_counter() - t) * 1000)
                    cpu[s].append((time.thread_time() - c) * 1000)
    p50 = {s: float(np.percentile(v, 50)) for s, v in times.items()}
    cpu50 = {s: float(np.percentile(v, 50)) for s, v in cpu.items()}
    smallest = min(kbs)
    return {
        "rounds": rounds,
        "p50_ms": {str(s): round(v, 2) for s, v in p50.items()},
        "p95_ms": {str(s): round(float(np.percentile(v, 95)), 2) for s, v in times.items()},
        "p50_ratio_to_smallest": {str(s): round(v / p50[smallest], 3) for s, v in p50.items()},
        # the grounding thread's CPU time in the same run (a shared machine's load stretches wall time, not this)
        "cpu_p50_ms": {str(s): round(v, 2) for s, v in cpu50.items()},
        "cpu_p95_ms": {str(s): round(float(np.percentile(v, 95)), 2) for s, v in cpu.items()},
        "cpu_p50_ratio_to_smallest": {str(s): round(v / cpu50[smallest], 3) for s, v in cpu50.items()},
    }


def _share(xs: list[bool]) -> float | None:
    return round(sum(xs) / len(xs), 3) if xs else None


def _query_namesake(r: dict[str, Any]) -> bool:
    """A name-guess query whose accepted entity is named exactly as the query."""
    from culturebase.entity import normalize_text

    return r.get("route") == "name" and r["accepted"] is not None and normalize_text(r["accepted"]) == normalize_text(r["query"])


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of one size and split."""
    neg = [r for r in rows if not r.get("expected")]
    pos = [r for r in rows if r.get("expected")]
    out: dict[str, Any] = {
        "negatives": len(neg),
        "negatives_grounded": _share([r["accepted"] is not None for r in neg]),
        "negatives_grounded_by_lang": {
            lang: _share([r["accepted"] is not None for r in neg if r.get("lang") == lang]) for lang in ("zh", "en")
        },
        "positives": len(pos),
        "top1": _share([r["accepted"] == r["expected"] for r in pos]),
        "top1_rank_only": _share([r["top"] == r["expected"] for r in pos]),
        "wrong_accepted": _share([r["accepted"] is not None and r["accepted"] != r["expected"] for r in pos]),
        # a name guess that is exactly the name of another entity of this KB ("孔明": a Moegirl character so
        # named beside the sample's 诸葛亮, whose alias it is) names both; accepting that namesake is a right
        # reading of an ambiguous query, which the strict top1 above counts as wrong
        "top1_query_namesakes_right": _share([r["accepted"] == r["expected"] or _query_namesake(r) for r in pos]),
        "query_namesakes_accepted": sorted(r["query"] for r in pos if r["accepted"] != r["expected"] and _query_namesake(r)),
    }
    kinds = sorted({r["kind"] for r in pos})
    out["top1_by_kind"] = {k: _share([r["accepted"] == r["expected"] for r in pos if r["kind"] == k]) for k in kinds}
    out["top1_rank_only_by_kind"] = {k: _share([r["top"] == r["expected"] for r in pos if r["kind"] == k]) for k in kinds}
    out["top1_by_lang"] = {lang: _share([r["accepted"] == r["expected"] for r in pos if r.get("lang") == lang]) for lang in ("zh", "en")}
    return out


def ratios(now: Any, base: Any) -> Any:
    """now / base for every number present in both (nested dicts)."""
    if isinstance(now, dict) and isinstance(base, dict):
        return {k: ratios(now[k], base[k]) for k in now if k in base and ratios(now[k], base[k]) is not None}
    if isinstance(now, (int, float)) and isinstance(base, (int, float)) and not isinstance(now, bool):
        return round(now / base, 3) if base else None
    return None


def parse_args() -> argparse.Namespace:
    """The command line (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="200,5000,40000", help="comma-separated KB sizes")
    ap.add_argument("--real", type=Path, default=REPO.parent / "shared" / "data" / "real", help="the real data folder")
    ap.add_argument("--work", type=Path, default=REPO / "data" / "bench" / "grounding_precision", help="KBs and caches")
    ap.add_argument("--tau", type=float, default=None, help="τ (default: the grounder's default)")
    ap.add_argument("--baseline", type=Path, help="a JSON printed earlier: ratios beside each figure")
    ap.add_argument("--dump", type=Path, help="write every query's row (top candidates, route scores) as JSONL per size")
    ap.add_argument("--label", default="", help="a label printed with the figures")
    ap.add_argument(
        "--no-side-by-side", dest="side_by_side", action="store_false",
        help="skip the latency run that grounds each query at every size in turn (p50 ratio to the smallest size)",
    )
    ap.add_argument("--no-crosslingual", action="store_true", help="ground without the cross-lingual pass (retrieval/grounding/crosslingual.py)")
    return ap.parse_args()


def size_entry(rows: list[dict], n: int, tau: float, named: Any) -> dict[str, Any]:
    """One KB size's figures: latency, each split's summary, the negatives grounded and those left out."""
    ms = np.array([r["ms"] for r in rows])
    entry: dict[str, Any] = {
        "entities": n,
        "tau": tau,
        "latency_ms": {"p50": round(float(np.percentile(ms, 50)), 2), "p95": round(float(np.percentile(ms, 95)), 2)},
    }
    for split in ("calibration", "held-out"):
        entry[split] = summarise([r for r in rows if r["split"] == split])
    entry["all"] = summarise(rows)
    entry["negatives_grounded_examples"] = [
        {"query": r["query"], "grounded": r["accepted"], "route": r["accepted_route"], "score": r["score"]}
        for r in rows
        if not r.get("expected") and r["accepted"]
    ][:15]
    entry["negatives_left_out_naming_the_kb"] = named
    return entry


def measure_size(args: argparse.Namespace, size: int, real: Path, embedder: Any, queries: list[dict]) -> dict[str, Any]:
    """Ground every query on the KB of one size; dump its rows (``--dump``) and return its figures."""
    kb = open_kb(args.work, size, real, embedder)
    try:
        rows, tau, named = run_size(kb, queries, args.tau, crosslingual=not args.no_crosslingual)
        n = kb.store.count()
    finally:
        kb.close()
    if args.dump:
        args.dump.mkdir(parents=True, exist_ok=True)
        with (args.dump / f"rows-{size}.jsonl").open("w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return size_entry(rows, n, tau, named)


def side_by_side(args: argparse.Namespace, sizes: list[str], real: Path, embedder: Any, queries: list[dict]) -> dict[str, Any]:
    """The latency run grounding each query at every size in turn."""
    kbs = {int(s): open_kb(args.work, int(s), real, embedder) for s in sizes}
    try:
        return interleaved_latency(kbs, queries, args.tau, crosslingual=not args.no_crosslingual)
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
    result: dict[str, Any] = {
        "label": args.label, "embedder": embedder.name, "crosslingual": not args.no_crosslingual, "queries": len(queries), "sizes": {},
    }
    for size in [int(s) for s in args.sizes.split(",") if s]:
        entry = measure_size(args, size, real, embedder, queries)
        result["sizes"][str(size)] = entry
        log.info("size %d done: %s", size, json.dumps(entry["held-out"], ensure_ascii=False))
    if args.side_by_side and len(result["sizes"]) > 1:
        result["latency_side_by_side"] = side_by_side(args, list(result["sizes"]), real, embedder, queries)
        log.info("latency side by side: %s", json.dumps(result["latency_side_by_side"]))
    if args.baseline and args.baseline.exists():
        base = json.loads(args.baseline.read_text("utf-8"))
        result["ratio_to_baseline"] = {
            size: ratios({k: v for k, v in e.items() if k not in ("negatives_grounded_examples", "negatives_left_out_naming_the_kb")}, base["sizes"].get(size, {}))
            for size, e in result["sizes"].items()
        }
    print(json.dumps(result, ensure_ascii=False, indent=2))


if __name__ == "__main__":
    main()
