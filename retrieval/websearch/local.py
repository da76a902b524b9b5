"""``LocalCorpusSearch``: offline search over the crawled-pages corpus in CultureBase.

Queries are embedded with the knowledge base's embedder and matched against the
``corpus`` collection's ``text`` vector; each hit becomes a result with the page's
title, URL and chunk text.  Embedding and store access are blocking, so they run in a
worker thread behind a lock (the embedded store is single-process and the embedder is
not re-entrant).
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any

from retrieval.websearch.base import SearchError, SearchResult

if TYPE_CHECKING:  # pragma: no cover
    from retrieval.knowledge_base import KnowledgeBase

MAX_SNIPPET_CHARS = 1200


class LocalCorpusSearch:
    """A :class:`~retrieval.websearch.base.WebSearch` over ``kb.store.corpus``."""

    name = "local"

    def __init__(self, kb: KnowledgeBase, lock: threading.Lock | None = None, min_score: float = 0.0) -> None:
        self.kb = kb
        self.lock = lock or threading.Lock()
        self.min_score = min_score

    def params(self, max_results: int) -> dict[str, Any]:
        return {"max_results": max_results, "embedder": self.kb.embedder.name, "min_score": self.min_score}

    def search_sync(self, query: str, max_results: int = 5) -> list[SearchResult]:
        """Blocking search (used by the async method in a worker thread)."""
        with self.lock:  # the embedder only; the corpus search below runs concurrently
            vector = self.kb.embedder.encode_queries([query]).dense[0]
        hits = self.kb.store.corpus.search("text", vector, max_results)
        out = []
        for hit in hits:
            if hit.score < self.min_score:
                continue
            p = hit.payload
            out.append(
                SearchResult(
                    title=str(p.get("title") or p.get("url") or ""),
                    url=str(p.get("url") or ""),
                    content=str(p.get("text") or "")[:MAX_SNIPPET_CHARS],
                    score=round(float(hit.score), 4),
                )
            )
        return out

    async def search(self, query: str, max_results: int = 5) -> list[SearchResult]:
        try:
            return await asyncio.to_thread(self.search_sync, query, max_results)
        except SearchError:
            raise
        except Exception as exc:
            raise SearchError(f"local corpus search {query!r} failed: {type(exc).__name__}: {exc}") from exc
