"""Crawl jobs: persisted in SQLite, each run in its own process, shared by the CLI and the service.

A job row holds the spider, its parameters, the settings it runs with, a status
(``queued`` / ``running`` / ``succeeded`` / ``failed`` / ``cancelled``), live counters the
child process writes while it crawls, its pid, its JOBDIR and its log file.  Because the
row lives in SQLite, status survives a restart of whoever started the job; a job whose
process died without finishing (killed, machine restart) is reported as ``failed`` with
an ``interrupted`` reason and can be resumed: the new process reuses the JOBDIR and skips
every page the job already stored (table ``job_pages``), so nothing is fetched or stored twice.

The same database holds ``page_state`` (ETag / Last-Modified / MediaWiki revision per page
and knowledge base) used by incremental re-crawls.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from culturebase.settings import Settings

STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
ACTIVE = ("queued", "running")
SPIDERS = ("knowyourmeme", "moegirl", "memegen")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    spider TEXT NOT NULL,
    params TEXT NOT NULL,
    settings TEXT NOT NULL,
    status TEXT NOT NULL,
    error TEXT,
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    pid INTEGER,
    pid_start TEXT,
    jobdir TEXT NOT NULL,
    log_path TEXT NOT NULL,
    counters TEXT NOT NULL DEFAULT '{}',
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    kb TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS job_pages (
    job_id TEXT NOT NULL,
    page_key TEXT NOT NULL,
    outcome TEXT NOT NULL,
    PRIMARY KEY (job_id, page_key)
);
CREATE TABLE IF NOT EXISTS page_state (
    kb TEXT NOT NULL,
    page_key TEXT NOT NULL,
    etag TEXT,
    last_modified TEXT,
    revid INTEGER,
    entity_id TEXT,
    fetched_at REAL,
    PRIMARY KEY (kb, page_key)
);
"""


class JobError(ValueError):
    """A job operation that cannot be done (unknown id, wrong state ...); the message says why."""


def kb_key(settings: Settings) -> str:
    """Identity of the knowledge base a crawl writes to (scopes incremental state)."""
    if settings.qdrant_url:
        return f"qdrant:{settings.qdrant_url}#{settings.qdrant_collection_prefix}"
    return "edge:" + str(Path(settings.kb_path).expanduser().resolve())


class CrawlDB:
    """The SQLite file of jobs, per-job page progress and per-KB page state (WAL; safe across processes)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.conn = sqlite3.connect(str(self.path), timeout=30, check_same_thread=False, isolation_level=None)
        self.conn.row_factory = sqlite3.Row
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute("PRAGMA busy_timeout=30000")
        with self._lock:
            self.conn.executescript(_SCHEMA)

    def execute(self, sql: str, args: Sequence[Any] = ()) -> sqlite3.Cursor:
        with self._lock:
            return self.conn.execute(sql, args)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with self._lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                self.conn.executemany(sql, list(rows))
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise

    # -- jobs ---------------------------------------------------------------------------
    def job_row(self, job_id: str) -> sqlite3.Row | None:
        return self.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()

    def update_job(self, job_id: str, **fields: Any) -> None:
        if not fields:
            return
        cols = ", ".join(f"{k} = ?" for k in fields)
        values = [json.dumps(v, ensure_ascii=False) if isinstance(v, (dict, list)) else v for v in fields.values()]
        self.execute(f"UPDATE jobs SET {cols} WHERE id = ?", (*values, job_id))

    # -- per-job progress (resume) ------------------------------------------------------
    def mark_pages(self, job_id: str, keys: Iterable[str], outcome: str) -> None:
        self.executemany(
            "INSERT OR REPLACE INTO job_pages (job_id, page_key, outcome) VALUES (?, ?, ?)",
            [(job_id, k, outcome) for k in keys],
        )

    def done_pages(self, job_id: str) -> set[str]:
        return {r[0] for r in self.execute("SELECT page_key FROM job_pages WHERE job_id = ?", (job_id,))}

    # -- per-KB page state (incremental) ------------------------------------------------
    def page_state(self, kb: str, page_key: str) -> sqlite3.Row | None:
        return self.execute("SELECT * FROM page_state WHERE kb = ? AND page_key = ?", (kb, page_key)).fetchone()

    def save_page_states(self, kb: str, rows: Iterable[tuple[str, str | None, str | None, int | None, str | None]]) -> None:
        now = time.time()
        self.executemany(
            "INSERT OR REPLACE INTO page_state (kb, page_key, etag, last_modified, revid, entity_id, fetched_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(kb, key, etag, lm, revid, eid, now) for key, etag, lm, revid, eid in rows],
        )

    def clear_page_state(self, kb: str) -> int:
        return self.execute("DELETE FROM page_state WHERE kb = ?", (kb,)).rowcount

    def close(self) -> None:
        with self._lock:
            self.conn.close()


@dataclass
class CrawlJob:
    """A crawl job as the CLI and the service show it."""

    id: str
    spider: str
    status: str
    params: dict[str, Any]
    counters: dict[str, Any]
    error: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    pid: int | None
    attempts: int
    kb: str
    jobdir: str
    log_path: str
    cancel_requested: bool = False
    resumable: bool = field(default=False)

    @property
    def finished(self) -> bool:
        return self.status not in ACTIVE

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("created_at", "started_at", "finished_at"):
            data[key] = _iso(data[key])
        return data


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


# -- process liveness ---------------------------------------------------------------------
def proc_start(pid: int) -> str | None:
    """The kernel start time of a pid (guards against pid reuse); None when it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None if Path("/proc").exists() else ("?" if _pid_exists(pid) else None)
    rest = stat[stat.rfind(")") + 2 :].split()
    if rest and rest[0] in ("Z", "X"):
        return None
    return rest[19] if len(rest) > 19 else "?"


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_alive(pid: int | None, start: str | None) -> bool:
    """Whether the process that ran a job is still the same live process."""
    if not pid:
        return False
    now = proc_start(pid)
    if now is None:
        return False
    return start in (None, "?") or now == "?" or now == start


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


class CrawlJobManager:
    """Start, list, inspect, cancel and resume crawl jobs (no CLI code: the service uses it too)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.db = CrawlDB(settings.resolved_crawl_jobs_db)
        self.jobs_dir = Path(settings.data_dir) / "crawl_jobs"
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    # -- start ----------------------------------------------------------------------------
    def start(
        self,
        spider: str,
        start_urls: Sequence[str] | None = None,
        limit: int | None = None,
        kb_path: Path | None = None,
        options: dict[str, Any] | None = None,
        scrapy_settings: dict[str, Any] | None = None,
    ) -> CrawlJob:
        """Queue a job and start its process; returns the job (status ``queued`` or ``running``)."""
        if spider not in SPIDERS:
            raise JobError(f"unknown spider {spider!r}; choose one of: {', '.join(SPIDERS)}")
        if limit is not None and limit < 1:
            raise JobError("limit must be at least 1")
        for url in start_urls or []:
            if not url.startswith(("http://", "https://")):
                raise JobError(f"start URL {url!r} is not an absolute http(s) URL")
        settings = self.settings.model_copy(update={"kb_path": Path(kb_path)}) if kb_path else self.settings
        job_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        jobdir = self.jobs_dir / job_id
        jobdir.mkdir(parents=True, exist_ok=True)
        params = {
            "start_urls": list(start_urls or []),
            "limit": limit,
            "options": dict(options or {}),
            "scrapy_settings": dict(scrapy_settings or {}),
        }
        self.db.execute(
            "INSERT INTO jobs (id, spider, params, settings, status, created_at, jobdir, log_path, counters, kb) "
            "VALUES (?, ?, ?, ?, 'queued', ?, ?, ?, '{}', ?)",
            (
                job_id,
                spider,
                json.dumps(params, ensure_ascii=False),
                json.dumps(settings_for_child(settings), ensure_ascii=False),
                time.time(),
                str(jobdir / "scrapy"),
                str(jobdir / "crawl.log"),
                kb_key(settings),
            ),
        )
        self._spawn(job_id)
        return self.get(job_id)

    def _spawn(self, job_id: str) -> None:
        row = self.db.job_row(job_id)
        assert row is not None
        log_path = Path(row["log_path"])
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.db.update_job(job_id, attempts=(row["attempts"] or 0) + 1)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "crawlers.run_job", job_id, "--db", str(self.db.path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=_child_env(),
                start_new_session=True,
            )
        self._procs[job_id] = proc
        self.db.update_job(job_id, pid=proc.pid, pid_start=proc_start(proc.pid))

    # -- read -----------------------------------------------------------------------------
    def get(self, job_id: str) -> CrawlJob:
        """One job, with a dead process detected and recorded as an interrupted failure."""
        row = self.db.job_row(job_id)
        if row is None:
            raise JobError(f"no crawl job {job_id!r} (kar crawl-jobs list shows the jobs)")
        if row["status"] in ACTIVE:
            proc = self._procs.get(job_id)
            if proc is not None:
                proc.poll()  # reap our own child so it does not linger as a zombie
            if not process_alive(row["pid"], row["pid_start"]):
                row = self.db.job_row(job_id)  # the child may have just written its final status
                assert row is not None
                if row["status"] in ACTIVE:
                    code = proc.returncode if proc is not None else None
                    how = f"exit code {code}" if code is not None else "process gone"
                    self.db.update_job(
                        job_id,
                        status="failed",
                        error=f"interrupted: crawl process {row['pid']} died ({how}); resume with `kar crawl-jobs resume {job_id}`",
                        finished_at=time.time(),
                    )
                    row = self.db.job_row(job_id)
        return self._to_job(row)

    def list(self, status: str | None = None, limit: int = 100) -> list[CrawlJob]:
        """Jobs, newest first."""
        if status is not None and status not in STATUSES:
            raise JobError(f"unknown status {status!r}; choose one of: {', '.join(STATUSES)}")
        rows = self.db.execute("SELECT id FROM jobs ORDER BY created_at DESC LIMIT ?", (limit,)).fetchall()
        jobs = [self.get(r[0]) for r in rows]
        return [j for j in jobs if status is None or j.status == status]

    def _to_job(self, row: sqlite3.Row) -> CrawlJob:
        status = row["status"]
        return CrawlJob(
            id=row["id"],
            spider=row["spider"],
            status=status,
            params=json.loads(row["params"]),
            counters=json.loads(row["counters"] or "{}"),
            error=row["error"],
            created_at=row["created_at"],
            started_at=row["started_at"],
            finished_at=row["finished_at"],
            pid=row["pid"],
            attempts=row["attempts"],
            kb=row["kb"],
            jobdir=row["jobdir"],
            log_path=row["log_path"],
            cancel_requested=bool(row["cancel_requested"]),
            resumable=status in ("failed", "cancelled"),
        )

    # -- control ----------------------------------------------------------------------------
    def cancel(self, job_id: str) -> CrawlJob:
        """Ask a job to stop: a running crawl shuts down gracefully (what it parsed is stored)."""
        job = self.get(job_id)
        if job.finished:
            raise JobError(f"job {job_id} is already {job.status}")
        self.db.update_job(job_id, cancel_requested=1)
        if job.pid and process_alive(job.pid, self.db.job_row(job_id)["pid_start"]):
            try:
                os.kill(job.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        return self.get(job_id)

    def wait(self, job_id: str, timeout: float | None = None, poll_s: float = 0.2) -> CrawlJob:
        """Block until the job finishes (or the timeout passes); returns its latest state."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.get(job_id)
            if job.finished or (deadline is not None and time.monotonic() > deadline):
                return job
            time.sleep(poll_s)

    def resume(self, job_id: str) -> CrawlJob:
        """Restart a failed or cancelled job from its JOBDIR; pages it already stored are skipped."""
        job = self.get(job_id)
        if not job.resumable:
            raise JobError(f"job {job_id} is {job.status}; only failed or cancelled jobs can be resumed")
        self.db.update_job(job_id, status="queued", error=None, finished_at=None, cancel_requested=0)
        self._spawn(job_id)
        return self.get(job_id)

    def logs(self, job_id: str, tail: int | None = 200) -> str:
        """The job's log (last ``tail`` lines; all with ``tail=None``)."""
        job = self.get(job_id)
        path = Path(job.log_path)
        if not path.exists():
            return ""
        lines = path.read_text("utf-8", errors="replace").splitlines()
        return "\n".join(lines if tail is None else lines[-tail:])

    def close(self) -> None:
        self.db.close()


def settings_for_child(settings: Settings) -> dict[str, Any]:
    """The settings a job's process rebuilds (secrets excluded: the child reads them from its environment)."""
    from pydantic import SecretStr

    out: dict[str, Any] = {}
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if isinstance(value, SecretStr):
            continue
        if value is None:
            continue
        out[name] = str(Path(value).expanduser().resolve()) if isinstance(value, Path) else value
    return out
