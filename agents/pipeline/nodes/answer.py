"""The one-call conditions' node (Vanilla, CoT, context note): the item's prompt, one VLM call, the response."""

from __future__ import annotations

import time
from typing import Any

from agents.pipeline.deps import PipelineDeps
from agents.pipeline.nodes.blocks import context_block
from agents.pipeline.nodes.common import call_vlm, item_language, node_error
from agents.pipeline.prompts import Prompt, load_prompt
from agents.pipeline.state import PipelineState


def answer_prompt(state: PipelineState, language: str) -> tuple[Prompt, str]:
    """The prompt a one-call condition sends and its rendered text (a task item's instruction when it has one)."""
    condition = state["condition"]
    context = state.get("context") or {}
    if condition == "context_note" and not context.get("context_note"):
        raise ValueError("condition context_note needs a cultural context note for the item")
    if state.get("task"):  # a task item: its instruction, with the note (if any) among the context lines
        prompt = load_prompt("task_cot" if condition == "cot" else "task", language)
        return prompt, prompt.render(context=context_block(context, language), instruction=state["task"]["instruction"])
    if condition == "context_note":
        prompt = load_prompt("context_note", language)
        return prompt, prompt.render(note=context["context_note"], context=context_block(context, language, skip=("context_note",)))
    prompt = load_prompt("cot" if condition == "cot" else "explain", language)
    return prompt, prompt.render(context=context_block(context, language))


async def answer(state: PipelineState, deps: PipelineDeps) -> dict[str, Any]:
    """Answer in one VLM call (Vanilla, CoT, context note)."""
    started = time.perf_counter()
    sent: list[dict[str, Any]] = []
    try:
        prompt, text = answer_prompt(state, item_language(state, deps.config))
        result, call = await call_vlm(deps, "answer", state, text, sent)
    except Exception as exc:
        return {"error": node_error("answer", exc), "prompts": sent, "timings": {"answer": time.perf_counter() - started}}
    return {
        "response": result.text,
        "vlm_calls": [call],
        "prompts": sent,
        "prompt_hashes": {prompt.key: prompt.sha},
        "timings": {"answer": time.perf_counter() - started},
    }
