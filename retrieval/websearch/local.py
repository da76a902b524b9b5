"""``LocalCorpusSearch``: offline search over the crawled and imported pages in CultureBase.

``mode="hybrid"`` (the default) is :func:`retrieval.websearch.hybrid.search_corpus`: dense and
BM25 lexical routes fused, a relevance floor read against the query's own background, one
result per page (at most two chunks of it).  ``mode="dense"`` is the search as it was before
(one dense search, the top chunks whatever their score), kept for ``bench/evidence.py`` and for
corpora built before the lexical vector.  Embedding and store access are blocking, so they run
in a worker thread; the lock guards the embedder only.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from retrieval.calibration.resolve import Calibration, resolve_calibration
from retrieval.websearch.base import SearchError, SearchResult
from retrieval.websearch.hybrid import PageFloors, PageHit, search_corpus
from retrieval.websearch.params import PARAMS, HybridParams, PageFusion

if TYPE_CHECKING:  # pragma: no cover
    from retrieval.knowledge_base import KnowledgeBase

__all__ = ["LocalCorpusSearch"]


class LocalCorpusSearch:
    """A :class:`~retrieval.websearch.base.WebSearch` over ``kb.store.corpus``."""

    name = "local"

    def __init__(
        self,
        kb: KnowledgeBase,
        lock: threading.Lock | None = None,
        min_score: float = 0.0,
        mode: Literal["hybrid", "dense"] = "hybrid",
        fusion: PageFusion = "sum",
        floor: float | None = None,
        calibration: Calibration | None = None,
        hybrid: HybridParams = PARAMS,
    ) -> None:
        self.kb = kb
        self.lock = lock or threading.Lock()
        self.min_score = min_score
        self.mode = mode
        self.fusion = fusion
        #: the hybrid search's tuned values, with ``fusion`` as given
        self.hybrid = replace(hybrid, fusion=fusion)
        # the floors are the calibration record's (the KB's, the bundled one, or conservative values); floor
        # overrides the record's corpus floor (KAR_EVIDENCE_FLOOR)
        self.calibration = calibration or resolve_calibration(kb.store, kb.embedder.name, kb.embedder.dim)
        self.floor = self.calibration.thresholds.corpus_floor if floor is None else floor
        self.ordinary_floor = self.calibration.thresholds.corpus_ordinary_floor
        #: the hybrid search ranks a page titled as one of ``names`` first (the name rule); the dense one ignores them
        self.uses_names = mode == "hybrid"

    def params(self, max_results: int) -> dict[str, Any]:
        if self.mode == "dense":
            return {"max_results": max_results, "embedder": self.kb.embedder.name, "min_score": self.min_score}
        # the title rule and the lexical-alone rule change what a search returns: a cached answer from before
        # them is not this search's
        return {
            "max_results": max_results, "embedder": self.kb.embedder.name, "mode": "hybrid", "fusion": self.fusion, "floor": self.floor,
            "title_rule": self.hybrid.title_min_coverage, "lexical_alone_needs_words": self.hybrid.lexical_alone_needs_words, "name_rule": self.hybrid.name_rule,
            "ordinary_words_rule": self.hybrid.ordinary_words_rule, "ordinary_floor": self.ordinary_floor, "ordinary_shared_words": self.hybrid.ordinary_shared_words,
        }

    def pages(self, query: str, max_results: int = 5, names: Sequence[str] | None = None) -> list[PageHit]:
        """The best pages for ``query`` with their heights and floor decision (blocking; hybrid mode);
        ``names``: the grounded entity's names and aliases when the query is about one (the name rule of
        :mod:`retrieval.websearch.hybrid`; None: read off the query when it has KAR's entity form)."""
        with self.lock:  # the embedder only; the corpus search below runs concurrently
            vector = self.kb.embedder.encode_queries([query]).dense[0]
        return search_corpus(self.kb.store, vector, query, max_results, PageFloors(self.floor, self.ordinary_floor), self.hybrid, names=names)

    def search_sync(self, query: str, max_results: int = 5, names: Sequence[str] | None = None) -> list[SearchResult]:
        """Blocking search (used by the async method in a worker thread); ``names`` as in :meth:`pages`."""
        if self.mode == "hybrid":
            return [
                SearchResult(h.title, h.url, h.text, round(h.relevance, 4), h.above_floor, h.entity_id)
                for h in self.pages(query, max_results, names=names or None)
            ]
        with self.lock:
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
                    content=str(p.get("text") or "")[: self.hybrid.max_snippet_chars],
                    score=round(float(hit.score), 4),
                )
            )
        return out

    async def search(self, query: str, max_results: int = 5, names: Sequence[str] | None = None) -> list[SearchResult]:
        """Results for ``query``; ``names``: the grounded entity's names and aliases (hybrid mode's name rule)."""
        try:
            return await asyncio.to_thread(self.search_sync, query, max_results, names)
        except SearchError:
            raise
        except Exception as exc:
            raise SearchError(f"local corpus search {query!r} failed: {type(exc).__name__}: {exc}") from exc
