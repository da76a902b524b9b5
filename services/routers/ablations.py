"""Ablation jobs: dataset × conditions run in the background by the ``kar run`` runner."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Path as PathParam, Response
from fastapi.responses import FileResponse

from services.deps import Services, WriteKey
from services.schemas import AblationCreate, AblationDatasetPublic, AblationPublic, ErrorPublic

router = APIRouter(tags=["ablations"])
JobId = Annotated[str, PathParam(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
Cond = Annotated[str, PathParam(pattern=r"^(vanilla|cot|search_cot|kar|context_note)$")]
ERR = {code: {"model": ErrorPublic} for code in (401, 403, 404, 409, 422, 503)}


def public(job: Any) -> dict[str, Any]:
    data = job.to_dict()
    data["progress"] = round(job.done / job.total, 4) if job.total else 0.0
    data["results"] = {c: f"/v1/ablations/{job.id}/predictions/{c}" for c in job.conditions}
    return {k: data.get(k) for k in AblationPublic.model_fields}


@router.post("/v1/ablations", status_code=202, response_model=AblationPublic, responses=ERR)
async def start_ablation(body: AblationCreate, services: Services, key: WriteKey, response: Response) -> dict[str, Any]:
    job = services.ablations.start(body.dataset, list(dict.fromkeys(body.conditions)), body.limit, body.concurrency, body.resume_id,
                                 allow_no_evidence=body.allow_no_evidence)
    response.headers["Location"] = f"/v1/ablations/{job.id}"
    return public(job)


@router.get("/v1/ablations", response_model=list[AblationPublic])
async def list_ablations(services: Services) -> list[dict[str, Any]]:
    return [public(j) for j in services.ablations.list()]


@router.get("/v1/ablations/datasets", response_model=list[AblationDatasetPublic])
async def list_ablation_datasets(services: Services) -> list[dict[str, Any]]:
    """Benchmarks a job can run: files and folders under the server's DATA_DIR/datasets (read-only)."""
    return await asyncio.to_thread(services.ablations.list_datasets)


@router.get("/v1/ablations/{job_id}", response_model=AblationPublic, responses=ERR)
async def get_ablation(job_id: JobId, services: Services) -> dict[str, Any]:
    return public(services.ablations.get(job_id))


@router.post("/v1/ablations/{job_id}/cancel", response_model=AblationPublic, responses=ERR)
async def cancel_ablation(job_id: JobId, services: Services, key: WriteKey) -> dict[str, Any]:
    return public(services.ablations.cancel(job_id))


@router.get("/v1/ablations/{job_id}/diagnostics", responses=ERR)
async def ablation_diagnostics(job_id: JobId, services: Services) -> dict[str, Any]:
    """Retrieval diagnostics per condition (as ``kar report --run`` writes them under ``diagnostics``): gold entity
    in CultureBase, grounded, extra entities, knowledge in the prompt (lexical proxy), off-entity evidence, per item;
    joined with judged files in the job folder's ``judged/`` when present."""
    from eval.report.common import jsonable

    store = services.kb.store if services.kb is not None else None
    return jsonable(await asyncio.to_thread(services.ablations.diagnostics, job_id, store))


@router.get("/v1/ablations/{job_id}/predictions/{condition}", responses=ERR)
async def download_predictions(job_id: JobId, condition: Cond, services: Services) -> FileResponse:
    """MemeBench predictions ``[{id, image_path, response}]`` of one condition."""
    path = services.ablations.result_file(job_id, "predictions", condition)
    return FileResponse(path, media_type="application/json", filename=f"{job_id}-{condition}.json")


@router.get("/v1/ablations/{job_id}/traces/{condition}", responses=ERR)
async def download_traces(job_id: JobId, condition: Cond, services: Services) -> FileResponse:
    """Full traces (JSONL, one ExplainResult a line) of one condition."""
    path = services.ablations.result_file(job_id, "traces", condition)
    return FileResponse(path, media_type="application/x-ndjson", filename=f"{job_id}-{condition}.jsonl")
