"""The caption route: an OCR line inside one of the entity's catchphrases, or a catchphrase inside a line.

Each OCR line, each pair of adjacent lines and all lines joined (:func:`retrieval.text.lexical.caption_lines`)
is matched against every candidate's catchphrases (its usage's quoted lines, aliases and name:
:func:`retrieval.text.lexical.catchphrases`) by normalised containment
(:func:`retrieval.text.lexical.caption_score`).  A line too short for that (fewer than 4 CJK or 8 Latin
characters) still counts when it is, as a whole, one of the catchphrases (:func:`retrieval.text.lexical.whole_lines`:
``Yes.``, ``真香``, ``STONKS``, an attribution line ``—— 鲁迅``): it scores ``PARAMS.whole_line``.  That is
how memes quote; the same word inside a sentence is no such line.  The route scores candidates; it
brings none.
"""

from __future__ import annotations

from retrieval.grounding.candidates import ENTITIES, CandidatePool, RouteHit, RouteQuery, RouteRun
from retrieval.grounding.params import PARAMS
from retrieval.grounding.registry import register_route
from retrieval.grounding.route import TextEvidenceRoute
from retrieval.text import lexical as lex

NAME = "caption"


def score(query: RouteQuery, pool: CandidatePool) -> RouteRun:
    """Each candidate's best line/catchphrase pair; the hit's cue is the OCR line, its reason the pair
    (``{"line": ..., "catchphrase": ...}``)."""
    run = RouteRun()
    lines = lex.caption_lines(query.cues.ocr_text)
    whole = lex.whole_lines(query.cues.ocr_text)
    if not lines and not whole:
        run.status[NAME] = "skipped: no OCR line long enough (≥ 4 CJK or ≥ 8 Latin characters, or ≥ 2 CJK / 3 Latin as a whole line)"
        return run
    run.status[NAME] = f"ran on {len(set(lines) | whole)} OCR line(s)"
    for ent in pool.entities.values():
        phrases = ENTITIES.derived(ent, "catchphrases", lex.catchphrases)
        match = lex.caption_score(lines, phrases) if lines else None
        if (match is None or match.score < PARAMS.whole_line) and whole:
            match = whole_line_match(whole, phrases) or match
        if match is not None:
            run.hits.append(RouteHit(NAME, ent, match.score, cue=match.line, reason={"line": match.line, "catchphrase": match.phrase}))
    return run


def whole_line_match(whole: set[str], phrases: list[str]) -> lex.CaptionMatch | None:
    """A catchphrase that some OCR line is as a whole (squashed keys equal)."""
    for phrase in phrases:
        key = lex.squash(phrase)
        if key in whole:
            return lex.CaptionMatch(PARAMS.whole_line, key, phrase)
    return None


@register_route()
class CaptionRoute(TextEvidenceRoute):
    """An OCR line inside one of the entity's catchphrases; scores every candidate (module docstring)."""

    name = NAME
    reads = ("ocr_text",)
    weight = PARAMS.route_weights[NAME]
    steps = {"score": score}
