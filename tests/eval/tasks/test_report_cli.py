"""`kar report` on benchmark-family files: metrics picked by task; `kar bench validate|convert`."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from services.cli import app
from tests.eval.tasks.benchkit import avmeme, memereacon, png, write_jsonl

runner = CliRunner()


def _preds(path, replies):
    path.write_text(json.dumps([{"id": k, "response": v} for k, v in replies.items()]), "utf-8")
    return path


def test_report_mcq_and_classification_and_generation(tmp_path):
    bench = write_jsonl(tmp_path / "mr.jsonl", [memereacon(i, "CSAC-S", label=lab) for i, lab in enumerate(["Support", "Deny", "Extension", "Deny"])]
                        + [memereacon(9, "PI-G", references=["the poster mocks [mondays]"])])
    van = _preds(tmp_path / "van.json", {"mr0-CSAC-S": "Support", "mr1-CSAC-S": "Support", "mr2-CSAC-S": "??", "mr3-CSAC-S": "Deny",
                                         "mr9-PI-G": "mocks mondays"})
    kar = _preds(tmp_path / "kar.json", {"mr0-CSAC-S": "Support", "mr1-CSAC-S": "Deny", "mr2-CSAC-S": "Extension", "mr3-CSAC-S": "Support",
                                         "mr9-PI-G": "the poster mocks mondays"})
    result = runner.invoke(app, ["report", "--bench", str(bench), "--judged", f"m/vanilla={van}", "--judged", f"m/kar={kar}",
                                 "--out", str(tmp_path / "rep"), "--bootstrap", "100", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    cls = data["tasks"]["CSAC-S"]
    assert cls["runs"]["m/vanilla"]["accuracy"] == 0.5 and cls["runs"]["m/vanilla"]["n_unparseable"] == 1
    assert cls["runs"]["m/kar"]["accuracy"] == 0.75
    paired = cls["paired"]["m/kar"]
    assert paired["baseline"] == "m/vanilla" and paired["repaired"] == 2 and paired["damaged"] == 1
    gen = data["tasks"]["PI-G"]
    assert gen["runs"]["m/kar"]["rouge_l"] == 1.0 and gen["paired"]["m/kar"]["delta"] > 0
    rows = (tmp_path / "rep" / "items.csv").read_text().splitlines()
    assert rows[0].startswith("task,run,id") and len(rows) == 1 + 2 * 5
    # human output: bracketed data survives rich
    human = runner.invoke(app, ["report", "--bench", str(bench), "--judged", f"m/vanilla={van}", "--out", str(tmp_path / "r2"), "--bootstrap", "0"])
    assert human.exit_code == 0 and "| m/vanilla | 0.500 |" in human.output


def test_bench_validate_and_bad_predictions(tmp_path):
    png(tmp_path / "m0.png")
    bench = write_jsonl(tmp_path / "mr.jsonl", [memereacon(0), avmeme(1)])
    result = runner.invoke(app, ["bench", "validate", str(bench)])
    assert result.exit_code == 2 and "line 2 (id=av1): field 'benchmark': 'avmeme' in a memereacon file" in result.output
    ok = write_jsonl(tmp_path / "ok.jsonl", [memereacon(0)])
    result = runner.invoke(app, ["bench", "validate", str(ok), "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["tasks"] == {"CMI-C": 1}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"id": "mr0-CMI-C", "response": 3}]))
    result = runner.invoke(app, ["report", "--bench", str(ok), "--judged", f"vanilla={bad}", "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and "field 'response' must be a string or null" in result.output


def test_diagnostics_are_skipped_for_benchmarks_without_gold_entities(tmp_path):
    """AVMeme Exam (like DrivelHub+) annotates no gold identity entities: asked for diagnostics, the report says so."""
    bench = write_jsonl(tmp_path / "av.jsonl", [avmeme(0), avmeme(1)])
    van = _preds(tmp_path / "van.json", {"av0": "A", "av1": "B"})
    (tmp_path / "run" / "traces").mkdir(parents=True)
    result = runner.invoke(app, ["report", "--bench", str(bench), "--judged", f"vanilla={van}", "--out", str(tmp_path / "rep"),
                                 "--bootstrap", "0", "--run", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    said = "avmeme items name no gold identity entities, so there is nothing to diagnose retrieval against"
    assert f"diagnostics skipped: {said}" in " ".join(result.output.split())
    assert json.loads((tmp_path / "rep" / "metrics.json").read_text("utf-8"))["diagnostics"] == {"skipped": said}
