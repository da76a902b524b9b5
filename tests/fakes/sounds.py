"""Sounds the tests make: a melody of random notes (no two seeds alike) and its WAV bytes."""

from __future__ import annotations

import io
import wave

import numpy as np

from retrieval.sounds import fingerprint as fp

SR = fp.SAMPLE_RATE


def melody(seed: int, seconds: float = 6.0) -> np.ndarray:
    """Notes of random pitch, length and timbre (no two seeds alike)."""
    rng = np.random.default_rng(seed)
    parts, total = [], 0
    while total < seconds * SR:
        n = int(SR * rng.uniform(0.1, 0.4))
        t = np.arange(n) / SR
        f = 110 * 2 ** (int(rng.integers(0, 40)) / 12)
        env = np.minimum(1, t / 0.01) * np.exp(-t * rng.uniform(2, 8))
        parts.append((np.sin(2 * np.pi * f * t) + rng.uniform(0, 0.5) * np.sin(4 * np.pi * f * t)) * env)
        total += n
    return (0.5 * np.concatenate(parts)[: int(seconds * SR)]).astype(np.float32)


def wav_bytes(x: np.ndarray) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SR)
        w.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())
    return buf.getvalue()
