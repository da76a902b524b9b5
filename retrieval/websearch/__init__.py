"""Web search backends: Tavily, the local crawled corpus, and the shared SQLite cache."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from retrieval.websearch.base import CacheMissError, SearchError, SearchNotConfiguredError, SearchResult, WebSearch
from retrieval.websearch.cache import CachedSearch
from retrieval.websearch.evidence import EvidenceStatus, evidence_status
from retrieval.websearch.local import LocalCorpusSearch
from retrieval.websearch.searxng import SearxngSearch
from retrieval.websearch.tavily import TavilySearch

if TYPE_CHECKING:  # pragma: no cover
    from culturebase.settings import Settings
    from retrieval.knowledge_base import KnowledgeBase


def build_search(
    settings: Settings, kb: KnowledgeBase | None = None, lock: threading.Lock | None = None, cache: bool = True
) -> WebSearch | None:
    """The configured backend behind the disk cache (None for ``search_backend=none``)."""
    backend: WebSearch
    if settings.search_backend == "none":
        return None
    if settings.search_backend == "tavily":
        key = settings.tavily_api_key.get_secret_value() if settings.tavily_api_key else None
        backend = TavilySearch(key, settings.tavily_api_base_url)
    elif settings.search_backend == "searxng":
        backend = SearxngSearch(settings.searxng_url)
    else:
        if kb is None:
            raise SearchNotConfiguredError("local search needs the knowledge base (its corpus collection)")
        backend = LocalCorpusSearch(
            kb, lock=lock, mode=settings.corpus_search, fusion=settings.corpus_fusion, floor=settings.evidence_floor
        )
    if not cache:
        return backend
    return CachedSearch(backend, settings.resolved_search_cache_path, replay_only=settings.search_replay_only)


__all__ = [
    "CacheMissError",
    "CachedSearch",
    "EvidenceStatus",
    "LocalCorpusSearch",
    "SearchError",
    "SearchNotConfiguredError",
    "SearchResult",
    "SearxngSearch",
    "TavilySearch",
    "WebSearch",
    "build_search",
    "evidence_status",
]
