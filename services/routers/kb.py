"""``GET /v1/kb/stats`` (entity counts by language and site, corpus size, backend, embedder) and
``POST /v1/kb/import`` (write key): an entity dump of any size up to ``KAR_API_MAX_IMPORT_MB``, streamed to
disk and imported by a job (:mod:`services.import_jobs`); ``GET /v1/kb/import/{id}`` shows it.

The import reads what ``kar kb import`` and ``POST /v1/entities/import`` read (JSONL, the MemeBench release's
JSON, the published dumps, a zip / tar.gz of a dump folder); image URLs are not fetched.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path as PathParam, Query, Request, Response

from services.deps import Services, WriteKey
from services.routers.entities import DumpCategories, DumpFormat, dump_content_type
from services.schemas import ErrorPublic

router = APIRouter(tags=["knowledge base"])
ERR = {code: {"model": ErrorPublic} for code in (400, 401, 403, 404, 413, 415, 422, 507)}
JobId = Annotated[str, PathParam(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]


@router.get("/v1/kb/stats")
async def kb_stats(services: Services) -> dict[str, Any]:
    def stats() -> dict[str, Any]:
        from retrieval.calibration.stats import calibration_stats

        out = services.kb.store.stats()
        out["calibration"] = calibration_stats(services.kb.store, services.kb.embedder)  # what `kar kb stats` shows too
        return out

    return await services.kb_read(stats)  # a read: not behind an import holding the store lock


@router.post("/v1/kb/import", status_code=202, responses=ERR)
async def import_kb(
    request: Request,
    services: Services,
    key: WriteKey,
    response: Response,
    format: DumpFormat = None,
    category: DumpCategories = None,
    dry_run: Annotated[bool, Query(description="Read and validate the dump and report what would be stored; store nothing.")] = False,
) -> dict[str, Any]:
    """Import an entity dump: the body is streamed to disk (413 beyond KAR_API_MAX_IMPORT_MB) and imported by a
    job; 202 with the job, GET its ``url`` for progress and the report (rejected entries by line or index)."""
    from services.import_runners import kb_runner

    ctype = dump_content_type(request, format)
    categories = [c for c in (category or "").split(",") if c.strip()] or None
    manager = services.imports
    job = await manager.receive(request, "kb", dry_run, {"content_type": ctype, "format": format, "categories": categories})
    s = services.settings
    manager.start(job, kb_runner(services.kb, s.import_archive_max_mb * 2**20, s.kb_path), services.kb_call)
    response.headers["Location"] = job.public()["url"]
    return job.public()


@router.get("/v1/kb/import/{job_id}", responses=ERR)
async def kb_import_job(job_id: JobId, services: Services) -> dict[str, Any]:
    """An import job: status, entities written so far of the total, and when it has ended the report (stored,
    merged, rejected entries by line or index with their reasons) or the error."""
    return services.imports.get("kb", job_id).public()
