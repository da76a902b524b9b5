"""POST /v1/entities/import with a published dump: detected format, category filter, report by reason, no image fetched."""

from __future__ import annotations

import json

from tests.culturebase.test_importers import kym_entry
from tests.services.conftest import rw, store_fingerprint


async def test_kym_dump_is_detected_filtered_and_reported(api):
    client, services = api
    count = services.kb.store.count()
    body = json.dumps([kym_entry("Zzyzx Test Meme"), kym_entry("Some Person", category="Person"), {"title": "  "}, kym_entry("Zzyzx Test Meme")])
    r = await client.post("/v1/entities/import", params={"category": "Meme"}, content=body.encode(),
                          headers={**rw(), "Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    rep = r.json()
    assert (rep["format"], rep["unit"], rep["read"], rep["stored"], rep["merged_duplicates"]) == ("kym-imkg", "entry", 4, 1, 1)
    assert rep["skipped_by_category"] == {"Person": 1} and rep["rejected"][0]["line"] == 3
    assert rep["images_not_fetched"] == 2 and rep["total_entities"] == count + 1


async def test_unknown_format_and_a_cut_dump_change_nothing(api):
    client, services = api
    before = store_fingerprint(services)
    r = await client.post("/v1/entities/import", params={"format": "csv"}, content=b"[]", headers={**rw(), "Content-Type": "application/json"})
    assert r.status_code == 422 and "kym-imkg" in r.json()["error"]["message"]
    cut = json.dumps([kym_entry("Cut")])[:60]
    r = await client.post("/v1/entities/import", params={"format": "kym-imkg"}, content=cut.encode(),
                          headers={**rw(), "Content-Type": "application/json"})
    assert r.status_code == 400 and "entry 1" in r.json()["error"]["message"]
    assert store_fingerprint(services) == before


async def test_a_crawl_output_is_detected_and_imported(api):
    from tests.culturebase.test_import_crawl import page_row

    client, services = api
    count = services.kb.store.count()
    rows = [page_row("Zzyzx Crawled Meme", "zzyzx-crawled"), page_row("", "no-name"), page_row("Zzyzx Crawled Meme", "zzyzx-crawled")]
    body = "\n".join(json.dumps(r) for r in rows).encode()
    r = await client.post("/v1/entities/import", content=body, headers={**rw(), "Content-Type": "application/x-ndjson"})
    assert r.status_code == 200, r.text
    rep = r.json()
    assert (rep["format"], rep["unit"], rep["read"], rep["stored"], rep["merged_duplicates"]) == ("crawl", "line", 3, 1, 1)
    assert rep["rejected"] == [{"line": 2, "reason": "field 'name': missing or empty"}] and rep["total_entities"] == count + 1
