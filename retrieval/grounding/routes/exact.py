"""The exact route: a name or alias of the entity, given as a guess or written in the OCR text.

====================================================  =========================================
what                                                  score
====================================================  =========================================
an entity guess equals a name/alias (normalised)      1.0
a name/alias quoted in the OCR text                   0.6
a name/alias in the OCR text as whole words (jieba)   0.6 · :func:`distinctiveness`
a guess nearly equals a name/alias (ratio r ≥ 0.85)   0.5 · r
====================================================  =========================================

The OCR text is also read with its look-alike digits as letters (``5tonks`` → ``stonks``:
:func:`retrieval.text.lexical.ocr_letter_readings`).  A name that is an ordinary word counts less
inside a sentence, nothing from Zipf ``PARAMS.zipf_ordinary`` on: there it needs corroboration
(the dense routes, a caption).  The route scores candidates; it brings none.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from functools import lru_cache

from culturebase.entity import Entity, normalize_text
from retrieval.grounding.candidates import CandidatePool, RouteHit, RouteQuery, RouteRun
from retrieval.grounding.params import PARAMS
from retrieval.grounding.registry import register_route
from retrieval.grounding.route import TextEvidenceRoute
from retrieval.text import lexical as lex

NAME = "exact"
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]")

#: normalised name keys, cached: the route keys every alias of every candidate on every query
_name_key = lru_cache(maxsize=65536)(normalize_text)


def distinctiveness(name: str) -> float:
    """1.0 for a name that is no ordinary word, falling linearly to 0.0 between Zipf frequency
    ``PARAMS.zipf_distinct`` and ``PARAMS.zipf_ordinary`` (老板 4.98 → 0, 鲁迅 4.22 → 0, 诸葛亮 3.75 → 0.17,
    doge 2.97 → 0.69, 王司徒 2.24 → 1); 0.0 for a word of the Chinese dictionary however rare
    (东坡肉 2.5, 烧麦 3.12: :func:`~retrieval.text.lexical.is_dictionary_word`)."""
    if lex.is_dictionary_word(name):
        return 0.0
    z = lex.commonness(name)
    hi, lo = PARAMS.zipf_ordinary, PARAMS.zipf_distinct
    return float(min(1.0, max(0.0, (hi - z) / (hi - lo))))


def alias_in_text(alias_key: str, text_key: str) -> bool:
    """A name/alias inside a text as whole words (jieba's word boundaries for CJK)."""
    if not alias_key or not text_key:
        return False
    long_enough = len(alias_key) >= 2 if _CJK.search(alias_key) else len(alias_key) >= 4
    if not long_enough or alias_key not in text_key:
        return False
    if _CJK.search(alias_key):
        return lex.name_in_text(alias_key, text_key)
    return re.search(rf"(?<![\w]){re.escape(alias_key)}(?![\w])", text_key) is not None


def match_entity(
    entity: Entity,
    name_keys: set[str],
    ocr_keys: Sequence[str],
    quoted: set[str] = frozenset(),  # type: ignore[assignment]
) -> tuple[float, str | None]:
    """The route's score for one entity and the name/alias that matched (table above)."""
    best, matched = 0.0, None
    for alias in entity.names:
        key = _name_key(alias)
        if key in name_keys:
            return 1.0, alias
        if key in quoted and best < PARAMS.quoted:
            best, matched = PARAMS.quoted, alias
        elif best < PARAMS.quoted and any(alias_in_text(key, k) for k in ocr_keys):
            value = 0.6 * distinctiveness(alias)
            if value > best:
                best, matched = value, alias
        for guess in name_keys:
            if 2.0 * min(len(guess), len(key)) < 0.85 * (len(guess) + len(key)):
                continue  # SequenceMatcher.real_quick_ratio(), without building the matcher
            sm = difflib.SequenceMatcher(None, guess, key)
            ratio = sm.ratio()
            if ratio >= 0.85 and 0.5 * ratio > best:
                best, matched = 0.5 * ratio, alias
    return best, matched


def score(query: RouteQuery, pool: CandidatePool) -> RouteRun:
    """Each candidate's exact score (entities with none are left out); the reason is the matched name/alias."""
    run = RouteRun()
    cues = query.cues
    name_keys = {normalize_text(c.name[: PARAMS.max_cue_chars]) for c in cues.entities if lex.squash(c.name)}
    run.status[NAME] = "ran" if name_keys or lex.squash(cues.ocr_text) else "skipped: no entity guess or OCR text"
    ocr_key = normalize_text(cues.ocr_text[: lex.MAX_LEXICAL_CHARS])
    ocr_keys = (ocr_key, *lex.ocr_letter_readings(ocr_key))  # 5tonks is also read as stonks
    quoted = {normalize_text(q) for q in lex.quoted_spans(cues.ocr_text[: lex.MAX_LEXICAL_CHARS])}
    for ent in pool.entities.values():
        value, matched = match_entity(ent, name_keys, ocr_keys, quoted)
        if value:
            run.hits.append(RouteHit(NAME, ent, value, reason=matched))
    return run


@register_route()
class ExactRoute(TextEvidenceRoute):
    """A name or alias given as a guess or written in the OCR text; scores every candidate (module docstring)."""

    name = NAME
    reads = ("ocr_text", "entities")
    weight = PARAMS.route_weights[NAME]
    steps = {"score": score}
