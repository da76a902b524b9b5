"""Report building, tables, JSON encoding of infinities, and judge reliability."""

from __future__ import annotations

import json

import pytest

from eval.tasks.memebench import load_benchmark
from eval.metrics.reliability import judge_reliability, kappa
from eval.report.vikr import (
    augmentation_rows,
    build_report,
    jsonable,
    leaderboard_markdown,
    leaderboard_rows,
    pairing,
    split_name,
)
from eval.verdicts import evaluation_from_vector, unscored_evaluation
from tests.eval.evalkit import make_item, write_bench

import numpy as np


def recs(vectors):
    return [
        {"id": f"m{i}", "evaluation": evaluation_from_vector(v) if v else unscored_evaluation("parse_failure", "x")}
        for i, v in enumerate(vectors)
    ]


@pytest.fixture
def bench(tmp_path):
    return load_benchmark(write_bench(tmp_path, [make_item(i) for i in range(4)]))


def test_split_name():
    assert split_name("gpt-4o/kar") == ("gpt-4o", "kar")
    assert split_name("org/model/cot") == ("org/model", "cot")
    assert split_name("vanilla") == ("", "vanilla")


def test_build_report_pairs_within_model(bench):
    judged = {
        "a/vanilla": recs([[1, 1, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1], None]),
        "a/kar": recs([[1, 1, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1], [1, 1, 1, 1]]),
        "b/vanilla": recs([[0, 0, 0, 0]] * 4),
        "b/cot": recs([[0, 0, 0, 0]] * 4),
        "c/kar": recs([[1, 1, 1, 1]] * 4),  # no baseline for model c: not paired
    }
    report = build_report(bench, judged, n_boot=200)
    assert set(report["paired"]) == {"a/kar", "b/cot"}
    # the pairs alone (what kar report's diagnostics worker joins by) are the report's
    assert pairing(judged, "vanilla") == {name: entry["baseline"] for name, entry in report["paired"].items()}
    assert pairing(judged, "vanilla") == {"a/kar": "a/vanilla", "b/cot": "b/vanilla"}
    assert pairing(["vanilla", "kar", "cot"], "vanilla") == {"kar": "vanilla", "cot": "vanilla"}
    assert pairing(judged, None) == {} and pairing(["kar"], "vanilla") == {}
    s = report["paired"]["a/kar"]["layers"]["Success"]
    assert s["transition"] == [[0, 2], [1, 1]] and s["repair"] == 1.0 and s["damage"] == 0.5 and s["ratio"] == 2.0
    assert report["paired"]["b/cot"]["layers"]["Success"]["ratio_status"] == "undefined"
    assert report["conditions"]["a/vanilla"]["metrics"]["unscored_reasons"] == {"parse_failure": 1}
    rows = leaderboard_rows(report)
    assert [r["name"] for r in rows][:2] == ["c/kar", "a/kar"]
    assert rows[1]["success"] == 0.75
    md = leaderboard_markdown(report)
    assert "| 1 | c/kar | 100.0 |" in md and "n = 4 items" in md
    aug = {r["name"]: r for r in augmentation_rows(report)}
    assert aug["a/kar"]["delta_success"] == 0.25 and aug["a/kar"]["V_repair"] == 1.0


def test_jsonable_encodes_infinities():
    assert jsonable({"a": float("inf"), "b": [float("nan"), 1.5], "c": (float("-inf"),)}) == {
        "a": "inf", "b": [None, 1.5], "c": ["-inf"]
    }
    json.dumps(jsonable({"x": float("inf")}), allow_nan=False)


def test_kappa_values():
    a = np.array([1, 1, 0, 0])
    assert kappa(a, a) == pytest.approx(1.0)
    assert kappa(a, np.array([0, 0, 1, 1])) == pytest.approx(-1.0)
    assert kappa(np.array([1, 1]), np.array([1, 1])) is None
    # po = 3/4, pe = 0.5*0.25 + 0.5*0.75 = 0.5 → κ = 0.5
    assert kappa(np.array([1, 1, 0, 0]), np.array([1, 0, 0, 0])) == pytest.approx(0.5)


def test_judge_reliability_by_hand(bench):
    human = {"vanilla": recs([[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]])}
    judges = {
        "g": {"vanilla": recs([[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]]),
              "kar": recs([[1, 1, 1, 1]] * 4), "cot": recs([[1, 1, 1, 1]] * 2 + [[0, 0, 0, 0]] * 2)},
        "o": {"vanilla": recs([[1, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]),
              "kar": recs([[1, 1, 1, 1]] * 3 + [[0, 0, 0, 0]]), "cot": recs([[1, 1, 1, 1]] + [[0, 0, 0, 0]] * 3)},
    }
    rel = judge_reliability(bench, human, judges)
    assert rel["vs_human"]["g"]["V"]["kappa"] == pytest.approx(1.0)
    # judge o on V: human [1,1,0,1] vs o [1,1,0,0]: po = 3/4, pe = 3/4*1/2 + 1/4*1/2 = 1/2 → κ = 0.5
    assert rel["vs_human"]["o"]["V"]["kappa"] == pytest.approx(0.5)
    assert rel["vs_human"]["intersection"]["V"]["kappa"] == pytest.approx(0.5)
    assert rel["vs_human"]["g"]["n"] == 4
    # agreement pooled over 12 (condition, item) pairs on Success: g/o differ on vanilla? no; kar item 3; cot item 1
    assert rel["inter_judge"]["g|o"]["Success"]["agreement"] == pytest.approx(10 / 12)
    # leaderboards: g success vanilla .25, kar 1.0, cot .5; o: .25, .75, .25 → ranks agree except a tie
    assert rel["spearman"]["g|o"]["n_conditions"] == 3
    assert rel["spearman"]["g|o"]["rho"] == pytest.approx(0.8660254, rel=1e-6)


def test_each_plot_is_drawn_once(bench, tmp_path, monkeypatch):
    """tight_layout's placeholder engine would make savefig lay every text out in a draw of its own first."""
    import matplotlib.figure

    from eval.report.vikr import make_plots

    draws = []
    draw = matplotlib.figure.Figure.draw
    monkeypatch.setattr(matplotlib.figure.Figure, "draw", lambda self, renderer: (draws.append(self), draw(self, renderer))[1])
    judged = {"vanilla": recs([[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 1], None]),
              "kar": recs([[1, 1, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1], [1, 1, 1, 1]])}
    paths = make_plots(build_report(bench, judged, n_boot=50), tmp_path)
    assert len(paths) == 4 and all(p.stat().st_size > 0 for p in paths)
    assert len(draws) == len(paths) and len(set(map(id, draws))) == len(paths)
