"""Reasoning-as-retrieval: TREC parsing, ir-measures values by hand, ties, missing queries; kar retrieve."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from eval.metrics.retrieval import TrecFormatError, evaluate_run, read_qrels, read_run
from services.cli import app
from tests.eval.tasks.benchkit import drivelhub, write_jsonl
from tests.fakes.media_openai import FakeMediaOpenAIServer

runner = CliRunner()


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n", "utf-8")
    return path


def test_measures_by_hand(tmp_path):
    run = _write(tmp_path / "run", [
        "v2n:q1 Q0 d1 1 0.9 t", "v2n:q1 Q0 d2 2 0.8 t",   # relevant at rank 1
        "v2n:q2 Q0 d9 1 0.9 t", "v2n:q2 Q0 d2 2 0.5 t", "v2n:q2 Q0 d3 3 0.4 t",  # relevant (d2, d3) at 2 and 3
        "n2v:q1 Q0 d1 1 0.7 t",
        "v2n:q9 Q0 d1 1 0.1 t",  # no judgments: counted, not scored
    ])
    qrels = _write(tmp_path / "qrels", [
        "v2n:q1 0 d1 1", "v2n:q2 0 d2 1", "v2n:q2 0 d3 1", "v2n:q3 0 d3 1",  # q3 absent from the run → 0
        "n2v:q1 0 d1 1", "n2v:q2 0 d5 0",  # n2v:q2 has no relevant document
    ])
    result = evaluate_run(read_run(run), read_qrels(qrels))
    v2n = result["directions"]["v2n"]
    assert v2n["n_queries"] == 3 and v2n["missing_in_run"] == 1 and v2n["not_in_qrels"] == 1
    m = v2n["metrics"]
    assert m["Success@1"] == pytest.approx(1 / 3) and m["Success@5"] == pytest.approx(2 / 3)
    assert m["R@1"] == pytest.approx(1 / 3) and m["R@5"] == pytest.approx((1 + 1 + 0) / 3)
    assert m["RR"] == pytest.approx((1 + 1 / 2 + 0) / 3)
    # q2 nDCG@5: DCG = 1/log2(3) + 1/log2(4); IDCG = 1 + 1/log2(3)
    import math
    ndcg_q2 = (1 / math.log2(3) + 0.5) / (1 + 1 / math.log2(3))
    assert m["nDCG@5"] == pytest.approx((1 + ndcg_q2 + 0) / 3)
    n2v = result["directions"]["n2v"]
    assert n2v["n_queries"] == 1 and n2v["no_relevant"] == 1 and n2v["metrics"]["RR"] == 1.0
    assert result["ranks"] == {"v2n:q1": 1, "v2n:q2": 2, "v2n:q3": None, "n2v:q1": 1}


def test_ties_follow_trec_eval_order(tmp_path):
    # equal scores: trec_eval orders by document id descending, so "b" ranks before "a"
    run = _write(tmp_path / "run", ["q Q0 a 1 0.5 t", "q Q0 b 2 0.5 t", "q Q0 c 3 0.1 t"])
    qrels = _write(tmp_path / "qrels", ["q 0 a 1"])
    result = evaluate_run(read_run(run), read_qrels(qrels))
    assert result["ranks"]["q"] == 2
    assert result["directions"]["all"]["metrics"]["RR"] == pytest.approx(0.5)  # ir-measures agrees with our rank


def test_bad_trec_files(tmp_path):
    with pytest.raises(TrecFormatError, match=r"run: line 2: expected 6 columns"):
        read_run(_write(tmp_path / "run", ["q Q0 a 1 0.5 t", "q a 0.5"]))
    with pytest.raises(TrecFormatError, match=r"line 1: score 'x' is not a number"):
        read_run(_write(tmp_path / "run2", ["q Q0 a 1 x t"]))
    with pytest.raises(TrecFormatError, match=r"qrels: line 1: relevance 'yes'"):
        read_qrels(_write(tmp_path / "qrels", ["q 0 a yes"]))


def test_report_retrieval_cli(tmp_path):
    run = _write(tmp_path / "run", ["v2n:q1 Q0 d1 1 0.9 t", "n2v:q1 Q0 [d1] 1 0.9 t"])
    qrels = _write(tmp_path / "qrels", ["v2n:q1 0 d1 1", "v2n:q2 0 d2 1", "n2v:q1 0 [d1] 1"])
    result = runner.invoke(app, ["report-retrieval", "--run", str(run), "--qrels", str(qrels), "--json", "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["missing_in_run"] == ["v2n:q2"] and data["directions"]["v2n"]["metrics"]["R@1"] == 0.5
    ranks = (tmp_path / "o" / "ranks.csv").read_text().splitlines()
    assert ranks[0].startswith("direction,query,n_relevant,first_relevant_rank,in_run") and len(ranks) == 4
    human = runner.invoke(app, ["report-retrieval", "--run", str(run), "--qrels", str(qrels)])
    assert human.exit_code == 0 and "narrative→video" in human.output and "absent from the run scored 0: v2n:q2" in human.output


def test_kar_retrieve_with_an_embeddings_endpoint(tmp_path):
    items = [drivelhub(0, narrative="a cat mocks office mondays", extra_relevant=["dh1"]),
             drivelhub(1, narrative="tired workers dread mondays"),
             drivelhub(2, narrative="a dog celebrates summer at the beach")]
    bench = write_jsonl(tmp_path / "dh.jsonl", items)
    pred = tmp_path / "pred.json"
    pred.write_text(json.dumps([{"id": "dh0", "response": "the cat mocks office mondays"},
                                {"id": "dh1", "response": None},
                                {"id": "dh2", "response": "a dog at the beach celebrates summer"}]))
    with FakeMediaOpenAIServer() as server:
        result = runner.invoke(app, ["retrieve", "--bench", str(bench), "--pred", str(pred), "--out", str(tmp_path / "r"),
                                     "--embed-base-url", server.base_url, "--embed-model", "omni-embed", "--json"])
        assert result.exit_code == 0, result.output
        assert any(p.endswith("/embeddings") for p in server.paths())
    summary = json.loads(result.stdout)
    assert summary["skipped"] == {"no_explanation": 1}
    run = (tmp_path / "r" / "run.trec").read_text().splitlines()
    assert run[0].startswith("v2n:dh0 Q0 dh0 1 ") and sum(line.startswith("v2n:") for line in run) == 2 * 3
    qrels = (tmp_path / "r" / "qrels.trec").read_text().splitlines()
    assert "v2n:dh0 0 dh1 1" in qrels and "n2v:dh0 0 dh1 1" in qrels
    report = runner.invoke(app, ["report-retrieval", "--run", str(tmp_path / "r" / "run.trec"), "--qrels",
                                 str(tmp_path / "r" / "qrels.trec"), "--json"])
    data = json.loads(report.stdout)
    assert data["missing_in_run"] == ["v2n:dh1"]  # no explanation → no query, counted, scored 0
    assert data["directions"]["v2n"]["metrics"]["Success@1"] == pytest.approx(2 / 3)
