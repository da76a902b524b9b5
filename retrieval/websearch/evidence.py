"""Does a search backend have anything to search?  Asked before a run, not discovered after it.

The default backend (``local``) searches only the corpus that crawl jobs and ``kar corpus import``
fill (imported pages count like crawled ones); ``kar kb import`` adds entities, not pages.  A Search-CoT or KAR run over an empty corpus gets no web evidence at
all, so the pipeline factory, ``kar explain``, the API and ``kar run`` call
:func:`evidence_status` and say so up front (and record it in the trace and the manifest).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from retrieval.websearch.base import WebSearch
from retrieval.websearch.cache import CachedSearch
from retrieval.websearch.local import LocalCorpusSearch

__all__ = ["EvidenceStatus", "evidence_status"]

EMPTY_CORPUS_FIX = (
    "crawl pages first (`kar crawl knowyourmeme --limit 50`; `kar kb import` adds entities, not pages), "
    "import a page dump (`kar corpus import pages.jsonl`, a WARC, scrapy -o output), "
    "or use KAR_SEARCH_BACKEND=tavily with KAR_TAVILY_API_KEY (or searxng with KAR_SEARXNG_URL)"
)


@dataclass(frozen=True)
class EvidenceStatus:
    """What the configured search can return: ``available`` False means every search is empty."""

    backend: str
    available: bool
    reason: str | None = None
    corpus_chunks: int | None = None
    replay_only: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def corpus_chunks(kb: Any) -> int:
    """Chunks in the knowledge base's crawled-pages corpus (0 when the collection does not exist)."""
    store = kb.store
    if store.backend.collection_info("corpus") is None:
        return 0
    return int(store.corpus.count())


def evidence_status(search: WebSearch | None, backend: str | None = None) -> EvidenceStatus:
    """Whether ``search`` (as built by :func:`retrieval.websearch.build_search`, or ``None``) can return evidence.

    ``None`` (``KAR_SEARCH_BACKEND=none``) and a local corpus with no chunks are unavailable, with
    the reason and its fix; any other backend (Tavily with a key, a test double) is assumed available.
    """
    if search is None:
        name = backend or "none"
        return EvidenceStatus(name, False, f"web search is off (KAR_SEARCH_BACKEND={name}): searches return no evidence")
    replay_only = False
    inner: Any = search
    if isinstance(search, CachedSearch):
        inner, replay_only = search.backend, search.replay_only
    name = getattr(inner, "name", None) or backend or type(inner).__name__
    if isinstance(inner, LocalCorpusSearch):
        n = corpus_chunks(inner.kb)
        if n == 0:
            reason = (
                "the local search corpus is empty (0 crawled pages), so searches return nothing: " + EMPTY_CORPUS_FIX
            )
            if replay_only:  # a frozen rerun: the cache answers, the corpus is not asked
                return EvidenceStatus(name, True, "replay-only: searches come from the cache; " + reason, 0, True)
            return EvidenceStatus(name, False, reason, corpus_chunks=0)
        return EvidenceStatus(name, True, None, corpus_chunks=n, replay_only=replay_only)
    return EvidenceStatus(name, True, None, replay_only=replay_only)
