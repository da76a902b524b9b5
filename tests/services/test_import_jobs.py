"""POST /v1/corpus/import and /v1/kb/import: the body streamed to disk, 202 with a job, GET the job for its
report (bad records named by WARC record or line); 413 beyond KAR_API_MAX_IMPORT_MB, with or without a
Content-Length, and the partial body deleted."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.services.conftest import finished_job, ro, rw

PAGE = "<html><head><title>{title}</title></head><body><main><p>{text}</p></main></body></html>"
WARC_HEADERS = {"Content-Type": "application/warc"}


def warc_bytes() -> bytes:
    """Three HTML pages, a PNG (not a page: named), a 404 (named) and a request record (not reported)."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    records = [
        ("https://blog.example.org/nyan", "text/html", PAGE.format(title="Nyan Cat", text="Nyan Cat flies through space with a pop-tart body."), "200 OK"),
        ("https://blog.example.org/logo.png", "image/png", "\x89PNG\r\n\x1a\n", "200 OK"),
        ("https://blog.example.org/doge", "text/html", PAGE.format(title="Doge", text="Doge is a Shiba Inu with comic sans captions."), "200 OK"),
        ("https://blog.example.org/gone", "text/html", "<html></html>", "404 Not Found"),
        ("https://blog.example.org/potion", "text/html", PAGE.format(title="Potion Seller", text="My potions are too strong for you, traveller."), "200 OK"),
    ]
    buf = io.BytesIO()
    writer = WARCWriter(buf, gzip=True)
    for url, ctype, body, status in records:
        http = StatusAndHeaders(status, [("Content-Type", ctype)], protocol="HTTP/1.1")
        payload = io.BytesIO(body.encode("latin-1") if ctype == "image/png" else body.encode())
        writer.write_record(writer.create_warc_record(url, "response", payload=payload, http_headers=http))
    writer.write_record(writer.create_warc_record("https://blog.example.org/req", "request", payload=io.BytesIO(b"GET / HTTP/1.1\r\n\r\n")))
    return buf.getvalue()


async def test_a_warc_posted_to_the_corpus_is_imported_by_a_job_with_its_bad_records_named(make_client):
    async with make_client() as (client, services):
        body = warc_bytes()
        assert (await client.post("/v1/corpus/import", content=body, headers=WARC_HEADERS)).status_code == 401
        assert (await client.post("/v1/corpus/import", content=body, headers={**WARC_HEADERS, **ro()})).status_code == 403
        r = await client.post("/v1/corpus/import", content=body, headers={**WARC_HEADERS, **rw()})
        assert r.status_code == 202, r.text
        started = r.json()
        assert started["bytes"] == len(body) and started["kind"] == "corpus" and r.headers["location"] == started["url"]
        assert (await client.get(started["url"])).status_code == 401  # the corpus's reads need a key
        job = await finished_job(client, started["url"], ro())
        assert job["status"] == "succeeded", job
        assert job["done"] == 3 and job["unit"] == "pages"
        report = job["report"]
        assert report["pages"] == 3 and report["read"] == 5 and not report["complete"]
        assert report["skipped_total"] == 2
        assert {(s["where"], s["reason"]) for s in report["skipped"]} == {
            ("record 2", "https://blog.example.org/logo.png: not HTML (content type image/png)"),
            ("record 4", "https://blog.example.org/gone: HTTP status 404, not a page"),
        }
        assert report["corpus"]["pages"] == 3
        found = await client.get("/v1/corpus/search", params={"q": "Shiba Inu comic sans"}, headers=ro())
        assert found.json()["results"][0]["url"] == "https://blog.example.org/doge"
        assert not any((Path(services.settings.data_dir) / "imports").glob("*/body"))  # the body goes when the job ends
        assert (await client.get(started["url"].replace("/corpus/", "/kb/"))).status_code == 404  # not a kb job


async def test_an_entity_dump_posted_to_the_kb_is_imported_by_a_job_with_rejected_lines(make_client):
    async with make_client() as (client, services):
        count = services.kb.store.count()
        lines = [
            json.dumps({"name": "流式导入梗", "description": "经由任务导入", "language": "zh"}, ensure_ascii=False),
            "{not json",
            json.dumps({"name": "Streamed import meme", "source": "Release", "description": "through a job", "cultural_usage": "x"}),
        ]
        body = "\n".join(lines).encode()
        ndjson = {"Content-Type": "application/x-ndjson"}
        assert (await client.post("/v1/kb/import", content=body, headers={**ndjson, **ro()})).status_code == 403
        r = await client.post("/v1/kb/import", content=body, headers={**ndjson, **rw()})
        assert r.status_code == 202, r.text
        job = await finished_job(client, r.json()["url"], {})
        assert job["status"] == "succeeded", job
        assert job["done"] == 2 and job["total"] == 3 and job["unit"] == "entities"
        report = job["report"]
        assert report["read"] == 3 and report["stored"] == 2 and [x["line"] for x in report["rejected"]] == [2]
        assert report["total_entities"] == count + 2 == services.kb.store.count()
        r = await client.post("/v1/kb/import", content=b"plain text, not a zip", headers={**rw(), "Content-Type": "application/zip"})
        failed = await finished_job(client, r.json()["url"], {})
        assert failed["status"] == "failed" and "not a zip or tar(.gz) archive" in failed["error"]
        assert (await client.post("/v1/kb/import", content=b"x", headers={**rw(), "Content-Type": "image/png"})).status_code == 415
        assert (await client.post("/v1/kb/import", content=b"", headers={**rw(), **ndjson})).status_code == 400
        assert (await client.get("/v1/kb/import/nope")).status_code == 404


async def test_a_body_over_the_import_limit_is_413_naming_it_with_or_without_a_length(make_client):
    async with make_client(api_max_import_mb=0.01) as (client, services):  # 10,485 bytes
        body = warc_bytes() * 20
        assert len(body) > 0.01 * 2**20
        imports = Path(services.settings.data_dir) / "imports"
        for path in ("/v1/corpus/import", "/v1/kb/import"):
            headers = {**rw(), "Content-Type": "application/gzip"}
            r = await client.post(path, content=body, headers=headers)  # Content-Length: refused before reading
            assert r.status_code == 413 and "KAR_API_MAX_IMPORT_MB=0.01" in r.json()["error"]["message"], r.text

            async def chunked() -> AsyncIterator[bytes]:
                for start in range(0, len(body), 4096):
                    yield body[start : start + 4096]

            r = await client.post(path, content=chunked(), headers=headers)  # no Content-Length: counted while read
            assert r.status_code == 413 and "KAR_API_MAX_IMPORT_MB=0.01" in r.json()["error"]["message"], r.text
            assert not imports.exists() or not any(imports.iterdir())  # the partial body is deleted
        small = warc_bytes()
        assert len(small) < 0.01 * 2**20
        r = await client.post("/v1/corpus/import", content=small, headers={**rw(), **WARC_HEADERS})
        assert r.status_code == 202
        assert (await finished_job(client, r.json()["url"], ro()))["report"]["pages"] == 3


def test_a_job_running_when_the_server_stopped_reads_interrupted_after_a_restart(tmp_path):
    from services.errors import ApiError
    from services.import_jobs import ImportJob, ImportJobManager

    folder = tmp_path / "imports" / "abc123"
    folder.mkdir(parents=True)
    job = ImportJob(id="abc123", kind="corpus", bytes=10, status="running", done=4)
    (folder / "status.json").write_text(json.dumps(job.to_dict()), "utf-8")
    again = ImportJobManager(tmp_path, 1.0).get("corpus", "abc123")
    assert again.status == "interrupted" and again.done == 4 and "post the dump again" in (again.error or "")
    assert json.loads((folder / "status.json").read_text("utf-8"))["status"] == "interrupted"
    with pytest.raises(ApiError) as refused:  # a corpus job is not a kb job
        ImportJobManager(tmp_path, 1.0).get("kb", "abc123")
    assert refused.value.status == 404
