"""Cleaning the text of scraped dumps: HTML tags and entities, citation marks, empty strings."""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from typing import Any

_TAG = re.compile(r"<[^>]{0,2000}>")
_CITE = re.compile(r"\[\d{1,3}\]")
_WS = re.compile(r"\s+")


def one_line(text: str) -> str:
    """All whitespace (newlines too) collapsed to single spaces."""
    return _WS.sub(" ", text).strip()


def clean_inline(value: Any) -> str:
    """One line of text: HTML tags and entities resolved, citation marks (``[3]``) dropped, spaces collapsed;
    anything but a string is ``""``."""
    if not isinstance(value, str):
        return ""
    text = html.unescape(_TAG.sub(" ", value)) if ("<" in value or "&" in value) else value
    return _WS.sub(" ", _CITE.sub("", text)).strip()


def clean_paragraphs(values: Any) -> list[str]:
    """The non-empty cleaned strings of a text array (a lone string counts as one paragraph)."""
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, list):
        return []
    return [t for t in (clean_inline(v) for v in values) if t]


def join_capped(paragraphs: Iterable[str], limit: int) -> tuple[str, bool]:
    """Paragraphs joined by blank lines up to ``limit`` characters (cut at a paragraph, or inside the first);
    returns the text and whether anything was cut."""
    out: list[str] = []
    size = 0
    for p in paragraphs:
        extra = len(p) + (2 if out else 0)
        if size + extra > limit:
            if not out:
                return p[:limit].rstrip(), True
            return "\n\n".join(out), True
        out.append(p)
        size += extra
    return "\n\n".join(out), False


def string_list(value: Any) -> list[str]:
    """Cleaned non-empty strings of a list (a lone string is a list of one)."""
    return clean_paragraphs(value)
