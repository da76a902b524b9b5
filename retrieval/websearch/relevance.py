"""Whether a search result is about an entity, or relevant to its query on its own.

``mentions``: an entity's name or an alias in a result's title or text as whole words (jieba's
word boundaries for Chinese, as grounding's exact route reads them).  A name that is also an
ordinary word (:func:`retrieval.text.lexical.needs_corroboration`: "Yes", 老板) counts only in the
title: a page that merely uses the word is not about the meme.

``web_above_floor``: web backends (Tavily, SearXNG) rank the whole web and give no score on the
local corpus's scale, so their relevance floor is lexical and does not depend on any corpus's
size: the result must contain every *distinctive* word of the query (a word that is no ordinary
word, Zipf < :data:`~retrieval.text.lexical.COMMON_ZIPF`, outside the query template), and the query
must have at least one.  A caption made of ordinary words has none: its web results pass only
when they are about a grounded entity.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from retrieval.text import lexical as lex

#: the words KAR's query templates add (queries.entity_query): no evidence of relevance
TEMPLATE_WORDS = frozenset({"meme", "origin", "meaning", "梗", "文化背景", "出处", "文化", "背景"})
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]")


def _in_text(key: str, text_key: str) -> bool:
    if not key or key not in text_key:
        return False
    if _CJK.search(key):
        return lex.name_in_text(key, text_key)
    return re.search(rf"(?<![\w]){re.escape(key)}(?![\w])", text_key) is not None


def name_keys(name: str, aliases: Iterable[str] = ()) -> list[str]:
    """Normalised name and aliases long enough to identify anything (≥ 2 CJK or ≥ 3 other characters)."""
    out = []
    for n in (name, *aliases):
        key = re.sub(r"\s+", " ", lex.normalize(n or "")).strip()
        if key and (len(key) >= 2 if _CJK.search(key) else len(key) >= 3) and key not in out:
            out.append(key)
    return out


def mentions(entity: Any, title: str, text: str) -> bool:
    """Whether ``entity`` (``.name``, ``.aliases``) is named in the title, or (when the name is no ordinary
    word) in the text, as whole words."""
    title_key = re.sub(r"\s+", " ", lex.normalize(title or ""))
    text_key = re.sub(r"\s+", " ", lex.normalize(text or ""))
    for key in name_keys(entity.name, getattr(entity, "aliases", ()) or ()):
        if _in_text(key, title_key):
            return True
        if not lex.needs_corroboration(key) and _in_text(key, text_key):
            return True
    return False


def _query_words(query: str) -> list[str]:
    """The query's words that could say something, each once in order: outside KAR's query template, no number,
    at least 3 letters (2 characters in Chinese)."""
    key = lex.normalize(query)
    words: list[str] = []
    for a, b in lex.word_spans(key):
        w = key[a:b]
        if w in TEMPLATE_WORDS or w.isdigit() or w in words or len(w) < (2 if _CJK.search(w) else 3):
            continue
        words.append(w)
    return words


def distinctive_words(query: str) -> list[str]:
    """The query's words that are no ordinary words (outside KAR's query template)."""
    return [w for w in _query_words(query) if not lex.needs_corroboration(w)]


def holds_words(words: Sequence[str], text: str) -> bool:
    """Whether there are ``words`` (a query's :func:`distinctive_words`) and ``text`` (normalised here) holds
    every one of them."""
    if not words:
        return False
    hay = lex.normalize(text)
    return all(w in hay for w in words)


#: a word this common (wordfreq Zipf, its language) is a function word ("the", "with", "that"): no content word
FUNCTION_ZIPF = 6.0


def content_words(query: str) -> list[str]:
    """The query's words that say something, ordinary or not: no function word (Zipf ≥ :data:`FUNCTION_ZIPF`), no
    template word, no number, at least 3 letters (2 characters in Chinese)."""
    return [w for w in _query_words(query) if lex.commonness(w) < FUNCTION_ZIPF]


def holds_many_words(words: Sequence[str], text: str, at_least: int) -> bool:
    """Whether ``text`` (normalised here) holds at least ``at_least`` of ``words`` as whole words (jieba's words
    for Chinese)."""
    if at_least <= 0 or len(words) < at_least:
        return False
    key = lex.normalize(text)
    hay = {key[a:b] for a, b in lex.word_spans(key)}
    return sum(1 for w in words if w in hay) >= at_least


def holds_any_word(words: Sequence[str], text: str) -> bool:
    """Whether ``text`` (normalised here) holds at least one of ``words`` (a query's :func:`distinctive_words`)."""
    if not words:
        return False
    hay = lex.normalize(text)
    return any(w in hay for w in words)


def web_above_floor(query: str, title: str, content: str) -> bool:
    """A web result's floor: the query has distinctive words and the result contains each of them."""
    return holds_words(distinctive_words(query), f"{title}\n{content}")
