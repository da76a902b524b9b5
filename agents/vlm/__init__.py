"""VLM backends: the protocol and its implementations."""

from agents.vlm.base import (
    ChatMessage,
    ChatResult,
    ImageInput,
    SamplingParams,
    TokenUsage,
    VisionLanguageModel,
    VLMError,
    VLMNotConfiguredError,
)

__all__ = [
    "ChatMessage",
    "ChatResult",
    "ImageInput",
    "SamplingParams",
    "TokenUsage",
    "VisionLanguageModel",
    "VLMError",
    "VLMNotConfiguredError",
]
