"""The caption route: an OCR line inside one of the entity's catchphrases, or a catchphrase inside a line.

Each OCR line, each pair of adjacent lines and all lines joined (:func:`retrieval.lexical.caption_lines`)
is matched against every candidate's catchphrases (its usage's quoted lines, aliases and name:
:func:`retrieval.lexical.catchphrases`) by normalised containment
(:func:`retrieval.lexical.caption_score`).  The route scores candidates; it brings none.
"""

from __future__ import annotations

from retrieval import lexical as lex
from retrieval.routes.base import CandidatePool, RouteHit, RouteQuery, RouteRun

NAME = "caption"


def score(query: RouteQuery, pool: CandidatePool) -> RouteRun:
    """Each candidate's best line/catchphrase pair; the hit's cue is the OCR line, its reason the pair."""
    run = RouteRun()
    lines = lex.caption_lines(query.cues.ocr_text)
    if not lines:
        run.status[NAME] = "skipped: no OCR line long enough (≥ 4 CJK or ≥ 8 Latin characters)"
        return run
    run.status[NAME] = f"ran on {len(lines)} OCR line(s)"
    for ent in pool.entities.values():
        match = lex.caption_score(lines, lex.catchphrases(ent))
        if match is not None:
            run.hits.append(RouteHit(NAME, ent, match.score, cue=match.line, reason=match))
    return run
