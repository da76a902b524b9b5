"""Text helpers shared by the spiders and the pipeline: wikitext → plain text, alias phrasing, chunking."""

from __future__ import annotations

import html
import re
from collections.abc import Iterable

import mwparserfromhell
from mwparserfromhell.nodes import Comment, ExternalLink, Heading, HTMLEntity, Tag, Template, Text, Wikilink

from culturebase.importers.text import one_line  # one definition, shared with the dump importers

__all__ = ["one_line"]

_WS = re.compile(r"[ \t\u3000\xa0]+")
_NL = re.compile(r"\s*\n\s*")

# Display templates: template name (case-folded) -> index of the positional parameter shown as text.
DISPLAY_TEMPLATES = {
    "黑幕": 1, "heimu": 1, "胡话": 1, "ruby": 1, "rubyh": 1, "lang": 2, "lj": 1, "jpn": 1, "ja": 1,
    "lang-ja": 1, "lang-en": 1, "en": 1, "color": 2, "colour": 2, "font": 1, "文字模糊": 1, "blur": 1,
    "photrans": 1, "photrans2": 1, "coloredlink": 3, "nowrap": 1, "big": 1, "small": 1, "mask": 1,
    "模糊": 1, "ja-kana": 1, "lang-zh": 1, "s": 1, "del": 1, "u": 1, "b": 1, "i": 1,
}
# namespaces whose links are not text
_SKIP_LINK_PREFIXES = ("file:", "image:", "文件:", "图像:", "category:", "分类:", "分類:", "media:", "媒体:")
_DROP_TAGS = {"ref", "references", "gallery", "math", "score", "syntaxhighlight", "source", "templatedata", "timeline"}
_BREAK_TAGS = {"br", "p", "li", "div", "tr", "hr"}


def clean_ws(text: str) -> str:
    """Collapse runs of spaces on each line and blank lines; strip."""
    lines = [_WS.sub(" ", line).strip() for line in text.split("\n")]
    out: list[str] = []
    for line in lines:
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out).strip()


def _template_name(tpl: Template) -> str:
    return one_line(str(tpl.name)).casefold().replace("_", " ")


def _positional(tpl: Template, index: int) -> str | None:
    pos = [p for p in tpl.params if not p.showkey]
    if len(pos) >= index:
        return str(pos[index - 1].value)
    return None


def wikitext_to_text(wikitext: str | object, keep_headings: bool = False) -> str:
    """Plain text of wikitext: display templates (黑幕, ruby, lang, jpn ...) reduced to their text, other
    templates, refs, files, categories and comments dropped; links reduced to their label."""
    code = wikitext if isinstance(wikitext, mwparserfromhell.wikicode.Wikicode) else mwparserfromhell.parse(str(wikitext))
    parts: list[str] = []
    for node in code.nodes:
        if isinstance(node, Text):
            parts.append(str(node.value))
        elif isinstance(node, Wikilink):
            target = one_line(str(node.title))
            if target.casefold().lstrip(":").startswith(_SKIP_LINK_PREFIXES):
                continue
            parts.append(wikitext_to_text(node.text) if node.text is not None else target.split("#")[0])
        elif isinstance(node, Template):
            name = _template_name(node)
            idx = DISPLAY_TEMPLATES.get(name)
            if idx is not None:
                value = _positional(node, idx)
                if value is None and idx > 1:  # e.g. {{lang|text}} with the language omitted
                    value = _positional(node, 1)
                if value is not None:
                    parts.append(wikitext_to_text(value))
        elif isinstance(node, Tag):
            tag = str(node.tag).strip().casefold()
            if tag in _DROP_TAGS:
                continue
            if tag in _BREAK_TAGS and (node.self_closing or node.contents is None or not str(node.contents).strip()):
                parts.append("\n")
                continue
            if node.contents is not None:
                inner = wikitext_to_text(node.contents, keep_headings)
                if tag in {"li", "p", "div", "tr"}:
                    inner = "\n" + inner + "\n"
                parts.append(inner)
        elif isinstance(node, ExternalLink):
            if node.title is not None:
                parts.append(wikitext_to_text(node.title))
        elif isinstance(node, HTMLEntity):
            parts.append(node.normalize())
        elif isinstance(node, Heading):
            if keep_headings:
                parts.append("\n" + one_line(wikitext_to_text(node.title)) + "\n")
        elif isinstance(node, Comment):
            continue
        # Argument and others: dropped
    text = "".join(parts)
    text = re.sub(r"'{2,}", "", text)  # bold / italic markup
    text = re.sub(r"^[*#:;]+\s*", "", text, flags=re.M)  # list markers
    text = re.sub(r"__[A-Z]+__", "", text)  # magic words
    text = re.sub(r"^\{\|.*$|^\|[-}+]?.*$", "", text, flags=re.M) if "{|" in text else text
    return clean_ws(html.unescape(text))


_SPLIT_LIST = re.compile(r"\s*(?:<br\s*/?>|[、，,;；/／\n]|\band\b)\s*", re.I)


_NOTE = re.compile(r"[ \t]*[（(][^（()）\n]{0,40}[）)][ \t]*")


def split_list(value: str) -> list[str]:
    """A parameter value listing several names (``A、B<br>C（注）``) as a list of names, notes in brackets removed."""
    out = []
    for part in _SPLIT_LIST.split(_NOTE.sub(" ", value)):
        part = part.strip(" 　\"'“”「」『』《》()（）[]【】·.。")
        if part and len(part) <= 100:
            out.append(part)
    return list(dict.fromkeys(out))


_AKA = re.compile(
    r"(?:also|otherwise|commonly|sometimes|better|often|alternatively)\s+(?:known|referred to|called)\s+as\s+(.+?)(?:[.;:]\s|[.;:]?$|,\s+(?:is|was|are|were|refers?|which|who|it)\b)",
    re.I,
)
_QUOTED = re.compile(r"[\"“«]([^\"”»]{1,80})[\"”»]")


def aliases_from_aka(text: str) -> list[str]:
    """Names introduced by "also known as" phrasing: quoted names, else the comma/or-separated phrase."""
    out: list[str] = []
    for m in _AKA.finditer(text):
        phrase = m.group(1)
        quoted = _QUOTED.findall(phrase)
        if quoted:
            out.extend(q.strip(" ,.") for q in quoted)
            continue
        for part in re.split(r",\s*|\s+or\s+|\s+and\s+", phrase):
            part = part.strip(" ,.\"'")
            if part and len(part.split()) <= 6:
                out.append(part)
    return [a for a in dict.fromkeys(out) if a]


def title_variants(title: str) -> tuple[str, list[str]]:
    """``"Doge / Shibe (Shiba Inu)"`` → name ``Doge``, aliases ``[Shibe, Shiba Inu]``."""
    title = one_line(title)
    aliases: list[str] = []
    for m in re.finditer(r"\(([^)]{1,80})\)", title):
        aliases.append(m.group(1).strip())
    base = re.sub(r"\s*\([^)]{1,80}\)", "", title).strip()
    pieces = [p.strip() for p in re.split(r"\s+/\s+|\s+\|\s+", base) if p.strip()]
    if not pieces:
        return title, aliases
    return pieces[0], pieces[1:] + aliases


def chunk_text(text: str, max_chars: int = 800, overlap: int = 100) -> list[str]:
    """Split text at paragraph (then sentence) boundaries into chunks of at most ``max_chars``."""
    text = clean_ws(text)
    if not text:
        return []
    pieces: list[str] = []
    for para in text.split("\n"):
        para = para.strip()
        if not para:
            continue
        while len(para) > max_chars:
            cut = max(para.rfind(p, 0, max_chars) for p in (". ", "。", "！", "？", "! ", "? ", "；"))
            cut = cut + 1 if cut > max_chars // 3 else max_chars
            pieces.append(para[:cut].strip())
            para = para[max(cut - overlap, 0) if cut == max_chars else cut :].strip()
        if para:
            pieces.append(para)
    chunks: list[str] = []
    current = ""
    for piece in pieces:
        if current and len(current) + 1 + len(piece) > max_chars:
            chunks.append(current)
            current = piece
        else:
            current = f"{current}\n{piece}" if current else piece
    if current:
        chunks.append(current)
    return chunks


def first_nonempty(values: Iterable[str | None]) -> str:
    for v in values:
        if v and v.strip():
            return v.strip()
    return ""


def truncate(text: str, limit: int) -> str:
    """At most ``limit`` characters, cut at a sentence end when one is near."""
    if len(text) <= limit:
        return text
    cut = max(text.rfind(p, 0, limit) for p in (". ", "。", "\n"))
    return text[: cut + 1 if cut > limit // 2 else limit].rstrip()
