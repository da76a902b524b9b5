"""Running a crawl in this process: Scrapy settings from CultureKAR settings, and the crawl itself.

One crawl per process (Scrapy's reactor cannot restart): crawl jobs call :func:`run_crawl`
from ``python -m crawlers.run_job``; the benchmark calls it in a fresh process too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from culturebase.settings import Settings, get_settings


def scrapy_settings(settings: Settings, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Scrapy settings for a crawl with ``settings`` (politeness from ``KAR_CRAWL_*``) plus overrides."""
    from crawlers.jobs import settings_for_child

    values: dict[str, Any] = {
        "USER_AGENT": settings.crawl_user_agent,
        "ROBOTSTXT_OBEY": settings.crawl_obey_robots,
        "CONCURRENT_REQUESTS_PER_DOMAIN": settings.crawl_concurrency_per_domain,
        "DOWNLOAD_DELAY": settings.crawl_delay_s,
        "AUTOTHROTTLE_START_DELAY": max(settings.crawl_delay_s, 0.1 if settings.crawl_delay_s == 0 else 1.0),
        "AUTOTHROTTLE_TARGET_CONCURRENCY": float(settings.crawl_concurrency_per_domain),
        "KAR_SETTINGS": settings_for_child(settings),
        "KAR_FLUSH_EVERY": settings.embedder_batch_size * 2,
    }
    if settings.crawl_delay_s == 0:
        values["AUTOTHROTTLE_ENABLED"] = False  # politeness off: no delay to adapt
    values.update(overrides or {})
    return values


def _cached(crawler: Any, attr: str, factory: Any) -> Any:
    value = getattr(crawler, attr, None)
    if value is None:
        value = factory()
        setattr(crawler, attr, value)
    return value


def kar_settings_of(crawler: Any) -> Settings:
    """The CultureKAR settings a crawler runs with (``KAR_SETTINGS`` when set, else the environment's)."""

    def build() -> Settings:
        data = crawler.settings.get("KAR_SETTINGS")
        return Settings(**dict(data)) if data else get_settings()

    return _cached(crawler, "_kar_settings", build)


def crawl_db_of(crawler: Any) -> Any:
    """The crawl-job database (one connection per crawler process)."""
    from crawlers.jobs import CrawlDB

    return _cached(crawler, "_kar_crawl_db", lambda: CrawlDB(Path(kar_settings_of(crawler).resolved_crawl_jobs_db)))


def job_id_of(crawler: Any) -> str | None:
    """The crawl job this crawler runs for (None for a plain ``scrapy crawl``)."""
    return crawler.settings.get("KAR_JOB_ID") or None


def run_crawl(
    spider: str,
    settings: Settings,
    spider_args: dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run one crawl to the end in this process; returns the final Scrapy stats (with ``finish_reason``)."""
    from scrapy.crawler import CrawlerProcess
    from scrapy.settings import Settings as ScrapySettings

    base = ScrapySettings()
    base.setmodule("crawlers.settings", priority="project")
    base.setdict(scrapy_settings(settings, overrides), priority="cmdline")
    process = CrawlerProcess(base)
    crawler = process.create_crawler(spider)
    process.crawl(crawler, **(spider_args or {}))
    process.start()
    return dict(crawler.stats.get_stats())
