"""SearXNG backend through httpx against a local fake with SearXNG's JSON shape; behind the disk cache."""

from __future__ import annotations

import pytest

from culturebase.settings import Settings
from retrieval.websearch import CachedSearch, SearchError, SearchNotConfiguredError, SearchResult, SearxngSearch, build_search
from tests.fakes.searxng_server import FakeSearxngReply, FakeSearxngServer, envelope, result


@pytest.fixture
def searxng():
    with FakeSearxngServer() as server:
        yield server


def fast(server: FakeSearxngServer, **kw) -> SearxngSearch:
    return SearxngSearch(server.base_url, backoff_initial_s=0.01, backoff_max_s=0.02, **kw)


async def test_results_come_from_the_json_api_in_order(searxng):
    searxng.pages["doge meme origin meaning"] = [
        result("https://knowyourmeme.com/memes/doge", "Doge | Know Your Meme", "Doge is a Shiba Inu meme.", position=1),
        {"title": "an infobox-like entry without url", "content": "x"},
        result("https://en.wikipedia.org/wiki/Doge_(meme)", "Doge (meme) - Wikipedia", "Kabosu…", position=2),
    ]
    search = fast(searxng)
    results = await search.search("doge meme origin meaning", 5)
    await search.aclose()
    assert [r.url for r in results] == ["https://knowyourmeme.com/memes/doge", "https://en.wikipedia.org/wiki/Doge_(meme)"]
    assert results[0].title == "Doge | Know Your Meme" and results[0].content == "Doge is a Shiba Inu meme."
    assert results[0].score == 2.0 and results[0].above_floor is None
    (req,) = searxng.search_requests()
    assert req["params"]["q"] == "doge meme origin meaning" and req["params"]["format"] == "json"


async def test_max_results_is_respected(searxng):
    assert len(await fast(searxng).search("pepe", 2)) == 2


async def test_json_format_off_is_said_with_its_fix(searxng):
    searxng.json_enabled = False
    with pytest.raises(SearchError, match="403.*settings.yml"):
        await fast(searxng).search("doge")


async def test_no_engine_could_search_is_not_an_empty_web(searxng):
    searxng.enqueue(FakeSearxngReply(200, envelope("doge", [], [["duckduckgo", "CAPTCHA"], ["brave", "Suspended: too many requests"]])))
    with pytest.raises(SearchError, match="no engine could search.*duckduckgo: CAPTCHA"):
        await fast(searxng).search("doge")


async def test_plain_empty_answer_is_no_results(searxng):
    searxng.enqueue(FakeSearxngReply(200, envelope("zzqx", [])))
    assert await fast(searxng).search("zzqx") == []


async def test_server_errors_are_retried_then_given_up(searxng):
    searxng.enqueue(FakeSearxngReply(502), FakeSearxngReply(429))
    assert len(await fast(searxng).search("doge", 3)) == 3
    assert len(searxng.search_requests()) == 3
    searxng.enqueue(*[FakeSearxngReply(503)] * 3)
    with pytest.raises(SearchError, match="searxng search 'pepe' failed"):
        await fast(searxng, max_retries=2).search("pepe")


async def test_not_json_is_named(searxng):
    searxng.enqueue(FakeSearxngReply(200, b"<html>not json</html>"))
    with pytest.raises(SearchError, match="not JSON"):
        await fast(searxng).search("doge")


def test_needs_its_url():
    with pytest.raises(SearchNotConfiguredError, match="KAR_SEARXNG_URL"):
        SearxngSearch(None)


async def test_built_from_settings_behind_the_disk_cache(searxng, tmp_path):
    settings = Settings(search_backend="searxng", searxng_url=searxng.base_url, search_cache_path=tmp_path / "c.sqlite")
    search = build_search(settings)
    assert isinstance(search, CachedSearch) and isinstance(search.backend, SearxngSearch)
    first = await search.search("distracted boyfriend", 3)
    again = await search.search("distracted boyfriend", 3)
    assert first == again and all(isinstance(r, SearchResult) for r in first)
    assert len(searxng.search_requests()) == 1 and search.hits == 1
    await search.aclose()
