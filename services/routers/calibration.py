"""``POST /v1/calibration`` (write key): a ``kar calibrate`` job, with progress; ``GET /v1/calibration/{id}`` shows it;
``GET /v1/calibration`` shows the calibration in use.

The job reads the store as searches do (no store lock), stores the record under the lock, and the running
pipeline takes the new thresholds at once (grounding's τ and margins, the local search's floors).
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Path as PathParam
from pydantic import BaseModel, Field

from services.deps import Services, WriteKey
from services.errors import ApiError
from services.schemas import ErrorPublic

router = APIRouter(tags=["calibration"])
ERR = {code: {"model": ErrorPublic} for code in (400, 401, 403, 404, 409, 422)}
JobId = Annotated[str, PathParam(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]


class LabelIn(BaseModel):
    text: str = Field(min_length=1, max_length=2000)
    entity: str | None = Field(None, max_length=300, description="an entity id or name; null: the text names nothing")


class CalibrationCreate(BaseModel):
    target_false_rate: float = Field(0.01, gt=0.0, le=0.5)
    corpus: bool | None = Field(None, description="fit the corpus floors too (default: when the KB holds crawled pages)")
    max_entities: int = Field(400, ge=20, le=100000)
    max_pages: int = Field(300, ge=10, le=100000)
    labels: list[LabelIn] = Field(default_factory=list, max_length=100000)
    dry_run: bool = False


def _jobs(services: Any) -> dict[str, dict[str, Any]]:
    return services.__dict__.setdefault("calibration_jobs", {})


def apply_calibration(services: Any) -> None:
    """Give the running grounder and local search the calibration stored with the KB now."""
    from retrieval.calibration import resolve_calibration

    kb = services.kb
    cal = resolve_calibration(kb.store, kb.embedder.name, kb.embedder.dim)
    grounder = getattr(getattr(services.pipeline, "deps", None), "grounder", None)
    if grounder is not None:
        grounder.calibration, grounder.thresholds, grounder.refusal = cal, cal.thresholds, None
        grounder.tau = services.settings.grounding_tau if services.settings.grounding_tau is not None else cal.thresholds.tau
        services.pipeline.describe["calibration"] = cal.summary()
        services.pipeline.describe["tau"] = grounder.tau
    search = services.search
    for backend in (search, getattr(search, "backend", None)):
        if backend is not None and hasattr(backend, "ordinary_floor") and hasattr(backend, "calibration"):
            backend.calibration = cal
            backend.ordinary_floor = cal.thresholds.corpus_ordinary_floor
            if services.settings.evidence_floor is None:
                backend.floor = cal.thresholds.corpus_floor
    services.notes[:] = [n for n in services.notes if not n.startswith("grounding is not calibrated")]


def _run(services: Any, job: dict[str, Any], body: CalibrationCreate, labels_path: Any) -> None:
    from retrieval.calibration import write_kb_record
    from retrieval.calibration.job import CalibrateOptions, calibrate
    from retrieval.calibration.record import CalibrationRecord

    def progress(stage: str, done: int, total: int) -> None:
        job["progress"] = {"stage": stage, "done": done, "total": total}

    try:
        opts = CalibrateOptions(body.target_false_rate, labels_path, body.corpus, body.max_entities, body.max_pages, dry_run=True)
        report = calibrate(services.kb, opts, progress)
        if not body.dry_run:
            with services.lock:
                write_kb_record(services.kb.store, CalibrationRecord.model_validate(report["record"]))
            apply_calibration(services)
            report["stored"] = True
        job.update(status="succeeded", result=report)
    except Exception as exc:  # noqa: BLE001 - a job's failure is its status, said in one line
        job.update(status="failed", error=f"{type(exc).__name__}: {exc}")
    finally:
        job["finished_at"] = time.time()
        if labels_path is not None:
            labels_path.unlink(missing_ok=True)


@router.post("/v1/calibration", status_code=202, responses=ERR)
async def start_calibration(body: CalibrationCreate, services: Services, key: WriteKey) -> dict[str, Any]:
    """Start ``kar calibrate`` on the served knowledge base (one job at a time: 409 while one runs)."""
    import json
    import tempfile
    from pathlib import Path

    jobs = _jobs(services)
    if any(j["status"] == "running" for j in jobs.values()):
        raise ApiError(409, "calibration_running", "a calibration job is running: wait for it (GET /v1/calibration/{id})")
    if services.kb.store.count() == 0:
        raise ApiError(409, "empty_kb", "the knowledge base is empty: import entities first (POST /v1/kb/import)")
    labels_path = None
    if body.labels:
        fh = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8")
        with fh:
            fh.write("".join(json.dumps(x.model_dump(), ensure_ascii=False) + "\n" for x in body.labels))
        labels_path = Path(fh.name)
        from retrieval.calibration.probes import LabelsFileError, label_probes

        try:
            label_probes(labels_path, services.kb.store)
        except LabelsFileError as exc:
            labels_path.unlink(missing_ok=True)
            raise ApiError(422, "bad_labels", str(exc).replace(f"--labels {labels_path} ", "labels ")) from None
    job = {"id": uuid.uuid4().hex[:16], "status": "running", "started_at": time.time(), "progress": None, "result": None, "error": None}
    jobs[job["id"]] = job
    threading.Thread(target=_run, args=(services, job, body, labels_path), daemon=True, name=f"calibrate-{job['id']}").start()
    return {k: job[k] for k in ("id", "status", "progress")}


@router.get("/v1/calibration/{job_id}", responses=ERR)
async def calibration_job(job_id: JobId, services: Services, key: WriteKey) -> dict[str, Any]:
    job = _jobs(services).get(job_id)
    if job is None:
        raise ApiError(404, "not_found", f"no calibration job {job_id}")
    return dict(job)


@router.get("/v1/calibration", responses=ERR)
async def calibration_in_use(services: Services) -> dict[str, Any]:
    """The calibration the served grounding and search use (source, thresholds, record, warnings)."""
    from retrieval.calibration.stats import calibration_stats

    return await services.kb_read(calibration_stats, services.kb.store, services.kb.embedder)
