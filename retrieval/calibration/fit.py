"""Fitting the grounding accept rule: τ, the height margin and the evidence margin, under a false-rate bound.

Each probe is grounded once with no threshold (:func:`probe_features`): its best :data:`TOP_M` candidates'
fused score, evidence-route sum, height over the background, whether an image or sound matched, and whether
the candidate is the expected entity.  Any rule ``(τ, min_height, min_evidence)`` is then read offline: a
probe's top hit is its best candidate that passes the margins, accepted when its score ≥ τ
(:func:`retrieval.grounding.accepts` read on arrays).

**The guarantee.**  On the calibration split, a rule is admissible when the one-sided
:data:`CONFIDENCE` Clopper-Pearson upper bound of its false-grounding rate on the negatives (the packaged
captions and null labels) is at most the target; among admissible rules the one with the best top-1 on the
positives wins (ties: the higher τ, height, evidence margin).  With ``k`` false groundings among ``n``
negatives, the bound says: with 95 % confidence the rule's false rate on text like the negatives is ≤ target.
It needs ``n ≥ ln(0.05)/ln(1 − target)`` negatives even at ``k = 0`` (299 for 1 %): fewer, and no rule is
admissible; the fit then takes the rule with the lowest bound and says so.  The held-out split is read once,
after the choice: its false rate with its own bound, top-1, and the *oracle* (the best top-1 any rule of the
grid reaches there at a false rate ≤ target).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import beta

from retrieval.calibration.probes import Probe
from retrieval.calibration.record import Thresholds

__all__ = ["CONFIDENCE", "Features", "RuleFigures", "choose_rule", "clopper_pearson_upper", "min_negatives", "probe_features", "rule_figures"]

#: candidates of each probe kept (the top hit at any rule is among them: rules only drop candidates)
TOP_M = 8
#: the confidence of the false-rate bound
CONFIDENCE = 0.95
#: the grids the rule is chosen on (τ on the fused scale: a cosine plus up to 0.5 of evidence terms)
TAU_GRID = np.round(np.arange(0.30, 1.30, 0.0025), 4)
HEIGHT_GRID = np.round(np.arange(0.0, 0.205, 0.005), 3)
EVIDENCE_GRID = (0.03, 0.045, 0.05, 0.06, 0.08, 0.1)


def clopper_pearson_upper(k: int, n: int, confidence: float = CONFIDENCE) -> float:
    """One-sided Clopper-Pearson upper bound of a rate seen ``k`` times in ``n`` (1.0 when ``n`` is 0)."""
    if n <= 0:
        return 1.0
    if k >= n:
        return 1.0
    return float(beta.ppf(confidence, k + 1, n - k))


def min_negatives(target: float, confidence: float = CONFIDENCE) -> int:
    """The fewest negatives whose bound at zero false groundings is ≤ ``target``."""
    return int(math.ceil(math.log(1 - confidence) / math.log(1 - target)))


@dataclass
class Features:
    """Each probe's top candidates as arrays (rows: probes; columns: candidates, best first)."""

    probes: list[Probe]
    score: np.ndarray
    evidence: np.ndarray
    height: np.ndarray
    media: np.ndarray
    right: np.ndarray

    def subset(self, mask: np.ndarray) -> "Features":
        idx = np.flatnonzero(mask)
        return Features([self.probes[i] for i in idx], self.score[idx], self.evidence[idx], self.height[idx], self.media[idx], self.right[idx])

    def mask(self, split: str | None = None, negative: bool | None = None) -> np.ndarray:
        return np.array([(split is None or p.split == split) and (negative is None or (p.expected is None) == negative) for p in self.probes], bool)


def _cues(probe: Probe) -> Any:
    from retrieval.grounding import GroundingCues

    if probe.cue == "ocr":
        return GroundingCues(ocr_text=probe.text)
    if probe.cue == "visual":
        return GroundingCues(visual_handle=probe.text)
    return GroundingCues.from_text(probe.text)


def probe_features(
    grounder: Any, probes: Iterable[Probe], total: int, progress: Callable[[int, int], None] | None = None,
    right: Callable[[Probe, Any], bool] | None = None,
) -> Features:
    """Ground every probe with no threshold and keep its top candidates (the grounder's τ and margins are unused);
    ``right(probe, entity)``: whether a candidate is the expected one (default: its id is ``probe.expected``)."""
    from retrieval.grounding import evidence_sum

    kept: list[Probe] = []
    rows: list[list[tuple[float, float, float, bool, bool]]] = []
    for i, probe in enumerate(probes, 1):
        result = grounder.ground(_cues(probe))
        row = []
        for g in result.candidates[:TOP_M]:
            media = g.route in ("image", "sound") or "image" in g.route_scores or "sound" in g.route_scores
            ok = right(probe, g.entity) if right is not None else g.entity.id == probe.expected
            row.append((g.score, evidence_sum(g.route_scores), g.height, media, ok))
        kept.append(probe)
        rows.append(row)
        if progress:
            progress(i, total)
    n = len(rows)
    arr = np.full((n, TOP_M, 5), np.nan)
    for i, row in enumerate(rows):
        if row:
            arr[i, : len(row)] = row
    return Features(kept, arr[..., 0], arr[..., 1], arr[..., 2], arr[..., 3] == 1.0, arr[..., 4] == 1.0)


def _top(f: Features, min_height: float, min_evidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Per probe: the score of its best candidate passing the margins (-inf: none) and whether it is the right one."""
    passing = f.media | (f.evidence >= min_evidence) | (f.height >= min_height)
    passing &= ~np.isnan(f.score)
    first = np.argmax(passing, axis=1)
    has = passing.any(axis=1)
    rows = np.arange(len(first))
    score = np.where(has, f.score[rows, first], -np.inf)
    return score, has & f.right[rows, first]


@dataclass
class RuleFigures:
    """A rule's figures on some probes."""

    negatives: int
    false: int
    positives: int
    correct: int

    @property
    def false_rate(self) -> float:
        return self.false / self.negatives if self.negatives else 0.0

    @property
    def top1(self) -> float:
        return self.correct / self.positives if self.positives else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "negatives": self.negatives, "false": self.false, "false_rate": round(self.false_rate, 4),
            "false_rate_upper": round(clopper_pearson_upper(self.false, self.negatives), 4),
            "positives": self.positives, "top1": round(self.top1, 4),
        }


def rule_figures(f: Features, t: Thresholds) -> RuleFigures:
    """False groundings of the negatives and top-1 of the positives under ``t`` (its τ and margins)."""
    score, right = _top(f, t.min_height, t.min_evidence)
    accepted = score >= t.tau
    neg = np.array([p.expected is None for p in f.probes], bool)
    return RuleFigures(int(neg.sum()), int((accepted & neg).sum()), int((~neg).sum()), int((accepted & right & ~neg).sum()))


def _grid(f: Features) -> Iterable[tuple[float, float, np.ndarray, np.ndarray]]:
    """For every (height, evidence) margin: the false counts and correct counts over TAU_GRID."""
    neg = np.array([p.expected is None for p in f.probes], bool)
    for h in HEIGHT_GRID:
        for e in EVIDENCE_GRID:
            score, right = _top(f, float(h), float(e))
            acc = score[None, :] >= TAU_GRID[:, None]
            yield float(h), float(e), (acc & neg).sum(axis=1), (acc & right & ~neg).sum(axis=1)


def _upper_table(n: int) -> np.ndarray:
    """:func:`clopper_pearson_upper` for k = 0 … n."""
    k = np.arange(n + 1)
    with np.errstate(all="ignore"):
        upper = beta.ppf(CONFIDENCE, k + 1, np.maximum(n - k, 1))
    return np.where(k >= n, 1.0, np.nan_to_num(upper, nan=1.0)) if n > 0 else np.ones(1)


def choose_rule(cal: Features, target: float, base: Thresholds) -> tuple[Thresholds, bool]:
    """The admissible rule with the best top-1 on ``cal`` (module docstring); False when none was admissible
    (the rule with the lowest bound is returned).  Corpus floors are kept from ``base``."""
    n_neg = int(sum(p.expected is None for p in cal.probes))
    table = _upper_table(n_neg)
    best: tuple[Any, ...] | None = None
    fallback: tuple[Any, ...] | None = None
    for h, e, false, correct in _grid(cal):
        upper = table[false]
        ok = upper <= target
        if ok.any():  # the best top-1 among admissible τ, the highest τ on a tie
            i = max(np.flatnonzero(ok), key=lambda j: (correct[j], TAU_GRID[j]))
            key = (int(correct[i]), float(TAU_GRID[i]), h, e)
            best = key if best is None or key > best else best
        i = max(range(len(TAU_GRID)), key=lambda j: (-upper[j], correct[j], TAU_GRID[j]))
        fkey = (-float(upper[i]), int(correct[i]), float(TAU_GRID[i]), h, e)
        fallback = fkey if fallback is None or fkey > fallback else fallback
    if best is not None:
        _, tau, h, e = best
        ok_found = True
    else:
        assert fallback is not None
        _, _, tau, h, e = fallback
        ok_found = False
    return base.model_copy(update={"tau": float(tau), "min_height": h, "min_evidence": e}), ok_found


def oracle(held: Features, target: float) -> dict[str, Any]:
    """The best top-1 any rule of the grid reaches on ``held`` at a false rate ≤ ``target`` (point estimate)."""
    n_neg = int(sum(p.expected is None for p in held.probes))
    n_pos = len(held.probes) - n_neg
    best = (-1, 0.0, 0.0, 0.0)
    for h, e, false, correct in _grid(held):
        ok = false <= target * n_neg
        if ok.any():
            i = int(np.argmax(np.where(ok, correct, -1)))
            if correct[i] > best[0]:
                best = (int(correct[i]), float(TAU_GRID[i]), h, e)
    return {"top1": round(best[0] / n_pos, 4) if n_pos and best[0] >= 0 else None, "tau": best[1], "min_height": best[2], "min_evidence": best[3]}


def figures_by(f: Features, t: Thresholds, field: str) -> dict[str, dict[str, Any]]:
    """:func:`rule_figures` per value of a probe field (``kind``, ``language``)."""
    out: dict[str, dict[str, Any]] = {}
    for value in sorted({getattr(p, field) for p in f.probes}):
        sub = f.subset(np.array([getattr(p, field) == value for p in f.probes], bool))
        fig = rule_figures(sub, t)
        out[value] = {"n": len(sub.probes), **({"top1": round(fig.top1, 4)} if fig.positives else {"false_rate": round(fig.false_rate, 4)})}
    return out
