"""The grounding node (KAR only): the extraction's cues and the item's media matched against CultureBase."""

from __future__ import annotations

import time
from typing import Any

from agents.pipeline.deps import PipelineDeps
from agents.pipeline.nodes.common import node_error
from agents.pipeline.state import PipelineState
from culturebase.cpu import cpu_pool
from retrieval.grounding import EntityCue, GroundingCues


def grounding_cues(state: PipelineState) -> GroundingCues:
    """The cues grounding reads: OCR (the VLM's, plus the engine's when it adds text), transcript, visual handle,
    entity guesses, and the item's image, frames and sound."""
    ex = state.get("extraction") or {}
    ocr_engine = ((state.get("ocr") or {}).get("text") or "").strip()
    ocr_vlm = (ex.get("ocr_text") or "").strip()
    ocr_text = ocr_vlm if not ocr_engine or ocr_engine in ocr_vlm else f"{ocr_vlm}\n{ocr_engine}".strip()
    transcript = ((state.get("context") or {}).get("transcript") or "").strip()
    if transcript:  # what is said in a clip is a cue like the text shown in it
        ocr_text = f"{ocr_text}\n{transcript}".strip()
    cues = GroundingCues(
        ocr_text=ocr_text,
        visual_handle=ex.get("visual_handle") or "",
        entities=[EntityCue(e["name"], e.get("source") or "", e.get("confidence") or "medium") for e in ex.get("entities") or []],
    )
    cues.image_bytes = state.get("image") or None  # the grounder's image route hashes and matches it itself
    cues.frames = list(state.get("frames") or [])  # a clip: the route reads each sampled frame as a picture
    cues.audio_bytes = state.get("audio") or None  # a clip's sound (WAV): the sound route fingerprints it
    return cues


async def ground(state: PipelineState, deps: PipelineDeps) -> dict[str, Any]:
    """Ground the cues; the accepted entities become ``hits``."""
    started = time.perf_counter()
    if deps.grounder is None:
        return {
            "error": node_error("ground", RuntimeError("condition kar needs CultureBase (no grounder configured)")),
            "timings": {"ground": time.perf_counter() - started},
        }
    cues = grounding_cues(state)
    grounder = deps.grounder

    def run() -> Any:
        # no store-write lock: searches run concurrently (the embedded engine itself takes one at a time,
        # in FIFO turns: culturebase/store/fifo_turns.py); the KB's embedder serialises itself
        return grounder.ground(cues, language=deps.config.grounding_language)

    try:
        result = await cpu_pool().run(run) if not getattr(grounder, "inline", False) else run()
    except Exception as exc:
        return {"error": node_error("ground", exc), "timings": {"ground": time.perf_counter() - started}}
    return {
        "grounding": result.to_dict(),
        "hits": list(result.hits),
        "timings": {"ground": time.perf_counter() - started},
    }
