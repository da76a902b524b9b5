"""A scripted in-process :class:`VisionLanguageModel` double for tests."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from agents.vlm.base import ChatMessage, ChatResult, SamplingParams, TokenUsage, VLMError


@dataclass
class ScriptedCall:
    """What the double received on one call."""

    messages: list[ChatMessage]
    sampling: SamplingParams | None


Reply = str | Exception | Callable[[list[ChatMessage]], str]


@dataclass
class ScriptedVLM:
    """Replies from a FIFO script, then from ``default`` (text, exception or callable).

    ``usage`` is reported per call; ``delay_s`` simulates latency; every call is
    recorded in ``calls``.
    """

    script: list[Reply] = field(default_factory=list)
    default: Reply | None = None
    model_id: str = "scripted-vlm"
    prompt_tokens: int = 100
    completion_tokens: int = 20
    delay_s: float = 0.0
    calls: list[ScriptedCall] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._queue: deque[Reply] = deque(self.script)

    def push(self, *replies: Reply) -> None:
        self._queue.extend(replies)

    async def chat(self, messages: list[ChatMessage], sampling: SamplingParams | None = None) -> ChatResult:
        self.calls.append(ScriptedCall(list(messages), sampling))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        reply = self._queue.popleft() if self._queue else self.default
        if reply is None:
            raise VLMError("ScriptedVLM: script exhausted and no default reply")
        if isinstance(reply, Exception):
            raise reply
        text = reply(messages) if callable(reply) else reply
        return ChatResult(
            text=text,
            model=self.model_id,
            usage=TokenUsage(self.prompt_tokens, self.completion_tokens),
            latency_s=self.delay_s,
            endpoint="scripted",
        )
