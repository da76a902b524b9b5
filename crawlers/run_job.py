"""The process of one crawl job: ``python -m crawlers.run_job JOB_ID --db PATH`` (started by CrawlJobManager).

It marks the job running, runs the spider with the job's settings and JOBDIR, mirrors the
counters into the job row (see :mod:`crawlers.extensions`) and records the final status:
``succeeded``; ``failed`` with the reason (blocked page, store error, crash); ``cancelled``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from crawlers.jobs import CrawlDB, proc_start

CLEAN_MARKER = "kar-clean-shutdown"


def _prepare_jobdir(jobdir: Path) -> str | None:
    """Keep Scrapy's JOBDIR after a clean stop; after a hard kill its queue files may be torn, so start them afresh
    (pages the job already stored are skipped through the job_pages table either way)."""
    jobdir.mkdir(parents=True, exist_ok=True)
    marker = jobdir / CLEAN_MARKER
    had_state = (jobdir / "requests.queue").exists() or (jobdir / "requests.seen").exists()
    note = None
    if had_state and not marker.exists():
        for name in ("requests.queue", "requests.seen"):
            path = jobdir / name
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            elif path.exists():
                path.unlink()
        note = "previous run did not stop cleanly: Scrapy queue state reset, stored pages are skipped"
    marker.unlink(missing_ok=True)
    return note


def outcome(stats: dict[str, Any], cancel_requested: bool) -> tuple[str, str | None]:
    """Final (status, error) from the crawl's stats."""
    reason = stats.get("finish_reason")
    fatal = stats.get("kar/fatal")
    if fatal:
        return "failed", str(fatal)
    if reason == "blocked":
        return "failed", str(stats.get("kar/block_reason") or "blocked by the site")
    if cancel_requested or reason == "cancelled":
        return "cancelled", None
    if reason == "shutdown":
        return "failed", "interrupted: the crawl process was stopped by a signal; resume to continue"
    if reason is None:
        return "failed", "the crawl did not start (see the job log)"
    if reason in ("finished",) or reason.startswith("closespider_"):
        return "succeeded", None
    return "failed", f"crawl ended with reason {reason!r}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crawlers.run_job")
    parser.add_argument("job_id")
    parser.add_argument("--db", required=True)
    args = parser.parse_args(argv)

    db = CrawlDB(Path(args.db))
    row = db.job_row(args.job_id)
    if row is None:
        print(f"no crawl job {args.job_id!r} in {args.db}", file=sys.stderr)
        return 2
    if row["status"] != "queued":
        print(f"job {args.job_id} is {row['status']}, not queued; nothing to do", file=sys.stderr)
        return 2
    if row["cancel_requested"]:
        db.update_job(args.job_id, status="cancelled", finished_at=time.time())
        return 0
    pid = os.getpid()
    db.update_job(
        args.job_id,
        status="running",
        pid=pid,
        pid_start=proc_start(pid),
        started_at=row["started_at"] or time.time(),
    )
    params = json.loads(row["params"])
    jobdir = Path(row["jobdir"])
    note = _prepare_jobdir(jobdir)
    logging.basicConfig(level=logging.INFO)
    if note:
        logging.getLogger("crawlers.run_job").warning(note)
    stats: dict[str, Any] = {}
    try:
        from culturebase.settings import Settings
        from crawlers.runner import run_crawl

        settings = Settings(**json.loads(row["settings"]))
        spider_args: dict[str, Any] = dict(params.get("options") or {})
        if params.get("start_urls"):
            spider_args["start_urls"] = params["start_urls"]
        if params.get("limit"):
            spider_args["limit"] = params["limit"]
        base = json.loads(row["counters"] or "{}") if (row["attempts"] or 0) > 1 else {}
        overrides = {
            "KAR_JOB_ID": args.job_id,
            "JOBDIR": str(jobdir),
            "KAR_COUNTER_BASE": base,
            **(params.get("scrapy_settings") or {}),
        }
        stats = run_crawl(row["spider"], settings, spider_args, overrides)
        (jobdir / CLEAN_MARKER).write_text(time.strftime("%Y-%m-%dT%H:%M:%S"))
        fresh = db.job_row(args.job_id)
        status, error = outcome(stats, bool(fresh["cancel_requested"]) if fresh else False)
    except Exception as exc:  # anything unexpected: a failed job with the reason, never a silent stop
        traceback.print_exc()
        status, error = "failed", f"{type(exc).__name__}: {exc}"
    from crawlers.extensions import add_counters, counters_from_stats

    started = db.job_row(args.job_id)["started_at"]
    base = json.loads(row["counters"] or "{}") if (row["attempts"] or 0) > 1 else {}
    counters = add_counters(base, counters_from_stats(stats))
    counters["elapsed_s"] = round(time.time() - (started or time.time()), 3)
    counters["finish_reason"] = stats.get("finish_reason")
    db.update_job(args.job_id, status=status, error=error, finished_at=time.time(), counters=counters)
    print(f"job {args.job_id}: {status}" + (f" ({error})" if error else ""), flush=True)
    return 0 if status in ("succeeded", "cancelled") else 1


if __name__ == "__main__":
    sys.exit(main())
