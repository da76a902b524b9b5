"""The pipeline graph: a LangGraph ``StateGraph`` built fresh by :func:`build_graph`.

::

    START ─┬─ vanilla | cot | context_note ──► answer ──► END               (1 VLM call)
           └─ search_cot | kar ──► extract ─┬─ kar ──► ground ─┐
                                            └─ search_cot ─────┴─► search ──► reason ──► END
                                                                        (2 VLM calls)

Any node that fails records ``error`` and the graph stops there (the response stays None);
a condition is never swapped for another.  Every VLM call records what it was sent in ``prompts``
(:mod:`agents.vlm.record`: texts verbatim up to ``PipelineConfig.prompt_record_max_chars``, media by
hash, size and dimensions), a failed call too; the reasoning call's record names where its
CultureBase block and its evidence block lie in the text (``sections``), for the diagnostics.  KAR with no entity ≥ τ builds exactly the
Search-CoT queries (the CultureBase part of the query list is empty).
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from langgraph.graph import END, START, StateGraph

from agents.pipeline.evidence import format_evidence, format_pieces, none_reason, select_evidence
from agents.pipeline.extraction import Extraction, ExtractedEntity, parse_extraction
from agents.pipeline.prompts import load_prompt
from agents.pipeline.queries import build_queries
from agents.pipeline.state import PipelineState
from agents.vlm.base import AudioInput, ChatMessage, ImageInput, SamplingParams, VisionLanguageModel
from agents.vlm.record import record_messages
from culturebase.cpu import cpu_pool
from retrieval.grounding import EntityCue, GroundingCues
from retrieval.websearch import SearchResult, WebSearch

CONTEXT_LABELS = {
    "en": {"post_text": "Post text", "top_comment": "Top comment", "context_note": "Cultural context note",
           "media": "Media", "transcript": "Audio transcript", "frame_text": "Text read off the video frames"},
    "zh": {"post_text": "帖子正文", "top_comment": "热门评论", "context_note": "文化背景说明",
           "media": "媒体", "transcript": "音频转写", "frame_text": "视频帧中的文字"},
}
#: a CultureBase entry in the reasoning prompt: each text field cut to this many characters, the first this many aliases
KB_FIELD_CHARS = 600
KB_ALIASES = 6


class Grounder(Protocol):
    tau: float

    def ground(self, cues: GroundingCues, language: str | None = None) -> Any: ...


class OCREngine(Protocol):
    def read(self, image: bytes) -> Any: ...


@dataclass
class PipelineConfig:
    """Per-run switches (from settings by default)."""

    max_queries: int = 5
    search_results: int = 5
    evidence_token_budget: int = 3000
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


def _error(stage: str, exc: BaseException) -> dict[str, Any]:
    return {"stage": stage, "type": type(exc).__name__, "message": str(exc)}


def _lang(state: PipelineState, config: PipelineConfig) -> str:
    return state.get("language") or config.default_language


def context_block(context: dict[str, str], language: str, skip: tuple[str, ...] = ()) -> str:
    items = [(k, v) for k, v in (context or {}).items() if v and k not in skip]
    if not items:
        return ""
    labels = CONTEXT_LABELS["zh" if language.startswith("zh") else "en"]
    body = "\n".join(f"- {labels.get(k, k)}: {v}" for k, v in items)
    return load_prompt("context").render(items=body)


def _extraction_summary(ex: dict[str, Any]) -> str:
    ents = "; ".join(
        f"{e['name']}" + (f" ({e['source']})" if e.get("source") else "") + f" [{e.get('confidence', 'medium')}]"
        for e in ex.get("entities") or []
    )
    return "\n".join(
        [
            f"- OCR text: {ex.get('ocr_text') or '(none)'}",
            f"- Visual handle: {ex.get('visual_handle') or '(none)'}",
            f"- Candidate entities: {ents or '(none)'}",
        ]
    )


def _knowledge_block(hits: list[Any]) -> str:
    if not hits:
        return ""
    entries = []
    for i, h in enumerate(hits, start=1):
        e = h.entity
        parts = [f"{i}. {e.name}" + (f" — {e.source_work}" if e.source_work else "") + f" (score {h.score:.2f})"]
        if e.aliases:
            parts.append(f"   aliases: {', '.join(e.aliases[:KB_ALIASES])}")
        for label, value in (("description", e.description), ("visual", e.visual_desc), ("usage", e.cultural_usage)):
            if value:
                parts.append(f"   {label}: {value[:KB_FIELD_CHARS]}")
        entries.append("\n".join(parts))
    return load_prompt("knowledge").render(entries="\n".join(entries))


def _media_parts(state: PipelineState) -> tuple[tuple[ImageInput, ...], tuple[AudioInput, ...]]:
    """What the VLM sees: nothing (text only), the video frames, or the image; plus native audio."""
    if state.get("text_only"):
        return (), ()
    audio = (AudioInput(state["audio"], "wav"),) if state.get("audio") else ()
    if state.get("audio_only"):
        return (), audio
    if state.get("frames"):
        images = tuple(ImageInput(f, f"frame{i}") for i, f in enumerate(state["frames"]))
    else:
        images = (ImageInput(state["image"], state.get("image_name") or "image"),)
    return images, audio


def _sections(text: str, blocks: dict[str, str]) -> dict[str, list[int]]:
    """Where each non-empty block lies in the rendered ``text`` (``[start, end)``, in the order given)."""
    found: dict[str, list[int]] = {}
    start = 0
    for name, block in blocks.items():
        at = text.find(block, start) if block else -1
        if at >= 0:
            found[name] = [at, at + len(block)]
            start = at + len(block)
    return found


def _ocr_frames(engine: OCREngine, frames: list[bytes]) -> dict[str, Any]:
    """OCR of each frame; lines kept once, in order of first appearance."""
    lines: dict[str, None] = {}
    per_frame = []
    for frame in frames:
        text = (engine.read(frame).text or "").strip()
        per_frame.append(text)
        for line in text.splitlines():
            if line.strip():
                lines.setdefault(line.strip(), None)
    return {"text": "\n".join(lines), "frames": per_frame}


def build_graph(deps: PipelineDeps):  # noqa: C901 - one closure per node reads best here
    """Compile the pipeline graph over ``deps`` (tests build a fresh one per case)."""
    cfg = deps.config

    def record(stage: str, messages: list[ChatMessage], media: Any, sections: dict[str, list[int]] | None, replied: bool) -> dict[str, Any]:
        return {"stage": stage, "replied": replied, "max_chars": cfg.prompt_record_max_chars,
                "messages": record_messages(messages, media, cfg.prompt_record_max_chars), **({"sections": sections} if sections else {})}

    async def call_vlm(stage: str, state: PipelineState, text: str, sent: list[dict[str, Any]], sampling: SamplingParams | None = None,
                       sections: dict[str, list[int]] | None = None):
        """One VLM call; what it was sent is appended to ``sent`` (a failed call's too)."""
        if deps.vlm is None:
            from agents.vlm.base import VLMNotConfiguredError

            raise VLMNotConfiguredError(
                "no VLM configured: set KAR_VLM_BASE_URLS and KAR_VLM_MODEL to generate explanations"
            )
        images, audio = _media_parts(state)
        messages = [ChatMessage("user", text, images, audio)]
        try:
            result = await deps.vlm.chat(messages, sampling)
        except Exception:
            sent.append(record(stage, messages, None, sections, False))
            raise
        sent.append(record(stage, messages, getattr(result, "sent_media", None), sections, True))
        call = {
            "stage": stage,
            "model": result.model,
            "endpoint": result.endpoint,
            "prompt_tokens": result.usage.prompt_tokens,
            "completion_tokens": result.usage.completion_tokens,
            "latency_s": round(result.latency_s, 4),
        }
        return result, call

    async def answer(state: PipelineState) -> dict[str, Any]:
        started = time.perf_counter()
        condition = state["condition"]
        language = _lang(state, cfg)
        context = state.get("context") or {}
        sent: list[dict[str, Any]] = []
        try:
            if condition == "context_note" and not context.get("context_note"):
                raise ValueError("condition context_note needs a cultural context note for the item")
            if state.get("task"):  # a task item: its instruction, with the note (if any) among the context lines
                prompt = load_prompt("task_cot" if condition == "cot" else "task", language)
                text = prompt.render(context=context_block(context, language), instruction=state["task"]["instruction"])
            elif condition == "context_note":
                prompt = load_prompt("context_note", language)
                text = prompt.render(note=context["context_note"], context=context_block(context, language, skip=("context_note",)))
            else:
                prompt = load_prompt("cot" if condition == "cot" else "explain", language)
                text = prompt.render(context=context_block(context, language))
            result, call = await call_vlm("answer", state, text, sent)
        except Exception as exc:
            return {"error": _error("answer", exc), "prompts": sent, "timings": {"answer": time.perf_counter() - started}}
        return {
            "response": result.text,
            "vlm_calls": [call],
            "prompts": sent,
            "prompt_hashes": {prompt.key: prompt.sha},
            "timings": {"answer": time.perf_counter() - started},
        }

    async def extract(state: PipelineState) -> dict[str, Any]:
        update: dict[str, Any] = {"timings": {}, "notes": []}
        ocr_text = ""
        if cfg.ocr_enabled and deps.ocr is not None and not state.get("audio_only"):
            started = time.perf_counter()
            try:
                if state.get("frames"):  # a video: OCR every sampled frame, each line once
                    ocr = await cpu_pool().run(_ocr_frames, deps.ocr, state["frames"])
                    ocr_text = ocr["text"]
                    update["ocr"] = ocr
                else:
                    ocr = await cpu_pool().run(deps.ocr.read, state["image"])  # the process-wide CPU pool
                    ocr_text = ocr.text
                    update["ocr"] = ocr.to_dict()
            except Exception as exc:  # OCR is an aid: its failure is recorded, not fatal
                update["ocr"] = {"text": "", "error": _error("ocr", exc)}
            update["timings"]["ocr"] = time.perf_counter() - started
        started = time.perf_counter()
        language = _lang(state, cfg)
        if deps.vlm is None:
            ex = Extraction(ocr_text=ocr_text, format="ocr_only")
            update["notes"].append("no VLM configured: extraction is the OCR text only")
            update["extraction"] = ex.to_dict()
            update["timings"]["extract"] = time.perf_counter() - started
            return update
        prompt = load_prompt("extract")
        hint = f"\nAn OCR engine read this text in the image (it may contain errors):\n{ocr_text}\n" if ocr_text else ""
        text = prompt.render(ocr_hint=hint, context=context_block(state.get("context") or {}, language))
        sent: list[dict[str, Any]] = []
        update["prompts"] = sent
        try:
            result, call = await call_vlm("extract", state, text, sent, SamplingParams(json_mode=cfg.extract_json_mode))
        except Exception as exc:
            update["error"] = _error("extract", exc)
            update["timings"]["extract"] = time.perf_counter() - started
            return update
        ex = parse_extraction(result.text)
        extraction = ex.to_dict()
        extraction["raw"] = result.text
        update.update(
            extraction=extraction,
            vlm_calls=[call],
            prompt_hashes={prompt.key: prompt.sha},
        )
        update["timings"]["extract"] = time.perf_counter() - started
        return update

    def _cues(state: PipelineState) -> GroundingCues:
        ex = state.get("extraction") or {}
        ocr_engine = ((state.get("ocr") or {}).get("text") or "").strip()
        ocr_vlm = (ex.get("ocr_text") or "").strip()
        ocr_text = ocr_vlm if not ocr_engine or ocr_engine in ocr_vlm else f"{ocr_vlm}\n{ocr_engine}".strip()
        transcript = ((state.get("context") or {}).get("transcript") or "").strip()
        if transcript:  # what is said in a clip is a cue like the text shown in it
            ocr_text = f"{ocr_text}\n{transcript}".strip()
        return GroundingCues(
            ocr_text=ocr_text,
            visual_handle=ex.get("visual_handle") or "",
            entities=[EntityCue(e["name"], e.get("source") or "", e.get("confidence") or "medium") for e in ex.get("entities") or []],
        )

    async def ground(state: PipelineState) -> dict[str, Any]:
        started = time.perf_counter()
        if deps.grounder is None:
            return {
                "error": _error("ground", RuntimeError("condition kar needs CultureBase (no grounder configured)")),
                "timings": {"ground": time.perf_counter() - started},
            }
        cues = _cues(state)

        cues.image_bytes = state.get("image") or None  # the grounder's image route hashes and matches it itself
        cues.frames = list(state.get("frames") or [])  # a clip: the route reads each sampled frame as a picture
        cues.audio_bytes = state.get("audio") or None  # a clip's sound (WAV): the sound route fingerprints it

        def run() -> Any:
            # no store-write lock: searches run concurrently (the embedded engine itself takes one at a time,
            # in FIFO turns: culturebase/store/fifo_turns.py); the KB's embedder serialises itself
            return deps.grounder.ground(cues, language=cfg.grounding_language)

        try:
            result = await cpu_pool().run(run) if not getattr(deps.grounder, "inline", False) else run()
        except Exception as exc:
            return {"error": _error("ground", exc), "timings": {"ground": time.perf_counter() - started}}
        return {
            "grounding": result.to_dict(),
            "hits": list(result.hits),
            "timings": {"ground": time.perf_counter() - started},
        }

    async def search(state: PipelineState) -> dict[str, Any]:
        started = time.perf_counter()
        ex_dict = dict(state.get("extraction") or {})
        ex = Extraction(
            ocr_text=ex_dict.get("ocr_text") or "",
            entities=[ExtractedEntity(e["name"], e.get("source") or "", e.get("confidence") or "medium") for e in ex_dict.get("entities") or []],
            suggested_queries=list(ex_dict.get("suggested_queries") or []),
        )
        hits = state.get("hits") if state["condition"] == "kar" else None
        ocr_engine = (state.get("ocr") or {}).get("text") or ""
        queries = build_queries(ex, hits, cfg.max_queries, ocr_fallback=ocr_engine)
        update: dict[str, Any] = {"queries": [q.to_dict() for q in queries]}
        if deps.search is None:
            update["searches"] = []
            update["notes"] = ["web search disabled (search_backend=none): no evidence"]
            update["evidence"] = {
                **format_evidence([], cfg.evidence_token_budget).__dict__,
                "pieces": [],
                "dropped": {},
                "none_reason": "web search is off (KAR_SEARCH_BACKEND=none)",
            }
            update["timings"] = {"search": time.perf_counter() - started}
            return update
        # a CultureBase query passes its grounded entity's names and aliases (the local corpus ranks the page
        # titled by one of them first; web backends ignore them); Search-CoT's queries carry none
        outcomes = await asyncio.gather(
            *(deps.search.search(q.text, cfg.search_results, names=q.names or None) for q in queries), return_exceptions=True
        )
        backend = getattr(deps.search, "name", type(deps.search).__name__)
        searches: list[dict[str, Any]] = []
        triples: list[tuple[str, str, list[SearchResult]]] = []
        error = None
        for q, outcome in zip(queries, outcomes):
            if isinstance(outcome, BaseException):
                searches.append({"query": q.text, "backend": backend, "results": [], "error": _error("search", outcome)})
                error = error or _error("search", outcome)
                continue
            searches.append(
                {
                    "query": q.text,
                    "backend": backend,
                    "results": [
                        {"title": r.title, "url": r.url, "snippet": r.content[:300], "score": r.score, "above_floor": r.above_floor}
                        for r in outcome
                    ],
                }
            )
            triples.append((q.text, backend, outcome))
        update["searches"] = searches
        if error is not None:
            update["error"] = error
        else:
            # KAR: the grounded entities scope the evidence and bring their own pages; Search-CoT: neither
            entities = [h.entity for h in hits] if hits else None
            own: list[Any] = []
            if entities and deps.pages is not None:
                try:
                    own = await asyncio.to_thread(deps.pages.for_entities, entities)
                except Exception as exc:  # the entity pages are an aid: recorded, not fatal
                    update.setdefault("notes", []).append(f"entity pages not fetched: {type(exc).__name__}: {exc}")
            sel = select_evidence(triples, entities, own)
            ev = format_pieces(sel, cfg.evidence_token_budget)
            update["evidence"] = {
                "text": ev.text,
                "tokens": ev.tokens,
                "truncated": ev.truncated,
                "results_shown": ev.results_shown,
                "pieces": [p.to_dict() for p in sel.pieces],
                "dropped": dict(sorted(sel.dropped.items())),
                "considered": sel.considered,
                "entity_scoped": entities is not None,
                "none_reason": none_reason(sel, len(queries)),
            }
        update["timings"] = {"search": time.perf_counter() - started}
        return update

    async def reason(state: PipelineState) -> dict[str, Any]:
        started = time.perf_counter()
        if deps.vlm is None:
            return {
                "response": None,
                "notes": ["no explanation generated: no VLM configured (set KAR_VLM_BASE_URLS and KAR_VLM_MODEL)"],
                "timings": {"reason": time.perf_counter() - started},
            }
        language = _lang(state, cfg)
        task = state.get("task")
        prompt = load_prompt("task_reason" if task else "reason", language)
        hits = state.get("hits") if state["condition"] == "kar" else None
        knowledge = _knowledge_block(hits or [])
        evidence = (state.get("evidence") or {}).get("text") or format_evidence([], cfg.evidence_token_budget).text
        text = prompt.render(
            extraction=_extraction_summary(state.get("extraction") or {}),
            knowledge=knowledge,
            context=context_block(state.get("context") or {}, language),
            evidence=evidence,
            **({"instruction": task["instruction"]} if task else {}),
        )
        sent: list[dict[str, Any]] = []
        try:
            result, call = await call_vlm("reason", state, text, sent, sections=_sections(text, {"knowledge": knowledge, "evidence": evidence}))
        except Exception as exc:
            return {"error": _error("reason", exc), "prompts": sent, "timings": {"reason": time.perf_counter() - started}}
        return {
            "response": result.text,
            "vlm_calls": [call],
            "prompts": sent,
            "prompt_hashes": {prompt.key: prompt.sha},
            "timings": {"reason": time.perf_counter() - started},
        }

    # routing functions are async so LangGraph runs them on the loop, not in a worker thread
    async def route_start(state: PipelineState) -> str:
        return "extract" if state["condition"] in ("search_cot", "kar") else "answer"

    async def after_extract(state: PipelineState) -> str:
        if state.get("error"):
            return END
        return "ground" if state["condition"] == "kar" else "search"

    def stop_on_error(next_node: str):
        async def route(state: PipelineState) -> str:
            return END if state.get("error") else next_node

        return route

    graph = StateGraph(PipelineState)
    graph.add_node("answer", answer)
    graph.add_node("extract", extract)
    graph.add_node("ground", ground)
    graph.add_node("search", search)
    graph.add_node("reason", reason)
    graph.add_conditional_edges(START, route_start, ["answer", "extract"])
    graph.add_edge("answer", END)
    graph.add_conditional_edges("extract", after_extract, ["ground", "search", END])
    graph.add_conditional_edges("ground", stop_on_error("search"), ["search", END])
    graph.add_conditional_edges("search", stop_on_error("reason"), ["reason", END])
    graph.add_edge("reason", END)
    return graph.compile()
