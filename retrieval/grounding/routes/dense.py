"""The dense routes: each cue embedded and searched on the entity vector it describes.

==========  =====================================  ==============================================
route       cue                                    entity vector (cosine)
==========  =====================================  ==============================================
``ocr``     OCR text (captions, catchphrases)      ``usage`` (name | aliases | usage); ``identity`` for
                                                   an entity without cultural usage (no ``usage`` vector)
``visual``  the VLM's visual handle                ``visual`` (visual | description); none for an
                                                   entity without a visual description
``name``    each entity guess (+ source work)      ``identity`` (name | aliases | source)
==========  =====================================  ==============================================

Each query is searched once per entity language (``PARAMS.background_languages`` with at least
``PARAMS.k_background`` entities); its ``k_background``-th neighbour's cosine there is the query's
*background* in that language, and a hit's *height* is its cosine minus that background (the
accept rule reads it).  A name guess also scores the entities whose name or alias equals it
(a filtered search), and the visual route runs the cross-lingual pass
(:mod:`retrieval.grounding.crosslingual`).  In the ``complete`` phase the route then gives every
candidate that a query did not find (found by another route) that query's cosine, read from its
stored vectors.  A low-confidence guess's cosine is scaled by 0.97 (medium 0.99).  Fusion takes the
best cosine of the three (role ``cosine``)
"""

from __future__ import annotations

from typing import Any

from culturebase.entity import normalize_text
from culturebase.store import CultureBaseStore, PayloadFilter
from retrieval.grounding.candidates import CandidatePool, DenseQuery, RouteHit, RouteQuery, RouteRun
from retrieval.grounding.crosslingual import ROUTES as CROSSLINGUAL_ROUTES
from retrieval.grounding.language_search import language_filter, search_by_language
from retrieval.grounding.params import PARAMS
from retrieval.grounding.registry import register_route
from retrieval.text import lexical as lex

ROUTE_VECTOR: dict[str, str] = {"ocr": "usage", "visual": "visual", "name": "identity"}
#: an entity without a vector on the route is scored on this one instead (OCR text names an entity whose
#: cultural usage nobody wrote down: its name); an entity without a visual description is not scored by one
FALLBACK_VECTOR: dict[str, str] = {"ocr": "identity"}
DENSE_ROUTES = ("ocr", "visual", "name")


def dense_queries(cues: Any) -> list[DenseQuery]:
    """The dense queries of the cues: the OCR text, the visual handle, each distinct entity guess
    (with its source work); cues with no letters, digits or CJK characters are dropped."""
    queries: list[DenseQuery] = []
    limit = PARAMS.max_cue_chars
    if lex.squash(cues.ocr_text):
        queries.append(DenseQuery("ocr", cues.ocr_text.strip()[:limit], 1.0))
    if lex.squash(cues.visual_handle):
        queries.append(DenseQuery("visual", cues.visual_handle.strip()[:limit], 1.0))
    seen: set[str] = set()
    for cue in cues.entities:
        name = cue.name.strip()[:limit]
        if not lex.squash(name) or normalize_text(name) in seen:
            continue
        seen.add(normalize_text(name))
        text = f"{name} | {cue.source.strip()}" if cue.source.strip() else name
        queries.append(DenseQuery("name", text, PARAMS.confidence_factor.get(cue.confidence, 1.0)))
    return queries


@register_route()
class DenseRoute:
    """The ``ocr``, ``visual`` and ``name`` routes (with the optional cross-lingual pass of the query)."""

    name = "dense"
    scores = DENSE_ROUTES
    reads = ("ocr_text", "visual_handle", "entities")
    role = "cosine"
    weight = 1.0
    accepts_alone = False
    phases = ("find", "complete")

    def __init__(self) -> None:
        self.languages: tuple[int, list[str], bool] | None = None  # (entity count, languages apart, they cover the KB)

    def wanted(self, query: RouteQuery) -> bool:
        """Whether any cue has letters, digits or CJK characters."""
        return bool(query.dense)

    def run(self, phase: str, query: RouteQuery, pool: CandidatePool) -> RouteRun:
        """``find``: search each dense query (its backgrounds kept for ``complete``); ``complete``: every other candidate's cosines."""
        if phase == "find":
            run, query.state[self.name] = self.find(query, pool)
            return run
        return self.complete(query, pool, query.state.get(self.name) or [{} for _ in query.dense])

    def background_languages(self, store: CultureBaseStore, language: str | None) -> tuple[list[str], bool]:
        """Entity languages searched apart (each with ≥ ``k_background`` entities), and whether they cover the KB."""
        if language is not None:
            return [language], True
        n = store.count()
        if self.languages is None or self.languages[0] != n:
            counts = {lg: store.count(language=lg) for lg in PARAMS.background_languages}
            groups = [lg for lg, c in counts.items() if c >= PARAMS.k_background]
            self.languages = (n, groups, sum(counts[lg] for lg in groups) == n)
        return list(self.languages[1]), self.languages[2]

    @staticmethod
    def hit(q: DenseQuery, ent: Any, score: float, background: dict[str, float]) -> RouteHit:
        height = score - background.get(ent.language, max(background.values())) if background else None
        return RouteHit(q.route, ent, score, cue=q.text, height=height)

    def find(self, query: RouteQuery, pool: CandidatePool) -> tuple[RouteRun, list[dict[str, float]]]:
        """Search each dense query per entity language; returns the run and each query's backgrounds."""
        run = RouteRun()
        coll = query.store.entities
        groups, covered = self.background_languages(query.store, query.language)
        backgrounds: list[dict[str, float]] = [{} for _ in query.dense]
        done: dict[tuple[str, str, tuple[str, ...]], dict[str | None, list[Any]]] = {}
        name_texts = {q.text for q in query.dense if q.route == "name"}

        def search(vector_name: str, text: str, vector: Any, lacks: tuple[str, ...] = ()) -> dict[str | None, list[Any]]:
            """Hits per entity language (None: of any language, when the languages searched apart do not cover
            the KB), searched once per (vector, cue text, lacks): a free-text search's OCR and name cues are one text."""
            key = (vector_name, text, lacks)
            if key not in done:
                if query.language is not None:
                    done[key] = {query.language: coll.search(vector_name, vector, query.limit, language_filter(query.language, lacks))}
                else:
                    by_language, best = search_by_language(coll, vector_name, vector, query.limit, groups, lacks)
                    done[key] = {**by_language, **({} if covered else {None: best})}
            return done[key]

        for i, q in enumerate(query.dense):
            vector = query.batch.dense[i]  # type: ignore[union-attr]
            found: list[tuple[Any, float]] = []
            primary = search(ROUTE_VECTOR[q.route], q.text, vector)
            fallback: dict[str | None, list[Any]] = {}
            shared = False
            if q.route in FALLBACK_VECTOR:  # entities with nothing on this route: scored on their fallback vector
                if FALLBACK_VECTOR[q.route] == "identity" and q.text in name_texts:  # the name cue searches these vectors anyway
                    fallback, shared = search("identity", q.text, vector), True
                else:
                    fallback = search(FALLBACK_VECTOR[q.route], q.text, vector, (ROUTE_VECTOR[q.route],))
            for lg in [*groups, *([] if covered else [None])]:
                hits = primary.get(lg, [])
                if q.route in FALLBACK_VECTOR:
                    extra = [h for h in fallback.get(lg, []) if not (shared and h.payload.get("cultural_usage"))]
                    hits = sorted(hits + extra, key=lambda h: -h.score)[: query.limit]
                found += [(pool.entity_of(h), h.score * q.factor) for h in hits]
                if lg is not None and hits:
                    backgrounds[i][lg] = hits[min(PARAMS.k_background, len(hits)) - 1].score * q.factor
            if q.route == "name":
                # entities whose name/alias equals the guess are scored even when dense search missed them
                key = normalize_text(q.text.split(" | ")[0])
                exact = PayloadFilter.of(match_keys=[key], language=query.language)
                found += [(pool.entity_of(h), h.score * q.factor) for h in coll.search("identity", vector, query.limit, exact)]
            for ent, score in found:
                run.hits.append(self.hit(q, ent, score, backgrounds[i]))
            # cross-lingual pass (crosslingual.py): other-language entities scored on centered vectors,
            # mapped back to the plain cosine scale with their own height; an entity keeps its larger score
            if query.crosslingual is not None and q.route in CROSSLINGUAL_ROUTES:
                known = {ent.id: ent for ent, _ in found}
                for xh in query.crosslingual.score(coll, ROUTE_VECTOR[q.route], q.text, vector, groups, known, query.limit, q.factor):
                    run.hits.append(RouteHit(q.route, xh.entity, xh.score, cue=q.text, height=xh.height))
            run.status[q.route] = "ran"
        return run, backgrounds

    def complete(self, query: RouteQuery, pool: CandidatePool, backgrounds: list[dict[str, float]]) -> RouteRun:
        """Give each candidate that one dense query did not find (found by another route) that query's cosine:
        an exact search among those candidates only (``PayloadFilter.among``: every one scored on its original
        vector; a filtered HNSW search over a few ids among tens of thousands returned none of them, and reading
        the vectors back cost 15 ms for 160 candidates); one on the fallback vector for those without the route's."""
        run = RouteRun()
        coll = query.store.entities
        for i, q in enumerate(query.dense):
            lacking = [eid for eid in pool.entities if q.route not in pool.scores.get(eid, {})]
            if not lacking:
                continue
            vector = query.batch.dense[i]  # type: ignore[union-attr]
            hits = coll.search(ROUTE_VECTOR[q.route], vector, len(lacking), PayloadFilter.among(lacking), exact=True)
            if q.route in FALLBACK_VECTOR:
                scored = {h.id for h in hits}
                rest = [eid for eid in lacking if eid not in scored]
                if rest:
                    hits += coll.search(FALLBACK_VECTOR[q.route], vector, len(rest), PayloadFilter.among(rest), exact=True)
            for h in hits:
                if h.id in pool.entities:
                    run.hits.append(self.hit(q, pool.entities[h.id], h.score * q.factor, backgrounds[i]))
        return run
