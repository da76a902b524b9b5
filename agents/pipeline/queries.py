"""Query building, as in the MemeBench release.

Order: the extractor's suggested queries; then (KAR only) each CultureBase hit ≥ τ as
``"{name} {source} 梗 文化背景 出处"`` (Chinese entity) or ``"{name} {source} meme origin
meaning"`` (otherwise); then each confident (high/medium) extracted entity in the same
template; OCR text only as the last fallback when nothing else produced a query.
Deduplicated (case and whitespace insensitive) and cut to the budget.

A CultureBase query carries the grounded entity's name and aliases (``Query.names``); the pipeline
passes them to the search backend (``WebSearch.search(..., names=)``), so the local corpus ranks the
entity's own page first even when it is titled by an alias the query does not hold.  Every other
query (the extractor's, an ungrounded extracted entity's, OCR; all of Search-CoT's) carries none.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import asdict, dataclass
from typing import Any, Literal

from agents.pipeline.extraction import Extraction

Origin = Literal["vlm", "culturebase", "entity", "ocr"]
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]")


@dataclass(frozen=True)
class QueryParams:
    """How queries are built; the query budget itself is ``PipelineConfig.max_queries``."""

    #: a query is cut to this many characters: set by hand with the pipeline's first version (no bench chose it)
    max_chars: int = 120
    #: extracted entities of these confidences become queries: the MemeBench release's rule (a protocol constant)
    confident: tuple[str, ...] = ("high", "medium")


PARAMS = QueryParams()


@dataclass(frozen=True)
class Query:
    """One search query; ``names``: the grounded entity's name and aliases for a CultureBase query, else ()."""

    text: str
    origin: Origin
    names: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _key(text: str) -> str:
    return _squash(unicodedata.normalize("NFKC", text)).casefold()


def entity_query(name: str, source: str, language: str | None = None) -> str:
    """The release's entity-guided query template (Chinese or English)."""
    zh = (language or "").lower().startswith("zh") if language else bool(_CJK.search(f"{name}{source}"))
    source = "" if _key(source) == _key(name) else source
    suffix = "梗 文化背景 出处" if zh else "meme origin meaning"
    return _squash(f"{name} {source} {suffix}")


def build_queries(extraction: Extraction, hits: list[Any] | None, budget: int, ocr_fallback: str = "",
                  params: QueryParams = PARAMS) -> list[Query]:
    """Queries for one item; ``hits`` are grounded entities (``.entity``) that passed τ, or None."""
    out: list[Query] = []
    seen: set[str] = set()

    def add(text: str, origin: Origin, names: tuple[str, ...] = ()) -> None:
        text = _squash(text)[:params.max_chars].strip()
        if text and _key(text) not in seen and len(out) < budget:
            seen.add(_key(text))
            out.append(Query(text, origin, names))

    for q in extraction.suggested_queries:
        add(q, "vlm")
    for hit in hits or []:
        ent = hit.entity
        add(entity_query(ent.name, ent.source_work or "", ent.language), "culturebase", (ent.name, *(getattr(ent, "aliases", None) or ())))
    for ent in extraction.entities:
        if ent.confidence in params.confident:
            add(entity_query(ent.name, ent.source), "entity")
    if not out:
        ocr = _squash(extraction.ocr_text or ocr_fallback)
        if ocr:
            add(ocr, "ocr")
    return out
