"""The web-search contract: ``WebSearch.search(query, max_results, names=None) -> list[SearchResult]``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class SearchResult:
    """One search hit: title, URL and a content snippet (plus the backend's score, if any).

    The local corpus also says whether the page stands above the relevance floor
    (``above_floor``, on the fused ``score`` scale: :mod:`retrieval.websearch.hybrid`) and which
    entity the page is linked to (``entity_id``); web backends leave both None."""

    title: str
    url: str
    content: str
    score: float | None = None
    above_floor: bool | None = None
    entity_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SearchResult":
        score = data.get("score")
        floor = data.get("above_floor")
        return cls(
            title=str(data.get("title") or ""),
            url=str(data.get("url") or ""),
            content=str(data.get("content") or ""),
            score=float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else None,
            above_floor=floor if isinstance(floor, bool) else None,
            entity_id=str(data["entity_id"]) if data.get("entity_id") else None,
        )


def uses_names(backend: object) -> bool:
    """Whether ``backend`` ranks with the ``names`` passed to its ``search`` (its ``uses_names`` attribute;
    False when it has none)."""
    return bool(getattr(backend, "uses_names", False))


class SearchError(RuntimeError):
    """A search failed after its retries; the message names the backend and the cause."""


class SearchNotConfiguredError(SearchError):
    """The configured backend cannot run (e.g. Tavily without an API key)."""


class CacheMissError(SearchError):
    """Replay-only mode: the query is not in the search cache."""


@runtime_checkable
class WebSearch(Protocol):
    """An async web search backend.

    ``names``: the names and aliases of the grounded entity a query was made for (KAR's entity queries;
    None for any other query, and always for Search-CoT, which grounds nothing).  A backend that ranks
    with them (the local corpus: :mod:`retrieval.websearch.hybrid`'s name rule) says so with a true
    ``uses_names`` attribute, and :class:`~retrieval.websearch.cache.CachedSearch` then keys on them; the web
    backends accept and ignore them, so their cache keys stay as they were."""

    name: str

    def params(self, max_results: int) -> dict[str, Any]:
        """The request parameters that determine the results (part of the cache key)."""
        ...

    async def search(self, query: str, max_results: int = 5, names: Sequence[str] | None = None) -> list[SearchResult]:
        """Results for ``query``, best first; raise :class:`SearchError` after retries."""
        ...
