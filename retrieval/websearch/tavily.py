"""``TavilySearch``: Tavily's search API through tavily-python's async client.

Requests use the study's settings (basic depth, ``max_results`` results, no answer, no raw
content); ``api_base_url`` may point at another endpoint (a proxy, or the local fake
server in the tests).  429, 5xx, transport errors and timeouts are retried with
exponential backoff (tenacity); anything else fails at once.  The client is built lazily
on first use, one per event loop (:class:`~retrieval.websearch.client.RetryingClient`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from retrieval.websearch.base import SearchNotConfiguredError, SearchResult
from retrieval.websearch.client import RetryingClient

if TYPE_CHECKING:  # pragma: no cover
    from tavily import AsyncTavilyClient


def is_retryable(exc: BaseException) -> bool:
    """True for transient Tavily failures (rate limit, 5xx, transport errors, timeouts)."""
    import httpx
    from tavily import errors

    if isinstance(exc, errors.TavilyKeylessLimitError):
        return False
    if isinstance(exc, (errors.UsageLimitExceededError, errors.TimeoutError, httpx.TransportError, asyncio.TimeoutError)):
        return True
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code >= 500 or exc.response.status_code in (408, 409, 429)
    return False


class TavilySearch(RetryingClient):
    """A :class:`~retrieval.websearch.base.WebSearch` over the Tavily API."""

    name = "tavily"

    def __init__(
        self,
        api_key: str | None,
        api_base_url: str | None = None,
        *,
        search_depth: str = "basic",
        **client: Any,
    ) -> None:
        """``client``: the timeout and retry settings of :class:`~retrieval.websearch.client.RetryingClient`."""
        if not api_key:
            raise SearchNotConfiguredError(
                "Tavily search needs an API key: set KAR_TAVILY_API_KEY (or use KAR_SEARCH_BACKEND=local)"
            )
        super().__init__(**client)
        self._api_key = api_key
        self.api_base_url = api_base_url
        self.search_depth = search_depth

    def params(self, max_results: int) -> dict[str, Any]:
        return {"search_depth": self.search_depth, "max_results": max_results, "include_answer": False}

    def new_client(self) -> AsyncTavilyClient:
        from tavily import AsyncTavilyClient

        return AsyncTavilyClient(api_key=self._api_key, api_base_url=self.api_base_url)

    async def close_client(self, client: Any) -> None:
        await client.close()

    def retryable(self, exc: BaseException) -> bool:
        return is_retryable(exc)

    async def search(self, query: str, max_results: int = 5, names: Sequence[str] | None = None) -> list[SearchResult]:
        """Results for ``query``; ``names`` are accepted and ignored (a web search ranks by the query alone)."""
        client = self.client()
        body = await self.retrying(
            query,
            lambda: client.search(
                query,
                search_depth=self.search_depth,
                max_results=max_results,
                include_answer=False,
                include_raw_content=False,
                include_images=False,
                timeout=self.timeout_s,
            ),
        )
        results = (body or {}).get("results") or []
        return [SearchResult.from_dict(r) for r in results[:max_results] if isinstance(r, dict)]
