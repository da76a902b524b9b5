"""The reasoning node (Search-CoT, KAR): extraction, CultureBase entries (KAR), context and evidence in one VLM call."""

from __future__ import annotations

import time
from typing import Any

from agents.pipeline.deps import PipelineDeps
from agents.pipeline.evidence import format_evidence
from agents.pipeline.nodes.blocks import block_sections, context_block, extraction_summary, knowledge_block
from agents.pipeline.nodes.common import call_vlm, item_language, node_error
from agents.pipeline.prompts import load_prompt
from agents.pipeline.state import PipelineState


async def reason(state: PipelineState, deps: PipelineDeps) -> dict[str, Any]:
    """The explanation (or the task's answer); the call's record names where its CultureBase and evidence blocks lie."""
    started = time.perf_counter()
    if deps.vlm is None:
        return {
            "response": None,
            "notes": ["no explanation generated: no VLM configured (set KAR_VLM_BASE_URLS and KAR_VLM_MODEL)"],
            "timings": {"reason": time.perf_counter() - started},
        }
    language = item_language(state, deps.config)
    task = state.get("task")
    prompt = load_prompt("task_reason" if task else "reason", language)
    hits = state.get("hits") if state["condition"] == "kar" else None
    knowledge = knowledge_block(hits or [])
    evidence = (state.get("evidence") or {}).get("text") or format_evidence([], deps.config.evidence_token_budget).text
    text = prompt.render(
        extraction=extraction_summary(state.get("extraction") or {}),
        knowledge=knowledge,
        context=context_block(state.get("context") or {}, language),
        evidence=evidence,
        **({"instruction": task["instruction"]} if task else {}),
    )
    sent: list[dict[str, Any]] = []
    sections = block_sections(text, {"knowledge": knowledge, "evidence": evidence})
    try:
        result, call = await call_vlm(deps, "reason", state, text, sent, sections=sections)
    except Exception as exc:
        return {"error": node_error("reason", exc), "prompts": sent, "timings": {"reason": time.perf_counter() - started}}
    return {
        "response": result.text,
        "vlm_calls": [call],
        "prompts": sent,
        "prompt_hashes": {prompt.key: prompt.sha},
        "timings": {"reason": time.perf_counter() - started},
    }
