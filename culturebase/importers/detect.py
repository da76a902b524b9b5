"""Which dump a path holds: chosen with ``--format NAME`` or detected from the first entry's keys."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from culturebase.importers.base import DumpEntry, DumpError, first_bytes, first_value
from culturebase.importers.crawl import is_crawl_row, read_crawl
from culturebase.importers.kym import read_kym
from culturebase.importers.kymkb import MEME_PICTURES, METADATA, TEMPLATE_INFO, find_kymkb_file, has_metadata_folders, read_kymkb
from culturebase.importers.moegirl import CHAR2SUBJECT, read_moegirl
from culturebase.importers.ours import read_jsonl, read_release

Reader = Callable[[Path, bool], Iterator[DumpEntry]]

#: format name → (reader, what it is); the order is the order the help and errors list them in
FORMATS: dict[str, tuple[Reader, str]] = {
    "jsonl": (read_jsonl, "our JSONL, one CultureBase record a line (what `kar kb export` writes)"),
    "release": (read_release, "the MemeBench release's kb_entries.json (a JSON list of name/aliases/source/... records)"),
    "kym-imkg": (read_kym, "IMKG's KnowYourMeme scrape (kym.raw.json: a JSON array of title/url/details/content/... entries)"),
    "kym-2023": (read_kym, "a 2023-layout KnowYourMeme Scrapy export (JSON arrays, possibly several one after the other, or JSONL; ld/parent keys)"),
    "kymkb": (read_kymkb, f"KYMKB (A Template Is All You Meme): a folder or its {TEMPLATE_INFO} / {MEME_PICTURES}, or per-meme */{METADATA}"),
    "crawl": (read_crawl, "our spiders' feed export (`scrapy crawl <spider> -o items.jsonl` or `.json`: one crawled page a row, site/url/name/page_key/...)"),
    "moegirl": (read_moegirl, f"Moegirlpedia maps: a folder with {CHAR2SUBJECT} (+ char2cv.json, subject_index.json, extra_info.json)"),
}


def formats_help() -> str:
    """One line per format, for errors and ``--help``."""
    return "; ".join(f"{name}: {what}" for name, (_, what) in FORMATS.items())


def _unknown(path: Path, why: str) -> DumpError:
    return DumpError(f"{path}: {why}; the shapes we read are — {formats_help()} (choose one with --format)")


def _kym_variant(first: dict[str, Any]) -> str:
    if "ld" in first or "parent" in first or isinstance(first.get("added"), str):
        return "kym-2023"
    return "kym-imkg"


def _is_kym(first: dict[str, Any]) -> bool:
    return "title" in first and bool({"details", "content", "search_keywords", "template_image_url", "category"} & set(first))


def _is_kymkb(first: dict[str, Any]) -> bool:
    if len(first) == 1:
        (value,) = first.values()
        return isinstance(value, dict) and "original_info" in value
    return "pic_title" in first and "title" in first


def detect_format(path: Path) -> str:
    """The format of a dump, from its layout and first entry; raises :class:`DumpError` naming the shapes we read."""
    if not path.exists():
        raise DumpError(f"{path}: no such file or folder")
    if path.is_dir():
        if (path / CHAR2SUBJECT).is_file():
            return "moegirl"
        if find_kymkb_file(path) is not None or has_metadata_folders(path):
            return "kymkb"
        raise _unknown(path, "a folder without a dump we know")
    if path.name == CHAR2SUBJECT:
        return "moegirl"
    if path.name in (TEMPLATE_INFO, MEME_PICTURES):
        return "kymkb"
    kind, first = first_value(path)
    if kind in ("array", "lines") and isinstance(first, dict):
        if is_crawl_row(first):
            return "crawl"
        if _is_kymkb(first):
            return "kymkb"
        if _is_kym(first):
            return _kym_variant(first)
        if "name" in first:
            return "release" if kind == "array" and "source" in first and "source_work" not in first else "jsonl"
        keys = ", ".join(sorted(first)[:8])
        raise _unknown(path, f"its first entry has keys {keys} (no name or title)")
    if kind == "array" and first is None:
        return "jsonl"  # an empty list: nothing to import, nothing to reject
    if kind in ("array", "lines"):
        raise _unknown(path, f"its first entry is a JSON {type(first).__name__}, not an object of fields")
    if kind == "object" and first is not None:
        key, value = first
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            raise _unknown(path, f"a JSON object of name → list (like Moegirlpedia's {CHAR2SUBJECT}): give the folder or {CHAR2SUBJECT} itself")
        raise _unknown(path, f"a JSON object (first key {key!r})")
    raise _unknown(path, _not_text(path) or "not JSON, JSON Lines or a dump folder we know")


def _not_text(path: Path) -> str | None:
    """Why the start of a file is not UTF-8 text (the byte), or None."""
    head = first_bytes(path)
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.end < len(head) - 3 or len(head) < 65536:  # not a character cut at the end of the sample
            bom = " (a UTF-16 byte-order mark: save the file as UTF-8)" if head[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
            return f"not UTF-8 text (byte {exc.start}){bom}"
    return None


def open_dump(path: Path, fmt: str | None = None, fetch_images: bool = False) -> tuple[str, Iterator[DumpEntry]]:
    """The format (given or detected) and the stream of entries of a dump."""
    fmt = fmt or detect_format(path)
    if fmt not in FORMATS:
        raise DumpError(f"unknown format {fmt!r}; the formats are — {formats_help()}")
    reader, _ = FORMATS[fmt]
    return fmt, reader(path, fetch_images)
