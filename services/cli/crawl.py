"""``kar crawl SPIDER`` (live progress, ``--json`` final job record) and
``kar crawl-jobs list|status|cancel|resume|logs``: thin terminal front of :mod:`crawlers.jobs`."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any, Optional

import typer
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from crawlers.jobs import SPIDERS, CrawlJob, CrawlJobManager, JobError
from services.cli.console import ExitCode, emit_json, err, fail, out
from services.cli.options import JsonOption, KbOption
from services.cli.render import print_joins, seconds

crawl_jobs_app = typer.Typer(
    help="Crawl jobs: list, status, cancel, resume, logs (a job's pages and counters live in KAR_DATA_DIR).",
    no_args_is_help=True,
    epilog="Examples:\n\n  kar crawl-jobs list\n\n  kar crawl-jobs resume 20260101-120000-ab12cd",
)

CRAWL_EXAMPLES = """\
Examples:

  kar crawl knowyourmeme --limit 20

  kar crawl moegirl --category Category:网络流行语 --limit 50 --kb data/culturebase
"""

JOB_ID_HELP = "Job id, as printed by `kar crawl --detach` or `kar crawl-jobs list`."


def _manager() -> CrawlJobManager:
    from culturebase.settings import get_settings

    return CrawlJobManager(get_settings())


def _parse_sets(values: list[str] | None) -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    for item in values or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{item!r}: expected KEY=VALUE", param_hint="--set")
        try:
            parsed[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            parsed[key.strip()] = raw
    return parsed


def default_start(spider: str, categories: list[str] | None = None) -> list[str]:
    """Where ``spider`` starts when no ``--start-url`` is given (what ``kar crawl`` prints before it starts)."""
    if spider == "knowyourmeme":
        from crawlers.spiders.knowyourmeme import DEFAULT_START

        return list(DEFAULT_START)
    if spider == "memegen":
        from crawlers.spiders.memegen import DEFAULT_START as MEMEGEN_START

        return list(MEMEGEN_START)
    if spider == "moegirl":
        from crawlers.spiders.moegirl import DEFAULT_API, DEFAULT_CATEGORIES

        return [f"{DEFAULT_API} ({c})" for c in (categories or DEFAULT_CATEGORIES)]
    return []


def describe_start(spider: str, start_urls: list[str], categories: list[str], limit: int | None) -> str:
    """``crawling knowyourmeme from https://… (default start), limit 20 entity pages`` (one line)."""
    urls = start_urls or default_start(spider, categories)
    where = ", ".join(urls) + ("" if start_urls else " (default start)")
    bound = f"limit {limit} entity pages" if limit else "no limit: every entity the start pages lead to (Ctrl-C cancels)"
    return f"crawling {spider} from {where}; {bound}"


def _counters_table(job: CrawlJob) -> Table:
    c = job.counters
    table = Table(title=escape(f"crawl job {job.id} · {job.spider} · {job.status}"), show_header=False, expand=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    rows = [
        ("pages fetched", c.get("pages_fetched", 0)),
        ("items parsed", c.get("items_parsed", 0)),
        ("items stored", c.get("items_stored", 0)),
        ("joined (same entity)", c.get("merged", 0)),
        *((f"  joined by {rule}", n) for rule, n in sorted((c.get("merged_by_rule") or {}).items())),
        ("kept apart", c.get("kept_apart", 0)),
        ("split (older joins)", c.get("split", 0)),
        ("dropped", c.get("dropped_total", 0)),
        ("unchanged (skipped)", c.get("skipped_unchanged", 0)),
        ("robots.txt forbidden", c.get("robots_forbidden", 0)),
        ("images stored", c.get("images_stored", 0)),
        ("images failed", c.get("images_failed_total", 0)),
        ("sounds stored", c.get("sounds_stored", 0)),
        ("sounds failed", c.get("sounds_failed_total", 0)),
        ("refused addresses", c.get("refused_address", 0)),
        ("sources unreachable", c.get("sources_unreachable", 0)),
        ("errors", c.get("errors", 0)),
        ("elapsed", seconds(c.get("elapsed_s", 0))),
    ]
    for reason, n in sorted((c.get("dropped") or {}).items()):
        rows.append((f"  dropped: {reason}", n))
    for reason, n in sorted((c.get("images_failed") or {}).items()):
        rows.append((f"  image failed: {reason}", n))
    for reason, n in sorted((c.get("sounds_failed") or {}).items()):
        rows.append((f"  sound failed: {reason}", n))
    for label, value in rows:
        table.add_row(escape(label), escape(str(value)))
    if job.error:
        table.add_row("error", escape(job.error))
    return table


def _follow(manager: CrawlJobManager, job: CrawlJob, show: bool) -> tuple[CrawlJob, bool]:
    """Poll the job's counters until it finishes; Ctrl-C cancels it (what it stored is kept).
    Returns the finished job and whether Ctrl-C cancelled it."""
    try:
        if not show:
            return manager.wait(job.id), False
        with Live(_counters_table(job), console=err, refresh_per_second=4, transient=False) as live:
            while not job.finished:
                time.sleep(0.25)
                job = manager.get(job.id)
                live.update(_counters_table(job))
        if not err.is_terminal:  # rich ends the table's last line only on a terminal
            err.line()
        return job, False
    except KeyboardInterrupt:
        err.print(f"cancelling job {job.id} ...", markup=False)
        manager.cancel(job.id)
        return manager.wait(job.id, timeout=60), True


def _finish(job: CrawlJob, json_out: bool, cancelled: bool = False, kb_flag: str = "") -> None:
    if json_out:
        emit_json(job.to_dict())
    else:
        c = job.counters
        out.print(
            f"job {job.id}: {job.status} · {c.get('items_stored', 0)} stored, {c.get('merged', 0)} joined, "
            f"{c.get('dropped_total', 0)} dropped, {c.get('errors', 0)} errors, {c.get('pages_fetched', 0)} pages, "
            f"{seconds(c.get('elapsed_s', 0))}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        if c.get("merged") or c.get("kept_apart") or c.get("split"):
            print_joins(out, {**c, "events": c.get("joins") or []})
        if job.error and job.status != "failed":
            err.print(f"reason: {job.error}", markup=False, highlight=False, soft_wrap=True)
        if job.status == "succeeded":
            err.print(f"next: kar kb stats{kb_flag}", markup=False, highlight=False, soft_wrap=True)
    if cancelled:
        raise typer.Exit(ExitCode.CANCELLED)
    if job.status == "failed":
        raise fail(_failure_line(job), ExitCode.FAILED)


def _failure_line(job: CrawlJob) -> str:
    """The job's error on one line, naming the setting whose value it holds, else (CultureBase did not open) the store's."""
    from culturebase.settings import get_settings
    from services.cli.errors import naming, one_line, with_settings_in

    line = with_settings_in(f"crawl job {job.id} failed: {one_line(job.error or 'see kar crawl-jobs logs ' + job.id, limit=None)}")
    if "KAR_" not in line and "cannot open CultureBase" in line:
        line = naming(line, "KAR_QDRANT_URL" if get_settings().qdrant_url else "KAR_KB_PATH")
    return line


def crawl_command(
    spider: Annotated[str, typer.Argument(help="Spider: knowyourmeme, moegirl or memegen.", show_default=False)],
    start_url: Annotated[
        Optional[list[str]],
        typer.Option(
            "--start-url",
            metavar="URL",
            help="Start URL (repeatable): an entry, listing, search, page or category URL. Default: knowyourmeme "
            "https://knowyourmeme.com/memes/confirmed, memegen https://api.memegen.link/templates/, moegirl "
            "Category:网络流行语.",
            show_default=False,
        ),
    ] = None,
    limit: Annotated[
        Optional[int],
        typer.Option("--limit", min=1, help="Stop after this many entity pages (default: no limit).", show_default=False),
    ] = None,
    kb: KbOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the final job record as JSON on stdout.")] = False,
    confirmed_only: Annotated[bool, typer.Option("--confirmed-only", help="knowyourmeme: keep Confirmed entries only.")] = False,
    category: Annotated[
        Optional[list[str]], typer.Option("--category", help="moegirl: seed category (repeatable).", show_default=False)
    ] = None,
    follow_sources: Annotated[
        bool, typer.Option("--follow-sources", help="memegen: also crawl each template's KnowYourMeme page into the same entity.")
    ] = False,
    full: Annotated[bool, typer.Option("--full", help="Fetch every page again (no incremental skipping).")] = False,
    detach: Annotated[bool, typer.Option("--detach", help="Start the job and print its id without waiting.")] = False,
    set_: Annotated[
        Optional[list[str]],
        typer.Option("--set", "-s", metavar="KEY=VALUE", help="Scrapy setting override (repeatable).", show_default=False),
    ] = None,
) -> None:
    """Crawl KnowYourMeme, Moegirl or a memegen API into CultureBase as a crawl job, showing live progress.

    Prints where it starts and its limit first; Ctrl-C cancels the job (exit 130) and keeps what it stored."""
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
        if spider in SPIDERS:  # said before the job starts (an unknown spider is refused by start below)
            target = str(kb) if kb is not None else (manager.settings.qdrant_url or str(manager.settings.kb_path))
            err.print(describe_start(spider, list(start_url or []), list(category or []), limit) + f"; into {target}", markup=False, highlight=False, soft_wrap=True)
        job = manager.start(spider, start_urls=start_url or [], limit=limit, kb_path=kb, options=options, scrapy_settings=scrapy_settings)
        if detach:
            if json_out:
                emit_json(job.to_dict())
            else:
                out.print(job.id, markup=False, highlight=False, soft_wrap=True)
            return
        job, cancelled = _follow(manager, job, show=not json_out)
    except JobError as exc:
        raise fail(str(exc), ExitCode.USAGE) from None
    finally:
        manager.close()
    _finish(job, json_out, cancelled, kb_flag=f" --kb {kb}" if kb is not None else "")


@crawl_jobs_app.command("list", epilog="Example:\n\n  kar crawl-jobs list --status failed --json")
def list_jobs(
    status: Annotated[
        Optional[str], typer.Option("--status", help="Only jobs with this status (queued, running, succeeded, failed, cancelled).")
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Crawl jobs, newest first."""
    manager = _manager()
    try:
        jobs = manager.list(status=status)
    except JobError as exc:
        raise fail(str(exc), ExitCode.USAGE) from None
    finally:
        manager.close()
    if json_out:
        emit_json([j.to_dict() for j in jobs])
        return
    table = Table("id", "spider", "status", "stored", "pages", "error")
    for j in jobs:
        table.add_row(*(escape(x) for x in (j.id, j.spider, j.status, str(j.counters.get("items_stored", 0)), str(j.counters.get("pages_fetched", 0)), j.error or "")))
    out.print(table)
    if not jobs:
        out.print("no crawl jobs yet: start one with `kar crawl knowyourmeme --limit 20`", markup=False, highlight=False, soft_wrap=True)


def _one(action: str, job_id: str, json_out: bool, **kw: Any) -> None:
    manager = _manager()
    cancelled = False
    try:
        if action == "status":
            job = manager.get(job_id)
        elif action == "cancel":
            job = manager.cancel(job_id)
        else:
            job = manager.resume(job_id)
            if kw.get("wait"):
                job, cancelled = _follow(manager, job, show=not json_out)
    except JobError as exc:
        raise fail(str(exc), ExitCode.USAGE) from None
    finally:
        manager.close()
    if json_out:
        emit_json(job.to_dict())
    else:
        out.print(_counters_table(job))
    if cancelled:
        raise typer.Exit(ExitCode.CANCELLED)


@crawl_jobs_app.command("status", epilog="Example:\n\n  kar crawl-jobs status 20260101-120000-ab12cd --json")
def job_status(job_id: Annotated[str, typer.Argument(help=JOB_ID_HELP, show_default=False)], json_out: JsonOption = False) -> None:
    """One job: status, counters, error."""
    _one("status", job_id, json_out)


@crawl_jobs_app.command("cancel", epilog="Example:\n\n  kar crawl-jobs cancel 20260101-120000-ab12cd")
def job_cancel(job_id: Annotated[str, typer.Argument(help=JOB_ID_HELP, show_default=False)], json_out: JsonOption = False) -> None:
    """Stop a queued or running job (what it parsed so far is kept)."""
    _one("cancel", job_id, json_out)


@crawl_jobs_app.command("resume", epilog="Example:\n\n  kar crawl-jobs resume 20260101-120000-ab12cd --no-wait")
def job_resume(
    job_id: Annotated[str, typer.Argument(help=JOB_ID_HELP, show_default=False)],
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Follow the resumed job until it ends.")] = True,
    json_out: JsonOption = False,
) -> None:
    """Resume a failed (e.g. killed) or cancelled job; pages it already stored are not fetched again."""
    _one("resume", job_id, json_out, wait=wait)


@crawl_jobs_app.command("logs", epilog="Example:\n\n  kar crawl-jobs logs 20260101-120000-ab12cd --tail 50")
def job_logs(
    job_id: Annotated[str, typer.Argument(help=JOB_ID_HELP, show_default=False)],
    tail: Annotated[int, typer.Option("--tail", min=0, help="Last N lines (0: all).")] = 200,
) -> None:
    """The job's log."""
    manager = _manager()
    try:
        typer.echo(manager.logs(job_id, tail=tail or None))
    except JobError as exc:
        raise fail(str(exc), ExitCode.USAGE) from None
    finally:
        manager.close()
