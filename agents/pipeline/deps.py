"""What the pipeline's nodes are given: per-run switches (:class:`PipelineConfig`) and their parts (:class:`PipelineDeps`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from culturebase.settings import setting_default
from agents.vlm.base import VisionLanguageModel
from retrieval.grounding import GroundingCues
from retrieval.websearch import WebSearch


class Grounder(Protocol):
    tau: float

    def ground(self, cues: GroundingCues, language: str | None = None) -> Any: ...


class OCREngine(Protocol):
    def read(self, image: bytes) -> Any: ...


@dataclass
class PipelineConfig:
    """Per-run switches; the search budgets default to the settings' defaults (``KAR_SEARCH_MAX_QUERIES``,
    ``KAR_SEARCH_RESULTS``, ``KAR_EVIDENCE_TOKEN_BUDGET``)."""

    #: web queries per item: a protocol constant, the MemeBench study's budget of at most 5 queries per item
    max_queries: int = setting_default("search_max_queries")
    #: results per query and the evidence block's token budget: set with the pipeline's first version (no bench chose them)
    search_results: int = setting_default("search_results")
    evidence_token_budget: int = setting_default("evidence_token_budget")
    ocr_enabled: bool = True
    default_language: str = "en"
    extract_json_mode: bool = False
    grounding_language: str | None = None  # restrict grounding to one language (None: all)
    # a recorded prompt's text parts are kept whole up to this many characters (cut beyond, marked, with the
    # original length): above the longest reasoning prompt at the default budgets (template ~1.5k characters,
    # top_k = 5 CultureBase entries of three 600-character fields ~10k, evidence at the 3,000-token budget ≤ ~12k),
    # so a default run records its prompts whole unless the item's own context text is very long
    prompt_record_max_chars: int = 32_000


@dataclass
class PipelineDeps:
    """What the nodes call: every part optional except where a condition needs it."""

    vlm: VisionLanguageModel | None
    grounder: Grounder | None = None
    search: WebSearch | None = None
    ocr: OCREngine | None = None
    config: PipelineConfig = field(default_factory=PipelineConfig)
    lock: threading.Lock = field(default_factory=threading.Lock)  # guards store writes; grounding reads run without it
    pages: Any = None  # grounded entities' own corpus pages (retrieval.websearch.entity_pages.EntityPages), KAR only
