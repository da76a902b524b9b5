"""``KARPipeline``: explain one image under one condition; stream stage events as they finish.

The API the CLI, the batch runner and the web service share::

    pipeline = KARPipeline(PipelineDeps(vlm=..., grounder=..., search=..., ocr=...))
    result = await pipeline.explain(image_bytes, "kar", ExplainContext(post_text="..."))
    async for event in pipeline.stream(image_bytes, "kar"):   # StageEvent per finished stage
        ...                                                     # last one: stage "done", .result set
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from agents.pipeline.deps import PipelineDeps
from agents.pipeline.graph import build_graph
from agents.pipeline.state import CONDITIONS, ExplainContext, ExplainResult, PipelineState, StageEvent

#: state keys a caller may add for video / task items (see PipelineState)
EXTRA_INPUTS = frozenset({"frames", "audio", "text_only", "audio_only", "task", "media"})

STAGE_FIELDS = {
    "answer": ("response",),
    "extract": ("ocr", "extraction"),
    "ground": ("grounding",),
    "search": ("queries", "searches"),
    "reason": ("response",),
}


class UnknownConditionError(ValueError):
    """The condition is not one of :data:`CONDITIONS`."""


def _stage_data(stage: str, update: dict[str, Any]) -> dict[str, Any]:
    data = {k: update.get(k) for k in STAGE_FIELDS.get(stage, ()) if k in update}
    if update.get("error"):
        data["error"] = update["error"]
    if stage == "search" and update.get("evidence"):
        ev = update["evidence"]
        data["evidence"] = {
            k: ev.get(k) for k in ("tokens", "truncated", "results_shown", "pieces", "dropped", "none_reason") if k in ev
        }
    return data


class KARPipeline:
    """The KAR pipeline and its baselines over one set of dependencies (graph compiled once)."""

    def __init__(self, deps: PipelineDeps, describe: dict[str, Any] | None = None) -> None:
        self.deps = deps
        self.graph = build_graph(deps)
        self.describe = describe or {}

    @property
    def model_id(self) -> str | None:
        return getattr(self.deps.vlm, "model_id", None) if self.deps.vlm is not None else None

    def _initial(
        self, image: bytes, condition: str, context: ExplainContext | None, item_id: str, language: str | None, image_name: str,
        extras: dict[str, Any] | None = None,
    ) -> PipelineState:
        if condition not in CONDITIONS:
            raise UnknownConditionError(f"unknown condition {condition!r}; choose from {', '.join(CONDITIONS)}")
        extras = dict(extras or {})
        unknown = set(extras) - EXTRA_INPUTS - {"context"}
        if unknown:
            raise ValueError(f"unknown pipeline input(s): {', '.join(sorted(unknown))}")
        extra_context = {k: str(v) for k, v in (extras.pop("context", None) or {}).items() if v}
        state: PipelineState = {
            "item_id": item_id,
            "condition": condition,
            "image": image,
            "image_name": image_name,
            "language": language,
            "context": (context or ExplainContext()).to_dict() | extra_context,
            "timings": {},
            "prompt_hashes": {},
            "vlm_calls": [],
            "prompts": [],
            "notes": [],
        }
        state.update(extras)  # type: ignore[typeddict-item]
        return state

    async def stream(
        self,
        image: bytes,
        condition: str = "kar",
        context: ExplainContext | None = None,
        *,
        item_id: str | None = None,
        language: str | None = None,
        image_path: str | None = None,
        extras: dict[str, Any] | None = None,
    ) -> AsyncIterator[StageEvent]:
        """Yield a :class:`StageEvent` per finished stage, then ``stage="done"`` with the result.

        ``extras`` carries video/task inputs: ``frames``, ``audio``, ``text_only``, ``task``,
        ``media`` (trace record) and ``context`` (more context lines, e.g. a transcript)."""
        item_id = item_id or uuid.uuid4().hex[:12]
        state = self._initial(image, condition, context, item_id, language, image_path or "image", extras)
        started = time.perf_counter()
        final: dict[str, Any] = dict(state)
        async for mode, chunk in self.graph.astream(state, stream_mode=["updates", "values"]):
            if mode == "values":
                final = chunk
                continue
            for stage, update in (chunk or {}).items():
                yield StageEvent(stage, _stage_data(stage, update or {}), time.perf_counter() - started)
        elapsed = time.perf_counter() - started
        result = self._result(final, elapsed, image_path)
        # the event carries the unrounded clock (the trace's total is rounded), so events stay ordered
        yield StageEvent("done", {"response": result.response, "error": result.error}, elapsed, result)

    async def explain(
        self,
        image: bytes,
        condition: str = "kar",
        context: ExplainContext | None = None,
        *,
        item_id: str | None = None,
        language: str | None = None,
        image_path: str | None = None,
        on_event: Callable[[StageEvent], Any] | None = None,
        extras: dict[str, Any] | None = None,
    ) -> ExplainResult:
        """Run one condition on one image and return the explanation with its trace."""
        result: ExplainResult | None = None
        async for event in self.stream(image, condition, context, item_id=item_id, language=language, image_path=image_path, extras=extras):
            if on_event is not None:
                maybe = on_event(event)
                if hasattr(maybe, "__await__"):
                    await maybe
            if event.result is not None:
                result = event.result
        assert result is not None
        return result

    def _result(self, state: dict[str, Any], total_s: float, image_path: str | None) -> ExplainResult:
        calls = list(state.get("vlm_calls") or [])
        usage = {
            "prompt_tokens": sum(c["prompt_tokens"] for c in calls),
            "completion_tokens": sum(c["completion_tokens"] for c in calls),
        }
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        timings = {k: round(v, 4) for k, v in (state.get("timings") or {}).items()}
        timings["total"] = round(total_s, 4)
        evidence = state.get("evidence")
        trace = {
            "id": state["item_id"],
            "condition": state["condition"],
            "language": state.get("language"),
            "models": {
                "vlm": self.model_id,
                "vlm_reported": sorted({c["model"] for c in calls if c.get("model")}),
                **{k: v for k, v in self.describe.items() if k != "vlm"},
            },
            "context": state.get("context") or {},
            **({"media": state.get("media")} if state.get("media") is not None else {}),
            **({"task": state.get("task"), "text_only": bool(state.get("text_only"))} if state.get("task") is not None else {}),
            "prompt_hashes": state.get("prompt_hashes") or {},
            "ocr": state.get("ocr"),
            "extraction": state.get("extraction"),
            "grounding": state.get("grounding"),
            "queries": state.get("queries") or [],
            "searches": state.get("searches") or [],
            "evidence": evidence,
            "vlm_calls": calls,
            "prompts": list(state.get("prompts") or []),
            "search_calls": len(state.get("searches") or []),
            "usage": usage,
            "timings": timings,
            "notes": state.get("notes") or [],
            "error": state.get("error"),
        }
        response = state.get("response")
        if state.get("error"):
            response = None
        return ExplainResult(
            id=state["item_id"],
            condition=state["condition"],
            response=response,
            error=state.get("error"),
            trace=trace,
            image_path=image_path,
        )
