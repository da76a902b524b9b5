"""Fixtures for the crawler tests: the local fixture site, per-test settings/job manager, a fast test embedder."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from crawl_fixture_server import FIXTURES, FixtureServer  # noqa: E402

from culturebase.settings import Settings  # noqa: E402

# job processes load the test embedder from this folder
FAST = {"KAR_EMBEDDER_FACTORY": "hash_embedder:build"}


@pytest.fixture
def server():
    with FixtureServer(synthetic_entries=30) as srv:
        yield srv


@pytest.fixture
def settings(tmp_path, monkeypatch) -> Settings:
    monkeypatch.setenv("PYTHONPATH", str(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return Settings(
        data_dir=tmp_path / "data",
        kb_path=tmp_path / "kb",
        crawl_delay_s=0,
        crawl_concurrency_per_domain=2,
    )


@pytest.fixture
def manager(settings):
    from crawlers.jobs import CrawlJobManager

    mgr = CrawlJobManager(settings)
    yield mgr
    for job in mgr.list():
        if not job.finished and job.pid:
            try:
                os.kill(job.pid, 9)
            except ProcessLookupError:
                pass
    mgr.close()


@pytest.fixture
def open_kb(settings):
    """Open the test KB (after the crawl process has released it) with the test embedder."""
    from hash_embedder import HashEmbedder

    from retrieval.knowledge_base import KnowledgeBase

    opened = []

    def _open(s: Settings | None = None):
        kb = KnowledgeBase.open(s or settings, embedder=HashEmbedder())
        opened.append(kb)
        return kb

    yield _open
    for kb in opened:
        try:
            kb.close()
        except Exception:
            pass


def fixture_response(url: str, path: Path, status: int = 200, headers: dict | None = None, meta: dict | None = None):
    """A saved page as a Scrapy response (spiders are tested offline on these)."""
    from scrapy.http import HtmlResponse, Request, TextResponse

    request = Request(url, meta=meta or {})
    cls = TextResponse if path.suffix == ".json" else HtmlResponse
    return cls(url=url, body=path.read_bytes(), encoding="utf-8", request=request, status=status, headers=headers or {})


__all__ = ["FAST", "FIXTURES", "fixture_response"]
