"""Build the pipeline from settings: VLM, CultureBase grounder, search backend (+ cache), OCR.

Parts are built only when a requested condition needs them; a part that is not
configured is ``None`` and the reason is kept in ``notes`` (e.g. no VLM: ``kar explain``
still runs OCR + grounding + search and says no explanation was generated).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents.pipeline.deps import PipelineConfig, PipelineDeps
from agents.pipeline.pipeline import KARPipeline
from agents.pipeline.state import RETRIEVAL_CONDITIONS

#: the conditions whose prompts carry web evidence (an empty backend is said up front)
SEARCH_CONDITIONS = frozenset({"search_cot", "kar"})

if TYPE_CHECKING:  # pragma: no cover
    from culturebase.settings import Settings
    from retrieval.knowledge_base import KnowledgeBase


def missing_evidence(evidence: dict[str, Any] | None, conditions: list[str]) -> str | None:
    """Why the search conditions among ``conditions`` would run without web evidence (``evidence``: an
    :class:`~retrieval.websearch.evidence.EvidenceStatus` as a dict), or None.  ``kar run`` and the API's
    ablation jobs refuse such a run unless told to allow it; the caller adds how."""
    searching = [c for c in conditions if c in SEARCH_CONDITIONS]
    if not searching or not evidence or evidence.get("available", True):
        return None
    return f"{', '.join(searching)} would run without web evidence: {evidence.get('reason')}"


@dataclass
class PipelineResources:
    """A pipeline plus what it owns (closed by :meth:`aclose`)."""

    pipeline: KARPipeline
    kb: KnowledgeBase | None = None
    notes: list[str] = field(default_factory=list)

    def describe(self) -> dict[str, Any]:
        return {**self.pipeline.describe, "notes": self.notes}

    async def aclose(self) -> None:
        deps = self.pipeline.deps
        for part in (deps.vlm, deps.search):
            closer = getattr(part, "aclose", None)
            if closer is not None:
                try:
                    await closer()
                except Exception:  # pragma: no cover - closing is best effort
                    pass
        if self.kb is not None:
            self.kb.close()
            self.kb = None


def config_from_settings(settings: Settings, ocr_enabled: bool | None = None) -> PipelineConfig:
    return PipelineConfig(
        max_queries=settings.search_max_queries,
        search_results=settings.search_results,
        evidence_token_budget=settings.evidence_token_budget,
        ocr_enabled=settings.ocr_enabled if ocr_enabled is None else ocr_enabled,
    )


def resolve_vlm(settings: Settings, vlm: Any, require_vlm: bool, notes: list[str]) -> Any:
    """The VLM passed in, else the one settings configure (None, with the reason in ``notes``, when none is)."""
    from agents.vlm import OpenAICompatibleVLM, VLMNotConfiguredError

    if vlm != "settings":
        return vlm
    try:
        return OpenAICompatibleVLM.from_settings(settings)
    except VLMNotConfiguredError as exc:
        if require_vlm:
            raise
        notes.append(str(exc))
        return None


def build_grounder(settings: Settings, kb: KnowledgeBase, describe: dict[str, Any], notes: list[str]) -> Any:
    """The CultureBase grounder over ``kb``; its embedder, size, τ and calibration go in ``describe``."""
    from retrieval.grounding import EntityGrounder

    grounder = EntityGrounder(
        kb.store,
        kb.embedder,
        tau=settings.grounding_tau,
        top_k=settings.grounding_top_k,
        candidates=settings.grounding_candidates,
        image_route=kb.image_route,
        sound_route=kb.sound_store,
        require_calibration=settings.require_calibration,
        defer_refusal=True,
    )
    describe.update(embedder=kb.embedder.name, kb_entities=kb.store.count(), tau=grounder.tau)
    # which calibration produced this run's groundings (traces and run manifests carry describe)
    describe["calibration"] = grounder.calibration.summary()
    notes.extend(n for n in (grounder.calibration.warning, *grounder.calibration.notes) if n)
    if describe["kb_entities"] == 0:
        notes.append(f"CultureBase at {settings.kb_path} is empty: run `kar kb import FILE` first")
    return grounder


def build_search_part(settings: Settings, search: Any, kb: Any, lock: threading.Lock, conditions: tuple[str, ...] | list[str],
                      describe: dict[str, Any], notes: list[str]) -> Any:
    """The search backend passed in, else the one settings configure; whether evidence is available goes in ``describe``."""
    if search == "settings":
        from retrieval.websearch import build_search

        search = build_search(settings, kb, lock=lock)
    describe["search_backend"] = settings.search_backend if search is not None else "none"
    if any(c in SEARCH_CONDITIONS for c in conditions):
        from retrieval.websearch import evidence_status

        evidence = evidence_status(search, settings.search_backend)
        describe["evidence"] = evidence.to_dict()
        if not evidence.available:
            notes.append(f"no web evidence: {evidence.reason}")
    describe["search_cache"] = str(settings.resolved_search_cache_path) if search is not None else None
    describe["search_replay_only"] = settings.search_replay_only
    return search


def entity_pages(kb: Any, search: Any, conditions: tuple[str, ...] | list[str]) -> Any:
    """A grounded entity's own corpus pages (KAR with a knowledge base and a search backend), else None."""
    if kb is None or search is None or "kar" not in conditions:
        return None
    from retrieval.websearch.entity_pages import EntityPages

    return EntityPages(kb.store)  # a grounded entity's own pages, whatever the search backend


def build_pipeline(
    settings: Settings,
    conditions: tuple[str, ...] | list[str] = ("kar",),
    *,
    vlm: Any = "settings",
    ocr_enabled: bool | None = None,
    require_vlm: bool = False,
    kb: Any = None,
    search: Any = "settings",
    ocr: Any = "settings",
) -> PipelineResources:
    """Build what ``conditions`` need from ``settings``.

    ``vlm``, ``search`` and ``ocr`` may be passed in (e.g. test doubles, or ``None`` for none);
    ``kb`` may be an already-open KnowledgeBase (the service's), which the resources then use but
    never close.
    """
    notes: list[str] = []
    vlm = resolve_vlm(settings, vlm, require_vlm, notes)
    describe: dict[str, Any] = {"vlm": getattr(vlm, "model_id", None), "vlm_base_urls": list(getattr(vlm, "base_urls", []) or [])}
    lock = threading.Lock()
    owned_kb = None
    grounder = None
    ocr_flag = settings.ocr_enabled if ocr_enabled is None else ocr_enabled
    needs_retrieval = any(c in RETRIEVAL_CONDITIONS for c in conditions)
    if not needs_retrieval:
        search = None if search == "settings" else search
        ocr = None if ocr == "settings" else ocr
    try:
        if needs_retrieval:
            if kb is not None or "kar" in conditions or settings.search_backend == "local":
                if kb is None:
                    from retrieval.knowledge_base import KnowledgeBase

                    kb = owned_kb = KnowledgeBase.open(settings, create=True)
                grounder = build_grounder(settings, kb, describe, notes)
            search = build_search_part(settings, search, kb, lock, conditions, describe, notes)
            if ocr == "settings":
                from retrieval.ocr import OCR

                ocr = OCR.from_settings(settings) if ocr_flag else None
        config = config_from_settings(settings, ocr_flag and ocr is not None)
        describe["ocr_enabled"] = config.ocr_enabled
        deps = PipelineDeps(vlm=vlm, grounder=grounder, search=search, ocr=ocr, config=config, lock=lock,
                            pages=entity_pages(kb, search, conditions))
        return PipelineResources(KARPipeline(deps, describe=describe), kb=owned_kb, notes=notes)
    except BaseException:
        if owned_kb is not None:
            owned_kb.close()
        raise
