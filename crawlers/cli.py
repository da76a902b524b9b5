"""CLI: ``kar crawl SPIDER`` (live progress, ``--json`` final job record) and ``kar crawl-jobs list|status|cancel|resume|logs``.

Registered into the ``kar`` app by ``services.cli``::

    app.command("crawl")(crawl_command)
    app.add_typer(crawl_jobs_app, name="crawl-jobs")
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from crawlers.jobs import CrawlJob, CrawlJobManager, JobError

crawl_jobs_app = typer.Typer(help="Crawl jobs: list, status, cancel, resume, logs.", no_args_is_help=True)


def _manager() -> CrawlJobManager:
    from culturebase.settings import get_settings

    return CrawlJobManager(get_settings())


def _parse_sets(values: list[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in values or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{item!r}: expected KEY=VALUE", param_hint="--set")
        try:
            out[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.strip()] = raw
    return out


def _counters_table(job: CrawlJob) -> Table:
    c = job.counters
    table = Table(title=f"crawl job {job.id} · {job.spider} · {job.status}", show_header=False, expand=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    rows = [
        ("pages fetched", c.get("pages_fetched", 0)),
        ("items parsed", c.get("items_parsed", 0)),
        ("items stored", c.get("items_stored", 0)),
        ("merged duplicates", c.get("merged", 0)),
        ("dropped", c.get("dropped_total", 0)),
        ("unchanged (skipped)", c.get("skipped_unchanged", 0)),
        ("robots.txt forbidden", c.get("robots_forbidden", 0)),
        ("images stored", c.get("images_stored", 0)),
        ("images failed", c.get("images_failed_total", 0)),
        ("refused addresses", c.get("refused_address", 0)),
        ("sources unreachable", c.get("sources_unreachable", 0)),
        ("errors", c.get("errors", 0)),
        ("elapsed", f"{c.get('elapsed_s', 0):.1f}s"),
    ]
    for reason, n in sorted((c.get("dropped") or {}).items()):
        rows.append((f"  dropped: {reason}", n))
    for reason, n in sorted((c.get("images_failed") or {}).items()):
        rows.append((f"  image failed: {reason}", n))
    for label, value in rows:
        table.add_row(escape(label), escape(str(value)))
    if job.error:
        table.add_row("error", escape(job.error))
    return table


def _follow(manager: CrawlJobManager, job: CrawlJob, show: bool) -> CrawlJob:
    """Poll the job's counters until it finishes (Ctrl-C cancels it)."""
    console = Console(stderr=True)
    try:
        if not show:
            return manager.wait(job.id)
        with Live(_counters_table(job), console=console, refresh_per_second=4, transient=False) as live:
            while not job.finished:
                time.sleep(0.25)
                job = manager.get(job.id)
                live.update(_counters_table(job))
        return job
    except KeyboardInterrupt:
        console.print(f"cancelling job {job.id} ...", markup=False)
        manager.cancel(job.id)
        return manager.wait(job.id, timeout=60)


def _finish(job: CrawlJob, json_out: bool) -> None:
    if json_out:
        typer.echo(json.dumps(job.to_dict(), ensure_ascii=False, indent=2))
    else:
        c = job.counters
        typer.echo(
            f"job {job.id}: {job.status} · {c.get('items_stored', 0)} stored, {c.get('merged', 0)} merged, "
            f"{c.get('dropped_total', 0)} dropped, {c.get('errors', 0)} errors, {c.get('pages_fetched', 0)} pages"
        )
        if job.error:
            typer.echo(f"reason: {job.error}", err=True)
    if job.status == "failed":
        raise typer.Exit(1)


def crawl_command(
    spider: str = typer.Argument(..., help="Spider: knowyourmeme, moegirl or memegen."),
    start_url: list[str] = typer.Option(None, "--start-url", help="Start URL (repeatable): an entry, listing, search, page or category URL."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Stop after this many entity pages."),
    kb: Path | None = typer.Option(None, "--kb", help="CultureBase folder to grow (default: KAR_KB_PATH)."),
    json_out: bool = typer.Option(False, "--json", help="Print the final job record as JSON."),
    confirmed_only: bool = typer.Option(False, "--confirmed-only", help="knowyourmeme: keep Confirmed entries only."),
    category: list[str] = typer.Option(None, "--category", help="moegirl: seed category (repeatable)."),
    follow_sources: bool = typer.Option(
        False, "--follow-sources", help="memegen: also crawl each template's KnowYourMeme page into the same entity."
    ),
    full: bool = typer.Option(False, "--full", help="Fetch every page again (no incremental skipping)."),
    detach: bool = typer.Option(False, "--detach", help="Start the job and return its id without waiting."),
    set_: list[str] = typer.Option(None, "--set", help="Scrapy setting override KEY=VALUE (repeatable)."),
) -> None:
    """Crawl KnowYourMeme, Moegirl or a memegen API into CultureBase as a crawl job, showing live progress."""
    options: dict[str, Any] = {}
    if confirmed_only:
        options["confirmed_only"] = "1"
    if category:
        options["categories"] = list(category)
    if follow_sources:
        options["follow_sources"] = "1"
    scrapy_settings = _parse_sets(set_)
    if full:
        scrapy_settings["KAR_INCREMENTAL"] = False
    manager = _manager()
    try:
        job = manager.start(spider, start_urls=start_url or [], limit=limit, kb_path=kb, options=options, scrapy_settings=scrapy_settings)
        if detach:
            typer.echo(json.dumps(job.to_dict(), ensure_ascii=False, indent=2) if json_out else job.id)
            return
        job = _follow(manager, job, show=not json_out)
    except JobError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    finally:
        manager.close()
    _finish(job, json_out)


@crawl_jobs_app.command("list")
def list_jobs(
    status: str | None = typer.Option(None, "--status", help="Only jobs with this status."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Crawl jobs, newest first."""
    manager = _manager()
    try:
        jobs = manager.list(status=status)
    except JobError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    finally:
        manager.close()
    if json_out:
        typer.echo(json.dumps([j.to_dict() for j in jobs], ensure_ascii=False, indent=2))
        return
    table = Table("id", "spider", "status", "stored", "pages", "error")
    for j in jobs:
        table.add_row(*(escape(x) for x in (j.id, j.spider, j.status, str(j.counters.get("items_stored", 0)), str(j.counters.get("pages_fetched", 0)), j.error or "")))
    Console().print(table)


def _one(action: str, job_id: str, json_out: bool, **kw: Any) -> None:
    manager = _manager()
    try:
        if action == "status":
            job = manager.get(job_id)
        elif action == "cancel":
            job = manager.cancel(job_id)
        else:
            job = manager.resume(job_id)
            if kw.get("wait"):
                job = _follow(manager, job, show=not json_out)
    except JobError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    finally:
        manager.close()
    if json_out:
        typer.echo(json.dumps(job.to_dict(), ensure_ascii=False, indent=2))
    else:
        Console().print(_counters_table(job))


@crawl_jobs_app.command("status")
def job_status(job_id: str, json_out: bool = typer.Option(False, "--json")) -> None:
    """One job: status, counters, error."""
    _one("status", job_id, json_out)


@crawl_jobs_app.command("cancel")
def job_cancel(job_id: str, json_out: bool = typer.Option(False, "--json")) -> None:
    """Stop a queued or running job (what it parsed so far is kept)."""
    _one("cancel", job_id, json_out)


@crawl_jobs_app.command("resume")
def job_resume(
    job_id: str,
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Follow the resumed job until it ends."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Resume a failed (e.g. killed) or cancelled job; pages it already stored are not fetched again."""
    _one("resume", job_id, json_out, wait=wait)


@crawl_jobs_app.command("logs")
def job_logs(job_id: str, tail: int = typer.Option(200, "--tail", help="Last N lines (0: all).")) -> None:
    """The job's log."""
    manager = _manager()
    try:
        typer.echo(manager.logs(job_id, tail=tail or None))
    except JobError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    finally:
        manager.close()
