"""The search node (Search-CoT, KAR): the queries, the web searches, the evidence block.

Search-CoT and KAR differ here only by the grounded hits: KAR's queries name its grounded entities, which
scope the evidence and bring their own pages; with no hit, KAR builds exactly the Search-CoT queries.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from agents.pipeline.deps import PipelineDeps
from agents.pipeline.evidence import PARAMS as EVIDENCE_PARAMS, format_evidence, format_pieces, none_reason, select_evidence
from agents.pipeline.extraction import ExtractedEntity, Extraction
from agents.pipeline.nodes.common import node_error
from agents.pipeline.queries import Query, build_queries
from agents.pipeline.state import PipelineState
from retrieval.websearch import SearchResult


def extraction_of(state: PipelineState) -> Extraction:
    """The extraction the queries are built from (OCR text, entity guesses, suggested queries)."""
    ex = dict(state.get("extraction") or {})
    return Extraction(
        ocr_text=ex.get("ocr_text") or "",
        entities=[ExtractedEntity(e["name"], e.get("source") or "", e.get("confidence") or "medium") for e in ex.get("entities") or []],
        suggested_queries=list(ex.get("suggested_queries") or []),
    )


def evidence_off(budget: int) -> dict[str, Any]:
    """The evidence record when web search is off."""
    return {
        **format_evidence([], budget).__dict__,
        "pieces": [],
        "dropped": {},
        "none_reason": "web search is off (KAR_SEARCH_BACKEND=none)",
    }


async def run_searches(deps: PipelineDeps, queries: list[Query]) -> tuple[list[dict[str, Any]], list[tuple[str, str, list[SearchResult]]], dict[str, Any] | None]:
    """Every query at once; returns the searches' trace, the (query, backend, results) of those that answered, the first error."""
    # a CultureBase query passes its grounded entity's names and aliases (the local corpus ranks the page
    # titled by one of them first; web backends ignore them); Search-CoT's queries carry none
    outcomes = await asyncio.gather(
        *(deps.search.search(q.text, deps.config.search_results, names=q.names or None) for q in queries), return_exceptions=True
    )
    backend = getattr(deps.search, "name", type(deps.search).__name__)
    searches: list[dict[str, Any]] = []
    triples: list[tuple[str, str, list[SearchResult]]] = []
    error = None
    for q, outcome in zip(queries, outcomes):
        if isinstance(outcome, BaseException):
            searches.append({"query": q.text, "backend": backend, "results": [], "error": node_error("search", outcome)})
            error = error or node_error("search", outcome)
            continue
        results = [
            {"title": r.title, "url": r.url, "snippet": r.content[:EVIDENCE_PARAMS.trace_snippet_chars], "score": r.score, "above_floor": r.above_floor}
            for r in outcome
        ]
        searches.append({"query": q.text, "backend": backend, "results": results})
        triples.append((q.text, backend, outcome))
    return searches, triples, error


async def select_and_format(deps: PipelineDeps, triples: list[tuple[str, str, list[SearchResult]]], hits: list[Any] | None,
                            n_queries: int, update: dict[str, Any]) -> dict[str, Any]:
    """The evidence record: pages selected (scoped by the grounded entities, their own pages first) and fenced."""
    # KAR: the grounded entities scope the evidence and bring their own pages; Search-CoT: neither
    entities = [h.entity for h in hits] if hits else None
    own: list[Any] = []
    if entities and deps.pages is not None:
        try:
            own = await asyncio.to_thread(deps.pages.for_entities, entities)
        except Exception as exc:  # the entity pages are an aid: recorded, not fatal
            update.setdefault("notes", []).append(f"entity pages not fetched: {type(exc).__name__}: {exc}")
    sel = select_evidence(triples, entities, own)
    ev = format_pieces(sel, deps.config.evidence_token_budget)
    return {
        "text": ev.text,
        "tokens": ev.tokens,
        "truncated": ev.truncated,
        "results_shown": ev.results_shown,
        "pieces": [p.to_dict() for p in sel.pieces],
        "dropped": dict(sorted(sel.dropped.items())),
        "considered": sel.considered,
        "entity_scoped": entities is not None,
        "none_reason": none_reason(sel, n_queries),
    }


async def search(state: PipelineState, deps: PipelineDeps) -> dict[str, Any]:
    """Build the queries, search, and select the evidence (a failed search stops the graph)."""
    started = time.perf_counter()
    hits = state.get("hits") if state["condition"] == "kar" else None
    ocr_engine = (state.get("ocr") or {}).get("text") or ""
    queries = build_queries(extraction_of(state), hits, deps.config.max_queries, ocr_fallback=ocr_engine)
    update: dict[str, Any] = {"queries": [q.to_dict() for q in queries]}
    if deps.search is None:
        update["searches"] = []
        update["notes"] = ["web search disabled (search_backend=none): no evidence"]
        update["evidence"] = evidence_off(deps.config.evidence_token_budget)
    else:
        searches, triples, error = await run_searches(deps, queries)
        update["searches"] = searches
        if error is not None:
            update["error"] = error
        else:
            update["evidence"] = await select_and_format(deps, triples, hits, len(queries), update)
    update["timings"] = {"search": time.perf_counter() - started}
    return update
