"""What our spiders write with ``scrapy crawl <spider> -o items.jsonl`` (or ``-o items.json``): one
:class:`crawlers.items.PageItem` row a line (or a JSON array), mapped to entities by
:func:`item_to_entity` — the one mapping the crawl pipeline uses too (``crawlers.pipelines``
imports it from here), so a crawl's output re-imported into another KB gives the entities the
crawl itself stored.

A row the spider marked with ``drop_reason``, one without a name, or one with too little text
(description, visual description and cultural usage together under :data:`MIN_CONTENT_CHARS`
characters) is rejected with that reason, as the crawl drops it.  The row's template image
(``image``, else the first of ``image_urls``) and its sound files (``audio_urls``) are fetched only
with ``--fetch-images``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from culturebase.entity import Entity, Source, canonical_url
from culturebase.importers.base import DumpEntry, EntryError, first_bytes, stream_array_items, stream_lines
from culturebase.importers.report import format_validation_error
from culturebase.importers.text import one_line

#: a page with less text than this (description + visual description + cultural usage) is no entity
MIN_CONTENT_CHARS = 20
#: PageItem keys that only a crawl row has (format detection)
#: (``id_url`` is what older crawls wrote for a memegen template's KnowYourMeme page: read, not used for identity)
CRAWL_KEYS = frozenset({"page_key", "page_text", "drop_reason", "revid", "etag", "image_urls", "id_url", "same_as"})
_TEXT_FIELDS = ("name", "source_work", "description", "visual_desc", "cultural_usage", "language", "site", "url", "id_url", "same_as")
_LIST_FIELDS = ("aliases", "tags")


def item_to_entity(item: Mapping[str, Any], retrieved_at: float | None = None) -> Entity:
    """A page item as a CultureBase entity (raises ValueError / ValidationError when it cannot be one)."""
    name = one_line(item.get("name") or "")
    if not name:
        raise ValueError("missing name")
    url = item.get("url") or ""
    content = " ".join(item.get(k) or "" for k in ("description", "visual_desc", "cultural_usage"))
    if len(content.strip()) < MIN_CONTENT_CHARS:
        raise ValueError("no content")
    aliases = [one_line(a) for a in item.get("aliases") or [] if a and one_line(a)]
    tags = [one_line(t) for t in item.get("tags") or [] if t and one_line(t)]
    when = datetime.fromtimestamp(retrieved_at or time.time(), timezone.utc)
    extra = [
        Source(site=s["site"], url=s["url"], retrieved_at=when)
        for s in item.get("extra_sources") or []
        if s.get("url") and canonical_url(s["url"]) != canonical_url(url or "x:")
    ]
    return Entity(
        name=name,
        aliases=[a for a in aliases if len(a) <= 200][:200],
        source_work=item.get("source_work") or "",
        description=(item.get("description") or "")[:20_000],
        visual_desc=(item.get("visual_desc") or "")[:20_000],
        cultural_usage=(item.get("cultural_usage") or "")[:20_000],
        language=item.get("language") or "und",
        sources=[Source(site=item.get("site") or "web", url=url, retrieved_at=when), *extra],
        tags=[t for t in tags if len(t) <= 200][:200],
    )


def is_crawl_row(row: Mapping[str, Any]) -> bool:
    """Whether a dump's first row is a PageItem (what ``scrapy crawl -o`` writes)."""
    return "site" in row and "url" in row and ("name" in row or "drop_reason" in row) and bool(CRAWL_KEYS & set(row))


def _check_shape(row: Mapping[str, Any]) -> None:
    for key in _TEXT_FIELDS:
        value = row.get(key)
        if value is not None and not isinstance(value, str):
            raise EntryError(key, f"expected a string, got {type(value).__name__}")
    for key in _LIST_FIELDS:
        value = row.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise EntryError(key, f"expected a list of strings, got {type(value).__name__}")
    extra = row.get("extra_sources")
    if extra is not None and not (isinstance(extra, list) and all(isinstance(s, dict) and isinstance(s.get("site"), str) for s in extra)):
        raise EntryError("extra_sources", "expected a list of {site, url} objects")


def _crawled_at(row: Mapping[str, Any], default: float) -> float:
    """When the page was fetched: the ``retrieved_at`` of the entity the crawl pipeline attached, else ``default``."""
    entity = row.get("entity")
    try:
        stamp = entity["sources"][0]["retrieved_at"]  # type: ignore[index]
        return datetime.fromisoformat(str(stamp)).timestamp()
    except (TypeError, KeyError, IndexError, ValueError):
        return default


def _image(row: Mapping[str, Any]) -> str | None:
    image = row.get("image")
    if isinstance(image, str) and image.strip():
        return image.strip()
    urls = row.get("image_urls")
    if isinstance(urls, list) and urls and isinstance(urls[0], str):
        return urls[0]
    return None


def crawl_entry(where: int, row: Any, default_time: float) -> DumpEntry:
    """One crawl row as a dump entry: the record ``item_to_entity`` makes of it, or why it is none."""
    if not isinstance(row, dict):
        return DumpEntry(where, error=f"row {where} is {type(row).__name__}, expected a JSON object (a crawled page)")
    if row.get("drop_reason"):
        return DumpEntry(where, error=f"field 'drop_reason': the spider dropped this page: {row['drop_reason']}", category=row.get("site"))
    try:
        _check_shape(row)
        entity = item_to_entity(row, retrieved_at=_crawled_at(row, default_time))
    except EntryError as exc:
        return DumpEntry(where, error=str(exc), category=row.get("site") if isinstance(row.get("site"), str) else None)
    except ValidationError as exc:
        return DumpEntry(where, error=format_validation_error(exc), category=row.get("site"))
    except ValueError as exc:
        field = "name" if str(exc) == "missing name" else "description"
        why = (
            "missing or empty" if field == "name"
            else f"no content: description, visual_desc and cultural_usage together under {MIN_CONTENT_CHARS} characters"
        )
        return DumpEntry(where, error=f"field {field!r}: {why}", category=row.get("site"))
    record = entity.model_dump(mode="json")
    image = _image(row)
    if image:
        record["image"] = image
    audio = [u for u in row.get("audio_urls") or [] if isinstance(u, str) and u.startswith(("http://", "https://"))]
    if audio:  # the page's sound files: fetched with --fetch-images like its image (retrieval/sounds/importing.py)
        record["audio"] = audio
    same_as = row.get("same_as")
    return DumpEntry(where, record, category=entity.sources[0].site, same_as=same_as if isinstance(same_as, str) and same_as else None)


def read_crawl(path: Path, fetch_images: bool = False) -> Iterator[DumpEntry]:
    """Rows of a crawl's feed export: JSON Lines (line numbers) or JSON arrays (1-based indexes)."""
    default_time = path.stat().st_mtime
    if first_bytes(path, 4096).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"["):
        for where, row, err in stream_array_items(path):
            if err is not None:
                yield DumpEntry(where, error=err, stopped=True)
                return
            yield crawl_entry(where, row, default_time)
        return
    for where, row, err in stream_lines(path):
        yield DumpEntry(where, error=err) if err is not None else crawl_entry(where, row, default_time)
