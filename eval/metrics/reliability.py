"""Judge reliability against human labels: Cohen's κ, inter-judge agreement, Spearman ρ.

Inputs are judge records per condition (``{cond: records}``) for human labels and for
each judge.  κ per judge is computed per layer (V, I, K, R, Success) pooled over every
(condition, item) with a human label; an item the human did not label is left out,
an item the judge did not score counts as a failure (as in every metric).  The
intersection is the item-level AND of all judges (unscored on any side = failure).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from eval.tasks.memebench import BenchmarkItem
from eval.metrics.vikr import PAIRED_LAYERS, VikrMatrix, vikr_matrix

Records = Sequence[dict[str, Any]]


def kappa(a: np.ndarray, b: np.ndarray) -> float | None:
    """Cohen's κ (sklearn); ``None`` when undefined (e.g. both raters constant and equal)."""
    from sklearn.metrics import cohen_kappa_score

    if len(a) == 0:
        return None
    if np.array_equal(a, b) and len(np.unique(a)) == 1:
        return None  # κ = 0/0: perfect agreement on a constant label
    value = float(cohen_kappa_score(a.astype(int), b.astype(int)))
    return None if math.isnan(value) else value


def _stack(matrices: list[VikrMatrix], layer: str, masks: list[np.ndarray] | None = None) -> np.ndarray:
    parts = [m.layer(layer) if masks is None else m.layer(layer)[mask] for m, mask in zip(matrices, masks or [None] * len(matrices))]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def _intersection(matrices: list[VikrMatrix]) -> VikrMatrix:
    first = matrices[0]
    vectors = np.logical_and.reduce([m.vectors for m in matrices])
    scored = np.logical_and.reduce([m.scored for m in matrices])
    vectors = vectors & scored[:, None]
    return VikrMatrix(
        ids=first.ids, vectors=vectors, scored=scored, items_passed=first.items_passed * np.nan,
        items_total=first.items_total * np.nan, languages=first.languages, domains=first.domains,
        reasons=[None if s else "missing" for s in scored],
    )


def judge_reliability(
    bench: Sequence[BenchmarkItem],
    human: Mapping[str, Records],
    judges: Mapping[str, Mapping[str, Records]],
) -> dict[str, Any]:
    """κ per judge and for the intersection vs humans, inter-judge agreement, Spearman ρ."""
    from scipy.stats import spearmanr

    matrices = {j: {c: vikr_matrix(bench, recs) for c, recs in by_cond.items()} for j, by_cond in judges.items()}
    human_m = {c: vikr_matrix(bench, recs) for c, recs in human.items()}
    out: dict[str, Any] = {"vs_human": {}, "inter_judge": {}, "spearman": {}}

    def vs_human(per_cond: Mapping[str, VikrMatrix]) -> dict[str, Any]:
        conds = [c for c in human_m if c in per_cond]
        masks = [human_m[c].scored for c in conds]
        result: dict[str, Any] = {"n": int(sum(m.sum() for m in masks)), "conditions": conds}
        for layer in PAIRED_LAYERS:
            h = _stack([human_m[c] for c in conds], layer, masks)
            j = _stack([per_cond[c] for c in conds], layer, masks)
            result[layer] = {"kappa": kappa(h, j), "agreement": float((h == j).mean()) if len(h) else None}
        return result

    for judge, per_cond in matrices.items():
        out["vs_human"][judge] = vs_human(per_cond)
    if len(matrices) >= 2:
        shared = set.intersection(*(set(p) for p in matrices.values()))
        intersection = {c: _intersection([matrices[j][c] for j in matrices]) for c in shared}
        out["vs_human"]["intersection"] = vs_human(intersection)
    for ja, jb in itertools.combinations(matrices, 2):
        conds = sorted(set(matrices[ja]) & set(matrices[jb]))
        pair: dict[str, Any] = {"conditions": conds}
        for layer in PAIRED_LAYERS:
            a = _stack([matrices[ja][c] for c in conds], layer)
            b = _stack([matrices[jb][c] for c in conds], layer)
            pair[layer] = {"kappa": kappa(a, b), "agreement": float((a == b).mean()) if len(a) else None}
        out["inter_judge"][f"{ja}|{jb}"] = pair
        success_a = [float(matrices[ja][c].success.mean()) for c in conds]
        success_b = [float(matrices[jb][c].success.mean()) for c in conds]
        rho: float | None = None
        p: float | None = None
        if len(conds) >= 3 and len(set(success_a)) > 1 and len(set(success_b)) > 1:
            res = spearmanr(success_a, success_b)
            rho, p = float(res.statistic), float(res.pvalue)
        out["spearman"][f"{ja}|{jb}"] = {"rho": rho, "p": p, "n_conditions": len(conds)}
    return out
