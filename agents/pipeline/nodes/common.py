"""What every node shares: the error record, the item's language, the media the VLM sees, one recorded VLM call."""

from __future__ import annotations

from typing import Any

from agents.pipeline.deps import PipelineConfig, PipelineDeps
from agents.pipeline.state import PipelineState
from agents.vlm.base import AudioInput, ChatMessage, ImageInput, SamplingParams
from agents.vlm.record import record_messages


def node_error(stage: str, exc: BaseException) -> dict[str, Any]:
    """The trace's ``error`` entry for a failure in ``stage``."""
    return {"stage": stage, "type": type(exc).__name__, "message": str(exc)}


def item_language(state: PipelineState, config: PipelineConfig) -> str:
    """The item's language, else the run's default."""
    return state.get("language") or config.default_language


def media_parts(state: PipelineState) -> tuple[tuple[ImageInput, ...], tuple[AudioInput, ...]]:
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


def prompt_record(config: PipelineConfig, stage: str, messages: list[ChatMessage], media: Any,
                  sections: dict[str, list[int]] | None, replied: bool) -> dict[str, Any]:
    """The trace's record of what one VLM call was sent (texts verbatim up to the configured cap, media by hash)."""
    return {"stage": stage, "replied": replied, "max_chars": config.prompt_record_max_chars,
            "messages": record_messages(messages, media, config.prompt_record_max_chars), **({"sections": sections} if sections else {})}


async def call_vlm(deps: PipelineDeps, stage: str, state: PipelineState, text: str, sent: list[dict[str, Any]],
                   sampling: SamplingParams | None = None, sections: dict[str, list[int]] | None = None):
    """One VLM call; what it was sent is appended to ``sent`` (a failed call's too). Returns (result, call record)."""
    if deps.vlm is None:
        from agents.vlm.base import VLMNotConfiguredError

        raise VLMNotConfiguredError(
            "no VLM configured: set KAR_VLM_BASE_URLS and KAR_VLM_MODEL to generate explanations"
        )
    images, audio = media_parts(state)
    messages = [ChatMessage("user", text, images, audio)]
    try:
        result = await deps.vlm.chat(messages, sampling)
    except Exception:
        sent.append(prompt_record(deps.config, stage, messages, None, sections, False))
        raise
    sent.append(prompt_record(deps.config, stage, messages, getattr(result, "sent_media", None), sections, True))
    call = {
        "stage": stage,
        "model": result.model,
        "endpoint": result.endpoint,
        "prompt_tokens": result.usage.prompt_tokens,
        "completion_tokens": result.usage.completion_tokens,
        "latency_s": round(result.latency_s, 4),
    }
    return result, call
