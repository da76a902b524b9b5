"""Crawl jobs (the crawlers' manager, Qdrant-server policy) and ablation jobs (the kar run runner in the background)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

from services.deps import get_crawl_starter
from tests.services.conftest import rw

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


async def test_crawl_jobs_need_a_qdrant_server_with_the_embedded_store(api):
    client, _ = api
    r = await client.post("/v1/crawl-jobs", json={"spider": "moegirl", "limit": 1}, headers=rw())
    assert r.status_code == 409
    err = r.json()["error"]
    assert err["code"] == "crawl_needs_qdrant_server" and "KAR_QDRANT_URL" in err["message"] and "kar crawl" in err["message"]
    assert (await client.get("/v1/crawl-jobs")).json() == []
    r = await client.get("/v1/crawl-jobs/nope-123")
    assert r.status_code == 404 and r.json()["error"]["code"] == "crawl_job_not_found"


async def test_crawl_job_bad_input(api):
    client, _ = api
    client.app.dependency_overrides[get_crawl_starter] = lambda: object()  # as with a Qdrant server: validation decides
    r = await client.post("/v1/crawl-jobs", json={"spider": "evilspider"}, headers=rw())
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"
    r = await client.post("/v1/crawl-jobs", json={"spider": "moegirl", "limit": 0}, headers=rw())
    assert r.status_code == 422


async def test_crawl_job_lifecycle_through_the_manager(make_client, tmp_path):
    """With a Qdrant server configured the job process starts; here the server is absent, so the job fails and says so."""
    from crawlers.jobs import CrawlJobManager

    async with make_client() as (client, services):
        settings = services.settings.model_copy(update={"qdrant_url": "http://127.0.0.1:9", "crawl_jobs_db": tmp_path / "jobs.sqlite"})
        manager = CrawlJobManager(settings)
        client.app.dependency_overrides[get_crawl_starter] = lambda: manager
        services._crawl = manager
        r = await client.post("/v1/crawl-jobs", json={"spider": "moegirl", "start_urls": ["https://zh.moegirl.org.cn/api.php"], "limit": 1}, headers=rw())
        assert r.status_code == 202, r.text
        job = r.json()
        assert job["status"] in ("queued", "running") and r.headers["location"] == f"/v1/crawl-jobs/{job['id']}"
        listed = (await client.get("/v1/crawl-jobs")).json()
        assert [j["id"] for j in listed] == [job["id"]]
        for _ in range(300):
            job = (await client.get(f"/v1/crawl-jobs/{job['id']}")).json()
            if job["status"] not in ("queued", "running"):
                break
            await asyncio.sleep(0.2)
        assert job["status"] in ("failed", "succeeded") and isinstance(job["counters"], dict)
        r = await client.post(f"/v1/crawl-jobs/{job['id']}/cancel", headers=rw())
        assert r.status_code == 409 and r.json()["error"]["code"] == "crawl_job_conflict"
        logs = (await client.get(f"/v1/crawl-jobs/{job['id']}/logs")).json()
        assert logs["id"] == job["id"] and isinstance(logs["log"], str)


async def _finished(client, job: dict) -> dict:
    """The ablation job once it is no longer queued or running (polled for up to 10 s)."""
    for _ in range(200):
        job = (await client.get(f"/v1/ablations/{job['id']}")).json()
        if job["status"] not in ("queued", "running"):
            break
        await asyncio.sleep(0.05)
    return job


def _dataset(data_dir: Path) -> None:
    root = data_dir / "datasets"
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLES / "bench_sample.json", root / "bench.json")
    shutil.copytree(EXAMPLES / "images", root / "images")


async def test_ablation_job_runs_in_the_background_and_serves_results(api):
    client, services = api
    _dataset(Path(services.settings.data_dir))
    r = await client.post("/v1/ablations", json={"dataset": "bench.json", "conditions": ["vanilla", "cot"], "limit": 2}, headers=rw())
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["total"] == 4 and job["status"] in ("queued", "running")
    job = await _finished(client, job)
    assert job["status"] == "succeeded" and job["done"] == 4 and job["progress"] == 1.0
    assert job["summary"]["ran"] == 4 and job["summary"]["failed"] == 0
    preds = (await client.get(job["results"]["cot"])).json()
    assert [p["response"] for p in preds] == ["EXPLANATION", "EXPLANATION"]
    items = json.loads((EXAMPLES / "bench_sample.json").read_text("utf-8"))[:2]
    assert [p["id"] for p in preds] == [i["id"] for i in items]
    traces = (await client.get(f"/v1/ablations/{job['id']}/traces/vanilla")).text.splitlines()
    assert len(traces) == 2 and json.loads(traces[0])["condition"] == "vanilla"
    assert [j["id"] for j in (await client.get("/v1/ablations")).json()] == [job["id"]]


async def test_ablation_bad_input(api):
    client, services = api
    _dataset(Path(services.settings.data_dir))
    for body, status, code in [
        ({"dataset": "../../etc/passwd"}, 422, "invalid_dataset"),
        ({"dataset": "/etc/passwd"}, 422, "invalid_dataset"),
        ({"dataset": "missing.json"}, 404, "dataset_not_found"),
        ({"dataset": "bench.json", "conditions": ["magic"]}, 422, "validation_error"),
        ({"dataset": "bench.json", "conditions": []}, 422, "validation_error"),
    ]:
        r = await client.post("/v1/ablations", json=body, headers=rw())
        assert r.status_code == status and r.json()["error"]["code"] == code, (body, r.text)
    r = await client.get("/v1/ablations/nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == "ablation_not_found"
    assert (await client.get("/v1/ablations")).json() == []


async def test_ablations_need_a_vlm(make_client):
    async with make_client(vlm=None) as (client, services):
        _dataset(Path(services.settings.data_dir))
        r = await client.post("/v1/ablations", json={"dataset": "bench.json"}, headers=rw())
        assert r.status_code == 503 and r.json()["error"]["code"] == "vlm_not_configured"


async def test_ablation_job_runs_a_family_benchmark_through_the_registry(api):
    """The API loads through eval.tasks.load as kar run does: a MemeReaCon JSONL runs with its task prompts."""
    from tests.eval.tasks.benchkit import memereacon, png, write_jsonl

    client, services = api
    root = Path(services.settings.data_dir) / "datasets"
    png(root / "m0.png")
    write_jsonl(root / "mr.jsonl", [memereacon(0, "CMI-C"), memereacon(0, "PI-G")])
    r = await client.post("/v1/ablations", json={"dataset": "mr.jsonl", "conditions": ["vanilla"]}, headers=rw())
    assert r.status_code == 202, r.text
    job = r.json()
    job = await _finished(client, job)
    assert job["status"] == "succeeded" and job["summary"]["ran"] == 2, job
    traces = [json.loads(line) for line in (await client.get(f"/v1/ablations/{job['id']}/traces/vanilla")).text.splitlines()]
    assert {t["trace"]["task"]["task"] for t in traces} == {"CMI-C", "PI-G"}  # the task runner: each item's task prompt
    bad = await client.post("/v1/ablations", json={"dataset": "mr.jsonl", "conditions": ["vanilla", "context_note"]}, headers=rw())
    assert bad.status_code == 422 and "context_note does not apply to memereacon (2 items)" in bad.json()["error"]["message"]


async def test_a_search_condition_with_nothing_to_search_is_refused_unless_allowed(make_client):
    """As `kar run` does: search_cot/kar with no web evidence is a 422 naming the fix, before any job exists."""
    async with make_client(search=None) as (client, services):
        _dataset(Path(services.settings.data_dir))
        r = await client.post("/v1/ablations", json={"dataset": "bench.json", "conditions": ["vanilla", "kar"], "limit": 1},
                              headers=rw())
        error = r.json()["error"]
        assert r.status_code == 422 and error["code"] == "no_evidence", r.text
        assert error["message"].startswith("kar would run without web evidence: web search is off")
        assert '"allow_no_evidence": true' in error["message"]
        assert (await client.get("/v1/ablations")).json() == []
        r = await client.post("/v1/ablations", json={"dataset": "bench.json", "conditions": ["vanilla"], "limit": 1}, headers=rw())
        assert r.status_code == 202, r.text  # a condition that does not search is not refused
        r = await client.post("/v1/ablations", json={"dataset": "bench.json", "conditions": ["search_cot"], "limit": 1,
                                                     "allow_no_evidence": True}, headers=rw())
        assert r.status_code == 202, r.text
        job = r.json()
        job = await _finished(client, job)
        assert job["status"] == "succeeded", job
        manifest = json.loads((services.ablations.job_dir(job["id"]) / "manifest.json").read_text("utf-8"))
        assert manifest["allow_no_evidence"] is True and manifest["evidence"]["available"] is False
