"""Fusion, the one place routes are combined: pure functions over scored candidates.

Every route declares a role and a weight (:class:`retrieval.grounding.route.RouteTable`)::

    dense = max over the cosine routes (ocr, visual, name) of their cosine
    score = dense + Σ_r W[r] · s_r        over the evidence routes r (lexical 0.05, caption 0.25,
                                          exact 0.10, sparse 0.10; each s_r in [0, 1])
    winning route = the evidence route with the largest W[r]·s_r when that term is ≥ win_term (0.05),
                    else the cosine route with the highest cosine

then each match route (image, frames, sound) folds its matches in (:func:`fold_matches`)::

    match score  = τ + W[r] · e        e ∈ (0, 1] of an accepted match (image, sound 0.15)
    entity score = max(text score, match score)      the route wins when its score is larger

so an accepted match grounds its entity even with no text cue (always above τ), stronger evidence ranks
higher, and strong text evidence still ranks above a weak match.  The weights are the routes'
declarations (:data:`retrieval.grounding.params.PARAMS` for the built-in ones).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from culturebase.entity import Entity
from retrieval.grounding.builtin import route_table
from retrieval.grounding.candidates import CandidatePool, Match
from retrieval.grounding.entities import GroundedEntity
from retrieval.grounding.params import PARAMS
from retrieval.grounding.route import RouteTable


@dataclass
class FusedScore:
    """A fused score, the route that won, and each route's weighted term."""

    score: float
    route: str
    terms: dict[str, float]


def fuse(route_scores: Mapping[str, float], table: RouteTable | None = None) -> FusedScore:
    """The fusion of one candidate's text route scores (module docstring)."""
    t = table or route_table()
    cosine = {r: s for r, s in route_scores.items() if r in t.cosine}
    best_cosine = max(cosine, key=lambda r: cosine[r]) if cosine else PARAMS.fallback_route
    terms = {best_cosine: cosine.get(best_cosine, 0.0)}
    evidence_keys = t.evidence
    for route in evidence_keys:
        value = route_scores.get(route, 0.0)
        if value:
            terms[route] = t.weights[route] * value
    evidence = {r: v for r, v in terms.items() if r in evidence_keys}
    winner = max(evidence, key=lambda r: evidence[r]) if evidence else best_cosine
    if winner not in evidence or evidence[winner] < PARAMS.win_term:
        winner = best_cosine
    return FusedScore(score=float(sum(terms.values())), route=winner, terms=terms)


def fuse_candidate(pool: CandidatePool, eid: str, table: RouteTable) -> GroundedEntity:
    """One candidate's fused score, winning route and cue, from the routes' records in the pool."""
    scores = dict(pool.scores.get(eid, {}))
    cues = pool.cues.get(eid, {})
    fused = fuse(scores, table)
    cosine = table.cosine
    dense = max((v for r, v in scores.items() if r in cosine), default=0.0)
    best_cosine = max((r for r in scores if r in cosine), key=lambda r: scores[r], default=None)
    cue = cues.get(fused.route) or (cues.get(best_cosine, "") if best_cosine else "")
    return GroundedEntity(
        entity=pool.entities[eid],
        score=fused.score,
        route=fused.route,
        route_scores=scores,
        cue=cue,
        dense=float(dense),
        height=max(pool.heights.get(eid, {}).values(), default=0.0),
        reasons=dict(pool.reasons.get(eid, {})),
    )


def missing_entities(scored: Sequence[GroundedEntity], matches: Sequence[Match]) -> list[str]:
    """Ids of the accepted matches' entities that are not among the scored candidates (to fetch)."""
    known = {g.entity.id for g in scored}
    return [m.entity_id for m in matches if m.evidence is not None and m.entity_id not in known]


def fold_matches(
    scored: list[GroundedEntity], key: str, matches: Sequence[Match], entities: Mapping[str, Entity], tau: float, weight: float
) -> list[GroundedEntity]:
    """Fold one match route's matches into the scored candidates (module docstring); returns the list.

    Every match traces itself on a candidate it concerns (its ``fields``); an accepted one scores
    ``τ + weight · evidence`` under ``key``, and one whose entity is not a candidate adds it (from
    ``entities``, the fetched entities by id; a match whose entity is gone is skipped)."""
    by_id = {g.entity.id: g for g in scored}
    for m in matches:
        g = by_id.get(m.entity_id)
        if g is not None:
            g.media.update(m.fields)
    for m in matches:
        if m.evidence is None:
            continue
        value = tau + weight * m.evidence
        g = by_id.get(m.entity_id)
        if g is None:
            ent = entities.get(m.entity_id)
            if ent is None:  # a medium whose entity was deleted
                continue
            g = GroundedEntity(entity=ent, score=value, route=key, route_scores={}, cue=m.cue, media=dict(m.fields))
            by_id[m.entity_id] = g
            scored.append(g)
        elif value > g.score:
            g.score, g.route, g.cue = value, key, m.cue
        g.route_scores[key] = round(value, 4)
    return scored
