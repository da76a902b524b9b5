"""Fitting the grounding accept rule: τ, the height margin and the evidence margin, under a false-rate bound.

Each probe is grounded once with no threshold (:func:`probe_features`): its best :data:`TOP_M` candidates'
fused score, evidence-route sum, height over the background, whether an image or sound matched, and whether
the candidate is the expected entity.  Any rule ``(τ, min_height, min_evidence)`` is then read offline: a
probe's top hit is its best candidate that passes the margins, accepted when its score ≥ τ
(:func:`retrieval.grounding.accepts` read on arrays).

**The method: Learn then Test with a fixed sequence.**  The rules tested form one sequence fixed before any
negative is read (:func:`rule_path`): τ from the top of :data:`TAU_GRID` down, and at each τ the margins that
give the calibration split's *positives* their best top-1 there.  The calibration split's negatives (the
packaged captions, null labels) then test the rules in that order (:func:`fixed_sequence`): a rule is certified
when the one-sided :data:`CONFIDENCE` Clopper-Pearson upper bound of its false-grounding rate is ≤ the target,
and the walk stops at the first rule that is not.  Of the certified rules the one with the best top-1 on the
positives is kept (ties: the stricter).

**The guarantee.**  With probability ≥ :data:`CONFIDENCE` over the draw of the negatives, *every* certified
rule, hence the one kept, grounds at most the target share of text drawn like the negatives.  Testing in an
order fixed in advance and stopping at the first failure controls the family-wise error at 1 − confidence with
no multiple-testing correction (Angelopoulos et al., *Learn then Test*, 2021): a false certification needs the
first rule in the sequence whose true rate exceeds the target to pass its own test, which happens with
probability ≤ 1 − confidence.  Choosing the best of many rules each bounded on the same negatives gives no such
guarantee (the pick lands where the negatives happened to fall just short).  The bound needs
``n ≥ ln(1 − confidence)/ln(1 − target)`` negatives even at ``k = 0`` (299 for 1 %): with fewer, the test is run
at the lowest rate ``n`` negatives can bound (:func:`clopper_pearson_upper` at ``k = 0``) and the report says so.
The held-out split is read once, after the choice: its false rate with its own bound, top-1, and the *oracle*
(the best top-1 any rule of the full grid reaches there at a point false rate ≤ the target).
"""

from __future__ import annotations

import math
from functools import lru_cache
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import beta

from retrieval.calibration.probes import Probe
from retrieval.calibration.record import Thresholds

__all__ = [
    "CONFIDENCE", "Features", "RuleFigures", "Selection", "choose_rule", "clopper_pearson_upper", "fixed_sequence", "min_negatives",
    "oracle", "probe_features", "rule_figures", "rule_path", "certifiable_rate",
]

#: candidates of each probe kept (the top hit at any rule is among them: rules only drop candidates)
TOP_M = 8
#: the confidence of the false-rate bound
CONFIDENCE = 0.95
#: the grids the rule is chosen on (τ on the fused scale: a cosine plus up to 0.5 of evidence terms)
TAU_GRID = np.round(np.arange(0.30, 1.30, 0.0025), 4)
HEIGHT_GRID = np.round(np.arange(0.0, 0.205, 0.005), 3)
EVIDENCE_GRID = (0.03, 0.045, 0.05, 0.06, 0.08, 0.1)


@lru_cache(maxsize=65536)
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
    from retrieval.grounding import accepted_alone, evidence_sum

    table = grounder.table  # the grounder's routes: which score keys are evidence, which may accept alone
    kept: list[Probe] = []
    rows: list[list[tuple[float, float, float, bool, bool]]] = []
    for i, probe in enumerate(probes, 1):
        result = grounder.ground(_cues(probe))
        row = []
        for g in result.candidates[:TOP_M]:
            ok = right(probe, g.entity) if right is not None else g.entity.id == probe.expected
            row.append((g.score, evidence_sum(g.route_scores, table), g.height, accepted_alone(g, table), ok))
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


def certifiable_rate(target: float, negatives: int, confidence: float = CONFIDENCE) -> float:
    """The rate the test is run at: ``target``, or the lowest rate ``negatives`` can bound when that is higher."""
    return max(target, clopper_pearson_upper(0, negatives, confidence))


def fixed_sequence(false: Iterable[int], negatives: int, rate: float, confidence: float = CONFIDENCE) -> int:
    """How many rules of a sequence fixed in advance (strictest first; ``false``: each rule's false count among
    ``negatives``) the fixed-sequence test certifies: it stops at the first rule whose Clopper-Pearson upper bound
    exceeds ``rate`` (module docstring)."""
    certified = 0
    for k in false:
        if clopper_pearson_upper(int(k), negatives, confidence) > rate + 1e-12:
            break
        certified += 1
    return certified


def rule_path(cal: Features) -> list[tuple[float, float, float]]:
    """The rules the test walks, strictest first: τ from the top of :data:`TAU_GRID` down, each with the margins
    (of :data:`HEIGHT_GRID` × :data:`EVIDENCE_GRID`) that give the *positives* of ``cal`` their best top-1 at that
    τ (ties: the higher margins).  The negatives are not read, so the order is fixed before they test it."""
    pos = cal.subset(np.array([p.expected is not None for p in cal.probes], bool))
    best_correct = np.full(len(TAU_GRID), -1)
    margins = [(0.0, 0.0)] * len(TAU_GRID)
    for h, e, _, correct in _grid(pos):  # grid order: margins rise, so ">=" keeps the higher ones on a tie
        better = correct >= best_correct
        best_correct = np.where(better, correct, best_correct)
        for i in np.flatnonzero(better):
            margins[i] = (h, e)
    return [(float(TAU_GRID[i]), *margins[i]) for i in reversed(range(len(TAU_GRID)))]


@dataclass
class Selection:
    """What the fit chose: the thresholds, how many rules of the sequence were certified, the rate tested."""

    thresholds: Thresholds
    certified: int
    tested: int
    rate: float


def choose_rule(cal: Features, target: float, base: Thresholds) -> Selection:
    """The certified rule with the best top-1 on ``cal``'s positives (module docstring); with none certified the
    strictest rule of the sequence (it grounds next to nothing).  Corpus floors are kept from ``base``."""
    path = rule_path(cal)
    neg = np.array([p.expected is None for p in cal.probes], bool)
    n_neg = int(neg.sum())
    rate = certifiable_rate(target, n_neg)
    counts = [rule_figures(cal, base.model_copy(update={"tau": t, "min_height": h, "min_evidence": e})) for t, h, e in path]
    certified = fixed_sequence((c.false for c in counts), n_neg, rate)
    pick = max(range(certified), key=lambda i: (counts[i].correct, -i)) if certified else 0
    tau, h, e = path[pick]
    return Selection(base.model_copy(update={"tau": tau, "min_height": h, "min_evidence": e}), certified, len(path), rate)


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
