"""memegen: the template list of the memegen API (``GET /templates/``) into template entities with their blank image.

Each template ``{id, name, lines, overlays, styles, blank, example{text,url}, source, keywords, _self}``
becomes one entity, its id from its own ``_self`` page: the name; the keywords (franchises,
characters, phrases shared by many templates) and the memegen id as tags, never aliases; the
example captions as cultural usage; the ``source`` KnowYourMeme page as a linked source (its
pages are the entity's evidence, but a shared link joins nothing: several templates name one
page); its blank image downloaded (``image_urls``) and hashed for the image route.

With ``-a follow_sources=1`` (``kar crawl memegen --follow-sources``) the KnowYourMeme page of a
template is fetched too: a page that one template names is that template's entity
(``same_as``: joined by rule ``declared``); a page that several templates name (variants such as
Distracted Boyfriend / Distracted Girlfriend) is an entity of its own.

Only the API host is fetched unless ``follow_sources`` asks for the source pages; a source
that cannot be reached is counted (``kar/sources_unreachable``) and the job goes on.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import scrapy
from scrapy.http import Response

from culturebase.entity import canonical_url
from crawlers.items import PageItem
from crawlers.middlewares import PAGE_KEY
from crawlers.spiders.args import as_list, truthy
from crawlers.spiders.knowyourmeme import KnowYourMemeSpider
from crawlers.text import one_line

SITE = "memegen"
DEFAULT_START = ("https://api.memegen.link/templates/",)
SOURCE_META = "kar_template_page"  # request meta: the page of the one template naming this source (its same_as)


def _kym_url(source: Any) -> str | None:
    if not isinstance(source, str) or not source.startswith(("http://", "https://")):
        return None
    return source.strip()


def _site_of(url: str) -> str:
    """``knowyourmeme`` for a KnowYourMeme entry page (``/memes/…``), else the link's host (a video, a wiki)."""
    parts = urlsplit(url)
    return "knowyourmeme" if parts.path.startswith("/memes/") else (parts.hostname or "web")


def template_item(t: dict[str, Any], response_url: str) -> PageItem | str:
    """One template as a page item, or the reason it cannot be one."""
    tid, name = t.get("id"), one_line(str(t.get("name") or ""))
    if not isinstance(tid, str) or not tid.strip():
        return "template without id"
    if not name:
        return "template without name"
    keywords = [one_line(str(k)) for k in t.get("keywords") or [] if isinstance(k, str) and one_line(k)]
    example = t.get("example") if isinstance(t.get("example"), dict) else {}
    captions = [one_line(str(x)) for x in example.get("text") or [] if isinstance(x, str) and one_line(x)]
    lines = t.get("lines") if isinstance(t.get("lines"), int) else None
    self_url = t.get("_self") if isinstance(t.get("_self"), str) else f"{response_url.rstrip('/')}/{tid}"
    source = _kym_url(t.get("source"))
    desc = f"“{name}” is a meme template (memegen id {tid})" + (f" with {lines} caption line{'s' * (lines != 1)}" if lines else "") + "."
    if keywords:
        desc += " Keywords: " + ", ".join(keywords) + "."
    usage = ("Example captions: " + " / ".join(captions)) if captions else ""
    blank = t.get("blank") if isinstance(t.get("blank"), str) else None
    return PageItem(
        site=SITE,
        url=self_url,
        page_key=canonical_url(self_url),
        name=name,
        aliases=[],
        source_work="",
        description=desc,
        visual_desc="",
        cultural_usage=usage,
        language="en",
        tags=["meme template", f"memegen:{tid}", *keywords, *(f"style:{s}" for s in t.get("styles") or [] if isinstance(s, str))],
        title=name,
        page_text=f"{name}\n{desc}\n{usage}".strip(),
        image=blank,
        image_urls=[blank] if blank else [],
        image_kind="template",
        extra_sources=[{"site": _site_of(source), "url": source}] if source else [],
        details={"memegen_id": tid, "lines": lines},
    )


class MemegenSpider(scrapy.Spider):
    """Templates of a memegen API (``-a start_urls=URL`` of its ``/templates/``; ``-a follow_sources=1``)."""

    name = "memegen"
    custom_settings: dict[str, Any] = {}

    def __init__(self, start_urls: Any = None, limit: Any = None, follow_sources: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = as_list(start_urls) or list(DEFAULT_START)
        self.limit = int(limit) if limit not in (None, "", 0, "0") else None
        self.follow_sources = truthy(follow_sources)
        self.confirmed_only = False  # read by the KnowYourMeme entry parser

    async def start(self) -> AsyncIterator[Any]:
        for url in self.start_urls:
            yield scrapy.Request(url, callback=self.parse, dont_filter=True)

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        """The template list: one item per template (+ its KnowYourMeme page when following sources)."""
        stats = self.crawler.stats
        try:
            data = json.loads(response.text)
        except (ValueError, AttributeError) as exc:
            stats.set_value("kar/fatal", f"{response.url} is not the memegen template list (invalid JSON: {exc})")
            return
        if isinstance(data, dict) and isinstance(data.get("templates"), list):
            data = data["templates"]
        if not isinstance(data, list):
            stats.set_value("kar/fatal", f"{response.url} is not the memegen template list (expected a JSON list)")
            return
        named: dict[str, int] = {}  # canonical KnowYourMeme page -> how many templates name it
        for t in data[: self.limit] if self.limit is not None else data:
            source = _kym_url(t.get("source")) if isinstance(t, dict) else None
            if source:
                named[canonical_url(source)] = named.get(canonical_url(source), 0) + 1
        for n, t in enumerate(data):
            if self.limit is not None and n >= self.limit:
                break
            if not isinstance(t, dict):
                stats.inc_value("kar/dropped/template is not an object")
                continue
            item = template_item(t, response.url)
            if isinstance(item, str):
                stats.inc_value(f"kar/dropped/{item}")
                continue
            yield item
            source = _kym_url(t.get("source"))
            if self.follow_sources and source and _site_of(source) == "knowyourmeme":
                shared = named.get(canonical_url(source), 0) > 1
                if shared:
                    stats.inc_value("kar/sources_shared")
                yield scrapy.Request(
                    source,
                    callback=self.parse_source,
                    errback=self.source_failed,
                    priority=5,
                    meta={PAGE_KEY: canonical_url(source), SOURCE_META: None if shared else item["url"]},
                )

    def parse_source(self, response: Response) -> Iterator[Any]:
        """A template's KnowYourMeme page, parsed like the knowyourmeme spider does: the template's own
        entity when only that template names it (``same_as``), else an entity of its own."""
        self.crawler.stats.inc_value("kar/sources_fetched")
        for item in KnowYourMemeSpider.parse_entry(self, response):  # type: ignore[arg-type]
            if response.meta.get(SOURCE_META):
                item["same_as"] = response.meta[SOURCE_META]
            yield item

    def source_failed(self, failure: Any) -> None:
        """A source page that cannot be fetched (404, refused, DNS ...): counted, the job goes on."""
        self.crawler.stats.inc_value("kar/sources_unreachable")
        request = getattr(failure, "request", None)
        self.logger.info("source page unreachable: %s (%s)", getattr(request, "url", "?"), failure.getErrorMessage())
