"""The accept rule: which scored candidates become hits.

A candidate is accepted when its fused score is at least τ and, unless a route that may accept alone
(a media route: its declared ``accepts_alone``) scored it, its weighted evidence-route terms sum to at
least the evidence margin or its best dense cosine stands the height margin above the query's own
background (the cosine of its ``k_background``-th neighbour in the entity's language).  The best of
thousands of unrelated cosines rises with the KB's size; its height over the background does not.  τ and
both margins read the embedder's score scale: they are the calibration record's
(:class:`retrieval.calibration.Thresholds`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from retrieval.grounding.builtin import route_table
from retrieval.grounding.route import RouteTable


def evidence_sum(route_scores: Mapping[str, float], table: RouteTable | None = None) -> float:
    """Σ W[r]·s_r over the evidence routes (what the evidence margin reads)."""
    t = table or route_table()
    return sum(t.weights[r] * route_scores.get(r, 0.0) for r in t.evidence)


def accepted_alone(g: Any, table: RouteTable | None = None) -> bool:
    """Whether a route that may accept alone won or scored the candidate."""
    t = table or route_table()
    return g.route in t.alone or any(r in t.alone for r in g.route_scores)


def accepts(g: Any, tau: float, min_evidence: float, min_height: float, table: RouteTable | None = None) -> bool:
    """The accept rule (module docstring) for one grounded entity (``score``, ``route``, ``route_scores``, ``height``)."""
    if g.score < tau:
        return False
    t = table or route_table()
    if accepted_alone(g, t):
        return True
    return evidence_sum(g.route_scores, t) >= min_evidence or g.height >= min_height
