"""The API's ablation jobs expose the retrieval diagnostics `kar report --run` computes: per condition and
item, from the job's traces, the server's CultureBase and the benchmark; joined with judged files put in
the job folder; a benchmark-family dataset says it has no gold entities."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

from tests.services.conftest import rw

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


async def _finished(client, job: dict) -> dict:
    for _ in range(4000):  # a generous bound for a loaded machine (the run itself takes seconds)
        job = (await client.get(f"/v1/ablations/{job['id']}")).json()
        if job["status"] not in ("queued", "running"):
            return job
        await asyncio.sleep(0.05)
    raise AssertionError(job)


async def test_ablation_job_diagnostics(api):
    client, services = api
    root = Path(services.settings.data_dir) / "datasets"
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLES / "bench_sample.json", root / "bench.json")
    shutil.copytree(EXAMPLES / "images", root / "images")
    r = await client.post("/v1/ablations", json={"dataset": "bench.json", "conditions": ["vanilla", "kar"], "limit": 1}, headers=rw())
    assert r.status_code == 202, r.text
    job = await _finished(client, r.json())
    assert job["status"] == "succeeded", job
    diag = (await client.get(f"/v1/ablations/{job['id']}/diagnostics")).json()
    row = diag["kar"]["rows"][0]
    # the sample's identity is free text: its gold is the CultureBase entities it names
    assert row["id"] == "sample-zh-001" and row["gold_source"] == "identity_text" and "诸葛亮" in row["gold"]
    assert row["gold_in_kb"] is True and row["identity_grounded"] is True and row["gold_rank"] == 1
    assert row["knowledge_method"] == "proxy" and row["knowledge_units"] == 1
    assert diag["kar"]["counts"]["traced"] == 1 and diag["kar"]["joined"] is None
    assert diag["vanilla"]["rows"][0]["evidence_status"] == "n/a"
    # judged files placed in the job folder are joined (Vanilla fails, KAR passes: a repair with the entity grounded)
    judged = services.ablations.job_dir(job["id"]) / "judged"
    judged.mkdir()
    for cond, vector in (("vanilla", [1, 0, 0, 0]), ("kar", [1, 1, 1, 1])):
        record = {"id": "sample-zh-001", "image_path": "x", "response": "r", "evaluation": {"checklist_result": vector}}
        (judged / f"{cond}.json").write_text(json.dumps([record]), "utf-8")
    diag = (await client.get(f"/v1/ablations/{job['id']}/diagnostics")).json()
    cells = diag["kar"]["joined"]["layers"]["Success"]["cells"]
    assert diag["kar"]["joined"]["baseline"] == "vanilla" and cells["repair.grounded.knowledge"] + cells[
        "repair.grounded.no_knowledge"] == ["sample-zh-001"]
    assert (await client.get("/v1/ablations/nope/diagnostics")).status_code == 404


async def test_family_benchmark_job_says_it_has_no_gold(api):
    from tests.eval.tasks.benchkit import memereacon, png, write_jsonl

    client, services = api
    root = Path(services.settings.data_dir) / "datasets"
    png(root / "m0.png")
    write_jsonl(root / "mr.jsonl", [memereacon(0, "CMI-C")])
    r = await client.post("/v1/ablations", json={"dataset": "mr.jsonl", "conditions": ["vanilla"]}, headers=rw())
    job = await _finished(client, r.json())
    diag = (await client.get(f"/v1/ablations/{job['id']}/diagnostics")).json()
    assert diag == {"skipped": "memereacon items name no gold identity entities, so there is nothing to diagnose retrieval against"}
