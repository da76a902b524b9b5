"""What an import job runs on its body: the page-dump reader (corpus) or the entity-dump reader (kb).

Each runner is called in a worker thread under the store lock by :class:`services.import_jobs.ImportJobManager`
and returns the import's report as JSON: counts, and the bad records by line or record with their reasons (the
first ``services.params.PARAMS.max_listed``, all of them counted).  What makes the whole dump unreadable (not a
page dump, a broken archive, an unknown format) fails the job with a message that names the body, not a path.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from services.import_jobs import ImportFailed, ImportJob, Runner, listed

#: content types of a posted entity dump that are an archive of a dump folder (the body must then be one)
ARCHIVE_ONLY = ("application/zip", "application/x-zip-compressed", "application/x-tar", "application/x-gtar", "application/x-compressed-tar")


def corpus_runner(kb: Any) -> Runner:
    """Import a page dump (JSONL, scrapy -o, WARC / WARC.gz) into ``kb``'s search corpus."""

    def run(job: ImportJob, body: Path, tick: Any) -> dict[str, Any]:
        from crawlers.page_dump import import_pages
        from retrieval.knowledge_base import ImportFileError

        try:
            report = import_pages(kb, body, dry_run=job.dry_run, progress=tick)
        except ImportFileError as exc:
            raise ImportFailed(str(exc).replace(str(body), "body")) from None
        data = report.to_dict()
        data.pop("paths", None)
        data["skipped"], data["skipped_total"] = listed([{"where": s["where"], "reason": s["reason"]} for s in data["skipped"]])
        data["corpus"] = kb.store.corpus_stats()
        return data

    return run


def _dump_path(body: Path, work: Path, ctype: str, fmt: str | None, archive_limit: int) -> tuple[Path, str | None]:
    """The dump to read (the body, or the folder an archive body unpacks to) and its format (None: JSONL)."""
    from culturebase.importers import DumpError, detect_format
    from culturebase.importers.archive import ArchiveError, ArchiveTooLarge, archive_kind, unpack_archive

    with body.open("rb") as fh:
        kind = archive_kind(fh.read(512))
    if kind is None and ctype in ARCHIVE_ONLY + ("application/gzip", "application/x-gzip"):
        raise ImportFailed(f"the body is sent as {ctype} but is not a zip or tar(.gz) archive")
    if kind is None and fmt == "moegirl":
        raise ImportFailed("format 'moegirl' is a folder of maps: post it as a zip or tar.gz archive of the folder")
    path = body
    if kind is not None:
        try:
            path = unpack_archive(body, work / "dump", archive_limit)
        except ArchiveTooLarge as exc:
            raise ImportFailed(f"{exc} (KAR_IMPORT_ARCHIVE_MAX_MB)") from None
        except ArchiveError as exc:
            raise ImportFailed(str(exc)) from None
        body.unlink()
    if fmt is None:
        try:
            fmt = detect_format(path)
        except DumpError as exc:
            if kind is not None:  # a folder we do not know: say what is in it, and what we read
                raise ImportFailed(str(exc).replace(str(path), "the archive")) from None
            fmt = "jsonl"  # our reader names what is wrong with the body
    return path, fmt


def kb_runner(kb: Any, archive_limit: int, kb_path: Path) -> Runner:
    """Import an entity dump (any format ``kar kb import`` reads, or a zip / tar.gz of a dump folder) into ``kb``;
    image URLs are not fetched."""

    def run(job: ImportJob, body: Path, tick: Any) -> dict[str, Any]:
        from culturebase.store.bulk import BulkImportError
        from retrieval.knowledge_base import ImportFileError

        work = body.parent / "work"
        opts = job.options
        try:
            path, fmt = _dump_path(body, work, opts.get("content_type", ""), opts.get("format"), archive_limit)

            def total(count: int | None) -> None:
                job.total = count

            try:
                report = kb.import_dump(path, fmt=fmt, categories=opts.get("categories"), fetch_images=False,
                                        dry_run=job.dry_run, progress=tick, total=total)
            except ImportFileError as exc:
                raise ImportFailed(str(exc).replace(str(path), "body")) from None
            except BulkImportError as exc:
                raise ImportFailed(str(exc).replace(str(kb_path), "the KB folder")) from None
        finally:
            shutil.rmtree(work, ignore_errors=True)
        if report.stopped and not report.stored:
            raise ImportFailed(f"body: {report.stopped}")
        data = report.to_dict()
        data.pop("path", None)
        data["rejected"], data["rejected_total"] = listed(list(data.get("rejected") or []))
        if job.dry_run:
            job.done = report.stored
        data["total_entities"] = kb.store.count()
        return data

    return run
