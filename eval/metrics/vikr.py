"""VIKR metrics, as defined by the MemeBench paper.

* A dimension (layer) passes when all its checklist items pass; Success = V∧I∧K∧R.
* The denominator is **every benchmark item**; an unscored item (missing, no response,
  unparseable judge reply, judge error) counts as a failure of all four layers and is
  reported separately (``n_unscored`` and ``unscored_reasons``).
* Paired against a baseline, per layer and for Success, with the 2×2 transition counts
  ``n_ab`` (a = baseline pass, b = condition pass):

  - repair = n01 / (n00 + n01): share of baseline failures that now pass
    (``None`` when the baseline has no failures);
  - damage = n10 / (n10 + n11): share of baseline passes that now fail
    (``None`` when the baseline has no passes);
  - ratio = repair / damage.  Zero damage is explicit: ``ratio`` is ``None`` with
    ``ratio_status = "infinite"`` when repair > 0, and ``"undefined"`` when repair is 0
    or either side is undefined; otherwise ``ratio_status = "finite"``.
  - ΔSuccess = (n01 − n10)/n = repair·(1 − p_base) − damage·p_base.

* Paired bootstrap CIs (percentile, 10,000 resamples over items).  Every statistic here
  is a function of the 2×2 transition counts, and resampling n items with replacement
  draws those counts from Multinomial(n, observed cell shares); we draw them that way
  (numpy), which is the same bootstrap distribution at a fraction of the cost.
* Exact McNemar p-values: a two-sided binomial test on the discordant pairs
  (``scipy.stats.binomtest``); 1.0 when there are none.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eval.tasks.memebench import BenchmarkItem
from eval.records import RecordIndex
from eval.metrics.stats import N_BOOTSTRAP, bootstrap_transition, mcnemar_exact
from eval.verdicts import LAYERS, verdict_of

STATES: tuple[str, ...] = tuple(f"{i:04b}" for i in range(16))  # "VIKR" bits, e.g. "1101"
MONOTONIC_STATES = frozenset({"0000", "1000", "1100", "1110", "1111"})
PAIRED_LAYERS: tuple[str, ...] = (*LAYERS, "Success")


@dataclass
class VikrMatrix:
    """Per-item verdicts of one condition, aligned to the benchmark order."""

    ids: list[str]
    vectors: np.ndarray  # (n, 4) bool; unscored rows are all False
    scored: np.ndarray  # (n,) bool
    items_passed: np.ndarray  # (n,) float: checklist items passed (NaN when not itemized)
    items_total: np.ndarray  # (n,) float
    languages: list[str | None] = field(default_factory=list)
    domains: list[str | None] = field(default_factory=list)
    reasons: list[str | None] = field(default_factory=list)  # unscored reason per item

    @property
    def n(self) -> int:
        return len(self.ids)

    @property
    def unscored_reasons(self) -> dict[str, int]:
        return dict(Counter(r for r in self.reasons if r is not None))

    @property
    def success(self) -> np.ndarray:
        return self.vectors.all(axis=1)

    def layer(self, name: str) -> np.ndarray:
        """Pass/fail per item for a layer name (V, I, K, R, Success)."""
        return self.success if name == "Success" else self.vectors[:, LAYERS.index(name)]

    def subset(self, mask: np.ndarray) -> VikrMatrix:
        idx = np.flatnonzero(mask)
        return VikrMatrix(
            ids=[self.ids[i] for i in idx],
            vectors=self.vectors[idx],
            scored=self.scored[idx],
            items_passed=self.items_passed[idx],
            items_total=self.items_total[idx],
            languages=[self.languages[i] for i in idx],
            domains=[self.domains[i] for i in idx],
            reasons=[self.reasons[i] for i in idx],
        )


def vikr_matrix(bench: Sequence[BenchmarkItem], records: Sequence[dict[str, Any]]) -> VikrMatrix:
    """Align judge records to the benchmark; items without a record are unscored."""
    index = RecordIndex(records)
    n = len(bench)
    vectors = np.zeros((n, 4), dtype=bool)
    scored = np.zeros(n, dtype=bool)
    passed = np.full(n, np.nan)
    total = np.full(n, np.nan)
    reasons: list[str | None] = [None] * n
    for i, item in enumerate(bench):
        record = index.get(item.id, item.image_path)
        verdict = verdict_of(record.get("evaluation") if record else None)
        if verdict.vector is not None:
            vectors[i] = verdict.vector
            scored[i] = True
        else:
            reasons[i] = verdict.unscored_reason
        if verdict.items_total:
            passed[i], total[i] = verdict.items_passed, verdict.items_total
    matrix = VikrMatrix(
        ids=[item.id for item in bench],
        vectors=vectors,
        scored=scored,
        items_passed=passed,
        items_total=total,
        languages=[item.language for item in bench],
        domains=[item.domain for item in bench],
        reasons=reasons,
    )
    return matrix


def state_codes(vectors: np.ndarray) -> np.ndarray:
    """Integer VIKR state per item (V is the high bit): 0..15."""
    weights = np.array([8, 4, 2, 1])
    return vectors.astype(int) @ weights


def _share(count: int | float, n: int) -> float:
    return float(count) / n if n else 0.0


def condition_metrics(m: VikrMatrix) -> dict[str, Any]:
    """Success, coverage, relaxed 3/4, I∧K∧R, items passed, VIKR states and patterns."""
    n = m.n
    v = m.vectors
    layers_passed = v.sum(axis=1)
    codes = state_codes(v)
    counts = np.bincount(codes, minlength=16)
    states = {STATES[i]: int(counts[i]) for i in range(16)}
    non_monotonic = sum(c for s, c in states.items() if s not in MONOTONIC_STATES)
    V, I, K, R = (v[:, j] for j in range(4))  # noqa: E741
    # mean share of checklist items passed: unscored items count as 0 of their items;
    # scored items judged only at dimension level are left out (n_item_level says how many count)
    item_rate = np.where(m.scored, m.items_passed / m.items_total, 0.0)
    item_known = ~m.scored | ~np.isnan(item_rate)
    return {
        "n": n,
        "n_scored": int(m.scored.sum()),
        "n_unscored": int(n - m.scored.sum()),
        "unscored_reasons": dict(sorted(m.unscored_reasons.items())),
        "success": _share(int(m.success.sum()), n),
        "coverage": {layer: _share(int(v[:, j].sum()), n) for j, layer in enumerate(LAYERS)},
        "relaxed_3of4": _share(int((layers_passed >= 3).sum()), n),
        "ikr": _share(int((I & K & R).sum()), n),
        "mean_layers_passed": float(layers_passed.mean()) if n else 0.0,
        "mean_item_pass_rate": float(np.nanmean(item_rate[item_known])) if item_known.any() else None,
        "n_item_level": int(item_known.sum()),
        "states": states,
        "state_shares": {s: _share(c, n) for s, c in states.items()},
        "non_monotonic_share": _share(non_monotonic, n),
        "patterns": {
            "I1_K0": _share(int((I & ~K).sum()), n),
            "I0_K1": _share(int((~I & K).sum()), n),
            "I1_K1_R0": _share(int((I & K & ~R).sum()), n),
        },
    }


def breakdown(m: VikrMatrix, by: str) -> dict[str, dict[str, Any]]:
    """Core metrics per value of ``language`` or ``domain`` (missing values: ``"unknown"``)."""
    values = m.languages if by == "language" else m.domains
    keys = np.array([v if v is not None else "unknown" for v in values], dtype=object)
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(set(keys.tolist())):
        sub = m.subset(keys == key)
        full = condition_metrics(sub)
        out[key] = {k: full[k] for k in ("n", "n_unscored", "success", "coverage", "relaxed_3of4", "ikr")}
    return out


# -- paired comparisons --------------------------------------------------------------------


def transition_counts(base: np.ndarray, cond: np.ndarray) -> tuple[int, int, int, int]:
    """(n00, n01, n10, n11): first digit baseline pass, second condition pass."""
    base = np.asarray(base, dtype=bool)
    cond = np.asarray(cond, dtype=bool)
    if base.shape != cond.shape:
        raise ValueError(f"paired arrays differ in shape: {base.shape} vs {cond.shape}")
    n11 = int((base & cond).sum())
    n10 = int((base & ~cond).sum())
    n01 = int((~base & cond).sum())
    return len(base) - n11 - n10 - n01, n01, n10, n11


def ratio_status(repair: float | None, damage: float | None) -> str:
    if repair is None or damage is None:
        return "undefined"
    if damage == 0:
        return "infinite" if repair > 0 else "undefined"
    return "finite"


def repair_damage(n00: int, n01: int, n10: int, n11: int) -> dict[str, Any]:
    """Repair, damage, ratio and Δ from transition counts (see the module docstring)."""
    n = n00 + n01 + n10 + n11
    base_fail, base_pass = n00 + n01, n10 + n11
    repair = n01 / base_fail if base_fail else None
    damage = n10 / base_pass if base_pass else None
    status = ratio_status(repair, damage)
    ratio = repair / damage if status == "finite" else None  # type: ignore[operator]
    return {
        "n": n,
        "base_rate": base_pass / n if n else 0.0,
        "cond_rate": (n01 + n11) / n if n else 0.0,
        "delta": (n01 - n10) / n if n else 0.0,
        "repair": repair,
        "damage": damage,
        "ratio": ratio,
        "ratio_status": status,
        "repaired": n01,
        "damaged": n10,
        "transition": [[n00, n01], [n10, n11]],
    }


def paired_metrics(
    base: VikrMatrix, cond: VikrMatrix, n_boot: int = N_BOOTSTRAP, seed: int = 0
) -> dict[str, dict[str, Any]]:
    """Per layer (V, I, K, R) and for Success: repair/damage/ratio/Δ, CIs, McNemar p."""
    if base.ids != cond.ids:
        raise ValueError("paired matrices must be aligned to the same benchmark items")
    rng = np.random.default_rng(seed)
    out: dict[str, dict[str, Any]] = {}
    for layer in PAIRED_LAYERS:
        counts = transition_counts(base.layer(layer), cond.layer(layer))
        stats = repair_damage(*counts)
        stats["mcnemar_p"] = mcnemar_exact(counts[1], counts[2])
        if n_boot:
            stats.update(bootstrap_transition(counts, n_boot, rng))
        out[layer] = stats
    return out
