"""The vision-language model contract shared by the pipeline and the judges."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable


@dataclass(frozen=True)
class ImageInput:
    """An image to send: encoded bytes (PNG/JPEG/WebP/GIF) plus an optional name for traces."""

    data: bytes
    name: str = "image"


@dataclass(frozen=True)
class AudioInput:
    """An audio clip to send natively (OpenAI ``input_audio`` part): encoded bytes + format."""

    data: bytes
    format: str = "wav"
    name: str = "audio"


@dataclass(frozen=True)
class ChatMessage:
    """One chat turn: text plus zero or more images and audio clips (media come before the text)."""

    role: Literal["system", "user", "assistant"]
    text: str
    images: tuple[ImageInput, ...] = ()
    audio: tuple[AudioInput, ...] = ()


@dataclass(frozen=True)
class SamplingParams:
    """Per-call sampling; ``None`` fields fall back to the backend defaults."""

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    json_mode: bool = False


@dataclass
class TokenUsage:
    """Token counts of one or more calls."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, other: "TokenUsage") -> None:
        """Accumulate another usage into this one."""
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens


@dataclass
class ChatResult:
    """A model reply with its usage and the model id that produced it."""

    text: str
    model: str
    usage: TokenUsage = field(default_factory=TokenUsage)
    latency_s: float = 0.0
    endpoint: str | None = None
    #: the media parts the request carried, in order, as :mod:`agents.vlm.record` describes them (the copies
    #: sent, after any re-encoding); None when the backend does not say (the trace then describes its inputs)
    sent_media: list[dict[str, Any]] | None = None


class VLMError(RuntimeError):
    """A VLM call failed after its retries; the message says which endpoint and why."""


class VLMNotConfiguredError(RuntimeError):
    """No VLM is configured (KAR_VLM_BASE_URLS / KAR_VLM_MODEL unset)."""


@runtime_checkable
class VisionLanguageModel(Protocol):
    """Async chat with images → text + token usage."""

    model_id: str

    async def chat(self, messages: list[ChatMessage], sampling: SamplingParams | None = None) -> ChatResult:
        """Send the conversation and return the reply; raise :class:`VLMError` after retries."""
        ...
