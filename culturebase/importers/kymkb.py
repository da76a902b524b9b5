"""KYMKB, the KnowYourMeme knowledge base of "A Template Is All You Meme" (UKPLab).

Its scraping code writes (README of the repository's ``scraping/`` folder):

* ``template_info.json``: JSON Lines, one ``{title: {title, original_info: [...], out_paths: [...]}}``
  a line, where each ``original_info`` item is a ``meme_pictures.json`` record;
* ``meme_pictures.json``: JSON Lines of ``{url, title, about, origin, pic_title, other_meta}``, where
  ``url`` is the page's ``og:image`` (the template image), ``about`` its ``og:description`` and
  ``origin`` its ``og:site_name`` ("Know Your Meme": the site, not where the meme started, so it is
  not used), ``other_meta`` the page's named meta tags.

A KYMKB folder given whole is read from ``template_info.json`` (else ``meme_pictures.json``); a
folder of per-meme ``metadata.json`` files whose keys name KnowYourMeme sections (``title``,
``About``, ``Origin``, ``Spread``, …, any case) is read too.  Mapping: title → name;
``twitter:title`` when it differs → alias; about → description; Origin / Spread sections →
cultural usage; the image URL → the entity's image (with ``--fetch-images``).  The records carry
no page URL, so the entity id comes from the name (entries with the same title are merged).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from culturebase.entity import MAX_NAME_CHARS, MAX_TEXT_CHARS, normalize_text
from culturebase.importers.base import DumpEntry, DumpError, EntryError, stream_lines
from culturebase.importers.kym import section_paragraphs
from culturebase.importers.text import clean_inline, clean_paragraphs, join_capped

TEMPLATE_INFO = "template_info.json"
MEME_PICTURES = "meme_pictures.json"
METADATA = "metadata.json"
_PLACEHOLDERS = {"no description", "no title", "no origin"}


def find_kymkb_file(root: Path) -> Path | None:
    """The file a KYMKB folder is read from: ``template_info.json``, else ``meme_pictures.json`` (searched below ``root``)."""
    for name in (TEMPLATE_INFO, MEME_PICTURES):
        direct = root / name
        if direct.is_file():
            return direct
        for candidate in sorted(root.glob(f"**/{name}")):
            return candidate
    return None


def has_metadata_folders(root: Path) -> bool:
    """Whether ``root`` holds per-meme folders with a ``metadata.json``."""
    return any(True for _ in root.glob(f"*/{METADATA}"))


def _text(value: Any) -> str:
    text = clean_inline(value)
    return "" if text.lower() in _PLACEHOLDERS else text


def _picture_record(title: str, infos: list[Any], fetch_images: bool) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    notes: list[tuple[str, str]] = []
    if not title:
        raise EntryError("title", "missing or empty: an entry needs a title")
    if len(title) > MAX_NAME_CHARS:
        raise EntryError("title", f"{len(title)} characters, over the limit of {MAX_NAME_CHARS}")
    infos = [i for i in infos if isinstance(i, dict)]
    about = next((a for a in (_text(i.get("about")) for i in infos) if a), "")
    if len(about) > MAX_TEXT_CHARS:
        about = about[:MAX_TEXT_CHARS]
        notes.append(("about", f"longer than {MAX_TEXT_CHARS} characters: shortened"))
    aliases: list[str] = []
    for info in infos:
        meta = info.get("other_meta") if isinstance(info.get("other_meta"), dict) else {}
        alt = _text(meta.get("twitter:title"))
        if alt and normalize_text(alt) != normalize_text(title) and len(alt) <= MAX_NAME_CHARS:
            aliases.append(alt)
    record: dict[str, Any] = {"name": title, "aliases": aliases, "description": about, "language": "en", "tags": ["kymkb"]}
    image = next((i["url"] for i in infos if isinstance(i.get("url"), str) and i["url"].startswith(("http://", "https://"))), None)
    if image:  # fetched only with --fetch-images (the import drops and counts it otherwise)
        record["image"] = image
    return record, notes


def _template_info_entry(value: Any, fetch_images: bool) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    if not isinstance(value, dict):
        raise EntryError("line", f"is a JSON {type(value).__name__}, expected an object")
    if "original_info" in value or len(value) != 1:  # a meme_pictures.json record, or an unwrapped template
        info = value
    else:
        (info,) = value.values()
    if not isinstance(info, dict):
        raise EntryError("line", "expected {title: {title, original_info: [...]}}")
    if "original_info" in info:
        infos = info.get("original_info") if isinstance(info.get("original_info"), list) else []
        title = _text(info.get("title")) or next((_text(i.get("title")) for i in infos if isinstance(i, dict)), "")
        return _picture_record(title, infos, fetch_images)
    return _picture_record(_text(info.get("title")), [info], fetch_images)


def read_kymkb_file(path: Path, fetch_images: bool = False) -> Iterator[DumpEntry]:
    """Entries of ``template_info.json`` or ``meme_pictures.json`` (JSON Lines)."""
    for line, value, err in stream_lines(path):
        if err is not None:
            yield DumpEntry(line, error=err)
            continue
        try:
            record, notes = _template_info_entry(value, fetch_images)
        except EntryError as exc:
            yield DumpEntry(line, error=str(exc))
            continue
        yield DumpEntry(line, record, notes=notes)


def metadata_record(data: Any, folder_name: str, fetch_images: bool = False) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Our record for one per-meme ``metadata.json`` (section keys in any case)."""
    if not isinstance(data, dict):
        raise EntryError(METADATA, f"is a JSON {type(data).__name__}, expected an object")
    keys = {k.strip().lower(): v for k, v in data.items() if isinstance(k, str)}
    title = _text(keys.get("title") or keys.get("name")) or clean_inline(folder_name.replace("_", " "))
    if not title:
        raise EntryError("title", "missing or empty: an entry needs a title")
    if len(title) > MAX_NAME_CHARS:
        raise EntryError("title", f"{len(title)} characters, over the limit of {MAX_NAME_CHARS}")

    def paragraphs(key: str) -> list[str]:
        value = keys.get(key)
        return section_paragraphs(value) if isinstance(value, dict) else clean_paragraphs(value)

    notes: list[tuple[str, str]] = []
    description, cut = join_capped(paragraphs("about"), MAX_TEXT_CHARS)
    if cut:
        notes.append(("About", f"longer than {MAX_TEXT_CHARS} characters: shortened"))
    usage, cut = join_capped(paragraphs("origin") + paragraphs("spread"), MAX_TEXT_CHARS)
    if cut:
        notes.append(("Origin/Spread", f"longer than {MAX_TEXT_CHARS} characters: shortened"))
    record: dict[str, Any] = {"name": title, "description": description, "cultural_usage": usage, "language": "en", "tags": ["kymkb"]}
    url = keys.get("url")
    if isinstance(url, str) and url.startswith(("http://", "https://")) and "knowyourmeme.com" in url:
        record["sources"] = [{"site": "knowyourmeme", "url": url}]
    image = keys.get("template_image_url") or keys.get("image")
    if isinstance(image, str) and image.startswith(("http://", "https://")):
        record["image"] = image
    return record, notes


def read_kymkb_folders(root: Path, fetch_images: bool = False) -> Iterator[DumpEntry]:
    """Entries of per-meme folders holding ``metadata.json`` (in name order; ``where`` counts folders)."""
    import json

    for n, meta in enumerate(sorted(root.glob(f"*/{METADATA}")), start=1):
        try:
            data = json.loads(meta.read_text("utf-8"))
            record, notes = metadata_record(data, meta.parent.name, fetch_images)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            yield DumpEntry(n, error=f"{meta.parent.name}/{METADATA}: cannot be read: {exc}")
            continue
        except EntryError as exc:
            yield DumpEntry(n, error=f"{meta.parent.name}/{METADATA}: {exc}")
            continue
        yield DumpEntry(n, record, notes=notes)


def read_kymkb(path: Path, fetch_images: bool = False) -> Iterator[DumpEntry]:
    """A KYMKB folder or one of its JSON Lines files."""
    if path.is_file():
        yield from read_kymkb_file(path, fetch_images)
        return
    found = find_kymkb_file(path)
    if found is not None:
        yield from read_kymkb_file(found, fetch_images)
    elif has_metadata_folders(path):
        yield from read_kymkb_folders(path, fetch_images)
    else:
        raise DumpError(f"{path}: no {TEMPLATE_INFO}, {MEME_PICTURES} or */{METADATA} here: not a KYMKB folder")
