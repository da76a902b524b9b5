"""Crawl jobs through the crawlers' :class:`CrawlJobManager` (each job runs in its own process).

Starting a job needs a Qdrant server (``KAR_QDRANT_URL``): with the embedded store the API
process holds CultureBase and a crawl process could not write to it (409
``crawl_needs_qdrant_server``).  Listing, inspecting and cancelling work either way.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Path as PathParam, Query, Response

from services.deps import CrawlManager, CrawlStarter, WriteKey
from services.errors import ApiError
from services.schemas import CrawlJobCreate, CrawlJobPublic, ErrorPublic

router = APIRouter(tags=["crawl jobs"])
JobId = Annotated[str, PathParam(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
ERR = {code: {"model": ErrorPublic} for code in (401, 403, 404, 409, 422)}


def public(job: Any) -> dict[str, Any]:
    data = job.to_dict()
    return {k: data.get(k) for k in CrawlJobPublic.model_fields}


async def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    from crawlers.jobs import JobError

    try:
        return await asyncio.to_thread(fn, *args, **kwargs)
    except JobError as exc:
        message = str(exc)
        status, code = (404, "crawl_job_not_found") if message.startswith("no crawl job") else (409, "crawl_job_conflict")
        raise ApiError(status, code, message) from None


@router.post("/v1/crawl-jobs", status_code=202, response_model=CrawlJobPublic, responses=ERR)
async def start_job(body: CrawlJobCreate, key: WriteKey, manager: CrawlStarter, response: Response) -> dict[str, Any]:
    for url in body.start_urls:
        if not url.startswith(("http://", "https://")):
            raise ApiError(422, "validation_error", f"start URL {url!r} is not an absolute http(s) URL")
    job = await _call(manager.start, body.spider, start_urls=body.start_urls, limit=body.limit, options=body.options)
    response.headers["Location"] = f"/v1/crawl-jobs/{job.id}"
    return public(job)


@router.get("/v1/crawl-jobs", response_model=list[CrawlJobPublic], responses=ERR)
async def list_jobs(
    manager: CrawlManager,
    status: Annotated[str | None, Query(pattern=r"^(queued|running|succeeded|failed|cancelled)$")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[dict[str, Any]]:
    return [public(j) for j in await _call(manager.list, status=status, limit=limit)]


@router.get("/v1/crawl-jobs/{job_id}", response_model=CrawlJobPublic, responses=ERR)
async def get_job(job_id: JobId, manager: CrawlManager) -> dict[str, Any]:
    """One job with its live counters (pages, items stored, errors ... as the crawl writes them)."""
    return public(await _call(manager.get, job_id))


@router.post("/v1/crawl-jobs/{job_id}/cancel", response_model=CrawlJobPublic, responses=ERR)
async def cancel_job(job_id: JobId, key: WriteKey, manager: CrawlManager) -> dict[str, Any]:
    return public(await _call(manager.cancel, job_id))


@router.get("/v1/crawl-jobs/{job_id}/logs", responses=ERR)
async def job_logs(job_id: JobId, manager: CrawlManager, tail: Annotated[int, Query(ge=1, le=5000)] = 200) -> dict[str, Any]:
    return {"id": job_id, "log": await _call(manager.logs, job_id, tail=tail)}
