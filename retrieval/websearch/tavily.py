"""``TavilySearch``: Tavily's search API through tavily-python's async client.

Requests use the study's settings (basic depth, ``max_results`` results, no answer, no raw
content); ``api_base_url`` may point at another endpoint (a proxy, or the local fake
server in the tests).  429, 5xx, transport errors and timeouts are retried with
exponential backoff (tenacity); anything else fails at once.  The client is built lazily
on first use, one per event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from retrieval.websearch.base import SearchError, SearchNotConfiguredError, SearchResult

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


class TavilySearch:
    """A :class:`~retrieval.websearch.base.WebSearch` over the Tavily API."""

    name = "tavily"
    uses_names = False  # a web search ranks by the query alone: ``names`` never enter its cache key

    def __init__(
        self,
        api_key: str | None,
        api_base_url: str | None = None,
        *,
        search_depth: str = "basic",
        timeout_s: float = 30.0,
        max_retries: int = 3,
        backoff_initial_s: float = 1.0,
        backoff_max_s: float = 30.0,
    ) -> None:
        if not api_key:
            raise SearchNotConfiguredError(
                "Tavily search needs an API key: set KAR_TAVILY_API_KEY (or use KAR_SEARCH_BACKEND=local)"
            )
        self._api_key = api_key
        self.api_base_url = api_base_url
        self.search_depth = search_depth
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self._client: AsyncTavilyClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def params(self, max_results: int) -> dict[str, Any]:
        return {"search_depth": self.search_depth, "max_results": max_results, "include_answer": False}

    def _get_client(self) -> AsyncTavilyClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            from tavily import AsyncTavilyClient

            self._client = AsyncTavilyClient(api_key=self._api_key, api_base_url=self.api_base_url)
            self._loop = loop
        return self._client

    async def search(self, query: str, max_results: int = 5, names: Sequence[str] | None = None) -> list[SearchResult]:
        """Results for ``query``; ``names`` are accepted and ignored (a web search ranks by the query alone)."""
        client = self._get_client()
        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception(is_retryable),
                stop=stop_after_attempt(self.max_retries + 1),
                wait=wait_exponential_jitter(initial=self.backoff_initial_s, max=self.backoff_max_s),
                reraise=True,
            ):
                with attempt:
                    body = await client.search(
                        query,
                        search_depth=self.search_depth,
                        max_results=max_results,
                        include_answer=False,
                        include_raw_content=False,
                        include_images=False,
                        timeout=self.timeout_s,
                    )
        except Exception as exc:
            raise SearchError(f"tavily search {query!r} failed: {type(exc).__name__}: {exc}") from exc
        results = (body or {}).get("results") or []
        return [SearchResult.from_dict(r) for r in results[:max_results] if isinstance(r, dict)]

    async def aclose(self) -> None:
        if self._client is not None:
            try:
                await self._client.close()
            except RuntimeError:  # the loop that owned the client is gone
                pass
            self._client = None
