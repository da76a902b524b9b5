"""GET /v1/ablations/datasets: the benchmarks under DATA_DIR/datasets a web-page job can pick."""

from __future__ import annotations

import os

from tests.services.conftest import ro, rw
from tests.services.memebench_release import write_release


async def test_lists_benchmark_files_and_folders_relative_to_datasets(make_client, tmp_path):
    data_dir = tmp_path / "data"
    write_release(data_dir / "datasets" / "memebench")
    (data_dir / "datasets" / "top.jsonl").write_text('{"id": 1}\n', "utf-8")
    (data_dir / "datasets" / "notes.txt").write_text("not a benchmark", "utf-8")
    (data_dir / "datasets" / ".hidden.json").write_text("[]", "utf-8")
    outside = tmp_path / "outside.json"
    outside.write_text("[]", "utf-8")
    os.symlink(outside, data_dir / "datasets" / "escape.json")  # a link leaving DATA_DIR/datasets is not listed
    async with make_client(data_dir=data_dir) as (client, services):
        r = await client.get("/v1/ablations/datasets")  # a read: no key needed, like GET /v1/ablations
        assert r.status_code == 200, r.text
        listed = r.json()
        assert [d["name"] for d in listed] == ["memebench", "memebench/annotations.json", "memebench/kb_entries.json", "top.jsonl"]
        kinds = {d["name"]: d["kind"] for d in listed}
        assert kinds["memebench"] == "folder" and kinds["top.jsonl"] == "file"
        sizes = {d["name"]: d["size_bytes"] for d in listed}
        assert sizes["memebench/annotations.json"] == (data_dir / "datasets" / "memebench" / "annotations.json").stat().st_size
        assert str(tmp_path) not in r.text
        # the route is not taken for a job id, and keys are accepted as on the other reads
        assert (await client.get("/v1/ablations/datasets", headers=ro())).json() == listed
        assert (await client.get("/v1/ablations/datasets", headers=rw())).json() == listed
        # a listed name is what POST /v1/ablations takes
        r = await client.post("/v1/ablations", json={"dataset": "memebench/annotations.json", "conditions": ["vanilla"], "limit": 1}, headers=rw())
        assert r.status_code == 202, r.text


async def test_no_datasets_folder_lists_nothing(make_client):
    async with make_client() as (client, services):
        r = await client.get("/v1/ablations/datasets")
        assert r.status_code == 200 and r.json() == []
