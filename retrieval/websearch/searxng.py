"""``SearxngSearch``: a self-hosted SearXNG metasearch instance through its JSON API.

``GET {KAR_SEARXNG_URL}/search?q=…&format=json`` answers ``{query, number_of_results,
results[{url, title, content, engine, engines, score, category, publishedDate, …}], answers,
corrections, infoboxes, suggestions, unresponsive_engines[[engine, reason], …]}``.  Only
``results`` with a URL become search results (SearXNG's ``score`` is its own merge weight, kept
as given, not a relevance on any scale we floor).  Two things every user hits are said plainly:
the JSON format is off in a fresh instance (403: add ``json`` to ``search.formats`` in its
``settings.yml``), and an answer with no results while engines were unresponsive means no
engine could search (rate limits, CAPTCHAs), not that the web has nothing.  429, 5xx,
transport errors and timeouts are retried with exponential backoff; the client is built lazily,
one per event loop (:class:`~retrieval.websearch.client.RetryingClient`).  The disk cache
(:class:`~retrieval.websearch.cache.CachedSearch`) sits in front of it like any backend.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from retrieval.websearch.base import SearchError, SearchNotConfiguredError, SearchResult
from retrieval.websearch.client import RetryingClient

JSON_OFF_HELP = "enable the JSON format in the instance's settings.yml (search: formats: [html, json]) and restart it"


class _Retryable(Exception):
    """A transient SearXNG failure (retried)."""


def is_retryable(exc: BaseException) -> bool:
    import httpx

    return isinstance(exc, (_Retryable, httpx.TransportError, asyncio.TimeoutError))


class SearxngSearch(RetryingClient):
    """A :class:`~retrieval.websearch.base.WebSearch` over a SearXNG instance's JSON API."""

    name = "searxng"

    def __init__(
        self,
        base_url: str | None,
        *,
        language: str = "all",
        safesearch: int = 1,
        **client: Any,
    ) -> None:
        """``client``: the timeout and retry settings of :class:`~retrieval.websearch.client.RetryingClient`."""
        if not base_url:
            raise SearchNotConfiguredError(
                "SearXNG search needs its address: set KAR_SEARXNG_URL (e.g. the compose profile `searxng`), "
                "or use KAR_SEARCH_BACKEND=local"
            )
        super().__init__(**client)
        self.base_url = base_url.rstrip("/")
        self.language = language
        self.safesearch = safesearch

    def params(self, max_results: int) -> dict[str, Any]:
        return {"max_results": max_results, "language": self.language, "safesearch": self.safesearch, "instance": self.base_url}

    def new_client(self) -> Any:
        import httpx

        return httpx.AsyncClient(timeout=self.timeout_s, headers={"Accept": "application/json"})

    async def close_client(self, client: Any) -> None:
        await client.aclose()

    def retryable(self, exc: BaseException) -> bool:
        return is_retryable(exc)

    async def _get(self, query: str) -> dict[str, Any]:
        client = self.client()
        resp = await client.get(
            f"{self.base_url}/search",
            params={"q": query, "format": "json", "language": self.language, "safesearch": self.safesearch, "pageno": 1},
        )
        if resp.status_code == 403:
            raise SearchError(f"searxng at {self.base_url} refused format=json (403): {JSON_OFF_HELP}")
        if resp.status_code == 429 or resp.status_code >= 500:
            raise _Retryable(f"HTTP {resp.status_code}")
        if resp.status_code != 200:
            raise SearchError(f"searxng at {self.base_url} answered HTTP {resp.status_code}")
        try:
            body = resp.json()
        except ValueError:
            raise SearchError(
                f"searxng at {self.base_url} answered something that is not JSON ({resp.headers.get('content-type', '?')}): {JSON_OFF_HELP}"
            ) from None
        if not isinstance(body, dict):
            raise SearchError(f"searxng at {self.base_url} answered a JSON {type(body).__name__}, expected an object")
        return body

    async def search(self, query: str, max_results: int = 5, names: Sequence[str] | None = None) -> list[SearchResult]:
        """Results for ``query``; ``names`` are accepted and ignored (a web search ranks by the query alone)."""
        body = await self.retrying(query, lambda: self._get(query))
        raw = [r for r in body.get("results") or [] if isinstance(r, dict) and r.get("url")]
        down = [e for e in body.get("unresponsive_engines") or [] if e]
        if not raw and down:
            names = ", ".join(": ".join(map(str, e)) if isinstance(e, list) else str(e) for e in down[:5])
            raise SearchError(f"searxng search {query!r}: no engine could search ({names}); this is not an empty web")
        return [
            SearchResult(
                title=str(r.get("title") or ""),
                url=str(r["url"]),
                content=str(r.get("content") or ""),
                score=float(r["score"]) if isinstance(r.get("score"), (int, float)) else None,
            )
            for r in raw[:max_results]
        ]
