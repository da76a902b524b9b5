"""Moegirlpedia character maps (``Zzzzzzyt/moegirl-dataset``).

A folder with ``char2subject.json`` (page title → ``[region category?, work, …]``), optionally
``char2cv.json`` (title → voice actors), ``subject_index.json`` (the works) and the wikitext
crawl's ``extra_info.json`` (title → raw ``{{人物信息|…}}`` wikitext, read with mwparserfromhell) or ``extra_processed.json``
(title → ``{本名: [...], 别名: [...], 萌点: [...], …}``).  ``char2subject.json`` is streamed; the
side maps are joined by title and held as the few fields we use.

Mapping (docs/import.md): the page title ``米拉(空洞骑士)`` → name ``米拉`` and source work ``空洞骑士``
(``碧蓝航线:瑞凤`` → ``瑞凤`` of ``碧蓝航线`` when the prefix is a work); a region category such as
``日本作品`` is a tag, not a work; the first work is the source work, further works are named in the
description; voice actors are traits (``声优：…`` in the description), not aliases; 本名 and
别名/别号 → aliases; 萌点 → the visual description (``萌点：…``); the page → the source (site
``moegirl``, which also gives the id, as the crawler's).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from culturebase.entity import MAX_ALIASES, MAX_NAME_CHARS, normalize_text
from culturebase.importers.base import DumpEntry, DumpError, EntryError, stream_object_items
from culturebase.importers.text import clean_inline

SITE = "moegirl"
PAGE_URL = "https://zh.moegirl.org.cn/"
CHAR2SUBJECT = "char2subject.json"
CHAR2CV = "char2cv.json"
SUBJECT_INDEX = "subject_index.json"
EXTRA_FILES = ("extra_info.json", "extra_processed.json")
_PAREN = re.compile(r"^(.+?)\s*[(（]([^()（）]+)[)）]$")
_REGION = re.compile(r"^[\u4e00-\u9fff]{1,8}作品$")
_NOT_REGION = re.compile(r"同人|系列|衍生|文创")
_SPLIT = re.compile(r"[、,，;；/]|<br\s*/?>")
_EXTRA_FIELDS = {"本名": "本名", "别名": "别名", "别号": "别名", "萌点": "萌点"}


def is_region(category: str, works: set[str]) -> bool:
    """Whether a ``char2subject`` item is a region category (``日本作品``) rather than a work."""
    return bool(_REGION.match(category)) and category not in works and not _NOT_REGION.search(category)


def split_title(title: str, works: set[str]) -> tuple[str, str]:
    """``(name, qualifier)`` of a page title: ``米拉(空洞骑士)`` → ``("米拉", "空洞骑士")``;
    ``碧蓝航线:瑞凤`` → ``("瑞凤", "碧蓝航线")`` when the prefix is one of ``works``; else ``(title, "")``."""
    m = _PAREN.match(title)
    if m:
        return m.group(1).strip(), m.group(2).strip()
    for sep in (":", "："):
        if sep in title:
            prefix, rest = title.split(sep, 1)
            if prefix.strip() in works and rest.strip():
                return rest.strip(), prefix.strip()
    return title, ""


# -- extra_info.json (raw wikitext, read with mwparserfromhell) -------------------------------------
def _param_text(value: Any) -> str:
    """A template parameter's text: refs dropped, line breaks as separators, other markup stripped
    (a template such as ``{{jpn|…}}`` leaves nothing)."""
    for tag in value.filter_tags(recursive=True):
        name = str(tag.tag).strip().lower()
        if name in ("ref", "br"):
            try:
                value.replace(tag, "、" if name == "br" else "")
            except ValueError:  # already removed with its parent
                pass
    return value.strip_code(normalize=True, collapse=True)


def parse_infobox(wikitext: str) -> dict[str, list[str]]:
    """本名 / 别名 (别号) / 萌点 from a raw ``{{人物信息|…}}`` wikitext (``{{萌点|a|b,c}}`` lists its items;
    a value that is only a template, such as ``{{jpn|…}}``, gives nothing)."""
    import mwparserfromhell

    out: dict[str, list[str]] = {}
    for template in mwparserfromhell.parse(wikitext).filter_templates(recursive=False):
        for param in template.params:
            field = _EXTRA_FIELDS.get(str(param.name).strip())
            if field is None:
                continue
            inner = [t for t in param.value.filter_templates(recursive=False) if str(t.name).strip() == "萌点"]
            if field == "萌点" and inner:
                values = [_param_text(p.value).split(",")[-1] for p in inner[0].params]
            else:
                values = _SPLIT.split(_param_text(param.value))
            kept = [v for v in (clean_inline(x) for x in values) if v]
            if kept:
                out.setdefault(field, []).extend(kept)
    return out


def _extra_fields(value: Any) -> dict[str, list[str]]:
    """The fields we use from one ``extra_info.json`` (raw wikitext list) or ``extra_processed.json`` (dict) value."""
    if isinstance(value, dict):
        out: dict[str, list[str]] = {}
        for key, field in _EXTRA_FIELDS.items():
            v = value.get(key)
            items = [v] if isinstance(v, str) else v if isinstance(v, list) else []
            out.setdefault(field, []).extend(clean_inline(i) for i in items if isinstance(i, str) and clean_inline(i))
        return {k: v for k, v in out.items() if v}
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list):
        merged: dict[str, list[str]] = {}
        for text in value:
            if isinstance(text, str):
                for k, v in parse_infobox(text).items():
                    merged.setdefault(k, []).extend(v)
        return merged
    return {}


def load_extra(folder: Path) -> dict[str, dict[str, list[str]]]:
    """Title → {本名, 别名, 萌点} from ``extra_info.json`` or ``extra_processed.json`` when present (streamed)."""
    for name in EXTRA_FILES:
        path = folder / name
        if path.is_file():
            out: dict[str, dict[str, list[str]]] = {}
            for _, key, value, err in stream_object_items(path):
                if err is not None:
                    raise DumpError(f"{path}: {err}")
                fields = _extra_fields(value)
                if fields:
                    out[key] = fields
            return out
    return {}


def _load_json(path: Path, kind: type) -> Any:
    if not path.is_file():
        return kind()
    try:
        data = json.loads(path.read_text("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DumpError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(data, kind):
        raise DumpError(f"{path}: expected a JSON {'object' if kind is dict else 'array'}")
    return data


def moegirl_record(
    title: Any, subjects: Any, cvs: Any, extra: dict[str, list[str]] | None, works_index: set[str]
) -> tuple[dict[str, Any], list[tuple[str, str]], str | None]:
    """Our record for one character page, the notes on fields left out, and its region category."""
    notes: list[tuple[str, str]] = []
    title = clean_inline(title)
    if not title:
        raise EntryError("title", "empty page title")
    items = [s for s in (clean_inline(x) for x in subjects) if s] if isinstance(subjects, list) else []
    if subjects is not None and not isinstance(subjects, list):
        notes.append(("char2subject", f"expected a list of categories, got {type(subjects).__name__}: left out"))
    regions = [s for s in items if is_region(s, works_index)]
    works = [s for s in items if s not in regions]
    name, qualifier = split_title(title, set(works) | works_index)
    if len(name) > MAX_NAME_CHARS:
        raise EntryError("title", f"{len(name)} characters, over the limit of {MAX_NAME_CHARS}")
    source_work = qualifier if qualifier and (qualifier in works or qualifier in works_index) else (works[0] if works else "")
    aliases: list[str] = []
    if qualifier and qualifier != source_work:  # a disambiguator that is not the work: the full title is how the wiki names it
        aliases.append(title)
    extra = extra or {}
    aliases.extend(extra.get("本名", []) + extra.get("别名", []))
    kept = [a for a in dict.fromkeys(aliases) if len(a) <= MAX_NAME_CHARS and normalize_text(a) != normalize_text(name)]
    if len(kept) > MAX_ALIASES:
        notes.append(("别名", f"{len(kept)} aliases, over the limit of {MAX_ALIASES}: the rest left out"))
    description = []
    actors = [a for a in (clean_inline(x) for x in cvs) if a] if isinstance(cvs, list) else []
    if actors:
        description.append("声优：" + "、".join(dict.fromkeys(actors)))
    others = [w for w in works if w != source_work]
    if others:
        description.append("出自：" + "、".join(others))
    traits = extra.get("萌点", [])
    record: dict[str, Any] = {
        "name": name,
        "aliases": kept[:MAX_ALIASES],
        "source_work": source_work,
        "description": "；".join(description),
        "visual_desc": ("萌点：" + "、".join(dict.fromkeys(traits))) if traits else "",
        "language": "zh",
        "tags": ["moegirl", *regions],
        "sources": [{"site": SITE, "url": PAGE_URL + quote(title, safe="")}],
    }
    return record, notes, (regions[0] if regions else None)


def read_moegirl(path: Path, fetch_images: bool = False) -> Iterator[DumpEntry]:
    """Entries of a Moegirlpedia map folder (or its ``char2subject.json``); ``where`` is the character's index."""
    folder = path.parent if path.is_file() else path
    char2subject = folder / CHAR2SUBJECT
    if not char2subject.is_file():
        raise DumpError(f"{folder}: no {CHAR2SUBJECT}: not a Moegirlpedia map folder")
    works_index = {w for w in _load_json(folder / SUBJECT_INDEX, list) if isinstance(w, str)}
    cv = _load_json(folder / CHAR2CV, dict)
    extra = load_extra(folder)
    for where, title, subjects, err in stream_object_items(char2subject):
        if err is not None:
            yield DumpEntry(where, error=f"{CHAR2SUBJECT}: {err}", stopped=True)
            return
        try:
            record, notes, region = moegirl_record(title, subjects, cv.get(title), extra.get(title), works_index)
        except EntryError as exc:
            yield DumpEntry(where, error=str(exc))
            continue
        yield DumpEntry(where, record, category=region, notes=notes)
