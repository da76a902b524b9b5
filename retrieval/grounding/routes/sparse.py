"""The sparse route (bge-m3 only): the share of the query's bge-m3 lexical mass an entity covers.

The name guesses' and the OCR text's sparse weights search the entities' ``identity_sparse``
vector for more candidates (:func:`find`); then every candidate gets the best share over those
queries (:func:`score`): Σ q·d / Σ q², at most 1.
"""

from __future__ import annotations

from culturebase.store import PayloadFilter
from retrieval.grounding.candidates import CandidatePool, RouteHit, RouteQuery, RouteRun
from retrieval.grounding.params import PARAMS
from retrieval.grounding.registry import register_route
from retrieval.grounding.route import TextEvidenceRoute

NAME = "sparse"
VECTOR = "identity_sparse"


def _queries(query: RouteQuery) -> list[dict[int, float]]:
    batch = query.batch
    return [batch.sparse[i] for i, q in enumerate(query.dense) if q.route in ("name", "ocr") and batch.sparse[i]]  # type: ignore[union-attr,index]


def available(query: RouteQuery) -> bool:
    """Whether the embedder gave sparse weights and the store holds the sparse vector."""
    return query.batch is not None and query.batch.sparse is not None and VECTOR in query.store.entities.spec.sparse


def find(query: RouteQuery, pool: CandidatePool) -> RouteRun:
    """Candidates by the sparse weights (no score yet: :func:`score` scores every candidate)."""
    run = RouteRun()
    if not available(query):
        run.status[NAME] = "skipped: the embedder has no sparse lexical weights"
        return run
    flt = PayloadFilter.of(language=query.language)
    for sq in _queries(query):
        run.found += [pool.entity_of(h) for h in query.store.entities.search_sparse(VECTOR, sq, query.limit, flt)]
    run.status[NAME] = "ran"
    return run


def share(query_vec: dict[int, float], doc: dict[int, float]) -> float:
    """Share of the query's squared mass the document covers (at most 1)."""
    norm = sum(v * v for v in query_vec.values())
    if not norm or not doc:
        return 0.0
    return min(1.0, sum(v * doc.get(k, 0.0) for k, v in query_vec.items()) / norm)


def score(query: RouteQuery, pool: CandidatePool) -> RouteRun:
    """Each candidate's best share over the sparse queries (entities with none are left out)."""
    run = RouteRun()
    if not available(query):
        return run
    queries = _queries(query)
    docs = query.store.entities.retrieve_sparse(list(pool.entities), VECTOR)
    for eid, doc in docs.items():
        value = max((share(sq, doc) for sq in queries), default=0.0)
        if value:
            run.hits.append(RouteHit(NAME, pool.entities[eid], value))
    return run


@register_route()
class SparseRoute(TextEvidenceRoute):
    """bge-m3's lexical weights: brings more candidates after the dense completion, then scores every candidate."""

    name = NAME
    reads = ("ocr_text", "entities")
    weight = PARAMS.route_weights[NAME]
    steps = {"extend": find, "score": score}
