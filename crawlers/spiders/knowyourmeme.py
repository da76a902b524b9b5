"""KnowYourMeme: entry pages, listing pages (``rel=next``) and search pages into page items.

Start points (``-a start_urls=URL[,URL]`` or ``kar crawl knowyourmeme --start-url URL``):
an entry (``/memes/doge``), a listing (``/memes``, ``/memes/confirmed``, ``/memes/page/2``,
``/categories/...``) or a search (``/search?q=doge``).  ``-a confirmed_only=1`` keeps
entries whose status is Confirmed; ``-a limit=N`` stops after N entries.  An entry's ``og:image``
and the sound files of its body (:func:`page_sounds`) go to the media pipelines.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import scrapy
from scrapy.http import Response

from culturebase.entity import canonical_url
from crawlers.items import PageItem
from crawlers.middlewares import PAGE_KEY
from crawlers.sounds import MAX_PAGE_SOUNDS, is_audio_link
from crawlers.spiders.args import as_list, truthy
from crawlers.text import aliases_from_aka, clean_ws, one_line, title_variants, truncate

SITE = "knowyourmeme"
DEFAULT_START = ("https://knowyourmeme.com/memes/confirmed",)
STOP_SECTIONS = ("search interest", "external references", "recent videos", "recent images")
_ENTRY_PATH = re.compile(r"^/memes/(?:(?:subcultures|people|events|sites|cultures)/)?([a-z0-9][a-z0-9\-_%.']*)/?$", re.I)
_NOT_ENTRIES = {"page", "all", "confirmed", "submissions", "researching", "deadpool", "popular", "trending", "new", "random", "search", "submit"}
_TRACKING = re.compile(r"^(utm_\w+|ref|fbclid|gclid|spm)$", re.I)
_BLOCK_TAGS = {"p", "ul", "ol", "blockquote", "h3", "h4", "table", "dl", "center", "div", "pre"}


def is_entry_path(path: str) -> bool:
    m = _ENTRY_PATH.match(path)
    return bool(m) and m.group(1).lower() not in _NOT_ENTRIES


def clean_link(url: str) -> str:
    """A link without tracking parameters or fragment (so the same entry is requested once)."""
    parts = urlsplit(url)
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if not _TRACKING.match(k)])
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))


def node_text(sel: Any) -> str:
    """Visible text of a node: scripts/styles dropped, list items and breaks on their own lines."""
    parts = sel.xpath(
        ".//text()[not(ancestor::script) and not(ancestor::style) and not(ancestor::noscript)]"
        " | .//br | .//li"
    )
    out: list[str] = []
    for p in parts:
        root = p.root
        if isinstance(root, str):
            out.append(root)
        else:  # <br> or <li>: a line break
            out.append("\n")
    return clean_ws("".join(out))


def parse_sections(response: Response) -> list[tuple[str, str]]:
    """``section.bodycopy`` split at each ``h2`` (until "Search Interest"): [(heading, text)]."""
    body = response.css("section.bodycopy")
    if not body:
        return []
    sections: list[tuple[str, list[str]]] = []
    heading = ""
    current: list[str] = []
    for child in body[0].xpath("./*"):
        tag = child.root.tag if hasattr(child.root, "tag") else ""
        if tag == "h2":
            if heading or current:
                sections.append((heading, current))
            heading = one_line(node_text(child))
            current = []
            if heading.casefold() in STOP_SECTIONS:
                heading = "__stop__"
                break
            continue
        if tag in ("script", "style", "iframe", "img", "figure", "noscript"):
            continue
        if tag in _BLOCK_TAGS or tag in ("span", "a", "em", "strong", "b", "i"):
            text = node_text(child)
            if text:
                current.append(text)
    if heading != "__stop__" and (heading or current):
        sections.append((heading, current))
    return [(h, clean_ws("\n".join(c))) for h, c in sections if h != "__stop__"]


def parse_details(response: Response) -> dict[str, str]:
    """The details list(s): ``dt`` Status / Type / Year / Origin / Region → ``dd`` text."""
    details: dict[str, str] = {}
    for dl in response.css("dl"):
        if dl.attrib.get("id") == "entry_tags":
            continue
        for dt in dl.xpath("./dt"):
            key = one_line(node_text(dt)).rstrip(":").strip()
            dd = dt.xpath("following-sibling::dd[1]")
            if key and dd and key not in details:
                value = one_line(", ".join(t for t in (one_line(x) for x in dd.xpath(".//a//text()").getall()) if t)) or one_line(node_text(dd[0]))
                details[key] = value
    return details


def page_sounds(response: Response) -> list[str]:
    """Sound files of the entry body: ``<audio src>``, its ``<source src>``, and links to an audio file."""
    body = response.css("article.entry section.bodycopy, section.bodycopy") or response.css("article.entry")
    if not body:
        return []
    found = body[0].css("audio::attr(src), audio source::attr(src)").getall()
    found += [h for h in body[0].css("a::attr(href)").getall() if is_audio_link(response.urljoin(h))]
    urls = [response.urljoin(u.strip()) for u in found if u and u.strip() and not u.strip().startswith("data:")]
    return [u for u in dict.fromkeys(urls) if u.startswith(("http://", "https://"))][:MAX_PAGE_SOUNDS]


class KnowYourMemeSpider(scrapy.Spider):
    """Entries, listings and searches of knowyourmeme.com."""

    name = "knowyourmeme"
    custom_settings: dict[str, Any] = {}

    def __init__(
        self,
        start_urls: Any = None,
        limit: Any = None,
        confirmed_only: Any = None,
        max_listing_pages: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.start_urls = as_list(start_urls) or list(DEFAULT_START)
        self.limit = int(limit) if limit not in (None, "", 0, "0") else None
        self.confirmed_only = truthy(confirmed_only)
        self.max_listing_pages = int(max_listing_pages) if max_listing_pages else None
        self.entries_scheduled = 0
        self.listing_pages = 0
        self._scheduled: set[str] = set()

    async def start(self) -> AsyncIterator[Any]:
        for url in self.start_urls:
            path = urlsplit(url).path
            if is_entry_path(path):
                req = self.entry_request(url)
                if req is not None:
                    yield req
            else:
                yield scrapy.Request(url, callback=self.parse, dont_filter=True)

    # -- requests ---------------------------------------------------------------------------
    def limit_reached(self) -> bool:
        return self.limit is not None and self.entries_scheduled >= self.limit

    def entry_request(self, url: str) -> scrapy.Request | None:
        url = clean_link(url)
        key = canonical_url(url)
        if key in self._scheduled or self.limit_reached():
            return None
        self._scheduled.add(key)
        self.entries_scheduled += 1
        return scrapy.Request(url, callback=self.parse_entry, priority=10, meta={PAGE_KEY: key})

    # -- callbacks --------------------------------------------------------------------------
    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        """A start page: an entry when it has a body copy, else a listing/search page."""
        if response.css("section.bodycopy") and is_entry_path(urlsplit(response.url).path):
            yield from self.parse_entry(response)
        else:
            yield from self.parse_listing(response)

    def parse_listing(self, response: Response) -> Iterator[Any]:
        """Entry links of a listing or search page, then the ``rel=next`` page."""
        self.listing_pages += 1
        scope = response.css("table.entry_list, #entries, .entry-grid, #search-results, section.results, main, #content")
        scope = scope[:1] or [response]
        for href in scope[0].css("a::attr(href)").getall():
            url = response.urljoin(href)
            if urlsplit(url).netloc != urlsplit(response.url).netloc or not is_entry_path(urlsplit(url).path):
                continue
            req = self.entry_request(url)
            if req is not None:
                yield req
            if self.limit_reached():
                return
        if self.max_listing_pages and self.listing_pages >= self.max_listing_pages:
            return
        nxt = response.css('a[rel~="next"]::attr(href), link[rel~="next"]::attr(href)').get()
        if nxt:
            yield scrapy.Request(response.urljoin(nxt), callback=self.parse_listing, priority=0)

    def parse_entry(self, response: Response) -> Iterator[PageItem]:
        """One entry page as a page item (the pipeline validates it)."""
        title = one_line(" ".join(response.css("article.entry h1 *::text, article.entry h1::text").getall())) or one_line(
            " ".join(response.css("h1 *::text, h1::text").getall()[:3])
        )
        details = parse_details(response)
        status = details.get("Status", "")
        if self.confirmed_only and status.casefold() != "confirmed":
            self.crawler.stats.inc_value("kar/skipped_filtered")
            return
        name, aliases = title_variants(title) if title else ("", [])
        og_title = one_line(response.css('meta[property="og:title"]::attr(content)').get() or "")
        if og_title:
            og_name, og_aliases = title_variants(og_title)
            aliases += [og_name, *og_aliases]
        sections = parse_sections(response)
        by_heading = {h.casefold(): t for h, t in sections}
        about = by_heading.get("about") or (sections[0][1] if sections else "")
        aliases += aliases_from_aka(about)
        spread = "\n".join(t for h, t in sections if h.casefold() in ("spread", "various examples", "notable examples", "usage", "impact"))
        origin = by_heading.get("origin", "")
        series = ""
        header = response.css("article.entry > header, #entry-series, .series-banner") or response.css("body")
        # the first link *after* the words "Part of a series on" (a category badge may precede them in the same
        # element, and an XPath union returns nodes in document order)
        for link in header.xpath('.//text()[contains(., "Part of a series on")]/following::a[1]'):
            series = one_line(" ".join(link.xpath(".//text()").getall()))
            if series:
                break
        canonical = response.css('link[rel="canonical"]::attr(href)').get()
        url = response.url
        if canonical:
            absolute = response.urljoin(canonical)
            if urlsplit(absolute).netloc == urlsplit(response.url).netloc:  # a page may not claim another site's URL
                url = absolute
        tags = [one_line(t) for t in response.css("dl#entry_tags dd a::text").getall() if one_line(t)]
        if not tags:
            raw = one_line(node_text(response.css("dl#entry_tags dd")[0])) if response.css("dl#entry_tags dd") else ""
            tags = [t.strip() for t in raw.split(",") if t.strip()]
        for key in ("Type", "Origin", "Year", "Region"):
            for value in (details.get(key) or "").split(","):
                if value.strip():
                    tags.append(f"{key.lower()}:{value.strip()}")
        page_text = "\n".join([name] + [f"{h}\n{t}" if h else t for h, t in sections])
        image = response.css('meta[property="og:image"]::attr(content)').get()
        image = response.urljoin(image) if image else None
        audio_urls = page_sounds(response)
        yield PageItem(
            site=SITE,
            url=url,
            page_key=response.meta.get(PAGE_KEY) or canonical_url(response.url),
            name=name,
            aliases=[a for a in aliases if a],
            source_work=series,
            description=truncate(about, 4000),
            visual_desc="",
            cultural_usage=truncate(spread or origin, 6000),
            language="en",
            tags=tags,
            title=title,
            page_text=page_text,
            image=image,
            image_urls=[image] if image else [],
            audio_urls=audio_urls,
            status=status,
            details=details,
            etag=(response.headers.get(b"ETag") or b"").decode("latin-1") or None,
            last_modified=(response.headers.get(b"Last-Modified") or b"").decode("latin-1") or None,
        )
