"""The statistics every report shares: paired bootstrap over items (scores and 2×2 pass/fail
transitions), exact McNemar, Holm–Bonferroni.  Percentile CIs, 10,000 resamples by default."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np


N_BOOTSTRAP = 10_000


def mcnemar_exact(n01: int, n10: int) -> float:
    """Exact two-sided McNemar p-value (binomial test on the discordant pairs)."""
    from scipy.stats import binomtest

    discordant = n01 + n10
    if discordant == 0:
        return 1.0
    return float(binomtest(n01, discordant, 0.5, alternative="two-sided").pvalue)


def _quantiles(values: np.ndarray, level: float = 0.95) -> tuple[float | None, float | None]:
    finite_or_inf = values[~np.isnan(values)]
    if finite_or_inf.size == 0:
        return None, None
    alpha = (1 - level) / 2
    lo, hi = np.quantile(finite_or_inf, [alpha, 1 - alpha], method="inverted_cdf")
    return _json_float(lo), _json_float(hi)


def _json_float(x: float) -> float | None:
    """NaN → None; infinities are kept (the report writes them as the string "inf")."""
    if math.isnan(x):
        return None
    if math.isinf(x):
        return math.inf
    return float(x)


def bootstrap_transition(
    counts: tuple[int, int, int, int], n_boot: int = N_BOOTSTRAP, rng: np.random.Generator | None = None
) -> dict[str, Any]:
    """Percentile 95% CIs for Δ, repair, damage and ratio under the paired bootstrap."""
    rng = rng if rng is not None else np.random.default_rng(0)
    n = sum(counts)
    if n == 0:
        return {"delta_ci": [None, None], "ratio_ci": [None, None], "repair_ci": [None, None], "damage_ci": [None, None]}
    draws = rng.multinomial(n, np.asarray(counts, dtype=float) / n, size=n_boot)
    n00, n01, n10, n11 = (draws[:, j].astype(float) for j in range(4))
    with np.errstate(divide="ignore", invalid="ignore"):
        delta = (n01 - n10) / n
        repair = np.where(n00 + n01 > 0, n01 / (n00 + n01), np.nan)
        damage = np.where(n10 + n11 > 0, n10 / (n10 + n11), np.nan)
        ratio = np.where(
            damage > 0, repair / damage, np.where((damage == 0) & (repair > 0), np.inf, np.nan)
        )
    return {
        "delta_ci": list(_quantiles(delta)),
        "repair_ci": list(_quantiles(repair)),
        "damage_ci": list(_quantiles(damage)),
        "ratio_ci": list(_quantiles(ratio)),
        "ratio_infinite_share": float(np.isinf(ratio).mean()),
        "ratio_undefined_share": float(np.isnan(ratio).mean()),
    }


def holm(p_values: Mapping[str, float]) -> dict[str, float]:
    """Holm–Bonferroni adjusted p-values (step-down, monotone, capped at 1)."""
    ordered = sorted(p_values.items(), key=lambda kv: kv[1])
    m = len(ordered)
    adjusted: dict[str, float] = {}
    running = 0.0
    for rank, (key, p) in enumerate(ordered):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[key] = running
    return adjusted


def paired_bootstrap(base: np.ndarray, cond: np.ndarray, n_boot: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """Δ mean (cond − base) with a percentile 95% CI and a two-sided bootstrap p-value."""
    diff = np.asarray(cond, dtype=float) - np.asarray(base, dtype=float)
    n = len(diff)
    if n == 0:
        return {"n": 0, "delta": None, "ci": [None, None], "p": None}
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    for start in range(0, n_boot, 1000):  # chunks bound memory for large n
        stop = min(n_boot, start + 1000)
        means[start:stop] = diff[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    p = min(1.0, 2 * min((means <= 0).mean(), (means >= 0).mean()))
    return {"n": n, "delta": float(diff.mean()), "ci": [float(lo), float(hi)], "p": float(p)}


def bootstrap_mean_ci(values: np.ndarray, n_boot: int = 10_000, seed: int = 0) -> list[float | None]:
    """Percentile 95% CI of a mean (items resampled with replacement); ``[None, None]`` without values or resamples."""
    values = np.asarray(values, dtype=float)
    n = len(values)
    if n == 0 or n_boot <= 0:
        return [None, None]
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    for start in range(0, n_boot, 1000):
        stop = min(n_boot, start + 1000)
        means[start:stop] = values[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return [float(lo), float(hi)]
