"""``RetryingClient``: what the web backends (Tavily, SearXNG) share around their HTTP client.

A backend's client is built lazily on first use, one per event loop (a client bound to a closed loop
is built again); each request is retried with exponential backoff and jitter (tenacity) while the
backend's :meth:`RetryingClient.retryable` says the failure is transient, and any failure left is raised
as one :class:`~retrieval.websearch.base.SearchError` naming the backend, the query and the cause.  The
disk cache (:class:`~retrieval.websearch.cache.CachedSearch`) sits in front of a backend like any other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from retrieval.websearch.base import SearchError


class RetryingClient:
    """Base of a web backend: a lazy per-loop client, retries with backoff, errors as :class:`SearchError`.

    A subclass sets ``name``, builds its client in :meth:`new_client`, closes it in :meth:`close_client`, and
    says which failures are transient in :meth:`retryable`."""

    name = "web"
    uses_names = False  # a web search ranks by the query alone: ``names`` never enter its cache key

    def __init__(self, *, timeout_s: float = 30.0, max_retries: int = 3, backoff_initial_s: float = 1.0, backoff_max_s: float = 30.0) -> None:
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self._client: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def new_client(self) -> Any:
        """A new client for the running event loop."""
        raise NotImplementedError

    async def close_client(self, client: Any) -> None:
        """Close a client :meth:`new_client` built."""
        raise NotImplementedError

    def retryable(self, exc: BaseException) -> bool:
        """Whether a failure is transient (retried)."""
        return False

    def client(self) -> Any:
        """The client of the running event loop, built on first use."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = self.new_client()
            self._loop = loop
        return self._client

    async def retrying(self, query: str, request: Callable[[], Awaitable[Any]]) -> Any:
        """``request()``'s answer, retried with backoff while :meth:`retryable`; a failure left is a
        :class:`SearchError` ("{name} search {query!r} failed: …", the type named unless it is a SearchError)."""
        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception(self.retryable),
                stop=stop_after_attempt(self.max_retries + 1),
                wait=wait_exponential_jitter(initial=self.backoff_initial_s, max=self.backoff_max_s),
                reraise=True,
            ):
                with attempt:
                    return await request()
        except SearchError as exc:
            raise SearchError(f"{self.name} search {query!r} failed: {exc}") from exc
        except Exception as exc:
            raise SearchError(f"{self.name} search {query!r} failed: {type(exc).__name__}: {exc}") from exc
        raise AssertionError("unreachable: tenacity either returns or raises")  # pragma: no cover

    async def aclose(self) -> None:
        """Close the client, if one was built (a client whose loop is gone is dropped)."""
        if self._client is not None:
            try:
                await self.close_client(self._client)
            except RuntimeError:  # the loop that owned the client is gone
                pass
            self._client = None
