"""Retrieval diagnostics end to end: a release-format benchmark whose items each fall in a known cell,
run with the real `kar` CLI (kb import → run vanilla, search_cot, kar → judge → report --run) against
the fake OpenAI-compatible VLM and judge and the fake Tavily server; every cell is checked, as
metrics.json holds it, as the terminal shows it and as report.html shows it.  See
``tests/eval/diagnostics_bench.py`` for the items and why each lands where it does."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.cli import app
from tests.eval.diagnostics_bench import EXPECTED_CELLS, GOLD, NAMES, knowledge_judge_responder, vlm_responder, write_bench
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.tavily_server import FakeTavilyServer
from tests.services.memebench_release import judge_responder

CONDITIONS = ("vanilla", "search_cot", "kar")
runner = CliRunner()


def kar(*args: str) -> str:
    from culturebase.settings import get_settings

    get_settings.cache_clear()
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, f"kar {' '.join(args)} → {result.exit_code}\n{result.output}"
    return result.output


@pytest.fixture(scope="module")
def judged_run(tmp_path_factory):
    """kb import, kar run and kar judge once for the module; the paths the report tests read."""
    from culturebase.settings import get_settings

    tmp = tmp_path_factory.mktemp("diagnostics")
    saved = {k: v for k, v in os.environ.items() if k.startswith("KAR_")}
    for key in saved:
        del os.environ[key]
    os.environ.update(KAR_KB_PATH=str(tmp / "kb"), KAR_DATA_DIR=str(tmp / "data"), KAR_OCR_ENABLED="false",
                      KAR_SEARCH_BACKEND="tavily", KAR_TAVILY_API_KEY="tvly-test")
    try:
        bench, kb_entries = write_bench(tmp / "bench")
        kar("kb", "import", str(kb_entries))
        with FakeOpenAIServer(responder=vlm_responder, model="fake-vl") as vlm, \
                FakeOpenAIServer(responder=judge_responder(strict=False)) as judge, FakeTavilyServer() as tavily:
            os.environ["KAR_TAVILY_API_BASE_URL"] = tavily.base_url
            kar("run", "--dataset", str(bench), "--conditions", ",".join(CONDITIONS), "--out", str(tmp / "run"),
                "--model", "fake-vl", "--base-url", vlm.base_url, "--concurrency", "2")
            judged = []
            for cond in CONDITIONS:
                kar("judge", "--bench", str(bench), "--pred", str(tmp / "run" / "predictions" / f"{cond}.json"),
                    "--out", str(tmp / "judged" / f"{cond}.json"), "--judge-model", "judge-a", "--judge-base-url", judge.base_url)
                judged += ["--judged", f"{cond}={tmp / 'judged' / f'{cond}.json'}"]
        yield {"tmp": tmp, "bench": bench, "judged": judged}
    finally:
        for key in [k for k in os.environ if k.startswith("KAR_")]:
            del os.environ[key]
        os.environ.update(saved)
        get_settings.cache_clear()


def report(judged_run, *extra: str, out: str = "report") -> tuple[str, dict]:
    printed = kar("report", "--bench", str(judged_run["bench"]), *judged_run["judged"], "--run", str(judged_run["tmp"] / "run"),
                  "--out", str(judged_run["tmp"] / out), "--bootstrap", "0", *extra)
    return printed, json.loads((judged_run["tmp"] / out / "metrics.json").read_text("utf-8"))


def test_every_item_lands_in_its_cell(judged_run):
    printed, metrics = report(judged_run)
    diag = metrics["diagnostics"]
    rows = {r["id"]: r for r in diag["kar"]["rows"]}
    # the four diagnostics the issue names, item by item (KAR)
    assert rows["present"]["identity_grounded"] is True and rows["present"]["gold_rank"] == 1
    assert rows["present"]["knowledge_in_prompt"] == 1.0 and rows["present"]["knowledge_method"] == "proxy"
    assert rows["missing"]["identity_grounded"] is True and rows["missing"]["knowledge_in_prompt"] == 0.0
    assert rows["[wrong]"]["gold_in_kb"] is True and rows["[wrong]"]["identity_grounded"] is False
    assert rows["[wrong]"]["extra_entities"] == ["Doge"] and rows["[wrong]"]["n_extra"] == 1
    assert rows["not_in_kb"]["gold_in_kb"] is False and rows["not_in_kb"]["gold_missing_from_kb"] == ["鲁迅"]
    assert rows["not_in_kb"]["identity_grounded"] is False and rows["not_in_kb"]["grounded"] == []
    assert rows["off_entity"]["evidence_off_entity"] == 1.0 and rows["off_entity"]["evidence_pieces"] > 0
    # the web results for 鲁迅 (not in the KB, nothing grounded) name no distinctive word beyond an ordinary one,
    # so the evidence floor keeps none of them; had one been kept it names 鲁迅 (0.0 off-entity)
    assert rows["not_in_kb"]["evidence_off_entity"] in (None, 0.0)
    assert {r["evidence_status"] for r in rows.values()} == {"tavily"}
    assert [r["gold"] for r in diag["kar"]["rows"]] == [[g] for g in GOLD]
    # the condition's figures
    kar_ = diag["kar"]
    assert kar_["gold_in_kb"] == pytest.approx(4 / 5) and kar_["identity_grounded"] == pytest.approx(2 / 5)
    assert kar_["extra_entities"] == pytest.approx(1 / 5) and kar_["knowledge_in_prompt"] == pytest.approx(1 / 5)
    assert diag["vanilla"]["identity_grounded"] is None and diag["vanilla"]["knowledge_in_prompt"] == 0.0
    assert diag["vanilla"]["evidence_status"] == {"n/a": 5} and diag["search_cot"]["identity_grounded"] is None
    # joined with the judgments: every cell holds exactly its item, for Success and for K
    for layer in ("Success", "K"):
        cells = kar_["joined"]["layers"][layer]["cells"]
        assert cells == EXPECTED_CELLS, (layer, cells)
    assert kar_["joined"]["baseline"] == "vanilla"
    sc = diag["search_cot"]["joined"]["layers"]["Success"]
    assert sc["repaired"] == 0 and sc["cells"]["damage.off_entity"] == ["off_entity"] and sc["cells"]["damage.neither"] == ["not_in_kb"]
    # the terminal: both tables, the proxy named as a proxy
    assert "knowledge in prompt (proxy)" in printed and "PROXY" in printed
    assert "| kar | vanilla | Success | 2 | 1 | 1 | 0 | 0 | 3 | 1 | 1 | 1 |" in printed
    # report.html's section and the plot
    page = (judged_run["tmp"] / "report" / "report.html").read_text("utf-8")
    assert "Retrieval diagnostics" in page and "kar · Success · extra entity injected</li>" not in page
    assert "kar · Success · extra entity injected: [wrong]" in page
    # the page's copy of metrics.json leaves the per-item rows to metrics.json itself
    assert "5 per-item rows: see metrics.json" in page and "gold_missing_from_kb" not in page
    assert (judged_run["tmp"] / "report" / "diagnostics_causes.png").stat().st_size > 1000


def test_items_lists_one_cell(judged_run):
    printed, _ = report(judged_run, "--items", "kar:damage.extra_entity", "--no-plots", out="items")
    assert "kar · Success · damage.extra_entity (extra entity injected): 1 item(s)" in printed
    assert "- [wrong]: gold Distracted Boyfriend (in KB: True); grounded Doge; extra Doge" in printed
    printed, _ = report(judged_run, "--items", "kar:K:repair.grounded.knowledge", "--no-plots", out="items")
    assert "- present:" in printed and "- missing:" not in printed
    result = runner.invoke(app, ["report", "--bench", str(judged_run["bench"]), *judged_run["judged"], "--run",
                                 str(judged_run["tmp"] / "run"), "--out", str(judged_run["tmp"] / "bad"), "--items", "kar:nope"])
    assert result.exit_code == 2 and "CELL one of" in result.output


def test_knowledge_judge_decides_and_is_cached(judged_run):
    with FakeOpenAIServer(responder=knowledge_judge_responder) as kj:
        args = ("--knowledge-judge", "--judge-model", "kj", "--judge-base-url", kj.base_url, "--no-plots")
        printed, metrics = report(judged_run, *args, out="judge")
        rows = {r["id"]: r for r in metrics["diagnostics"]["kar"]["rows"]}
        assert {r["knowledge_method"] for r in rows.values()} == {"judge"}
        assert [rows[n]["knowledge_stated"] for n in NAMES] == [[True], [False], [False], [False], [False]]
        assert "knowledge in prompt (judge)" in printed and "PROXY" not in printed
        asked = len(kj.requests)
        # vanilla has no material (no call); search_cot and kar: one call per item, except items 3 and 4, whose
        # KAR prompt material is Search-CoT's (nothing grounded): judged once
        assert asked == 8
        report(judged_run, *args, out="judge2")
        assert len(kj.requests) == asked  # every verdict came from the cache


def test_no_traces_and_family_benchmarks_say_they_skip(judged_run, tmp_path):
    _, metrics = report(judged_run, "--no-plots", out="plain")
    assert "diagnostics" in metrics  # --run given
    plain = kar("report", "--bench", str(judged_run["bench"]), *judged_run["judged"], "--out", str(tmp_path / "r"), "--bootstrap", "0",
                "--no-plots")
    assert "diagnostics" not in json.loads((tmp_path / "r" / "metrics.json").read_text("utf-8")) and "Retrieval" not in plain
    bad = runner.invoke(app, ["report", "--bench", str(judged_run["bench"]), *judged_run["judged"], "--traces",
                              f"kar={tmp_path / 'missing.jsonl'}", "--out", str(tmp_path / "r2")])
    assert bad.exit_code == 2 and "missing.jsonl: trace file not found" in bad.output


CACHE_NOTE = "read from the cache of an earlier report"


def test_a_repeated_report_reads_its_diagnostics_back_and_a_changed_trace_recomputes(judged_run):
    import shutil

    shutil.rmtree(judged_run["tmp"] / "data" / "cache" / "diagnostics", ignore_errors=True)
    first, computed = report(judged_run, "--no-plots", out="cache1")
    assert CACHE_NOTE not in first
    again, cached = report(judged_run, "--no-plots", out="cache2")
    assert CACHE_NOTE in " ".join(again.split())
    assert cached["diagnostics"] == computed["diagnostics"]
    # a trace file that changed (here: a blank line appended, which reads the same) is diagnosed again
    trace = judged_run["tmp"] / "run" / "traces" / "kar.jsonl"
    original = trace.read_bytes()
    try:
        trace.write_bytes(original + b"\n")
        changed, recomputed = report(judged_run, "--no-plots", out="cache3")
        assert CACHE_NOTE not in " ".join(changed.split())
        assert recomputed["diagnostics"] == computed["diagnostics"]
    finally:
        trace.write_bytes(original)


def test_the_causes_plot_is_the_workers_and_a_stale_one_is_not_shown(judged_run):
    from eval.report.diagnostics import CAUSES_PLOT, causes_plot

    _, metrics = report(judged_run, out="drawn")
    drawn = (judged_run["tmp"] / "drawn" / CAUSES_PLOT).read_bytes()
    # the same plot drawn here, in this process, from the joined diagnostics of metrics.json
    again = causes_plot(metrics["diagnostics"], judged_run["tmp"])
    assert again is not None and again.read_bytes() == drawn
    # a folder holding an earlier report's plot, reported with no pair (no baseline run): no plot is shown or kept
    stale = judged_run["tmp"] / "stale"
    stale.mkdir()
    (stale / CAUSES_PLOT).write_bytes(drawn)
    _, metrics = report(judged_run, "--baseline", "no-such-condition", out="stale")
    assert all(entry.get("joined") is None for entry in metrics["diagnostics"].values())
    assert not (stale / CAUSES_PLOT).exists()
    assert f'alt="{CAUSES_PLOT[:-4]}"' not in (stale / "report.html").read_text("utf-8")
