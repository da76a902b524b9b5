"""The grounder: runs every registered route over an image's cues, fuses, keeps what the accept rule accepts.

Routes run phase by phase (:data:`retrieval.grounding.route.PHASES`), in registry order within a phase:
the dense and lexical routes bring candidates (``find``), the dense routes give every candidate its
cosines (``complete``), the sparse route brings more (``extend``), the caption, exact and sparse routes
score every candidate (``score``); each candidate is fused (:func:`retrieval.grounding.fusion.fuse`),
then the media routes' matches are folded in (``match``: :func:`retrieval.grounding.fusion.fold_matches`).
Hits that :func:`~retrieval.grounding.accept.accepts` are kept, best first, at most ``top_k``.  τ and
the margins are the calibration record's of the (embedder, knowledge base) (:mod:`retrieval.calibration`);
``KAR_GROUNDING_TAU`` overrides τ.
"""

from __future__ import annotations

from typing import Any

from culturebase.store import CultureBaseStore
from retrieval.calibration.resolve import Calibration, UncalibratedEmbedderError, resolve_calibration
from retrieval.embedders import Embedder
from retrieval.grounding.accept import accepts
from retrieval.grounding.candidates import CandidatePool, RouteQuery
from retrieval.grounding.crosslingual import CrossLingualPass
from retrieval.grounding.cues import GroundingCues
from retrieval.grounding.entities import GroundedEntity, GroundingResult
from retrieval.grounding.fusion import fold_matches, fuse_candidate, missing_entities
from retrieval.grounding.params import PARAMS
from retrieval.grounding.registry import registered_routes
from retrieval.grounding.route import RouteTable
from retrieval.grounding.routes.dense import dense_queries

#: the phases that build and score the candidate pool (``match`` runs after the text fusion)
POOL_PHASES = ("find", "complete", "extend", "score")


class EntityGrounder:
    """Grounds image cues in CultureBase: runs each registered route (:mod:`retrieval.grounding.registry`),
    fuses (:mod:`retrieval.grounding.fusion`), keeps what :func:`~retrieval.grounding.accept.accepts`.

    The routes are the ones registered when the grounder is built (the built-in ones register when
    :mod:`retrieval.grounding.routes` is imported, as this module does)."""

    def __init__(
        self,
        store: CultureBaseStore,
        embedder: Embedder,
        tau: float | None = None,
        top_k: int = 5,
        candidates: int = 20,
        image_route: Any = None,
        crosslingual: bool = True,
        sound_route: Any = None,
        calibration: Calibration | None = None,
        require_calibration: bool = False,
        defer_refusal: bool = False,
    ) -> None:
        self.image_route = image_route  # retrieval.images.route.ImageRoute (None: no image route)
        self.sound_route = sound_route  # retrieval.sounds.route.SoundStore (None: no sound route)
        # the cross-lingual pass of the visual route (crosslingual.py); False: plain cosines only
        self.crosslingual = CrossLingualPass(embedder, k_background=PARAMS.k_background) if crosslingual else None
        self.store = store
        self.embedder = embedder
        # the thresholds: the KB's calibration record, the bundled one, or conservative values with a warning
        # (require_calibration: refuse instead); tau overrides the record's τ (KAR_GROUNDING_TAU)
        # (defer_refusal: build anyway and refuse at each ground(), as a long-lived service does)
        self.refusal: UncalibratedEmbedderError | None = None
        try:
            self.calibration = calibration or resolve_calibration(store, embedder.name, embedder.dim, require=require_calibration)
        except UncalibratedEmbedderError as exc:
            if not defer_refusal:
                raise
            self.refusal, self.calibration = exc, resolve_calibration(store, embedder.name, embedder.dim)
        self.thresholds = self.calibration.thresholds
        self.tau = self.thresholds.tau if tau is None else tau
        self.top_k = top_k
        self.candidates = candidates
        self.routes = [cls() for cls in registered_routes()]
        self.table = RouteTable.of(self.routes)

    def query(self, cues: GroundingCues, language: str | None) -> RouteQuery:
        """What the routes read of these cues (not yet embedded)."""
        return RouteQuery(
            cues, self.store, dense_queries(cues), None, 0, self.candidates, language,
            image_route=self.image_route, sound_store=self.sound_route, crosslingual=self.crosslingual,
        )

    def ground(self, cues: GroundingCues, language: str | None = None) -> GroundingResult:
        """Score candidate entities for the cues; ``language`` optionally restricts entities to one language.

        Cues with no letters, digits or CJK characters (empty, whitespace, punctuation, control
        characters) are dropped; ``result.routes`` says which routes ran and why others did not.
        """
        if self.refusal is not None:
            raise self.refusal
        query = self.query(cues, language)
        if not any(route.wanted(query) for route in self.routes):
            return self.empty("skipped: no cue with letters, digits or CJK characters")
        query.n_entities = self.store.count()
        if query.n_entities == 0:
            return self.empty("skipped: CultureBase is empty")
        if query.dense:
            query.batch = self.embedder.encode_queries([q.text for q in query.dense])
        pool = CandidatePool()
        routes: dict[str, str] = {}
        for phase in POOL_PHASES:
            for route in self.routes:
                if phase in route.phases:
                    routes.update(pool.apply(route.run(phase, query, pool)).status)
        scored = [fuse_candidate(pool, eid, self.table) for eid in pool]
        scored = self.fold(query, pool, scored, routes)
        scored.sort(key=lambda g: (-g.score, g.entity.name))
        t = self.thresholds
        hits = [g for g in scored if accepts(g, self.tau, t.min_evidence, t.min_height, self.table)][: self.top_k]
        return GroundingResult(hits, scored, self.tau, routes, t)

    def fold(self, query: RouteQuery, pool: CandidatePool, scored: list[GroundedEntity], routes: dict[str, str]) -> list[GroundedEntity]:
        """Run the ``match`` phase: each media route's matches folded into the scored candidates."""
        for route in self.routes:
            if "match" not in route.phases:
                continue
            run = route.run("match", query, pool)
            if run.matches:
                missing = missing_entities(scored, run.matches)
                fetched = {e.id: e for e in self.store.get_many(missing)} if missing else {}
                scored = fold_matches(scored, route.scores[0], run.matches, fetched, self.tau, route.weight)
            routes.update(run.status)
        return scored

    def empty(self, why: str) -> GroundingResult:
        """A result with no candidate, every route skipped for one reason."""
        return GroundingResult([], [], self.tau, {"all": why}, self.thresholds)

    def search_text(self, text: str, language: str | None = None, top_k: int | None = None) -> GroundingResult:
        """Free-text search through the same retriever (the text is every cue route); τ is not applied."""
        return self.ground(GroundingCues.from_text(text), language=language).top(top_k or self.top_k)
