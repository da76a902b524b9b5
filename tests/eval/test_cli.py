"""kar judge / kar judge run / kar judge merge / kar report through typer's CliRunner (services/cli/judge.py, report.py)."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from services.cli.judge import judge_app
from services.cli.report import report_command
from eval.verdicts import evaluation_from_vector
from tests.eval.evalkit import judge_reply_for_prompt, make_item, official_eval, write_bench
from tests.fakes.openai_server import FakeOpenAIServer, FakeReply

app = typer.Typer()
app.add_typer(judge_app, name="judge")
app.command("report")(report_command)
runner = CliRunner()


@pytest.fixture
def bench_and_preds(tmp_path):
    bench = write_bench(tmp_path, [make_item(i) for i in range(3)])
    pred = tmp_path / "pred.json"
    pred.write_text(json.dumps([{"id": f"m{i}", "image_path": f"images/m{i}.png", "response": f"r{i}"} for i in range(3)]))
    return bench, pred


def test_judge_command_end_to_end(tmp_path, bench_and_preds, monkeypatch):
    bench, pred = bench_and_preds
    monkeypatch.setenv("KAR_DATA_DIR", str(tmp_path / "data"))
    from culturebase.settings import get_settings

    get_settings.cache_clear()
    with FakeOpenAIServer() as server:
        server.responder = lambda req: FakeReply(text=judge_reply_for_prompt(req.user_text()), prompt_tokens=500, completion_tokens=50)
        out = tmp_path / "judged.json"
        args = ["judge", "--bench", str(bench), "--pred", str(pred), "--out", str(out), "--judge-model", "jm",
                "--judge-base-url", server.base_url, "--concurrency", "2", "--price-input", "1", "--price-output", "4", "--json"]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout[result.stdout.index("{"):])
        assert summary["scored"] == 3 and summary["calls"] == 3 and summary["judge_model"] == "jm"
        assert summary["cost_usd"] == pytest.approx(1500 / 1e6 * 1 + 150 / 1e6 * 4)
        assert (tmp_path / "data" / "judge_cache.sqlite").exists()
        again = runner.invoke(app, args)
        assert again.exit_code == 0 and json.loads(again.stdout[again.stdout.index("{"):])["resumed"] == 3
        assert len(server.requests) == 3
    assert [r["evaluation"]["checklist_result"] for r in json.loads(out.read_text())] == [[1, 1, 1, 1]] * 3
    get_settings.cache_clear()


def test_judge_command_errors(tmp_path, bench_and_preds, monkeypatch):
    bench, pred = bench_and_preds
    result = runner.invoke(app, ["judge", "--bench", str(bench)])
    assert result.exit_code == 2 and "--pred, --out" in result.output
    items = json.loads(bench.read_text())
    items[2]["eval_checklist"]["knowledge"] = []
    bench.write_text(json.dumps(items))
    result = runner.invoke(app, ["judge", "--bench", str(bench), "--pred", str(pred), "--out", str(tmp_path / "o.json"),
                                 "--judge-base-url", "http://127.0.0.1:9/v1", "--judge-model", "m"])
    assert result.exit_code == 2
    assert "item 2 (id=m2): field 'eval_checklist.knowledge' is an empty checklist" in result.output
    items[2]["eval_checklist"]["knowledge"] = ["k"]
    bench.write_text(json.dumps(items))
    monkeypatch.delenv("KAR_JUDGE_BASE_URLS", raising=False)
    monkeypatch.delenv("KAR_JUDGE_MODEL", raising=False)
    from culturebase.settings import get_settings

    get_settings.cache_clear()
    result = runner.invoke(app, ["judge", "--bench", str(bench), "--pred", str(pred), "--out", str(tmp_path / "o.json")])
    assert result.exit_code == 2 and "KAR_JUDGE_BASE_URLS" in result.output
    get_settings.cache_clear()


def test_merge_command(tmp_path, bench_and_preds):
    bench, _ = bench_and_preds
    a = tmp_path / "a.json"
    b = tmp_path / "b.jsonl"
    a.write_text(json.dumps([{"id": f"m{i}", "image_path": f"images/m{i}.png", "response": "r", "evaluation": official_eval(v)}
                             for i, v in enumerate([[1, 1, 1, 1], [1, 0, 1, 1], [1, 1, 1, 1]])]))
    b.write_text("\n".join(json.dumps({"id": f"m{i}", "image_path": f"images/m{i}.png", "response": "r", "evaluation": official_eval(v)})
                           for i, v in enumerate([[1, 1, 0, 1], [1, 1, 1, 1]])))
    out = tmp_path / "merged.json"
    result = runner.invoke(app, ["judge", "merge", str(a), str(b), "--out", str(out), "--bench", str(bench), "--json", "--names", "g,o"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["n"] == 3 and summary["n_unscored"] == 1
    assert summary["coverage"] == {"V": 2 / 3, "I": 1 / 3, "K": 1 / 3, "R": 2 / 3}
    merged = json.loads(out.read_text())
    assert merged[0]["evaluation"]["item_results"]["knowledge"][0]["judge_b_pass"] == 0
    assert merged[0]["evaluation"]["judges"]["a"]["name"] == "g"
    no_bench = runner.invoke(app, ["judge", "merge", str(a), str(b), "--out", str(out), "--json"])
    assert no_bench.exit_code == 0 and json.loads(no_bench.stdout)["n"] == 3
    bad = runner.invoke(app, ["judge", "merge", str(a), str(tmp_path / "missing.json"), "--out", str(out)])
    assert bad.exit_code == 2 and "missing.json: file not found" in bad.output


def test_report_command(tmp_path, bench_and_preds):
    bench, _ = bench_and_preds
    files = {}
    for name, vectors in {"m1/vanilla": [[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 0, 0]],
                          "m1/kar": [[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0]]}.items():
        path = tmp_path / (name.replace("/", "_") + ".json")
        path.write_text(json.dumps([{"id": f"m{i}", "evaluation": evaluation_from_vector(v)} for i, v in enumerate(vectors)]))
        files[name] = path
    out = tmp_path / "report"
    result = runner.invoke(app, ["report", "--bench", str(bench), *sum((["--judged", f"{k}={v}"] for k, v in files.items()), []),
                                 "--out", str(out), "--json", "--bootstrap", "500"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout)
    assert metrics["conditions"]["m1/kar"]["metrics"]["success"] == 2 / 3
    s = metrics["paired"]["m1/kar"]["layers"]["Success"]
    assert s["repair"] == 0.5 and s["damage"] == 0.0 and s["ratio"] is None and s["ratio_status"] == "infinite"
    for name in ("metrics.json", "leaderboard.md", "leaderboard.csv", "augmentation.md", "augmentation.csv",
                 "coverage.png", "visual_vs_knowledge.png", "repair_vs_damage.png", "vikr_states.png", "report.html"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    assert "∞ (no damage)" in (out / "augmentation.md").read_text()
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and "<table>" in html
    assert json.loads((out / "metrics.json").read_text())["paired"]["m1/kar"]["layers"]["I"]["ratio_status"] == "infinite"
    bad = runner.invoke(app, ["report", "--bench", str(bench), "--judged", "novalue", "--out", str(out)])
    assert bad.exit_code == 2 and "NAME=FILE" in bad.output


def test_judge_run_is_the_bare_form_and_bench_is_a_hidden_alias(tmp_path, bench_and_preds, monkeypatch):
    """`kar judge run --dataset` and the bare `kar judge --bench` (the old name) judge the same way."""
    bench, pred = bench_and_preds
    monkeypatch.setenv("KAR_DATA_DIR", str(tmp_path / "data"))
    from culturebase.settings import get_settings

    get_settings.cache_clear()
    outs = {}
    with FakeOpenAIServer() as server:
        server.responder = lambda req: FakeReply(text=judge_reply_for_prompt(req.user_text()))
        for form in (["judge", "run", "--dataset"], ["judge", "--bench"]):
            out = tmp_path / f"{form[-2]}.json"
            result = runner.invoke(app, [*form, str(bench), "--pred", str(pred), "--out", str(out), "--judge-model", "jm",
                                         "--judge-base-url", server.base_url, "--no-cache", "--json"])
            assert result.exit_code == 0, result.output
            assert json.loads(result.stdout[result.stdout.index("{"):])["scored"] == 3
            outs[form[1]] = json.loads(out.read_text())
        assert len(server.requests) == 6  # both forms judged every item (no cache, separate outputs)
    assert [r["evaluation"] for r in outs["run"]] == [r["evaluation"] for r in outs["--bench"]]
    # two different values for one option are refused; the missing flags are named by their new names
    other = tmp_path / "other.json"
    result = runner.invoke(app, ["judge", "run", "--dataset", str(bench), "--bench", str(other), "--pred", str(pred), "--out", str(other)])
    assert result.exit_code == 2 and "--dataset and --bench name the same option" in result.output
    result = runner.invoke(app, ["judge", "run", "--pred", str(pred)])
    assert result.exit_code == 2 and "--dataset, --out" in result.output
    get_settings.cache_clear()
