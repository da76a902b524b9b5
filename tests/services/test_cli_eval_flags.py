"""The evaluation commands' shared flags: `--dataset` / `--image-root` with their old names as hidden
aliases, `kar run --model/--base-url/--api-key/--kb` recorded in the manifest (never the key), and
`kar run` refusing search conditions whose backend has nothing to search unless --allow-no-evidence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.cli import app
from tests.fakes.openai_server import FakeOpenAIServer

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "examples" / "bench_sample.json"
runner = CliRunner()


@pytest.fixture
def kar_env(clean_kar_env, tmp_path):
    return clean_kar_env(KAR_KB_PATH=str(tmp_path / "kb"), KAR_DATA_DIR=str(tmp_path / "data"), KAR_OCR_ENABLED="false")


def kar(*args: str):
    from culturebase.settings import get_settings

    get_settings.cache_clear()
    return runner.invoke(app, list(args))


@pytest.mark.parametrize("backend", ["local", "none"])
def test_run_refuses_search_conditions_without_evidence(kar_env, tmp_path, backend):
    kar_env.setenv("KAR_SEARCH_BACKEND", backend)
    out = tmp_path / "run"
    with FakeOpenAIServer(model="m") as vlm:
        result = kar("run", "--dataset", str(BENCH), "--out", str(out), "--conditions", "vanilla,search_cot",
                     "--model", "m", "--base-url", vlm.base_url, "--limit", "1")
        assert result.exit_code == 2, result.output
        assert "search_cot would run without web evidence" in result.output and "--allow-no-evidence" in result.output
        reason = "the local search corpus is empty (0 crawled pages)" if backend == "local" else "web search is off"
        assert reason in result.output
        assert not out.exists() and not vlm.requests  # refused before anything ran or was written


def test_run_allow_no_evidence_runs_and_the_manifest_records_it(kar_env, tmp_path):
    kar_env.setenv("KAR_SEARCH_BACKEND", "none")
    kar_env.setenv("KAR_VLM_MODEL", "env-model")  # the flag wins over env
    out = tmp_path / "run"
    with FakeOpenAIServer(model="flag-model") as vlm:
        base_url = vlm.base_url
        result = kar("run", "--bench", str(BENCH), "--out", str(out), "--conditions", "vanilla,search_cot", "--limit", "1",
                     "--model", "flag-model", "--base-url", base_url, "--api-key", "sk-secret-123",
                     "--kb", str(tmp_path / "kb2"), "--allow-no-evidence", "--json")
        assert result.exit_code == 0, result.output
        assert "warning: search_cot would run without web evidence" in result.output
        assert vlm.requests and {r.json["model"] for r in vlm.requests} == {"flag-model"}
        assert all(r.headers.get("authorization", r.headers.get("Authorization")) == "Bearer sk-secret-123" for r in vlm.requests)
    text = (out / "manifest.json").read_text("utf-8")
    manifest = json.loads(text)
    assert manifest["command_line"] == {"model": "flag-model", "base_urls": [base_url], "api_key_given": True,
                                        "kb": str(tmp_path / "kb2"), "allow_no_evidence": True}
    assert manifest["settings"]["vlm_model"] == "flag-model" and manifest["settings"]["kb_path"] == str(tmp_path / "kb2")
    assert manifest["evidence"]["available"] is False and manifest["evidence"]["backend"] == "none"
    assert manifest["dataset"] == str(BENCH)
    assert "sk-secret-123" not in text


@pytest.mark.parametrize(("command", "shown", "hidden"), [
    (["run"], "--dataset", "--bench"),
    (["judge"], "--dataset", "--bench"),
    (["judge", "run"], "--image-root", "--bench"),
    (["judge", "rubric"], "--image-root", "--media-root"),
    (["report"], "--dataset", "--bench"),
    (["report-refs"], "--image-root", "--image-dir"),
    (["retrieve"], "--dataset", "--bench"),
    (["bench", "validate"], "--image-root", "--media-root"),
])
def test_help_shows_the_new_names_and_hides_the_old(command, shown, hidden):
    result = kar(*command, "--help")
    assert result.exit_code == 0
    assert shown in result.stdout and hidden not in result.stdout


def test_old_media_root_name_still_works(tmp_path):
    bench = tmp_path / "avmeme.jsonl"
    bench.write_text(json.dumps({"benchmark": "avmeme", "id": "a1", "task": "qa"}) + "\n")
    new = kar("bench", "validate", str(bench), "--image-root", str(tmp_path), "--no-media-check")
    old = kar("bench", "validate", str(bench), "--media-root", str(tmp_path), "--no-media-check")
    assert new.exit_code == old.exit_code and new.output == old.output
    both = kar("bench", "validate", str(bench), "--image-root", str(tmp_path), "--media-root", str(tmp_path / "x"))
    assert both.exit_code == 2 and "--image-root and --media-root name the same option" in both.output
