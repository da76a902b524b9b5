"""The audio track of a clip: decoded with PyAV to 16 kHz mono WAV, sent natively or transcribed.

Transcription goes to any OpenAI-compatible ``/v1/audio/transcriptions`` endpoint (vLLM
serves Whisper this way): ``KAR_ASR_BASE_URL``, ``KAR_ASR_MODEL``, ``KAR_ASR_API_KEY``.
"""

from __future__ import annotations

import io
import wave
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from culturebase.settings import setting_default
from agents.media.frames import MediaError, MediaLimitError, MediaLimits, container_duration, open_container

SAMPLE_RATE = 16_000


def extract_wav(path: str | Path, max_duration_s: float = setting_default("media_max_duration_s"), limits: MediaLimits | None = None) -> bytes | None:
    """The first audio stream as 16-bit mono 16 kHz WAV bytes (cut at the cap); None without one.

    With ``limits`` (explain inputs) a track longer than ``KAR_MEDIA_MAX_S``, by its container's claim or
    while it is decoded (a stream that never ends), is refused instead of cut."""
    import av

    container = open_container(path)
    try:
        if not container.streams.audio:
            return None
        stream = container.streams.audio[0]
        if limits is not None:
            limits.check_duration(path, container_duration(container, stream))
            max_duration_s = limits.max_s
        resampler = av.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)
        chunks: list[np.ndarray] = []
        limit = int(max_duration_s * SAMPLE_RATE)
        total = 0
        try:
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    data = out.to_ndarray().reshape(-1)
                    chunks.append(data)
                    total += data.size
                if total >= limit:
                    if limits is not None:
                        raise MediaLimitError("media_too_long", "KAR_MEDIA_MAX_S",
                                              f"{Path(str(path)).name}: the audio runs past {limits.max_s:g} s")
                    break
            for out in resampler.resample(None):
                chunks.append(out.to_ndarray().reshape(-1))
        except av.error.FFmpegError as exc:
            raise MediaError(f"{path}: audio stream cannot be decoded ({exc})") from None
        samples = np.concatenate(chunks)[:limit] if chunks else np.zeros(0, dtype=np.int16)
        buffer = io.BytesIO()
        with wave.open(buffer, "wb") as handle:
            handle.setnchannels(1)
            handle.setsampwidth(2)
            handle.setframerate(SAMPLE_RATE)
            handle.writeframes(samples.astype(np.int16).tobytes())
        return buffer.getvalue()
    finally:
        container.close()


class Transcriber:
    """An OpenAI-compatible transcription client (built lazily on first use)."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout_s: float = 120.0):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._api_key = api_key
        self.timeout_s = timeout_s
        self._client: Any = None

    @classmethod
    def from_settings(cls, settings: Any) -> "Transcriber":
        """The transcriber the settings configure (one per endpoint and model in a process: its
        HTTP client is reused across clips)."""
        if not settings.asr_base_url or not settings.asr_model:
            raise MediaError("audio transcription needs KAR_ASR_BASE_URL and KAR_ASR_MODEL (e.g. vLLM serving openai/whisper-large-v3)")
        key = settings.asr_api_key.get_secret_value() if settings.asr_api_key is not None else None
        return _shared(settings.asr_base_url, settings.asr_model, key, settings.vlm_timeout_s)

    def transcribe(self, wav: bytes, language: str | None = None) -> str:
        """The transcript text of WAV bytes."""
        if self._client is None:
            from openai import OpenAI

            self._client = OpenAI(base_url=self.base_url, api_key=self._api_key or "EMPTY", timeout=self.timeout_s, max_retries=2)
        kwargs: dict[str, Any] = {"model": self.model, "file": ("audio.wav", wav, "audio/wav")}
        if language and len(language) == 2:
            kwargs["language"] = language
        reply = self._client.audio.transcriptions.create(**kwargs)
        return (getattr(reply, "text", None) or "").strip()


@lru_cache(maxsize=8)
def _shared(base_url: str, model: str, api_key: str | None, timeout_s: float) -> Transcriber:
    return Transcriber(base_url, model, api_key, timeout_s)
