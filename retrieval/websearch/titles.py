"""The title and name rules of the hybrid search: whether a page's title covers the query's words
(:func:`title_coverage`) or is one of a grounded entity's names (:func:`title_names`), compared word-aware."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from retrieval.text import lexical as lex
from retrieval.websearch.params import PARAMS
from retrieval.websearch.relevance import TEMPLATE_WORDS


def text_words(text: str) -> tuple[str, ...]:
    """The words of ``text`` as the title and name rules compare them (normalised; jieba's words for Chinese)."""
    key = lex.normalize(text or "")
    return tuple(key[a:b] for a, b in lex.word_spans(key))


@lru_cache(maxsize=65536)
def _title_key(title: str) -> str:
    return "".join(text_words(title))


def title_coverage(title: str, query_words: Sequence[str], min_chars: int = PARAMS.min_title_chars) -> float:
    """The share of the query's words (KAR's template words left out) that a page's title covers when the
    whole title stands in the query as consecutive whole words (compared without spaces and punctuation:
    jieba's word boundaries for Chinese); 0.0 when it does not, or when the title is too short to name
    anything (< ``min_chars`` letters or digits: "57" and "69" are KnowYourMeme pages).
    "Despacito" covers all of "Despacito meme origin meaning", "Despacito 2" none of it; "Virgin vs Chad"
    all of "Virgin vs Chad meme origin meaning", "Chad" a third.  Filler and untitled pages cover nothing."""
    target = _title_key(title)
    if len(target) < min_chars or not query_words or target not in "".join(query_words):
        return 0.0
    for i in range(len(query_words)):
        joined = ""
        for j in range(i, len(query_words)):
            joined += query_words[j]
            if len(joined) >= len(target):
                break
        if joined == target:
            content = [w for w in query_words if w not in TEMPLATE_WORDS]
            covered = sum(1 for w in query_words[i : j + 1] if w not in TEMPLATE_WORDS)
            return covered / len(content) if content else 0.0
    return 0.0


def lead_names(query_words: Sequence[str]) -> list[str]:
    """The names a query of KAR's entity form stands for: ``"{name} {source} {template}"`` (it ends in KAR's
    template words and has words before them), read as every run of its leading words before the template
    (the name is one of them: which one the query does not say), each as a title key; [] for another query."""
    n = len(query_words)
    while n and query_words[n - 1] in TEMPLATE_WORDS:
        n -= 1
    if n == len(query_words) or n == 0:
        return []
    out, joined = [], ""
    for w in query_words[:n]:
        joined += w
        out.append(joined)
    return out


def title_names(title: str, names: Sequence[str], min_chars: int = PARAMS.min_title_chars) -> int:
    """How many characters of a grounded name a page's title is: the length of its title key (words joined
    without spaces and punctuation, as :func:`title_coverage` compares) when it equals one of ``names``' keys
    (title keys, see :func:`name_keys_of`), else 0; titles shorter than ``min_chars`` name nothing."""
    target = _title_key(title)
    return len(target) if len(target) >= min_chars and target in names else 0


def name_keys_of(names: Sequence[str], min_chars: int = PARAMS.min_title_chars) -> frozenset[str]:
    """The title keys of a grounded entity's names and aliases (:func:`title_names` compares titles with them)."""
    return frozenset(k for k in (_title_key(n) for n in names if n) if len(k) >= min_chars)
