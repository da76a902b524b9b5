"""The search corpus: ``POST /v1/corpus/import`` (write key) and ``GET /v1/corpus/search`` / ``stats`` (read key).

The import reads the same formats as ``kar corpus import`` (JSONL pages, WARC / WARC.gz, ``scrapy
crawl -o`` output): the body is streamed to a temporary file, then read page by page; skipped
records come back named by line (or WARC record) with their reason.  The search runs the same
hybrid search KAR's local web search runs, floor included.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from services.deps import Services, WriteKey
from services.errors import ApiError
from services.schemas import ErrorPublic
from services.security import Principal, authenticate

router = APIRouter(tags=["corpus"])
ERR = {code: {"model": ErrorPublic} for code in (400, 401, 403, 413, 415, 422)}
CONTENT_TYPES = (
    "application/x-ndjson", "application/jsonl", "application/json", "text/plain",
    "application/warc", "application/gzip", "application/x-gzip", "application/octet-stream",
)


def require_read_key(request: Request, services: Services) -> Principal:
    """Reads of the corpus need an API key (read-only or read-write)."""
    return authenticate(request, services.keyring, write=False, required=True)


ReadKey = Annotated[Principal, Depends(require_read_key)]


@router.post("/v1/corpus/import", responses=ERR)
async def import_corpus(
    request: Request,
    services: Services,
    key: WriteKey,
    dry_run: Annotated[bool, Query(description="Read and check every record; store nothing.")] = False,
) -> dict[str, Any]:
    """Import pages into the search corpus (a page already there is replaced, by URL)."""
    from crawlers.page_dump import import_pages

    ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if ctype not in CONTENT_TYPES:
        raise ApiError(
            415, "unsupported_content_type",
            "send JSONL pages as application/x-ndjson, scrapy -o output as application/json, a WARC as application/warc (or application/gzip)",
        )
    with tempfile.TemporaryDirectory(prefix="kar-corpus-") as tmp:
        body = Path(tmp) / "body.dump"
        size = 0
        with body.open("wb") as fh:
            async for part in request.stream():
                size += len(part)
                fh.write(part)
        if size == 0:
            raise ApiError(400, "empty_import", "the import body is empty")
        report = await services.kb_call(import_pages, services.kb, body, dry_run=dry_run)
    stats = await services.kb_call(services.kb.store.corpus_stats)
    data = report.to_dict()
    data["paths"] = []
    return {**data, "corpus": stats}


@router.get("/v1/corpus/search", responses=ERR)
async def search_corpus(
    services: Services,
    key: ReadKey,
    q: Annotated[str, Query(min_length=1, max_length=1000, description="What to search for.")],
    top_k: Annotated[int, Query(ge=1, le=50)] = 5,
    include_below_floor: Annotated[bool, Query(description="Also return pages below the relevance floor (marked).")] = False,
) -> dict[str, Any]:
    """The ranked pages KAR's local web search finds for ``q``: url, title, score and chunk text."""
    from retrieval.websearch.local import LocalCorpusSearch

    if not q.strip():
        raise ApiError(422, "empty_query", "q is empty")
    s = services.settings
    search = LocalCorpusSearch(services.kb, fusion=s.corpus_fusion, floor=s.evidence_floor)
    pages = await services.kb_read(search.pages, q, top_k) if services.kb.store.has_corpus else []
    shown = [p for p in pages if include_below_floor or p.above_floor]
    return {
        "query": q,
        "floor": search.floor,
        "results": [{**p.to_dict(), "score": round(p.relevance, 4)} for p in shown],
        "below_floor": sum(1 for p in pages if not p.above_floor),
    }


@router.get("/v1/corpus/stats", responses=ERR)
async def corpus_stats(services: Services, key: ReadKey) -> dict[str, Any]:
    """Pages and chunks in the corpus, by site, and how many are linked to an entity."""
    return await services.kb_call(services.kb.store.corpus_stats)
