"""CultureBase over HTTP: grounding search = kar kb search, get/put/delete, JSONL import report, stats."""

from __future__ import annotations

import json

from retrieval.grounding import EntityGrounder
from tests.services.conftest import assert_healthy, rw, store_fingerprint


async def test_search_runs_the_grounding_retriever(api):
    client, services = api
    r = await client.get("/v1/entities", params={"q": "我从未见过有如此厚颜无耻之人", "top_k": 3})
    assert r.status_code == 200
    body = r.json()
    kb = services.kb
    expected = EntityGrounder(kb.store, kb.embedder, top_k=3, candidates=20).search_text("我从未见过有如此厚颜无耻之人", top_k=3)
    assert [h["id"] for h in body["hits"]] == [h.entity.id for h in expected.hits]
    assert body["tau"] == expected.tau and body["hits"][0]["name"] == "王司徒"
    # passes_tau is the accept rule (score ≥ τ plus evidence or height), the same decision the pipeline makes
    assert [h["passes_tau"] for h in body["hits"]] == [expected.accepts(g) for g in expected.hits]
    assert body["hits"][0]["passes_tau"]
    assert body["routes"] == expected.routes and body["routes"]["lexical"] == "ran"
    assert body["hits"][0]["route"] == "caption" and body["hits"][0]["route_scores"]["caption"] == 1.0


async def test_search_language_filter_and_listing(api):
    client, _ = api
    r = await client.get("/v1/entities", params={"q": "Doge", "lang": "en", "top_k": 5})
    assert r.status_code == 200 and r.json()["hits"] and all(h["language"] == "en" for h in r.json()["hits"])
    r = await client.get("/v1/entities", params={"top_k": 7})
    assert r.status_code == 200 and len(r.json()["hits"]) == 7 and r.json()["query"] is None
    r = await client.get("/v1/entities", params={"q": "x", "top_k": 0})
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"


async def test_get_put_delete_roundtrip(api):
    client, services = api
    count = services.kb.store.count()
    entity = {"name": "单元测试梗", "aliases": ["unit test meme"], "source_work": "CultureKAR", "description": "A meme made for a test.", "language": "en",
              "sources": [{"site": "example", "url": "https://example.com/meme"}]}
    r = await client.put("/v1/entities/cb_test_entity", json=entity, headers=rw())
    assert r.status_code == 201 and r.json()["id"] == "cb_test_entity"
    assert services.kb.store.count() == count + 1
    r = await client.get("/v1/entities/cb_test_entity")
    assert r.status_code == 200 and r.json()["aliases"] == ["unit test meme"]
    hits = (await client.get("/v1/entities", params={"q": "unit test meme", "top_k": 1})).json()["hits"]
    assert hits[0]["id"] == "cb_test_entity", "a stored entity is embedded and searchable"
    r = await client.put("/v1/entities/cb_test_entity", json={**entity, "description": "changed"}, headers=rw())
    assert r.status_code == 200 and (await client.get("/v1/entities/cb_test_entity")).json()["description"] == "changed"
    assert (await client.delete("/v1/entities/cb_test_entity", headers=rw())).status_code == 204
    r = await client.get("/v1/entities/cb_test_entity")
    assert r.status_code == 404 and r.json()["error"]["code"] == "entity_not_found"
    assert (await client.delete("/v1/entities/cb_test_entity", headers=rw())).status_code == 404
    assert services.kb.store.count() == count


async def test_put_invalid_entity_changes_nothing(api):
    client, services = api
    before = store_fingerprint(services)
    for body in ({"name": ""}, {"name": "x", "sources": [{"site": "s", "url": "javascript:alert(1)"}]}, {"name": "x", "unknown": 1}):
        r = await client.put("/v1/entities/bad", json=body, headers=rw())
        assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error", r.text
    r = await client.put("/v1/entities/bad", content=b"{nope", headers={**rw(), "Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "malformed_json"
    assert store_fingerprint(services) == before
    await assert_healthy(client)


async def test_import_reports_rejected_lines_and_stores_the_rest(api):
    client, services = api
    count = services.kb.store.count()
    lines = [
        json.dumps({"name": "导入梗一", "description": "第一条", "language": "zh"}, ensure_ascii=False),
        "{not json",
        json.dumps({"name": "", "language": "zh"}),
        json.dumps([1, 2]),
        json.dumps({"name": "Imported meme two", "source": "Release", "description": "release format", "cultural_usage": "x"}),
    ]
    r = await client.post("/v1/entities/import", content="\n".join(lines).encode(), headers={**rw(), "Content-Type": "application/x-ndjson"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["read"] == 5 and body["stored"] == 2
    assert [x["line"] for x in body["rejected"]] == [2, 3, 4]
    assert body["total_entities"] == count + 2 == services.kb.store.count()


async def test_import_bad_file_changes_nothing(api):
    client, services = api
    before = store_fingerprint(services)
    r = await client.post("/v1/entities/import", content=b"[{broken", headers={**rw(), "Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_import"
    r = await client.post("/v1/entities/import", content=b"", headers={**rw(), "Content-Type": "application/x-ndjson"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "empty_import"
    r = await client.post("/v1/entities/import", content=b"\xff\xfe\x00", headers={**rw(), "Content-Type": "application/x-ndjson"})
    assert r.status_code == 400 and "UTF-8" in r.json()["error"]["message"]
    assert store_fingerprint(services) == before


async def test_stats(api):
    client, services = api
    r = await client.get("/v1/kb/stats")
    body = r.json()
    calibration = body.pop("calibration")
    assert r.status_code == 200 and body == services.kb.store.stats()
    assert calibration["source"] == "bundled" and calibration["thresholds"]["tau"] == services.pipeline.deps.grounder.tau


async def test_import_on_a_nearly_full_disk_answers_507_with_the_count_and_keeps_the_store(make_client):
    """The JSONL import is a bulk import with the free-disk guard: a disk with less free space than
    KAR_MIN_FREE_DISK_MB stops it with 507, the count stored so far, and no server path."""
    async with make_client(min_free_disk_mb=2**40) as (client, services):
        count = services.kb.store.count()
        lines = [json.dumps({"name": f"磁盘梗{i}", "description": "a meme about a full disk", "language": "zh"}, ensure_ascii=False) for i in range(3)]
        r = await client.post("/v1/entities/import", content="\n".join(lines).encode(), headers={**rw(), "Content-Type": "application/x-ndjson"})
        assert r.status_code == 507, r.text
        err = r.json()["error"]
        assert err["code"] == "import_stopped" and "nearly full" in err["message"] and "stored 0 of 3 entities so far" in err["message"]
        assert str(services.settings.kb_path) not in err["message"]
        assert services.kb.store.count() == count
        await assert_healthy(client)


async def test_split_takes_a_joined_record_back_out_behind_the_write_key(api):
    from culturebase.entity import Entity, Source
    from culturebase.identity import SAME_NAME_AND_WORK, join

    client, services = api
    template = Entity(name="Split Test Meme", description="A template made for a split test.", language="en",
                      sources=[Source(site="memegen", url="https://api.memegen.link/templates/split-test")])
    page = Entity(name="Split Test Meme", aliases=["STM"], description="The meme's page, joined by name and work.", language="en",
                  sources=[Source(site="knowyourmeme", url="https://knowyourmeme.com/memes/split-test-meme")])
    joined = join(template, page, SAME_NAME_AND_WORK)
    services.kb.add([joined])
    got = (await client.get(f"/v1/entities/{joined.id}")).json()
    assert [(p["name"], p["rule"], p["url"]) for p in got["joined_from"]] == [
        ("Split Test Meme", "first", "https://api.memegen.link/templates/split-test"),
        ("Split Test Meme", SAME_NAME_AND_WORK, "https://knowyourmeme.com/memes/split-test-meme"),
    ]
    assert "constituents" not in got and "record" not in got["joined_from"][0]
    body = {"source": "https://knowyourmeme.com/memes/split-test-meme"}
    assert (await client.post(f"/v1/entities/{joined.id}/split", json=body)).status_code == 401
    r = await client.post(f"/v1/entities/{joined.id}/split", json={"source": "https://api.memegen.link/templates/split-test"}, headers=rw())
    assert r.status_code == 409 and r.json()["error"]["code"] == "cannot_split" and "own page" in r.json()["error"]["message"]
    assert (await client.post("/v1/entities/cb_missing/split", json=body, headers=rw())).status_code == 404
    r = await client.post(f"/v1/entities/{joined.id}/split", json=body, headers=rw())
    assert r.status_code == 200, r.text
    kept, out = r.json()["kept"], r.json()["split"]
    assert (kept["id"], kept["aliases"], kept["joined_from"]) == (template.id, [], [])
    assert (out["id"], out["aliases"]) == (page.id, ["STM"])
    assert (await client.get(f"/v1/entities/{page.id}")).json()["description"] == "The meme's page, joined by name and work."
