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
from agents.vlm.openai_compat import OpenAICompatibleVLM

__all__ = [
    "ChatMessage",
    "ChatResult",
    "ImageInput",
    "OpenAICompatibleVLM",
    "SamplingParams",
    "TokenUsage",
    "VisionLanguageModel",
    "VLMError",
    "VLMNotConfiguredError",
]
