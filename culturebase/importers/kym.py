"""KnowYourMeme scrapes: the IMKG dump (``kym.raw.json``) and the 2023-layout Scrapy export.

Both are arrays of page entries (the Scrapy export may hold several arrays one after the
other).  The mapping (docs/import.md):

* ``title`` → name (HTML stripped; an entry without one, or longer than the name limit, is rejected);
* title variants (``og:title``/``twitter:title``, the JSON-LD ``headline`` or ``name`` when they
  differ) → aliases: the site's own names for the page;
* ``search_keywords`` → tags (keywords are shared by many pages: never aliases);
* ``parent`` (the "Part of a series on" page) → source work, named from its URL;
* ``details.origin`` is where the meme started, usually a site (4chan, Tumblr): kept as an
  ``origin:`` tag and at the head of the cultural usage, never as the source work;
  ``details.year`` joins it when it is a plausible year (``""``/``9999`` are left out, noted);
* ``content.about`` → description (else the page's meta description); ``content.origin`` and
  ``content.spread`` (with their nested sub-sections) → cultural usage;
* ``category`` → a tag (and the category filter), ``details.tags`` / ``details.type`` → tags (a type given
  as its link, as IMKG has it, as ``type: <name>``);
* ``url`` → the source (site ``knowyourmeme``; it also gives the entity id, as the crawler's);
* ``template_image_url`` → the entity's image, fetched only when asked (``--fetch-images``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from culturebase.entity import MAX_ALIASES, MAX_NAME_CHARS, MAX_TEXT_CHARS, normalize_text
from culturebase.importers.base import DumpEntry, EntryError, first_bytes, stream_array_items, stream_lines
from culturebase.importers.text import clean_inline, clean_paragraphs, join_capped, string_list

SITE = "knowyourmeme"
_SECTION_KEYS = ("text", "links", "images")
_UNKNOWN = {"", "unknown", "n/a", "none", "-"}


def _http_url(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.strip()
    parts = urlsplit(value)
    return value if parts.scheme in ("http", "https") and parts.netloc else None


def section_paragraphs(section: Any, depth: int = 0) -> list[str]:
    """The paragraphs of a content section, its nested sub-sections (2023 layout) included, each
    sub-section led by its heading."""
    if not isinstance(section, dict) or depth > 4:
        return []
    out = clean_paragraphs(section.get("text"))
    for key, sub in section.items():
        if key in _SECTION_KEYS or not isinstance(sub, dict):
            continue
        inner = section_paragraphs(sub, depth + 1)
        heading = clean_inline(key)
        if inner:
            out.extend([f"{heading[:1].upper()}{heading[1:]}:", *inner] if heading else inner)
    return out


def name_from_url(url: str) -> str:
    """A page's name from its URL slug: ``…/memes/advice-animals`` → ``Advice Animals``."""
    slug = unquote(urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1])
    words = [w for w in re.split(r"[-_]+", slug) if w]
    return " ".join(w[:1].upper() + w[1:] for w in words)


def _year(value: Any) -> tuple[int | None, str | None]:
    if value in (None, "") or (isinstance(value, str) and not value.strip()):
        return None, None
    try:
        year = int(str(value).strip())
    except ValueError:
        return None, f"{value!r} is not a year, left out"
    if not 1700 <= year <= datetime.now(timezone.utc).year + 1:
        return None, f"{year} is not a plausible year, left out"
    return year, None


def _aliases(entry: dict[str, Any], title: str, notes: list[tuple[str, str]]) -> list[str]:
    keys = {normalize_text(title)}
    out: list[str] = []

    def add(value: str, where: str) -> None:
        if not value or normalize_text(value) in keys:
            return
        if len(value) > MAX_NAME_CHARS:
            notes.append((where, f"{len(value)} characters, over the limit of {MAX_NAME_CHARS}: left out"))
            return
        keys.add(normalize_text(value))
        out.append(value)

    meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
    for key in ("og:title", "twitter:title"):
        add(clean_inline(meta.get(key)), f"meta.{key}")
    for block in entry.get("ld") or [] if isinstance(entry.get("ld"), list) else []:
        if isinstance(block, dict) and block.get("@type") == "Article":
            for key in ("headline", "name"):
                add(clean_inline(block.get(key)), f"ld.{key}")
    if len(out) > MAX_ALIASES:
        notes.append(("search_keywords", f"{len(out)} aliases, over the limit of {MAX_ALIASES}: the rest left out"))
        out = out[:MAX_ALIASES]
    return out


def kym_record(entry: Any, fetch_images: bool = False) -> tuple[dict[str, Any], list[tuple[str, str]], str | None]:
    """Our record for one KnowYourMeme entry (either layout), the notes on fields left out, and its category.

    Raises :class:`EntryError` naming the field when the entry cannot be an entity."""
    if not isinstance(entry, dict):
        raise EntryError("entry", f"is a JSON {type(entry).__name__}, expected an object")
    notes: list[tuple[str, str]] = []
    title = clean_inline(entry.get("title"))
    if not title:
        raise EntryError("title", "missing or empty: an entry needs a title")
    if len(title) > MAX_NAME_CHARS:
        raise EntryError("title", f"{len(title)} characters, over the limit of {MAX_NAME_CHARS}")
    category = clean_inline(entry.get("category")) or None
    details = entry.get("details") if isinstance(entry.get("details"), dict) else {}
    content = entry.get("content") if isinstance(entry.get("content"), dict) else {}
    sections = {clean_inline(k).lower(): v for k, v in content.items() if isinstance(k, str)}

    origin = clean_inline(details.get("origin"))
    origin = "" if origin.lower() in _UNKNOWN else origin
    year, why = _year(details.get("year"))
    if why:
        notes.append(("details.year", why))

    about = section_paragraphs(sections.get("about"))
    meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
    if not about:
        about = clean_paragraphs(meta.get("description") or meta.get("og:description"))
    description, cut = join_capped(about, MAX_TEXT_CHARS)
    if cut:
        notes.append(("content.about", f"longer than {MAX_TEXT_CHARS} characters: shortened"))

    usage: list[str] = []
    if origin or year:
        usage.append("Origin: " + ", ".join(x for x in (origin, str(year) if year else "") if x) + ".")
    for key in ("origin", "spread"):
        usage.extend(section_paragraphs(sections.get(key)))
    cultural_usage, cut = join_capped(usage, MAX_TEXT_CHARS)
    if cut:
        notes.append(("content.origin/spread", f"longer than {MAX_TEXT_CHARS} characters: shortened"))

    parent = _http_url(entry.get("parent"))
    source_work = name_from_url(parent) if parent else ""

    tags: list[str] = []
    if category:
        tags.append(category)
    if origin and len(origin) < MAX_NAME_CHARS - 8:
        tags.append(f"origin: {origin}")
    for key in ("type", "tags"):
        for tag in string_list(details.get(key)):
            if _http_url(tag):  # IMKG lists types as links: …/types/viral-video?status=all → "type: Viral Video"
                tag = f"type: {name_from_url(tag)}"
            if len(tag) <= MAX_NAME_CHARS:
                tags.append(tag)
    tags.extend(t for t in string_list(entry.get("search_keywords")) if len(t) <= MAX_NAME_CHARS)
    record: dict[str, Any] = {
        "name": title,
        "aliases": _aliases(entry, title, notes),
        "source_work": source_work,
        "description": description,
        "cultural_usage": cultural_usage,
        "language": "en",
        "tags": tags[:MAX_ALIASES],
    }
    url = _http_url(entry.get("url"))
    if url:
        record["sources"] = [{"site": SITE, "url": url}]
    elif entry.get("url") not in (None, ""):
        notes.append(("url", f"{str(entry.get('url'))[:80]!r} is not an http(s) URL: no source kept"))
    image = _http_url(entry.get("template_image_url"))
    if image:  # fetched only with --fetch-images (the import drops and counts it otherwise)
        record["image"] = image
    return record, notes, category


def _entries(items: Iterator[tuple[int, Any, str | None]], fetch_images: bool, errors_stop: bool) -> Iterator[DumpEntry]:
    for where, item, err in items:
        if err is not None:  # a JSON array stops at its first error; a JSON Lines file goes on after a bad line
            yield DumpEntry(where, error=err, stopped=errors_stop)
            continue
        try:
            record, notes, category = kym_record(item, fetch_images)
        except EntryError as exc:
            category = clean_inline(item.get("category")) or None if isinstance(item, dict) else None
            yield DumpEntry(where, error=str(exc), category=category)
            continue
        yield DumpEntry(where, record, category=category, notes=notes)


def read_kym(path: Path, fetch_images: bool = False) -> Iterator[DumpEntry]:
    """Entries of a KnowYourMeme dump: JSON array(s) (IMKG, Scrapy ``-o x.json``) or JSON Lines (``-o x.jsonl``)."""
    if first_bytes(path, 4096).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{"):
        yield from _entries(stream_lines(path), fetch_images, errors_stop=False)
    else:
        yield from _entries(stream_array_items(path), fetch_images, errors_stop=True)
