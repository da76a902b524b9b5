"""Metrics: hand-computed expected values, edge cases, and hypothesis identities."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eval.tasks.memebench import load_benchmark
from eval.metrics.stats import bootstrap_transition, mcnemar_exact
from eval.metrics.vikr import (
    breakdown,
    condition_metrics,
    paired_metrics,
    repair_damage,
    transition_counts,
    vikr_matrix,
)
from eval.verdicts import evaluation_from_item_results, evaluation_from_vector, unscored_evaluation
from tests.eval.evalkit import make_item, write_bench

BASE = ["1111", "1110", "1100", "1000", "0000", "1011", None, "missing"]
COND = ["0111", "1111", "1110", "0000", "1111", "1011", "1111", "1111"]


def records(codes):
    out = []
    for i, code in enumerate(codes):
        if code == "missing":
            continue
        ev = unscored_evaluation("parse_failure", "bad") if code is None else evaluation_from_vector([int(c) for c in code])
        out.append({"id": f"m{i}", "image_path": f"images/m{i}.png", "response": "r", "evaluation": ev})
    return out


@pytest.fixture
def bench(tmp_path):
    items = [make_item(i, language="en" if i < 5 else "zh", domain=None if i % 2 else "anime") for i in range(8)]
    return load_benchmark(write_bench(tmp_path, items))


def test_condition_metrics_by_hand(bench):
    m = condition_metrics(vikr_matrix(bench, records(BASE)))
    assert m["n"] == 8 and m["n_scored"] == 6 and m["n_unscored"] == 2
    assert m["unscored_reasons"] == {"missing": 1, "parse_failure": 1}
    assert m["success"] == 1 / 8
    assert m["coverage"] == {"V": 5 / 8, "I": 3 / 8, "K": 3 / 8, "R": 2 / 8}
    assert m["relaxed_3of4"] == 3 / 8
    assert m["ikr"] == 1 / 8
    assert m["mean_layers_passed"] == 13 / 8
    assert {s: c for s, c in m["states"].items() if c} == {
        "1111": 1, "1110": 1, "1100": 1, "1000": 1, "0000": 3, "1011": 1
    }
    assert sum(m["states"].values()) == 8
    assert m["non_monotonic_share"] == 1 / 8
    assert m["patterns"] == {"I1_K0": 1 / 8, "I0_K1": 1 / 8, "I1_K1_R0": 1 / 8}


def test_mean_item_pass_rate_by_hand(tmp_path):
    items = [make_item(i, n_checks=(2, 1, 1, 1)) for i in range(3)]
    bench = load_benchmark(write_bench(tmp_path, items))
    recs = [
        {"id": "m0", "evaluation": evaluation_from_item_results(
            {"visual": [{"pass": 1}, {"pass": 0}], "identity": [{"pass": 1}], "knowledge": [{"pass": 1}], "reasoning": [{"pass": 0}]})},
        {"id": "m1", "evaluation": evaluation_from_vector([1, 1, 1, 1])},  # dimension-level only: not counted
        {"id": "m2", "evaluation": None},  # unscored: 0 of its items
    ]
    m = condition_metrics(vikr_matrix(bench, recs))
    assert m["mean_item_pass_rate"] == pytest.approx((3 / 5 + 0) / 2)
    assert m["n_item_level"] == 2


def test_breakdown_by_language_and_domain(bench):
    matrix = vikr_matrix(bench, records(BASE))
    by_lang = breakdown(matrix, "language")
    assert by_lang["en"]["n"] == 5 and by_lang["en"]["success"] == 1 / 5
    assert by_lang["en"]["coverage"]["V"] == 4 / 5
    assert by_lang["zh"]["n"] == 3 and by_lang["zh"]["n_unscored"] == 2 and by_lang["zh"]["coverage"]["K"] == 1 / 3
    by_domain = breakdown(matrix, "domain")
    assert by_domain["unknown"]["n"] == 4 and by_domain["anime"]["n"] == 4


def test_paired_metrics_by_hand(bench):
    base = vikr_matrix(bench, records(BASE))
    cond = vikr_matrix(bench, records(COND))
    p = paired_metrics(base, cond, n_boot=2000)
    s = p["Success"]
    assert s["transition"] == [[3, 4], [1, 0]]
    assert s["repair"] == 4 / 7 and s["damage"] == 1.0 and s["ratio"] == pytest.approx(4 / 7)
    assert s["delta"] == 3 / 8 and s["ratio_status"] == "finite"
    assert s["mcnemar_p"] == pytest.approx(12 / 32)
    v = p["V"]
    assert v["transition"] == [[0, 3], [2, 3]]
    assert v["repair"] == 1.0 and v["damage"] == 2 / 5 and v["ratio"] == pytest.approx(2.5) and v["delta"] == 1 / 8
    assert v["mcnemar_p"] == pytest.approx(1.0)
    i = p["I"]
    assert i["transition"] == [[2, 3], [0, 3]]
    assert i["repair"] == 3 / 5 and i["damage"] == 0.0 and i["ratio"] is None and i["ratio_status"] == "infinite"
    assert p["K"]["repair"] == 4 / 5 and p["R"]["repair"] == 4 / 6
    lo, hi = s["delta_ci"]
    assert lo <= 3 / 8 <= hi and -1 <= lo < hi <= 1


def test_repair_damage_edge_cases():
    no_fail = repair_damage(0, 0, 2, 8)  # baseline passes everything
    assert no_fail["repair"] is None and no_fail["damage"] == 0.2 and no_fail["ratio_status"] == "undefined"
    assert no_fail["delta"] == -0.2
    no_pass = repair_damage(6, 4, 0, 0)  # baseline passes nothing
    assert no_pass["damage"] is None and no_pass["repair"] == 0.4 and no_pass["ratio"] is None
    assert no_pass["ratio_status"] == "undefined"
    zero_zero = repair_damage(5, 0, 0, 5)
    assert zero_zero["repair"] == 0 and zero_zero["damage"] == 0 and zero_zero["ratio_status"] == "undefined"
    infinite = repair_damage(5, 1, 0, 5)
    assert infinite["ratio"] is None and infinite["ratio_status"] == "infinite"
    empty = repair_damage(0, 0, 0, 0)
    assert empty["delta"] == 0.0 and empty["repair"] is None and empty["damage"] is None


def test_all_unscored(bench):
    m = condition_metrics(vikr_matrix(bench, []))
    assert m["success"] == 0 and m["coverage"] == {"V": 0, "I": 0, "K": 0, "R": 0}
    assert m["n_unscored"] == 8 and m["unscored_reasons"] == {"missing": 8}
    assert m["states"]["0000"] == 8 and m["mean_item_pass_rate"] == 0.0
    p = paired_metrics(vikr_matrix(bench, []), vikr_matrix(bench, []), n_boot=100)
    assert p["Success"]["repair"] == 0.0 and p["Success"]["damage"] is None
    assert p["Success"]["mcnemar_p"] == 1.0 and p["Success"]["delta_ci"] == [0.0, 0.0]


def test_mcnemar_exact_values():
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(4, 0) == pytest.approx(0.125)
    assert mcnemar_exact(1, 9) == pytest.approx(22 / 1024)


def test_multinomial_bootstrap_matches_item_resampling():
    rng = np.random.default_rng(1)
    base = rng.random(60) < 0.4
    cond = np.where(rng.random(60) < 0.3, ~base, base)
    counts = transition_counts(base, cond)
    fast = bootstrap_transition(counts, n_boot=20000, rng=np.random.default_rng(2))
    idx = np.random.default_rng(3).integers(0, 60, size=(20000, 60))
    deltas = (cond[idx].astype(int) - base[idx].astype(int)).mean(axis=1)
    slow = np.quantile(deltas, [0.025, 0.975], method="inverted_cdf")
    assert fast["delta_ci"][0] == pytest.approx(slow[0], abs=1 / 60 + 1e-9)
    assert fast["delta_ci"][1] == pytest.approx(slow[1], abs=1 / 60 + 1e-9)


bool_pairs = st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=60)


@given(bool_pairs)
def test_delta_identity(pairs):
    base = np.array([p[0] for p in pairs])
    cond = np.array([p[1] for p in pairs])
    r = repair_damage(*transition_counts(base, cond))
    p_base = base.mean()
    repair = r["repair"] if r["repair"] is not None else 0.0  # only undefined when 1 - p_base == 0
    damage = r["damage"] if r["damage"] is not None else 0.0  # only undefined when p_base == 0
    assert r["delta"] == pytest.approx(repair * (1 - p_base) - damage * p_base)
    assert r["delta"] == pytest.approx(cond.mean() - base.mean())
    if r["ratio_status"] == "finite":
        assert r["ratio"] == pytest.approx(r["repair"] / r["damage"])
    assert sum(map(sum, r["transition"])) == len(pairs)


codes = st.lists(st.one_of(st.none(), st.text("01", min_size=4, max_size=4)), min_size=1, max_size=30)


@settings(deadline=None, max_examples=50)
@given(codes)
def test_condition_metric_invariants(tmp_path_factory, cs):
    folder = tmp_path_factory.mktemp("b")
    bench = load_benchmark(write_bench(folder, [make_item(i) for i in range(len(cs))]))
    m = condition_metrics(vikr_matrix(bench, records(cs)))
    assert sum(m["states"].values()) == len(cs)
    assert m["success"] <= min(m["coverage"].values())
    assert m["success"] <= m["relaxed_3of4"]
    assert 3 * m["relaxed_3of4"] <= sum(m["coverage"].values()) + 1e-12  # each relaxed item passes ≥ 3 layers
    assert m["ikr"] >= m["success"]
    assert m["mean_layers_passed"] == pytest.approx(sum(m["coverage"].values()))
    assert math.isclose(sum(m["state_shares"].values()), 1.0)
    assert m["n_unscored"] == sum(c is None for c in cs)
