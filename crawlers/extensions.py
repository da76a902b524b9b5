"""Scrapy extension that mirrors a crawl's counters into its job row (live progress) and honours cancel."""

from __future__ import annotations

import logging
import time
from typing import Any

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.logformatter import LogFormatter

from culturebase.identity import MAX_EVENTS
from crawlers.runner import crawl_db_of, job_id_of

log = logging.getLogger(__name__)


def counters_from_stats(stats: dict[str, Any], started: float | None = None) -> dict[str, Any]:
    """The job counters (pages fetched, items stored, merged, dropped by reason, errors ...) from Scrapy stats."""
    dropped = {k[len("kar/dropped/") :]: v for k, v in stats.items() if k.startswith("kar/dropped/")}
    images_failed = {k[len("kar/images_failed/") :]: v for k, v in stats.items() if k.startswith("kar/images_failed/")}
    sounds_failed = {k[len("kar/sounds_failed/") :]: v for k, v in stats.items() if k.startswith("kar/sounds_failed/")}
    errors = (
        stats.get("kar/errors", 0)
        + stats.get("spider_exceptions/count", 0)
        + sum(v for k, v in stats.items() if k.startswith("downloader/exception_type_count/") and "IgnoreRequest" not in k and "ForbiddenAddress" not in k)
        + stats.get("retry/max_reached", 0)
    )
    out: dict[str, Any] = {
        "pages_fetched": stats.get("kar/pages_fetched", 0),
        "items_parsed": stats.get("kar/parsed", 0),
        "items_stored": stats.get("kar/stored", 0),
        "merged": stats.get("kar/merged", 0),
        "merged_by_rule": {k[len("kar/merged/") :]: v for k, v in stats.items() if k.startswith("kar/merged/")},
        "kept_apart": stats.get("kar/kept_apart", 0),
        "split": stats.get("kar/split", 0),
        "joins": list(stats.get("kar/joins") or []),
        "dropped": dropped,
        "dropped_total": sum(dropped.values()),
        "skipped_unchanged": stats.get("kar/skipped_unchanged", 0),
        "skipped_done": stats.get("kar/skipped_done", 0),
        "skipped_filtered": stats.get("kar/skipped_filtered", 0),
        "robots_forbidden": stats.get("robotstxt/forbidden", 0),
        "retries": stats.get("retry/count", 0),
        "retry_after_waits": stats.get("kar/retry_after_waits", 0),
        "corpus_chunks": stats.get("kar/corpus_chunks", 0),
        "images_stored": stats.get("kar/images_stored", 0),
        "images_failed": images_failed,
        "images_failed_total": sum(images_failed.values()),
        "sounds_stored": stats.get("kar/sounds_stored", 0),
        "sounds_failed": sounds_failed,
        "sounds_failed_total": sum(sounds_failed.values()),
        "refused_address": stats.get("kar/refused_address", 0),
        "sources_fetched": stats.get("kar/sources_fetched", 0),
        "sources_unreachable": stats.get("kar/sources_unreachable", 0),
        "errors": errors,
    }
    if started is not None:
        out["elapsed_s"] = round(time.time() - started, 3)
    return out


def add_counters(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Counters of a resumed job: the earlier runs' plus this run's."""
    out = dict(new)
    for key, value in base.items():
        if key == "joins" and isinstance(value, list):
            out[key] = (value + list(new.get(key) or []))[:MAX_EVENTS]
        elif key in ("dropped", "images_failed", "sounds_failed", "merged_by_rule") and isinstance(value, dict):
            merged = dict(value)
            for reason, n in (new.get(key) or {}).items():
                merged[reason] = merged.get(reason, 0) + n
            out[key] = merged
        elif key in ("elapsed_s", "finish_reason"):
            continue
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = value + (new.get(key) or 0)
    return out


class QuietLogFormatter(LogFormatter):
    """Dropped items are logged as one INFO line with the reason, not the whole item."""

    def dropped(self, item: Any, exception: BaseException, response: Any, spider: Any = None) -> dict[str, Any]:
        return {"level": logging.INFO, "msg": "Dropped: %(exception)s", "args": {"exception": exception}}

    def scraped(self, item: Any, response: Any, spider: Any = None) -> dict[str, Any]:
        url = item.get("url") if hasattr(item, "get") else ""
        return {"level": logging.DEBUG, "msg": "Scraped %(url)s", "args": {"url": url}}


class JobProgressExtension:
    """Counts fetched pages; for a crawl job, writes counters to SQLite twice a second and stops on cancel."""

    interval_s = 0.5

    def __init__(self, crawler: Any) -> None:
        self.crawler = crawler
        self.job_id = job_id_of(crawler)
        self.started = time.time()
        self.base = dict(crawler.settings.getdict("KAR_COUNTER_BASE") or {})
        self._loop: Any = None
        self._closed = False
        crawler.signals.connect(self.response_received, signal=signals.response_received)
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Any) -> "JobProgressExtension":
        if not crawler.settings.getbool("KAR_PROGRESS_ENABLED", True):
            raise NotConfigured
        return cls(crawler)

    def response_received(self, response: Any, request: Any, spider: Any = None) -> None:
        if not request.url.endswith("/robots.txt") and response.status != 304:
            self.crawler.stats.inc_value("kar/pages_fetched")

    def spider_opened(self, spider: Any = None) -> None:
        self.started = time.time()
        if not self.job_id:
            return
        from twisted.internet import task

        self._loop = task.LoopingCall(self.tick)
        self._loop.start(self.interval_s, now=True)

    def tick(self) -> None:
        try:
            db = crawl_db_of(self.crawler)
            counters = add_counters(self.base, counters_from_stats(self.crawler.stats.get_stats(), self.started))
            db.update_job(self.job_id, counters=counters)
            row = db.job_row(self.job_id)
            if (
                not self._closed
                and row is not None
                and row["cancel_requested"]
                and not self.crawler.stats.get_value("kar/cancelled")
            ):
                self.crawler.stats.set_value("kar/cancelled", True)
                log.info("job %s: cancel requested, stopping", self.job_id)
                from scrapy.utils.defer import deferred_from_coro

                deferred_from_coro(self.crawler.engine.close_spider_async(reason="cancelled"))
        except Exception:  # a progress write must never kill the crawl
            log.exception("could not write job progress")

    def spider_closed(self, spider: Any = None, reason: str = "") -> None:
        self._closed = True
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        if self.job_id:
            self.tick()
