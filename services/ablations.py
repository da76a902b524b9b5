"""Ablation jobs of the API: the same runners as ``kar run``, in the background.

The dataset is read by :func:`eval.tasks.load`, as ``kar run`` reads it, so a job runs any
benchmark of the registry: MemeBench through :class:`agents.runner.AblationRunner`, a family
JSONL (MemeReaCon, AVMeme Exam, DrivelHub+, MemeCULT-1K) through :class:`agents.tasks.TaskRunner`.

A job runs in the API process (as an asyncio task sharing the app's pipeline, so it
uses the same VLM concurrency limit and the same CultureBase) and writes the usual run
folder under ``DATA_DIR/ablations/{id}``; ``status.json`` there keeps its state, so
finished jobs are listed again after a restart (a job that was running when the server
stopped is reported ``interrupted``; POSTing the same dataset and conditions again with
``resume_id`` continues it, since the runner skips finished items).

Datasets are named relative to ``DATA_DIR/datasets`` (no absolute paths, no ``..``).

As ``kar run`` does, a job for ``search_cot`` or ``kar`` whose search backend has nothing to search
(an empty local corpus, ``KAR_SEARCH_BACKEND=none``) is refused up front (422 ``no_evidence``,
naming the fix) unless ``allow_no_evidence`` is set; the run's manifest records the evidence status.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from services.errors import ApiError


@dataclass
class AblationJob:
    id: str
    dataset: str
    conditions: list[str]
    limit: int | None
    concurrency: int
    status: str = "queued"  # queued, running, succeeded, failed, cancelled, interrupted
    done: int = 0
    total: int = 0
    error: str | None = None
    summary: dict[str, Any] | None = None
    created_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    allow_no_evidence: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class AblationManager:
    """Starts runner tasks on the app's event loop and keeps their state on disk."""

    def __init__(self, data_dir: Path, pipeline: Any, vlm_configured: bool) -> None:
        self.root = Path(data_dir) / "ablations"
        self.datasets = Path(data_dir) / "datasets"
        self.pipeline = pipeline
        self.vlm_configured = vlm_configured
        self.jobs: dict[str, AblationJob] = {}
        self.tasks: dict[str, asyncio.Task[Any]] = {}
        self._load()

    def _load(self) -> None:
        if not self.root.is_dir():
            return
        for status in sorted(self.root.glob("*/status.json")):
            try:
                job = AblationJob(**json.loads(status.read_text("utf-8")))
            except (ValueError, TypeError):
                continue
            if job.status in ("queued", "running"):
                job.status, job.error = "interrupted", "the server stopped while the job ran; POST it again with resume_id to continue"
            self.jobs[job.id] = job

    def job_dir(self, job_id: str) -> Path:
        return self.root / job_id

    def _save(self, job: AblationJob) -> None:
        path = self.job_dir(job.id) / "status.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(job.to_dict(), ensure_ascii=False, default=str), "utf-8")
        os.replace(tmp, path)

    def resolve_dataset(self, name: str) -> Path:
        rel = Path(name)
        if rel.is_absolute() or ".." in rel.parts or not name.strip():
            raise ApiError(422, "invalid_dataset", "dataset must be a path relative to DATA_DIR/datasets, without '..'")
        path = (self.datasets / rel).resolve()
        if not path.is_relative_to(self.datasets.resolve()):
            raise ApiError(422, "invalid_dataset", "dataset must stay inside DATA_DIR/datasets")
        if not path.exists():
            raise ApiError(404, "dataset_not_found", f"no dataset {name!r} under the server's DATA_DIR/datasets")
        return path

    def list_datasets(self, max_depth: int = 3, max_entries: int = 500) -> list[dict[str, Any]]:
        """Benchmark files (``.json``/``.jsonl``) and folders holding some under DATA_DIR/datasets, named
        relative to it (hidden entries and links leaving the folder are skipped; at most ``max_entries``)."""
        root = self.datasets.resolve() if self.datasets.is_dir() else None
        out: list[dict[str, Any]] = []
        if root is None:
            return out

        def walk(folder: Path, depth: int) -> None:
            try:
                entries = sorted(folder.iterdir(), key=lambda p: p.name)
            except OSError:
                return
            files = []
            for entry in entries:
                if len(out) >= max_entries or entry.name.startswith("."):
                    continue
                try:
                    real = entry.resolve()
                    if not real.is_relative_to(root):
                        continue
                    if entry.is_file() and entry.suffix in (".json", ".jsonl"):
                        files.append({"name": entry.relative_to(root).as_posix(), "kind": "file", "size_bytes": entry.stat().st_size})
                    elif entry.is_dir() and depth < max_depth:
                        walk(entry, depth + 1)
                except OSError:
                    continue
            if files and folder != root and len(out) < max_entries:
                out.append({"name": folder.relative_to(root).as_posix(), "kind": "folder", "size_bytes": sum(f["size_bytes"] for f in files)})
            out.extend(files[: max(0, max_entries - len(out))])

        walk(root, 1)
        return sorted(out, key=lambda d: d["name"])

    def get(self, job_id: str) -> AblationJob:
        job = self.jobs.get(job_id)
        if job is not None and job_id in self.tasks:
            return job
        # another worker process may run it (or have finished it): its status.json is the truth
        status = self.job_dir(job_id) / "status.json"
        if status.is_file():
            try:
                job = AblationJob(**json.loads(status.read_text("utf-8")))
            except (ValueError, TypeError, OSError):
                pass
        if job is None:
            raise ApiError(404, "ablation_not_found", f"no ablation job {job_id!r}")
        self.jobs[job_id] = job
        return job

    def list(self) -> list[AblationJob]:
        if self.root.is_dir():
            for status in self.root.glob("*/status.json"):
                if status.parent.name not in self.tasks:
                    try:
                        self.get(status.parent.name)
                    except ApiError:
                        pass
        return sorted(self.jobs.values(), key=lambda j: j.created_at, reverse=True)

    def evidence(self, conditions: list[str], allow_no_evidence: bool) -> dict[str, Any] | None:
        """The evidence status of the search conditions among ``conditions`` (asked now: the corpus may have
        grown since the server started); raises 422 when they would run without evidence and that is not allowed."""
        from agents.factory import SEARCH_CONDITIONS, missing_evidence
        from culturebase.settings import get_settings
        from retrieval.websearch import evidence_status

        if not any(c in SEARCH_CONDITIONS for c in conditions):
            return None
        evidence = evidence_status(self.pipeline.deps.search, get_settings().search_backend).to_dict()
        refusal = missing_evidence(evidence, conditions)
        if refusal and not allow_no_evidence:
            raise ApiError(422, "no_evidence", refusal + '; or set "allow_no_evidence": true to run them anyway (the manifest records it)')
        return evidence

    def start(
        self, dataset: str, conditions: list[str], limit: int | None, concurrency: int, resume_id: str | None = None,
        allow_no_evidence: bool = False,
    ) -> AblationJob:
        from culturebase.settings import get_settings
        from eval.records import DatasetError
        from eval.tasks import load

        if not self.vlm_configured:
            raise ApiError(503, "vlm_not_configured", "ablations need a VLM: set KAR_VLM_BASE_URLS and KAR_VLM_MODEL")
        path = self.resolve_dataset(dataset)
        try:
            loaded = load(path, check_media=True, limit=limit)  # MemeBench or a family benchmark: the registry decides
            loaded.check_conditions(conditions)
        except (DatasetError, ValueError) as exc:  # every bad item, named relative to DATA_DIR/datasets
            message = str(exc).replace(str(self.datasets.resolve()) + os.sep, "")
            raise ApiError(422, "invalid_dataset", message) from None
        evidence = self.evidence(conditions, allow_no_evidence)
        items = loaded.items
        if resume_id is not None:
            job = self.get(resume_id)
            if job.status in ("queued", "running"):
                raise ApiError(409, "ablation_running", f"ablation job {resume_id} is still {job.status}")
            job.status, job.error, job.finished_at = "queued", None, None
            job.dataset, job.conditions, job.limit, job.concurrency = dataset, conditions, limit, concurrency
        else:
            job = AblationJob(id=time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6], dataset=dataset, conditions=conditions, limit=limit, concurrency=concurrency)
        job.allow_no_evidence = allow_no_evidence
        job.total = len(items) * len(conditions)
        self.jobs[job.id] = job
        self._save(job)
        runner = loaded.runner(self.pipeline, self.job_dir(job.id), conditions, settings=get_settings(), concurrency=concurrency,
                               manifest={"api_job": job.id, "evidence": evidence, "allow_no_evidence": allow_no_evidence})
        self.tasks[job.id] = asyncio.get_running_loop().create_task(self._run(job, runner, items, str(path)))
        return job

    async def _run(self, job: AblationJob, runner: Any, items: list[Any], dataset: str) -> None:
        job.status = "running"
        self._save(job)

        last = [0.0]

        def progress(done: int, total: int) -> None:
            job.done, job.total = done, total
            if time.monotonic() - last[0] >= 1.0:  # other workers read progress from disk
                last[0] = time.monotonic()
                self._save(job)

        try:
            summary = await runner.run(items, progress=progress, dataset=dataset)
            job.summary = summary.to_dict()
            job.status = "succeeded"
        except asyncio.CancelledError:
            job.status = "cancelled"
        except Exception as exc:  # recorded on the job; the server keeps going
            job.status, job.error = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            job.finished_at = time.time()
            self._save(job)
            self.tasks.pop(job.id, None)

    def cancel(self, job_id: str) -> AblationJob:
        job = self.get(job_id)
        task = self.tasks.get(job_id)
        if task is None or job.status not in ("queued", "running"):
            raise ApiError(409, "ablation_finished", f"ablation job {job_id} is already {job.status}")
        task.cancel()
        return job

    def result_file(self, job_id: str, kind: str, condition: str) -> Path:
        job = self.get(job_id)
        if condition not in job.conditions:
            raise ApiError(404, "not_found", f"ablation job {job_id} has no condition {condition!r}")
        path = self.job_dir(job_id) / ("predictions" if kind == "predictions" else "traces") / (f"{condition}.json" if kind == "predictions" else f"{condition}.jsonl")
        if not path.exists():
            raise ApiError(404, "not_found", f"no {kind} for {condition} yet")
        return path

    def diagnostics(self, job_id: str, kb_store: Any | None) -> dict[str, Any]:
        """Retrieval diagnostics of a job's traces (:func:`eval.diagnostics.run_folder.diagnose_run`), joined with
        any judged files placed in its folder's ``judged/``; ``kb_store``: the app's CultureBase store (or None)."""
        from eval.diagnostics import KBNames
        from eval.diagnostics.run_folder import diagnose_run

        job = self.get(job_id)
        kb = KBNames(kb_store, None if kb_store is not None else "the server has no CultureBase")
        return diagnose_run(self.resolve_dataset(job.dataset), self.job_dir(job_id), job.conditions, kb)

    async def aclose(self) -> None:
        for task in list(self.tasks.values()):
            task.cancel()
        for task in list(self.tasks.values()):
            try:
                await task
            except BaseException:
                pass
