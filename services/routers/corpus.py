"""The search corpus: ``POST /v1/corpus/import`` (write key) and ``GET /v1/corpus/search`` / ``stats`` (read key).

The import reads the same formats as ``kar corpus import`` (JSONL pages, WARC / WARC.gz, ``scrapy
crawl -o`` output) and takes dumps of any size up to ``KAR_API_MAX_IMPORT_MB``: the body is streamed
to disk and imported by a job (:mod:`services.import_jobs`), answered 202 at once; ``GET
/v1/corpus/import/{id}`` shows the pages done and, at the end, the report with every skipped record
named by line (or WARC record) with its reason.  The search runs the same hybrid search KAR's local
web search runs, floor included.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path as PathParam, Query, Request, Response

from services.deps import Services, WriteKey
from services.errors import ApiError
from services.schemas import ErrorPublic
from services.security import Principal, authenticate

router = APIRouter(tags=["corpus"])
ERR = {code: {"model": ErrorPublic} for code in (400, 401, 403, 404, 413, 415, 422, 507)}
JobId = Annotated[str, PathParam(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
CONTENT_TYPES = (
    "application/x-ndjson", "application/jsonl", "application/json", "text/plain",
    "application/warc", "application/gzip", "application/x-gzip", "application/octet-stream",
)


def require_read_key(request: Request, services: Services) -> Principal:
    """Reads of the corpus need an API key (read-only or read-write)."""
    return authenticate(request, services.keyring, write=False, required=True)


ReadKey = Annotated[Principal, Depends(require_read_key)]


@router.post("/v1/corpus/import", status_code=202, responses=ERR)
async def import_corpus(
    request: Request,
    services: Services,
    key: WriteKey,
    response: Response,
    dry_run: Annotated[bool, Query(description="Read and check every record; store nothing.")] = False,
) -> dict[str, Any]:
    """Import pages into the search corpus (a page already there is replaced, by URL): the body is streamed to
    disk (413 beyond KAR_API_MAX_IMPORT_MB) and imported by a job; 202 with the job, GET its ``url`` for progress
    and the report."""
    from services.import_runners import corpus_runner

    ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if ctype not in CONTENT_TYPES:
        raise ApiError(
            415, "unsupported_content_type",
            "send JSONL pages as application/x-ndjson, scrapy -o output as application/json, a WARC as application/warc (or application/gzip)",
        )
    manager = services.imports
    job = await manager.receive(request, "corpus", dry_run, {"content_type": ctype})
    manager.start(job, corpus_runner(services.kb), services.kb_call)
    response.headers["Location"] = job.public()["url"]
    return job.public()


@router.get("/v1/corpus/import/{job_id}", responses=ERR)
async def corpus_import_job(job_id: JobId, services: Services, key: ReadKey) -> dict[str, Any]:
    """An import job: status, pages done, and when it has ended the report (counts, skipped records by line or
    WARC record with their reasons, the corpus's size) or the error."""
    return services.imports.get("corpus", job_id).public()


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
    return await services.kb_read(services.kb.store.corpus_stats)  # a read: not behind an import holding the store lock
