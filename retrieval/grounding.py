"""Entity grounding: match an image's cues against CultureBase by several routes, then fuse.

Each route is a small unit of its own (cues in, scored candidates with their reasons out:
:mod:`retrieval.routes`); this module holds only what is common: the candidate pool, the one
fusion rule and the one accept rule.

==========  ==========================================  =============================================
route       cue                                         what it scores (module)
==========  ==========================================  =============================================
``ocr``     OCR text (captions, catchphrases)           dense cosine on ``usage`` (name | aliases | usage)
``visual``  the VLM's visual handle                     dense cosine on ``visual`` (visual | description)
``name``    each entity guess (+ source work)           dense cosine on ``identity`` (name | aliases | source)
                                                        (:mod:`retrieval.routes.dense`)
``lexical`` every cue text                              BM25 on the ``lexical`` sparse vector (name, aliases,
                                                        source work, usage, description; embedder-independent,
                                                        :mod:`retrieval.text.lexical`), as min(1, BM25 / (|q|·idf₁))
                                                        (:mod:`retrieval.routes.lexical`)
``caption`` each OCR line (and adjacent lines joined)   normalised containment of the line in one of the
                                                        entity's catchphrases or of a catchphrase in the line
                                                        (:mod:`retrieval.routes.caption`)
``exact``   entity guesses and the OCR text             1.0 guess = name/alias (normalised); 0.6 name/alias
                                                        quoted in the OCR text; 0.6·distinctiveness a name/alias
                                                        in the OCR text as whole words (jieba); 0.5·r near match
                                                        (:mod:`retrieval.routes.exact`)
``sparse``  name guesses and OCR text (bge-m3 only)     share of the query's bge-m3 lexical mass covered
                                                        (:mod:`retrieval.routes.sparse`)
``image``   the image                                   perceptual hashes, then geometric verification
                                                        (:mod:`retrieval.routes.image` → :mod:`retrieval.images.route`)
==========  ==========================================  =============================================

Candidates are the union of what the dense, lexical and sparse routes find (in that order); an
entity found only by one route still gets every dense query's cosine (:meth:`DenseRoutes.complete
<retrieval.routes.dense.DenseRoutes.complete>`), and the caption and exact routes score every
candidate.  Each dense query is searched once per entity language; its K_BACKGROUND-th
neighbour's cosine there is the query's *background* in that language, and an entity's *height*
is its cosine minus that background (the accept rule reads it).  Searching each language apart
keeps the other language's entities among the candidates however many entities one language has.

Fusion (:func:`fuse`, the one place routes are combined)::

    dense = max over the dense routes (ocr, visual, name) of their cosine
    score = dense + Σ_r W[r] · s_r     for the evidence routes r in ROUTE_WEIGHTS
            (lexical 0.05, caption 0.25, exact 0.10, sparse 0.10; each s_r in [0, 1])
    winning route = the evidence route with the largest W[r]·s_r when that term is ≥ 0.05,
                    else the dense route with the highest cosine

The image route's matches are folded in by :func:`fuse_image_matches` (an accepted match scores
above τ).  Hits that :func:`accepts` (``score ≥ τ``, and a hit whose evidence routes sum below the
evidence margin must stand the height margin above its background) are kept, best first, at most ``top_k``
(docs/grounding.md: why this does not drift with the KB's size).  τ and both margins read the embedder's
score scale, so they are data: the calibration record of the (embedder, knowledge base), fitted by
``kar calibrate`` (:mod:`retrieval.calibration`, docs/calibration.md); ``KAR_GROUNDING_TAU`` overrides τ.  A new route is a new module under :mod:`retrieval.routes`
whose hits are recorded in the pool, with its weight in :data:`ROUTE_WEIGHTS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from culturebase.store import CultureBaseStore
from culturebase.entity import Entity
from retrieval.calibration.record import CONSERVATIVE, Thresholds
from retrieval.calibration.resolve import Calibration, UncalibratedEmbedderError, resolve_calibration  # noqa: F401  (re-exported)
from retrieval.crosslingual import CrossLingualPass
from retrieval.embedders import Embedder
from retrieval.routes import caption as caption_route, exact as exact_route, image as image_route_unit, sound as sound_route_unit
from retrieval.routes import lexical as lexical_route, sparse as sparse_route
from retrieval.routes.base import CandidatePool, RouteQuery
from retrieval.routes.dense import (  # noqa: F401  (re-exported: the dense routes' names)
    BACKGROUND_LANGUAGES,
    CONFIDENCE_FACTOR,
    DENSE_ROUTES,
    K_BACKGROUND,
    MAX_CUE_CHARS,
    ROUTE_VECTOR,
    DenseRoutes,
    dense_queries,
)
from retrieval.routes.exact import ZIPF_DISTINCT, ZIPF_ORDINARY, distinctiveness  # noqa: F401  (re-exported)
from retrieval.routes.lexical import LEXICAL_POOL  # noqa: F401  (re-exported)

if TYPE_CHECKING:
    from retrieval.images.route import ImageMatch

Route = Literal["ocr", "visual", "name"]
#: weights of the evidence routes in the fused score (each route's score is in [0, 1])
ROUTE_WEIGHTS: dict[str, float] = {"lexical": 0.05, "caption": 0.25, "exact": 0.10, "sparse": 0.10}
W_LEXICAL = ROUTE_WEIGHTS["lexical"]
W_SPARSE = ROUTE_WEIGHTS["sparse"]
#: an evidence route "wins" when its weighted term is at least this large
WIN_TERM = 0.05
# τ, the evidence margin and the height margin are the calibration record's (retrieval.calibration): no
# embedder-specific number lives here


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
    #: the image itself: the grounder's image route hashes and matches it (undecodable bytes: the route is skipped)
    image_bytes: bytes | None = None
    image: Any = None  # retrieval.images.route.QueryImage: an image already prepared by the route (wins over image_bytes)
    #: a clip's sampled frames (JPEG bytes): the image route reads each, an entity's best frame counts once (wins over image_bytes)
    frames: list[bytes] = field(default_factory=list)
    #: a sound clip (audio or video file bytes): the grounder's sound route fingerprints and matches it
    audio_bytes: bytes | None = None
    sound: Any = None  # retrieval.sounds.route.SoundQuery: a clip already decoded (wins over audio_bytes)

    @classmethod
    def from_text(cls, text: str) -> "GroundingCues":
        """A free-text search: the text serves as every cue route (what `kar kb search` runs)."""
        return cls(ocr_text=text, visual_handle=text, entities=[EntityCue(name=text, confidence="high")])

    def is_empty(self) -> bool:
        return not (
            self.ocr_text.strip() or self.visual_handle.strip() or any(e.name.strip() for e in self.entities) or self.image is not None
            or bool(self.image_bytes) or bool(self.frames) or self.sound is not None or bool(self.audio_bytes)
        )


@dataclass
class Fusion:
    """A fused score, the route that won, and each route's weighted term."""

    score: float
    route: str
    terms: dict[str, float]


def fuse(route_scores: dict[str, float]) -> Fusion:
    """The one fusion rule (module docstring): best dense cosine + weighted evidence routes."""
    dense = {r: s for r, s in route_scores.items() if r in DENSE_ROUTES}
    best_dense = max(dense, key=lambda r: dense[r]) if dense else "name"
    terms = {best_dense: dense.get(best_dense, 0.0)}
    for route, weight in ROUTE_WEIGHTS.items():
        value = route_scores.get(route, 0.0)
        if value:
            terms[route] = weight * value
    evidence = {r: t for r, t in terms.items() if r in ROUTE_WEIGHTS}
    winner = max(evidence, key=lambda r: evidence[r]) if evidence else best_dense
    if winner not in evidence or evidence[winner] < WIN_TERM:
        winner = best_dense
    return Fusion(score=float(sum(terms.values())), route=winner, terms=terms)


def evidence_sum(route_scores: dict[str, float]) -> float:
    """Σ W[r]·s_r over the evidence routes (what the evidence margin reads)."""
    return sum(w * route_scores.get(r, 0.0) for r, w in ROUTE_WEIGHTS.items())


def accepts(g: "GroundedEntity", tau: float, min_evidence: float, min_height: float) -> bool:
    """The accept rule: fused score ≥ τ, and a hit without evidence (weighted evidence-route terms summing
    below ``min_evidence``, no image match) must also stand ``min_height`` above the query's own background
    (the cosine of its K_BACKGROUND-th neighbour in the entity's language).  The best of thousands of
    unrelated cosines rises with the KB's size; its height over the background does not.  The three numbers
    are the calibration record's (:class:`retrieval.calibration.Thresholds`)."""
    if g.score < tau:
        return False
    if g.route in ("image", "sound") or "image" in g.route_scores or "sound" in g.route_scores:
        return True
    return evidence_sum(g.route_scores) >= min_evidence or g.height >= min_height


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
    caption: float = 0.0
    exact: float = 0.0
    matched_caption: dict[str, str] | None = None
    height: float = 0.0  # best dense cosine minus the query's background in the entity's language
    sound: dict[str, Any] | None = None  # sound route: the matched entity sound and its landmark count

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
        """:func:`accepts` with this result's τ and margins."""
        t = self.thresholds or CONSERVATIVE
        return accepts(g, self.tau, t.min_evidence, t.min_height)

    def to_dict(self, candidates: int = 10) -> dict[str, Any]:
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


# -- image route fusion ------------------------------------------------------------------------
#: weight of the image evidence above τ (the image route's accept rule: retrieval/images/route.py)
W_IMAGE = 0.15


def fuse_image_matches(
    scored: list["GroundedEntity"], matches: "Sequence[ImageMatch]", store: CultureBaseStore, tau: float, tau_image: int
) -> list["GroundedEntity"]:
    """Fold the image route's matches into the text-scored candidates; returns the new list.

    ::

        image evidence  e ∈ (0, 1]   for an accepted match (:meth:`ImageMatch.signal`: verified
                                     geometrically, hash-only for a template with no keypoints, learned)
        image score       = τ + W_IMAGE · e                      (always above the text τ)
        entity score      = max(text score, image score)          route "image" when the image score wins

    so an accepted image match grounds the entity even with no text cue, stronger image
    evidence ranks higher, and strong text evidence still ranks above a weak image match.
    """
    by_id = {g.entity.id: g for g in scored}
    accepted = [m for m in matches if m.signal(tau_image) is not None]
    missing = [m.entity_id for m in accepted if m.entity_id not in by_id]
    fetched = {e.id: e for e in store.get_many(missing)} if missing else {}
    for m in matches:
        g = by_id.get(m.entity_id)
        if g is not None:
            g.image_distance = m.distance
            g.image = m.trace(tau_image)
    for m in accepted:
        image_score = tau + W_IMAGE * m.evidence(tau_image)
        g = by_id.get(m.entity_id)
        if g is None:
            ent = fetched.get(m.entity_id)
            if ent is None:  # an image point whose entity was deleted
                continue
            g = GroundedEntity(
                entity=ent, score=image_score, route="image", dense=0.0, lexical=0.0, sparse=0.0, matched_alias=None,
                route_scores={}, cue=m.cue(tau_image),
            )
            g.image_distance, g.image = m.distance, m.trace(tau_image)
            by_id[m.entity_id] = g
            scored.append(g)
        elif image_score > g.score:
            g.score, g.route, g.cue = image_score, "image", m.cue(tau_image)
        g.route_scores["image"] = round(image_score, 4)
    return scored


#: weight of the sound evidence above τ (the sound route's accept rule: retrieval/sounds/route.py)
W_SOUND = 0.15


def fuse_sound_matches(scored: list["GroundedEntity"], hits: Sequence[Any], store: CultureBaseStore, tau: float) -> list["GroundedEntity"]:
    """Fold the sound route's hits into the candidates as :func:`fuse_image_matches` does for images::

        sound score  = τ + W_SOUND · e      e ∈ (0, 1] of an accepted match (SoundHit.evidence)
        entity score = max(text score, sound score)      route "sound" when the sound score wins

    Unaccepted hits are only traced (``GroundedEntity.sound``); they claim nothing."""
    by_id = {g.entity.id: g for g in scored}
    accepted = [h for h in hits if h.accepted()]
    missing = [h.entity_id for h in accepted if h.entity_id not in by_id]
    fetched = {e.id: e for e in store.get_many(missing)} if missing else {}
    for h in hits:
        if h.entity_id in by_id:
            by_id[h.entity_id].sound = h.trace()
    for h in accepted:
        value = tau + W_SOUND * h.evidence()
        g = by_id.get(h.entity_id)
        if g is None:
            ent = fetched.get(h.entity_id)
            if ent is None:  # a sound whose entity was deleted
                continue
            g = GroundedEntity(
                entity=ent, score=value, route="sound", dense=0.0, lexical=0.0, sparse=0.0, matched_alias=None,
                route_scores={}, cue=h.cue(),
            )
            g.sound = h.trace()
            by_id[h.entity_id] = g
            scored.append(g)
        elif value > g.score:
            g.score, g.route, g.cue = value, "sound", h.cue()
        g.route_scores["sound"] = round(value, 4)
    return scored


class EntityGrounder:
    """Grounds image cues in CultureBase: runs each route (:mod:`retrieval.routes`), fuses by :func:`fuse`,
    keeps what :func:`accepts`."""

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
        # the cross-lingual pass of the visual route (retrieval/crosslingual.py); False: plain cosines only
        self.crosslingual = CrossLingualPass(embedder, k_background=K_BACKGROUND) if crosslingual else None
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
        self.dense = DenseRoutes(store, self.crosslingual)

    def ground(self, cues: GroundingCues, language: str | None = None) -> GroundingResult:
        """Score candidate entities for the cues; ``language`` optionally restricts entities to one language.

        Cues with no letters, digits or CJK characters (empty, whitespace, punctuation, control
        characters) are dropped; ``result.routes`` says which routes ran and why others did not.
        """
        if self.refusal is not None:
            raise self.refusal
        queries = dense_queries(cues)
        image_on = self.image_route is not None and image_route_unit.wanted(cues)
        sound_on = self.sound_route is not None and sound_route_unit.wanted(cues)
        routes: dict[str, str] = {}
        if not queries and not image_on and not sound_on:
            routes["all"] = "skipped: no cue with letters, digits or CJK characters"
            return GroundingResult([], [], self.tau, routes, self.thresholds)
        n_entities = self.store.count()
        if n_entities == 0:
            routes["all"] = "skipped: CultureBase is empty"
            return GroundingResult([], [], self.tau, routes, self.thresholds)
        batch = self.embedder.encode_queries([q.text for q in queries]) if queries else None
        query = RouteQuery(cues, self.store, queries, batch, n_entities, self.candidates, language)
        pool = CandidatePool()
        # candidates: the dense and lexical routes' finds, every dense cosine for each, then the sparse route's
        self.dense.crosslingual = self.crosslingual
        dense_run, backgrounds = self.dense.find(query, pool)
        routes.update(pool.apply(dense_run).status)
        routes.update(pool.apply(lexical_route.find(query, pool)).status)
        pool.apply(self.dense.complete(query, pool, backgrounds))
        routes.update(pool.apply(sparse_route.find(query, pool)).status)
        # the routes that score every candidate
        exact = pool.apply(exact_route.score(query, pool))
        caption = pool.apply(caption_route.score(query, pool))
        pool.apply(sparse_route.score(query, pool))
        routes.update(caption.status)
        routes.update(exact.status)
        scored = [self._grounded(pool, eid) for eid in pool]
        image = image_route_unit.run(self.image_route, cues, language)
        if image.matches:
            scored = fuse_image_matches(scored, image.matches, self.store, self.tau, self.image_route.tau)
        routes.update(image.status)
        sound = sound_route_unit.run(self.sound_route, cues)
        if sound.hits:
            scored = fuse_sound_matches(scored, sound.hits, self.store, self.tau)
        routes.update(sound.status)
        scored.sort(key=lambda g: (-g.score, g.entity.name))
        t = self.thresholds
        hits = [g for g in scored if accepts(g, self.tau, t.min_evidence, t.min_height)][: self.top_k]
        return GroundingResult(hits, scored, self.tau, routes, t)

    @staticmethod
    def _grounded(pool: CandidatePool, eid: str) -> GroundedEntity:
        """One candidate's fused score, winning route and cue, from the routes' records in the pool."""
        scores = dict(pool.scores.get(eid, {}))
        cues = pool.cues.get(eid, {})
        reasons = pool.reasons.get(eid, {})
        fused = fuse(scores)
        dense = max((v for r, v in scores.items() if r in DENSE_ROUTES), default=0.0)
        best_dense = max((r for r in scores if r in DENSE_ROUTES), key=lambda r: scores[r], default=None)
        cue = cues.get(fused.route) or (cues.get(best_dense, "") if best_dense else "")
        caption = reasons.get(caption_route.NAME)
        return GroundedEntity(
            entity=pool.entities[eid],
            score=fused.score,
            route=fused.route,
            dense=float(dense),
            lexical=scores.get("lexical", 0.0),
            sparse=scores.get("sparse", 0.0),
            matched_alias=reasons.get(exact_route.NAME),
            route_scores=scores,
            cue=cue,
            caption=scores.get("caption", 0.0),
            exact=scores.get("exact", 0.0),
            matched_caption={"line": caption.line, "catchphrase": caption.phrase} if caption else None,
            height=max(pool.heights.get(eid, {}).values(), default=0.0),
        )

    def search_text(self, text: str, language: str | None = None, top_k: int | None = None) -> GroundingResult:
        """Free-text search through the same retriever (the text is every cue route); τ is not applied."""
        result = self.ground(GroundingCues.from_text(text), language=language)
        k = top_k or self.top_k
        return GroundingResult(result.candidates[:k], result.candidates, self.tau, result.routes, self.thresholds)
