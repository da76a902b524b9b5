"""What grounding returns: each scored entity with its route scores in one mapping, and the result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from culturebase.entity import Entity
from retrieval.calibration.record import CONSERVATIVE, Thresholds
from retrieval.grounding.accept import accepts


@dataclass
class GroundedEntity:
    """One grounded entity with how it was found.

    ``route_scores`` holds every route's score (route-score key → score: ``ocr``, ``visual``, ``name``,
    ``lexical``, ``caption``, ``exact``, ``sparse``, ``image``, ``sound`` and any registered route's);
    ``reasons`` each route's reason (``exact``: the matched name/alias; ``caption``: the matched line and
    catchphrase); ``media`` the trace fields media matches set (``image``, ``image_distance``, ``sound``)."""

    entity: Entity
    score: float
    route: str
    route_scores: dict[str, float]
    cue: str
    dense: float = 0.0  # the best cosine among the cosine (dense) routes
    height: float = 0.0  # best dense cosine minus the query's background in the entity's language
    reasons: dict[str, Any] = field(default_factory=dict)
    media: dict[str, Any] = field(default_factory=dict)

    # read-only views of single routes (the trace's keys)
    @property
    def lexical(self) -> float:
        return self.route_scores.get("lexical", 0.0)

    @property
    def sparse(self) -> float:
        return self.route_scores.get("sparse", 0.0)

    @property
    def caption(self) -> float:
        return self.route_scores.get("caption", 0.0)

    @property
    def exact(self) -> float:
        return self.route_scores.get("exact", 0.0)

    @property
    def matched_alias(self) -> str | None:
        return self.reasons.get("exact")

    @property
    def matched_caption(self) -> dict[str, str] | None:
        return self.reasons.get("caption")

    @property
    def image_distance(self) -> int | None:
        """The image route: summed dHash+pHash Hamming distance of the nearest image."""
        return self.media.get("image_distance")

    @property
    def image(self) -> dict[str, Any] | None:
        """The image route: the matched entity image (sha256, path, url, kind ...)."""
        return self.media.get("image")

    @property
    def sound(self) -> dict[str, Any] | None:
        """The sound route: the matched entity sound and its landmark count."""
        return self.media.get("sound")

    def to_dict(self) -> dict[str, Any]:
        """The trace's (and ``kar kb search --json``'s) form of the hit."""
        e = self.entity
        known = ("image_distance", "image", "sound")
        return {
            "id": e.id,
            "name": e.name,
            "aliases": e.aliases,
            "source_work": e.source_work,
            "language": e.language,
            "score": round(self.score, 4),
            "route": self.route,
            "dense": round(self.dense, 4),
            "lexical": round(self.lexical, 4),
            "caption": round(self.caption, 4),
            "exact": round(self.exact, 4),
            "height": round(self.height, 4),
            "sparse": round(self.sparse, 4),
            "matched_alias": self.matched_alias,
            "matched_caption": self.matched_caption,
            "route_scores": {k: round(v, 4) for k, v in self.route_scores.items()},
            "cue": self.cue,
            "image_distance": self.image_distance,
            "image": self.image,
            "sound": self.sound,
            **{k: v for k, v in self.media.items() if k not in known},
            "description": e.description,
            "visual_desc": e.visual_desc,
            "cultural_usage": e.cultural_usage,
            "sources": [s.model_dump(mode="json") for s in e.sources],
        }


@dataclass
class GroundingResult:
    """Hits that passed τ (best first, ≤ top_k), every scored candidate, and which routes ran."""

    hits: list[GroundedEntity]
    candidates: list[GroundedEntity]
    tau: float
    routes: dict[str, str] = field(default_factory=dict)
    thresholds: Thresholds | None = None  # the rule's margins (None: the grounder's calibration was not recorded)

    def accepts(self, g: GroundedEntity) -> bool:
        """:func:`retrieval.grounding.accept.accepts` with this result's τ and margins."""
        t = self.thresholds or CONSERVATIVE
        return accepts(g, self.tau, t.min_evidence, t.min_height)

    def top(self, k: int) -> "GroundingResult":
        """The same result with its first ``k`` candidates as hits (τ not applied: what a search shows)."""
        return GroundingResult(self.candidates[:k], self.candidates, self.tau, self.routes, self.thresholds)

    def to_dict(self, candidates: int = 10) -> dict[str, Any]:
        """The trace's form: τ, which routes ran, the hits and the first ``candidates`` candidates."""
        return {
            "tau": self.tau,
            "routes": dict(self.routes),
            "hits": [h.to_dict() for h in self.hits],
            "candidates": [
                {
                    "name": c.entity.name,
                    "id": c.entity.id,
                    "score": round(c.score, 4),
                    "route": c.route,
                    "route_scores": {k: round(v, 4) for k, v in c.route_scores.items()},
                }
                for c in self.candidates[:candidates]
            ],
        }


def route_summary(h: dict[str, Any]) -> str:
    """``caption 1.00 · ocr 0.86 · lexical 0.41`` (a hit's dict): the winning route first, then every route's score."""
    scores = h.get("route_scores") or {}
    order = [h["route"], *sorted((r for r in scores if r != h["route"]), key=lambda r: -scores[r])]
    return " · ".join(f"{r} {scores[r]:.2f}" if r in scores else r for r in order)
