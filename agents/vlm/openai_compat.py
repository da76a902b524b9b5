"""``OpenAICompatibleVLM``: any OpenAI-compatible chat server (vLLM, hosted APIs, Ollama).

Works unchanged against ``vllm serve Qwen/Qwen2.5-VL-7B-Instruct``: images go as
base64 ``data:`` URLs in ``image_url`` content parts (before the text), sampling
parameters are the standard chat-completions fields, and ``json_mode`` maps to
``response_format={"type": "json_object"}``.

Clients (``openai.AsyncOpenAI``, one per base URL, the SDK's own retries disabled) are
built lazily on first use.  Retries are ours (tenacity): exponential backoff with jitter
on 408/409/429/5xx and connection errors/timeouts, honouring ``Retry-After``; each retry
moves on to the next base URL, so a dead replica costs one attempt.

Images are down-scaled and encoded in the process-wide CPU pool (:mod:`culturebase.cpu`),
never on the event loop, and once per image: the two calls of a two-stage condition send
the same picture, so the data URL is kept in a small LRU (:class:`EncodedImages`) keyed by
a digest of the bytes, with the description of the copy it carries (SHA-256, byte size,
dimensions: :func:`agents.vlm.record.describe_image`), which each reply reports in
``ChatResult.sent_media`` for the trace.
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import hashlib
import io
import itertools
import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Literal

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from agents.vlm.base import (
    ChatMessage,
    ChatResult,
    ImageInput,
    SamplingParams,
    TokenUsage,
    VLMError,
    VLMNotConfiguredError,
)
from agents.vlm.record import describe_audio, describe_image

if TYPE_CHECKING:  # pragma: no cover
    from openai import AsyncOpenAI

    from culturebase.settings import Settings

RETRYABLE_STATUS = frozenset({408, 409, 429})
MAX_RETRY_AFTER_S = 120.0


def is_retryable(exc: BaseException) -> bool:
    """True for transient failures: 408/409/429/5xx and connection errors/timeouts."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in RETRYABLE_STATUS or exc.status_code >= 500
    return isinstance(exc, (openai.APIConnectionError, asyncio.TimeoutError))


def retry_after_seconds(exc: BaseException | None) -> float | None:
    """Seconds asked for by a ``Retry-After`` / ``retry-after-ms`` header, if any."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return max(0.0, float(value) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        if parsed is None:
            return None
        return max(0.0, parsed.timestamp() - time.time())


def encode_image(image: ImageInput, max_side: int) -> str:
    """The image as a ``data:`` URL, down-scaled so its longest side is ≤ ``max_side``."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(image.data)) as img:
            fmt = (img.format or "").upper()
            if max(img.size) <= max_side and fmt in {"PNG", "JPEG", "WEBP", "GIF"}:
                mime = "jpeg" if fmt == "JPEG" else fmt.lower()
                return f"data:image/{mime};base64,{base64.b64encode(image.data).decode()}"
            img.load()
            if getattr(img, "is_animated", False):
                img.seek(0)
            frame = img.copy()
    except Exception as exc:  # PIL raises many types for bad data
        raise VLMError(f"image {image.name!r} cannot be decoded: {exc}") from exc
    frame.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    buffer = io.BytesIO()
    if frame.mode in {"RGBA", "LA", "P"}:
        frame.save(buffer, format="PNG", optimize=False)
        mime = "png"
    else:
        frame.convert("RGB").save(buffer, format="JPEG", quality=90)
        mime = "jpeg"
    return f"data:image/{mime};base64,{base64.b64encode(buffer.getvalue()).decode()}"


class EncodedImages:
    """A bounded LRU of data URLs by (digest of the image bytes, max side), each with the description of the
    copy it carries: each picture is down-scaled, encoded and described once however many calls send it
    (thread-safe)."""

    def __init__(self, entries: int = 32) -> None:
        self.entries = entries
        self._urls: OrderedDict[tuple[bytes, int], tuple[str, dict[str, Any]]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, image: ImageInput, max_side: int) -> str:
        """The image's data URL (:func:`encode_image`), from the cache when it was encoded before."""
        return self.sent(image, max_side)[0]

    def sent(self, image: ImageInput, max_side: int) -> tuple[str, dict[str, Any]]:
        """The image's data URL and the description of the bytes it carries (:func:`describe_image`)."""
        key = (hashlib.blake2b(image.data, digest_size=16).digest(), max_side)
        with self._lock:
            found = self._urls.get(key)
            if found is not None:
                self._urls.move_to_end(key)
                self.hits += 1
                return found
        url = encode_image(image, max_side)
        found = (url, describe_image(base64.b64decode(url.split(",", 1)[1])))
        with self._lock:
            self.misses += 1
            self._urls[key] = found
            while len(self._urls) > self.entries:
                self._urls.popitem(last=False)
        return found


class OpenAICompatibleVLM:
    """A :class:`~agents.vlm.base.VisionLanguageModel` over OpenAI-compatible servers."""

    def __init__(
        self,
        base_urls: list[str],
        model: str,
        api_key: str | None = None,
        timeout_s: float = 120,
        max_retries: int = 4,
        concurrency: int = 8,
        max_image_side: int = 1024,
        default_sampling: SamplingParams | None = None,
        *,
        backoff_initial_s: float = 1.0,
        backoff_max_s: float = 60.0,
    ):
        if isinstance(base_urls, str):
            base_urls = [base_urls]
        if not base_urls:
            raise VLMNotConfiguredError("OpenAICompatibleVLM needs at least one base URL")
        if not model:
            raise VLMNotConfiguredError("OpenAICompatibleVLM needs a model id")
        self.base_urls = [url.rstrip("/") for url in base_urls]
        self.model_id = model
        self._api_key = api_key
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.concurrency = concurrency
        self.max_image_side = max_image_side
        self.encoded = EncodedImages()
        self.default_sampling = default_sampling or SamplingParams()
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self._clients: dict[str, AsyncOpenAI] = {}
        self._semaphore: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._rr = itertools.count()

    # -- construction from settings -----------------------------------------------------
    @classmethod
    def from_settings(cls, settings: Settings, role: Literal["vlm", "judge"] = "vlm") -> OpenAICompatibleVLM:
        """Build the VLM (``role="vlm"``) or the judge (``role="judge"``) from settings."""
        if role == "judge":
            urls, model, key = settings.judge_base_urls, settings.judge_model, settings.judge_api_key
            if not urls or not model:
                raise VLMNotConfiguredError(
                    "No judge model configured: set KAR_JUDGE_BASE_URLS (OpenAI-compatible base URL(s)) "
                    "and KAR_JUDGE_MODEL (and KAR_JUDGE_API_KEY if the server needs one)."
                )
            concurrency = settings.judge_concurrency
            sampling = SamplingParams(max_tokens=settings.vlm_max_tokens)
        elif role == "vlm":
            urls, model, key = settings.vlm_base_urls, settings.vlm_model, settings.vlm_api_key
            if not urls or not model:
                raise VLMNotConfiguredError(
                    "No VLM configured: set KAR_VLM_BASE_URLS (e.g. http://localhost:8001/v1 for "
                    "`vllm serve Qwen/Qwen2.5-VL-7B-Instruct --port 8001`) and KAR_VLM_MODEL (and KAR_VLM_API_KEY if needed)."
                )
            concurrency = settings.vlm_concurrency
            sampling = SamplingParams(
                temperature=settings.vlm_temperature,
                top_p=settings.vlm_top_p,
                max_tokens=settings.vlm_max_tokens,
            )
        else:  # pragma: no cover - Literal guards this
            raise ValueError(f"unknown role {role!r}")
        return cls(
            base_urls=list(urls),
            model=model,
            api_key=key.get_secret_value() if key is not None else None,
            timeout_s=settings.vlm_timeout_s,
            max_retries=settings.vlm_max_retries,
            concurrency=concurrency,
            max_image_side=settings.vlm_max_image_side,
            default_sampling=sampling,
        )

    # -- lazily built state ---------------------------------------------------------------
    def _client(self, base_url: str) -> AsyncOpenAI:
        client = self._clients.get(base_url)
        if client is None:
            from openai import AsyncOpenAI

            client = AsyncOpenAI(
                base_url=base_url,
                api_key=self._api_key or "EMPTY",
                timeout=self.timeout_s,
                max_retries=0,
            )
            self._clients[base_url] = client
        return client

    def _limiter(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._semaphore is None or self._loop is not loop:
            # a new event loop (e.g. a second asyncio.run) gets fresh loop-bound state
            self._semaphore = asyncio.Semaphore(self.concurrency)
            if self._loop is not None and self._loop is not loop:
                self._clients.clear()
            self._loop = loop
        return self._semaphore

    def _next_base_url(self) -> str:
        return self.base_urls[next(self._rr) % len(self.base_urls)]

    # -- request building -----------------------------------------------------------------
    def build_messages(self, messages: list[ChatMessage]) -> list[dict[str, Any]]:
        """OpenAI chat messages: images (data URLs) before the text of each turn."""
        return self.build_request(messages)[0]

    def build_request(self, messages: list[ChatMessage]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The OpenAI chat messages and the description of every media part they carry, in order."""
        out: list[dict[str, Any]] = []
        media: list[dict[str, Any]] = []
        for message in messages:
            audio = getattr(message, "audio", ())
            if not message.images and not audio:
                out.append({"role": message.role, "content": message.text})
                continue
            if message.role != "user":
                raise VLMError(f"images are only allowed in user messages, not {message.role!r}")
            parts: list[dict[str, Any]] = []
            for image in message.images:
                url, described = self.encoded.sent(image, self.max_image_side)
                parts.append({"type": "image_url", "image_url": {"url": url}})
                media.append(described)
            media += [describe_audio(clip.data, clip.format) for clip in audio]
            # audio as vLLM / OpenAI serve it to audio models: base64 in an input_audio part
            parts += [
                {"type": "input_audio", "input_audio": {"data": base64.b64encode(clip.data).decode(), "format": clip.format}}
                for clip in audio
            ]
            parts.append({"type": "text", "text": message.text})
            out.append({"role": "user", "content": parts})
        return out, media

    def sampling_kwargs(self, sampling: SamplingParams | None) -> dict[str, Any]:
        """Per-call sampling merged over the defaults (per-call non-None fields win)."""
        base, call = self.default_sampling, sampling or SamplingParams()
        kwargs: dict[str, Any] = {}
        for name in ("temperature", "top_p", "max_tokens", "seed"):
            value = getattr(call, name)
            if value is None:
                value = getattr(base, name)
            if value is not None:
                kwargs[name] = value
        if call.json_mode or base.json_mode:
            kwargs["response_format"] = {"type": "json_object"}
        return kwargs

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        asked = retry_after_seconds(exc)
        if asked is not None:
            return min(asked, MAX_RETRY_AFTER_S)
        return wait_exponential_jitter(initial=self.backoff_initial_s, max=self.backoff_max_s)(state)

    # -- the call ---------------------------------------------------------------------------
    async def chat(self, messages: list[ChatMessage], sampling: SamplingParams | None = None) -> ChatResult:
        """Send the conversation; retry transient failures; raise :class:`VLMError` after that."""
        from culturebase.cpu import cpu_pool

        payload, media = await cpu_pool().run(self.build_request, messages)  # decode/scale/encode: CPU work, off the event loop
        kwargs = self.sampling_kwargs(sampling)
        limiter = self._limiter()
        endpoint = self.base_urls[0]
        started = time.perf_counter()
        try:
            async with limiter:
                async for attempt in AsyncRetrying(
                    retry=retry_if_exception(is_retryable),
                    stop=stop_after_attempt(self.max_retries + 1),
                    wait=self._wait,
                    reraise=True,
                ):
                    with attempt:
                        endpoint = self._next_base_url()
                        response = await self._client(endpoint).chat.completions.create(
                            model=self.model_id, messages=payload, **kwargs
                        )
        except Exception as exc:
            raise VLMError(f"{self.model_id} at {endpoint}: {describe_error(exc)}") from exc
        if not response.choices:
            raise VLMError(f"{self.model_id} at {endpoint}: reply has no choices")
        usage = TokenUsage()
        if response.usage is not None:
            usage = TokenUsage(response.usage.prompt_tokens or 0, response.usage.completion_tokens or 0)
        return ChatResult(
            text=response.choices[0].message.content or "",
            model=response.model or self.model_id,
            usage=usage,
            latency_s=time.perf_counter() - started,
            endpoint=endpoint,
            sent_media=media,
        )

    async def aclose(self) -> None:
        """Close the HTTP clients built so far."""
        for client in self._clients.values():
            await client.close()
        self._clients.clear()


def describe_error(exc: BaseException) -> str:
    """One line: HTTP status and message, or the exception type and message."""
    status = getattr(exc, "status_code", None)
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"HTTP {status}: {text}" if status else f"{type(exc).__name__}: {text}"
