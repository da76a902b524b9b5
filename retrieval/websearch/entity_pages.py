"""A grounded entity's own pages from the corpus, fetched by id, not by similarity.

A page is an entity's own when its chunks carry the entity's id (a crawl links each page to the
entity it produced; ``kar corpus import`` links a page whose record names an ``entity``) or when
its URL is one of the entity's source URLs (compared canonically).  Each page comes back as one
:class:`~retrieval.websearch.base.SearchResult`: its first chunks in page order (the opening of
an entry says what it is), at most two chunks of it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from culturebase.entity import canonical_url
from retrieval.websearch.base import SearchResult
from retrieval.websearch.hybrid import join_chunks, page_key
from retrieval.websearch.params import PARAMS

#: pages per grounded entity that go first into the evidence block
MAX_PAGES_PER_ENTITY = 2


class EntityPages:
    """Fetches grounded entities' own pages from ``store.corpus``."""

    def __init__(self, store: Any, max_pages: int = MAX_PAGES_PER_ENTITY, lock: threading.Lock | None = None) -> None:
        self.store = store
        self.max_pages = max_pages
        self.lock = lock

    def for_entity(self, entity: Any) -> list[SearchResult]:
        """The entity's own pages, source-URL pages first."""
        urls = [s.url for s in getattr(entity, "sources", []) or [] if getattr(s, "url", None)]
        chunks = self.store.entity_page_chunks([entity.id], urls)
        by_page: dict[str, list[dict[str, Any]]] = {}
        for c in chunks:
            by_page.setdefault(page_key(c), []).append(c)
        source_keys = {canonical_url(u) for u in urls}
        pages = sorted(by_page.items(), key=lambda kv: (canonical_url(str(kv[1][0].get("url") or kv[0])) not in source_keys, kv[0]))
        out = []
        for _, parts in pages[: self.max_pages]:
            parts = sorted(parts, key=lambda p: int(p.get("chunk") or 0))[: PARAMS.max_chunks_per_page]
            first = parts[0]
            out.append(
                SearchResult(
                    title=str(first.get("title") or first.get("url") or ""),
                    url=str(first.get("url") or ""),
                    content=join_chunks(parts)[: PARAMS.max_snippet_chars * PARAMS.max_chunks_per_page],
                    score=None,
                    above_floor=None,
                    entity_id=entity.id,
                )
            )
        return out

    def for_entities(self, entities: Sequence[Any]) -> list[tuple[Any, SearchResult]]:
        """``[(entity, page), ...]`` for each entity in grounding order."""
        out: list[tuple[Any, SearchResult]] = []
        for e in entities:
            out.extend((e, page) for page in self.for_entity(e))
        return out
