"""Main text of a page from a site with no dedicated spider: the article, its title and its date.

:func:`extract_page` runs trafilatura on the HTML (settings: :class:`MainTextParams`):
menus, cookie banners, sidebars, footers and "related posts" lists are left out, the title comes from the
page's metadata (``og:title``, ``<title>``, ``<h1>``), the date from its markup (``article:published_time``,
JSON-LD ``datePublished``, ``<time datetime>``, a date in the URL) as an ISO date.  Where it finds no main
text (a tiny page, a listing, a page that is all navigation), the page's visible text is taken instead
(:func:`visible_text`: the ``main`` / ``article`` / ``body`` text, as every page was read before) and the
result says so (``method == "visible"``), so that an import can count it.

The KnowYourMeme and Moegirl spiders read their pages with their own selectors, not through here; a
KnowYourMeme entry in a page dump is read by its sections (:func:`crawlers.page_dump.html_page`).
Nothing here touches the network: trafilatura gets the HTML, never a URL to fetch.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from crawlers.text import clean_ws

Method = Literal["main", "visible"]


@dataclass(frozen=True)
class MainTextParams:
    """How main text is extracted; each value with the measurement that set it.

    ``favor_precision`` on and ``fast`` on (trafilatura's own algorithm, without its readability / jusText
    fallbacks): ``python bench/evidence.py --shell`` prints, under ``extraction``, the article kept and the
    shell kept by each of the four settings, on the bench's pages and on the 14 short pages of
    ``tests/fakes/pages.py``, each inside the bench's page shell.  On the bench's long pages all four keep
    the whole article and none of the shell; on the short pages the fallbacks took a cookie banner for the
    article (article kept 0.71) and the balanced mode kept the menu; precision + fast kept every article whole.
    ``min_chars``: main text shorter than this is no main text (trafilatura's own ``MIN_OUTPUT_SIZE``):
    a menu word or two is not an article (with its fallbacks, trafilatura returned "Home" for a listing
    page; its own algorithm returns nothing there); 20 characters is shorter than one short sentence, so a
    page with one sentence of prose keeps it (chosen, not tuned: the tests' pages are 41 characters and up).
    ``extensive_date_search`` off: a date only from the page's markup, never guessed from a copyright
    line or a number in the text (htmldate's extensive search read "(c) 2020" as 2020-01-01).
    """

    favor_precision: bool = True
    fast: bool = True
    min_chars: int = 20
    extensive_date_search: bool = False


DEFAULT_PARAMS = MainTextParams()


@dataclass(frozen=True)
class PageText:
    """A page's title, text and date (``YYYY-MM-DD`` or None), and how the text was found."""

    title: str
    text: str
    date: str | None
    method: Method


@lru_cache(maxsize=4)
def _config(min_chars: int, extensive_dates: bool) -> Any:
    from trafilatura.settings import use_config

    config = use_config()
    config.set("DEFAULT", "MIN_OUTPUT_SIZE", str(min_chars))
    config.set("DEFAULT", "EXTENSIVE_DATE_SEARCH", "on" if extensive_dates else "off")
    return config


def main_text(html: str | bytes, url: str = "", params: MainTextParams = DEFAULT_PARAMS) -> tuple[str, str, str | None]:
    """``(title, text, date)`` of the page's main text by trafilatura; text "" where it finds none."""
    import trafilatura

    if not html.strip():
        return "", "", None
    doc = trafilatura.bare_extraction(
        html,
        url=url or None,
        favor_precision=params.favor_precision,
        fast=params.fast,
        include_comments=False,
        include_tables=True,
        with_metadata=True,
        date_extraction_params={"extensive_search": params.extensive_date_search, "original_date": True},
        config=_config(params.min_chars, params.extensive_date_search),
    )
    if doc is None:
        return "", "", None
    text = clean_ws(doc.text or "")
    if len(text) < params.min_chars:
        text = ""
    return clean_ws(doc.title or ""), text, (doc.date or None)


def _response(html: str | bytes, url: str, content_type: str) -> Any:
    """A Scrapy response of the page (text given as ``str`` is read as such, whatever the header says)."""
    from scrapy.http import HtmlResponse

    url = url or "http://localhost/"
    if isinstance(html, str):
        return HtmlResponse(url=url, body=html.encode("utf-8"), encoding="utf-8")
    return HtmlResponse(url=url, body=html, headers={"Content-Type": content_type or "text/html"})


def visible_text(html: str | bytes, url: str = "", content_type: str = "") -> tuple[str, str]:
    """``(title, text)``: the ``og:title`` or ``<title>``, and every visible string of the page's ``main``
    (else ``article``, else ``body``), scripts and styles dropped: how a page with no main text is read."""
    response = _response(html, url, content_type)
    return page_title(response), root_text(response)


def page_title(response: Any) -> str:
    """The ``og:title`` of a Scrapy response, else its ``<title>``."""
    title = response.css('meta[property="og:title"]::attr(content)').get() or response.css("title::text").get() or ""
    return clean_ws(title)


def root_text(response: Any) -> str:
    """Every visible string of a Scrapy response's ``main`` (else ``article``, else ``body``)."""
    from crawlers.spiders.knowyourmeme import node_text

    root = response.css("main") or response.css("article") or response.css("body")
    return node_text(root[0]) if root else ""


def extract_page(html: str | bytes, url: str = "", content_type: str = "", params: MainTextParams = DEFAULT_PARAMS) -> PageText:
    """The page's main text (trafilatura; a first line that only repeats the title left out), else its visible
    text (``method == "visible"``); the title from the extractor, else the page's ``og:title`` / ``<title>``;
    the date where the markup gives one."""
    title, text, date = main_text(html, url, params)
    if text:
        title = title or page_title(_response(html, url, content_type))
        first, _, rest = text.partition("\n")
        if rest and first.casefold().split() == title.casefold().split():
            text = rest  # the title is stored on each chunk apart (and indexed with it), as crawled pages are
        return PageText(title, text, date, "main")
    v_title, v_text = visible_text(html, url, content_type)
    return PageText(v_title or title, v_text, date, "visible")
