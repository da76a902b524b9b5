"""The extraction node (Search-CoT, KAR): OCR of the image or frames, then one VLM call that names the cues."""

from __future__ import annotations

import time
from typing import Any

from agents.pipeline.deps import OCREngine, PipelineDeps
from agents.pipeline.extraction import Extraction, parse_extraction
from agents.pipeline.nodes.blocks import context_block
from agents.pipeline.nodes.common import call_vlm, item_language, node_error
from agents.pipeline.prompts import load_prompt
from agents.pipeline.state import PipelineState
from agents.vlm.base import SamplingParams
from culturebase.cpu import cpu_pool


def ocr_frames(engine: OCREngine, frames: list[bytes]) -> dict[str, Any]:
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


async def run_ocr(state: PipelineState, deps: PipelineDeps, update: dict[str, Any]) -> str:
    """OCR the image (or every sampled frame of a video) into ``update``; returns the text read ("" when off)."""
    if not (deps.config.ocr_enabled and deps.ocr is not None and not state.get("audio_only")):
        return ""
    started = time.perf_counter()
    ocr_text = ""
    try:
        if state.get("frames"):  # a video: OCR every sampled frame, each line once
            ocr = await cpu_pool().run(ocr_frames, deps.ocr, state["frames"])
            ocr_text = ocr["text"]
            update["ocr"] = ocr
        else:
            ocr = await cpu_pool().run(deps.ocr.read, state["image"])  # the process-wide CPU pool
            ocr_text = ocr.text
            update["ocr"] = ocr.to_dict()
    except Exception as exc:  # OCR is an aid: its failure is recorded, not fatal
        update["ocr"] = {"text": "", "error": node_error("ocr", exc)}
    update["timings"]["ocr"] = time.perf_counter() - started
    return ocr_text


async def extract(state: PipelineState, deps: PipelineDeps) -> dict[str, Any]:
    """OCR, then the extraction call (without a VLM the extraction is the OCR text alone)."""
    update: dict[str, Any] = {"timings": {}, "notes": []}
    ocr_text = await run_ocr(state, deps, update)
    started = time.perf_counter()
    language = item_language(state, deps.config)
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
        result, call = await call_vlm(deps, "extract", state, text, sent, SamplingParams(json_mode=deps.config.extract_json_mode))
    except Exception as exc:
        update["error"] = node_error("extract", exc)
        update["timings"]["extract"] = time.perf_counter() - started
        return update
    extraction = parse_extraction(result.text).to_dict()
    extraction["raw"] = result.text
    update.update(
        extraction=extraction,
        vlm_calls=[call],
        prompt_hashes={prompt.key: prompt.sha},
    )
    update["timings"]["extract"] = time.perf_counter() - started
    return update
