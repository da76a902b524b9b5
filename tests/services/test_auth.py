"""API keys (401 vs 403, read-only keys, writes disabled without keys), constant-time compare, rate limit, CORS, no secrets in logs."""

from __future__ import annotations

import logging

from services.security import KeyRing
from tests.services.conftest import RO_KEY, RW_KEY, ro, rw, store_fingerprint

ENTITY = {"name": "测试梗", "aliases": ["test meme"], "source_work": "单元测试", "description": "只为测试而存在的梗。", "language": "zh"}


async def test_write_without_key_is_401_with_challenge(api):
    client, services = api
    before = store_fingerprint(services)
    r = await client.put("/v1/entities/test-1", json=ENTITY)
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert store_fingerprint(services) == before


async def test_write_with_unknown_key_is_401(api):
    client, services = api
    r = await client.delete("/v1/entities/whatever", headers={"Authorization": "Bearer not-a-key"})
    assert r.status_code == 401 and "not valid" in r.json()["error"]["message"]


async def test_write_with_read_only_key_is_403(api):
    client, services = api
    before = store_fingerprint(services)
    r = await client.put("/v1/entities/test-1", json=ENTITY, headers=ro())
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    assert store_fingerprint(services) == before


async def test_write_with_read_write_key_succeeds(api):
    client, services = api
    r = await client.put("/v1/entities/test-1", json=ENTITY, headers=rw())
    assert r.status_code == 201, r.text
    r = await client.put("/v1/entities/test-1", json=ENTITY, headers={"X-API-Key": RW_KEY})
    assert r.status_code == 200


async def test_writes_are_disabled_without_configured_keys(make_client):
    async with make_client(api_keys=[]) as (client, services):
        for method, url, kwargs in [
            ("PUT", "/v1/entities/x", {"json": ENTITY}),
            ("DELETE", "/v1/entities/x", {}),
            ("POST", "/v1/entities/import", {"content": b"{}", "headers": {"Content-Type": "application/x-ndjson"}}),
            ("POST", "/v1/crawl-jobs", {"json": {"spider": "moegirl"}}),
            ("POST", "/v1/ablations", {"json": {"dataset": "x.json"}}),
        ]:
            r = await client.request(method, url, **kwargs)
            assert r.status_code == 403, (url, r.text)
            assert r.json()["error"]["code"] == "writes_disabled" and "KAR_API_KEYS" in r.json()["error"]["message"]


async def test_explain_key_required_when_configured(make_client, zhuge_png):
    async with make_client(api_require_key_for_explain=True) as (client, services):
        files = {"image": ("z.png", zhuge_png, "image/png")}
        r = await client.post("/v1/explain", files=files)
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
        r = await client.post("/v1/explain", files=files, headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401
        assert services.vlm.calls == []
        r = await client.post("/v1/explain", files=files, headers=ro())
        assert r.status_code == 200 and r.json()["response"] == "EXPLANATION"


async def test_explain_open_by_default(api, zhuge_png):
    client, _ = api
    r = await client.post("/v1/explain", files={"image": ("z.png", zhuge_png, "image/png")})
    assert r.status_code == 200


async def test_rate_limit_per_key(make_client, zhuge_png):
    async with make_client(api_rate_limit_per_min=2) as (client, services):
        files = {"image": ("z.png", zhuge_png, "image/png")}
        for _ in range(2):
            assert (await client.post("/v1/explain", files=files, headers=rw())).status_code == 200
        r = await client.post("/v1/explain", files=files, headers=rw())
        assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limited"
        assert 1 <= int(r.headers["retry-after"]) <= 60
        assert len(services.vlm.calls) == 4  # the refused request never reached the VLM
        # another key (and anonymous clients, by address) have their own budget
        assert (await client.post("/v1/explain", files=files, headers=ro())).status_code == 200
        assert (await client.post("/v1/explain", files=files)).status_code == 200
        assert (await client.get("/healthz")).status_code == 200


def test_keys_are_compared_in_constant_time_against_every_key(monkeypatch):
    import services.security as security

    seen = []
    real = security.hmac.compare_digest

    def spy(a, b):
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(security.hmac, "compare_digest", spy)
    ring = KeyRing(["k1", "k2", "ro:k3"])
    assert ring.match("k1") is True  # found first, yet every key is still compared
    assert len(seen) == 3
    assert ring.match("k3") is False and ring.match("nope") is None
    assert len(seen) == 9


async def test_cors(make_client):
    async with make_client(cors_origins=["https://memes.example"]) as (client, _):
        pre = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}
        r = await client.options("/v1/explain", headers={"Origin": "https://memes.example", **pre})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://memes.example"
        r = await client.options("/v1/explain", headers={"Origin": "https://evil.example", **pre})
        assert "access-control-allow-origin" not in r.headers
    async with make_client() as (client, _):  # no origins configured: no CORS headers at all
        r = await client.get("/healthz", headers={"Origin": "https://memes.example"})
        assert "access-control-allow-origin" not in r.headers


async def test_keys_never_reach_the_logs(api, caplog, zhuge_png):
    client, _ = api
    with caplog.at_level(logging.DEBUG):
        await client.put("/v1/entities/x1", json=ENTITY, headers=rw())
        await client.put("/v1/entities/x1", json=ENTITY, headers={"Authorization": "Bearer guessed-key-123"})
        await client.post("/v1/explain", files={"image": ("z.png", zhuge_png, "image/png")}, headers=ro())
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert RW_KEY not in text and RO_KEY not in text and "guessed-key-123" not in text
