"""Import jobs of the API: a page dump or an entity dump of any size, streamed to disk and imported in the background.

``POST /v1/corpus/import`` and ``POST /v1/kb/import`` write the request body, as it arrives, to
``DATA_DIR/imports/{id}/body`` (never whole in memory), counting bytes against ``KAR_API_MAX_IMPORT_MB``:
beyond it, with a ``Content-Length`` or without one (chunked), the upload stops, the partial file is
deleted and the answer is 413 naming the limit.  A complete body becomes a job (202): it runs in the API
process as an asyncio task, one import at a time (the others wait ``queued``), the import itself in a worker
thread under the store lock (the readers of
``kar corpus import`` / ``kar kb import``, so memory stays bounded by their batches), and ``GET`` on the
job shows its state, the records done so far, and at the end the import's report: counts and every bad
record by line (JSONL) or record (WARC) with its reason.

A job's state is kept in ``DATA_DIR/imports/{id}/status.json``, as the ablation jobs keep theirs, so a
finished job is found again after a restart (one that was running when the server stopped is reported
``interrupted``); the body is deleted when the job ends.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from services.errors import ApiError
from services.params import PARAMS

log = logging.getLogger("services")

#: the setting that bounds an import's body (named in the 413)
LIMIT_SETTING = "KAR_API_MAX_IMPORT_MB"

#: ``runner(job, body, tick)``: imports ``body`` and returns the report; calls ``tick(n)`` as ``n`` records are done
Runner = Callable[["ImportJob", Path, Callable[[int], None]], dict[str, Any]]


@dataclass
class ImportJob:
    """One import: what was posted, where it stands, and the import's report when it ends."""

    id: str
    kind: str  # corpus | kb
    bytes: int
    dry_run: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    status: str = "queued"  # queued, running, succeeded, failed, interrupted
    done: int = 0  # pages (corpus) or entities written (kb) so far
    total: int | None = None  # entities in the dump, once the kb import has counted them
    report: dict[str, Any] | None = None
    error: str | None = None
    created_at: float = field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def public(self) -> dict[str, Any]:
        """The job as the API shows it (``url``: where to GET it again)."""
        data = self.to_dict()
        data["unit"] = "pages" if self.kind == "corpus" else "entities"
        data["progress"] = round(min(1.0, self.done / self.total), 4) if self.total else None
        data["url"] = f"/v1/{self.kind}/import/{self.id}"
        return data


class ImportJobManager:
    """Receives import bodies onto disk and runs their imports as tasks on the app's event loop."""

    def __init__(self, data_dir: Path, max_mb: float) -> None:
        self.root = Path(data_dir) / "imports"
        self.max_mb = max_mb
        self.max_bytes = int(max_mb * 2**20)
        self.jobs: dict[str, ImportJob] = {}
        self.tasks: dict[str, asyncio.Task[Any]] = {}
        self.stopping = False
        self._turn: asyncio.Lock | None = None  # one import runs at a time; the others wait queued, holding no thread
        self._load()

    def _load(self) -> None:
        for status in sorted(self.root.glob("*/status.json")) if self.root.is_dir() else []:
            try:
                job = ImportJob(**json.loads(status.read_text("utf-8")))
            except (ValueError, TypeError, OSError):
                continue
            if job.status in ("queued", "running"):
                job.status, job.error = "interrupted", "the server stopped while the import ran; post the dump again (pages and entities are replaced by URL and id)"
                self._save(job)
            self.jobs[job.id] = job

    def _save(self, job: ImportJob) -> None:
        path = self.root / job.id / "status.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(job.to_dict(), ensure_ascii=False, default=str), "utf-8")
        os.replace(tmp, path)

    def too_large(self, size: int | None = None) -> ApiError:
        """The 413 of a body over the limit (``size``: its declared length, when known)."""
        what = f"the import body is {size} bytes" if size is not None else "the import body exceeds the limit"
        return ApiError(413, "import_too_large", f"{what}; the limit is {self.max_bytes} bytes ({LIMIT_SETTING}={self.max_mb:g})")

    async def receive(self, request: Any, kind: str, dry_run: bool, options: dict[str, Any]) -> ImportJob:
        """Stream the request body to a new job's folder under the limit; the job (queued) once it is complete."""
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit():
            if int(declared) > self.max_bytes:
                raise self.too_large(int(declared))
            self.root.mkdir(parents=True, exist_ok=True)
            free = shutil.disk_usage(self.root).free
            if int(declared) > free:
                raise ApiError(507, "insufficient_storage", f"the import body is {declared} bytes; the server's data folder has {free} bytes free")
        job = ImportJob(id=uuid.uuid4().hex[:12], kind=kind, bytes=0, dry_run=dry_run, options=options)
        folder = self.root / job.id
        folder.mkdir(parents=True, exist_ok=True)
        body = folder / "body"
        try:
            with body.open("wb") as fh:
                async for part in request.stream():
                    job.bytes += len(part)
                    if job.bytes > self.max_bytes:
                        raise self.too_large()
                    fh.write(part)
            if job.bytes == 0:
                raise ApiError(400, "empty_import", "the import body is empty")
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)  # the partial body goes, whatever stopped it
            raise
        self.jobs[job.id] = job
        self._save(job)
        return job

    def start(self, job: ImportJob, runner: Runner, lock_call: Callable[..., Any]) -> None:
        """Run ``runner(job, body)`` through ``lock_call`` (the store lock, in a worker thread) as a task."""
        self.tasks[job.id] = asyncio.get_running_loop().create_task(self._run(job, runner, lock_call))

    async def _run(self, job: ImportJob, runner: Runner, lock_call: Callable[..., Any]) -> None:
        body = self.root / job.id / "body"
        self._turn = self._turn or asyncio.Lock()
        saver = None
        try:
            async with self._turn:
                if self.stopping:
                    raise Interrupted(job.id)
                saver = asyncio.get_running_loop().create_task(self._save_while_running(job))
                job.status, job.started_at = "running", time.time()
                self._save(job)
                job.report = await lock_call(runner, job, body, self._ticker(job))
            job.status = "succeeded"
        except Interrupted:
            job.status, job.error = "interrupted", "the server stopped while the import ran; post the dump again"
        except asyncio.CancelledError:
            job.status, job.error = "interrupted", "the server stopped while the import ran; post the dump again"
            raise
        except ImportFailed as exc:
            job.status, job.error = "failed", str(exc)
        except Exception as exc:  # noqa: BLE001 - reported on the job, logged with its trace
            log.exception("import job %s failed", job.id)
            job.status, job.error = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            if saver is not None:
                saver.cancel()
            job.finished_at = time.time()
            self._save(job)
            self.tasks.pop(job.id, None)
            shutil.rmtree(self.root / job.id / "work", ignore_errors=True)
            body.unlink(missing_ok=True)

    def _ticker(self, job: ImportJob) -> Callable[[int], None]:
        def tick(n: int) -> None:
            job.done += n
            if self.stopping:  # in the import's thread: it stops at its next record
                raise Interrupted(job.id)

        return tick

    async def _save_while_running(self, job: ImportJob) -> None:
        while True:
            await asyncio.sleep(PARAMS.save_every_s)
            self._save(job)  # on the loop (a small file): never after the final save of the job

    def get(self, kind: str, job_id: str) -> ImportJob:
        """The job ``job_id`` of this kind (from memory, else its status.json: another worker may run it)."""
        job = self.jobs.get(job_id)
        if job is None or job_id not in self.tasks:
            try:
                job = ImportJob(**json.loads((self.root / job_id / "status.json").read_text("utf-8")))
            except (ValueError, TypeError, OSError):
                pass
        if job is None or job.kind != kind:
            raise ApiError(404, "import_not_found", f"no {kind} import job {job_id!r}")
        return job

    async def aclose(self, grace_s: float = 30.0) -> None:
        """Stop running imports at their next record (each is marked interrupted), waiting up to ``grace_s``
        for their threads to let the store go; then cancel what is left."""
        self.stopping = True
        tasks = list(self.tasks.values())
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=grace_s)
            for task in late:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


class Interrupted(Exception):
    """Raised in an import's thread when the server stops."""


class ImportFailed(Exception):
    """An import that could not run (unreadable dump, bad archive): the message is the job's error."""


def listed(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The first ``PARAMS.max_listed`` rows and how many there are."""
    return rows[:PARAMS.max_listed], len(rows)
