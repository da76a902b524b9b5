"""The one shape of a grounding route: cues in, scored candidates with their reasons out.

A route declares

- ``name``: its key in the registry (:mod:`retrieval.grounding.registry`);
- ``scores``: the route-score keys its hits carry (the dense route carries three: ``ocr``, ``visual``, ``name``);
  these are the keys of :attr:`GroundedEntity.route_scores <retrieval.grounding.entities.GroundedEntity.route_scores>`;
- ``reads``: the :class:`~retrieval.grounding.cues.GroundingCues` fields it reads;
- ``role`` and ``weight``: how fusion (:mod:`retrieval.grounding.fusion`) combines its score:
  ``"cosine"`` (the best cosine among the cosine routes counts), ``"evidence"`` (``weight · score`` is
  added) or ``"match"`` (an accepted media match scores ``τ + weight · evidence``);
- ``accepts_alone``: whether its evidence alone may accept an entity (:mod:`retrieval.grounding.accept`);
- ``phases``: the grounding phases it runs in (:data:`PHASES`, run in that order, routes in registry order).

and implements ``wanted(query)`` (whether it would run on these cues with this grounder) and
``run(phase, query, pool)`` returning a :class:`~retrieval.grounding.candidates.RouteRun`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from retrieval.grounding.candidates import CandidatePool, RouteQuery, RouteRun

#: the grounding phases, in the order they run: ``find`` brings candidates, ``complete`` scores every
#: candidate found so far, ``extend`` brings more candidates (not completed), ``score`` scores every
#: candidate, ``match`` matches media outside the pool (folded in after the text fusion)
PHASES = ("find", "complete", "extend", "score", "match")
#: how fusion reads a route's score
ROLES = ("cosine", "evidence", "match")


@runtime_checkable
class Route(Protocol):
    """A grounding route (module docstring)."""

    name: str
    scores: tuple[str, ...]
    reads: tuple[str, ...]
    role: str
    weight: float
    accepts_alone: bool
    phases: tuple[str, ...]

    def wanted(self, query: RouteQuery) -> bool:
        """Whether the route runs on this query's cues with this grounder's indexes."""
        ...

    def run(self, phase: str, query: RouteQuery, pool: CandidatePool) -> RouteRun:
        """The route's work in one of its phases."""
        ...


class TextEvidenceRoute:
    """What the text evidence routes (lexical, caption, exact, sparse) declare alike: one route-score key,
    their name; their weighted score is added in fusion; their evidence alone never accepts; they run when
    any cue has letters, digits or CJK characters. A subclass sets ``name``, ``reads``, ``weight`` and
    ``steps`` (each of its phases, in :data:`PHASES` order, to the function of ``(query, pool)`` it runs)."""

    name: str = ""
    reads: tuple[str, ...] = ()
    weight: float = 0.0
    role = "evidence"
    accepts_alone = False
    steps: Mapping[str, Callable[[RouteQuery, CandidatePool], RouteRun]] = {}
    scores: tuple[str, ...] = ()
    phases: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.scores = (cls.name,)
        cls.phases = tuple(cls.steps)

    def wanted(self, query: RouteQuery) -> bool:
        """Whether any cue has letters, digits or CJK characters."""
        return bool(query.dense)

    def run(self, phase: str, query: RouteQuery, pool: CandidatePool) -> RouteRun:
        """The step of ``phase``."""
        return self.steps[phase](query, pool)


@dataclass(frozen=True)
class RouteTable:
    """What fusion and the accept rule read of the routes: each route-score key's role and weight (in
    registry order), and the keys whose evidence alone may accept an entity."""

    roles: Mapping[str, str]
    weights: Mapping[str, float]
    alone: frozenset[str]
    #: the cosine routes' keys and the evidence routes' keys (registry order), read once per candidate
    cosine: frozenset[str] = frozenset()
    evidence: tuple[str, ...] = ()

    @classmethod
    def of(cls, routes: Iterable[Any]) -> "RouteTable":
        """The table of ``routes`` (classes or instances); a key declared twice keeps its first route's values."""
        roles: dict[str, str] = {}
        weights: dict[str, float] = {}
        alone: set[str] = set()
        for route in routes:
            for key in route.scores:
                if key in roles:
                    continue
                roles[key], weights[key] = route.role, float(route.weight)
                if route.accepts_alone:
                    alone.add(key)
        cosine = frozenset(k for k, r in roles.items() if r == "cosine")
        evidence = tuple(k for k, r in roles.items() if r == "evidence")
        return cls(roles, weights, frozenset(alone), cosine, evidence)

    def keys(self, role: str) -> tuple[str, ...]:
        """The route-score keys of one role, in registry order."""
        return tuple(k for k, r in self.roles.items() if r == role)
