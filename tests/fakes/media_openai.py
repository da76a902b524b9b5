"""The fake OpenAI-compatible server, extended for media: embeddings and audio transcription.

``/v1/chat/completions`` is the base server's (it records image_url and input_audio parts);
``/v1/embeddings`` returns bag-of-words hashing vectors (texts sharing words are close);
``/v1/audio/transcriptions`` (multipart) returns ``transcript`` and records the upload size.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import numpy as np

from tests.fakes.openai_server import FakeOpenAIServer, FakeReply, RecordedRequest

DIM = 64


def hash_vector(text: str) -> list[float]:
    """A deterministic bag-of-words vector (unit length; zero text → a fixed unit vector)."""
    vec = np.zeros(DIM)
    for word in text.lower().split():
        h = int(hashlib.blake2b(word.encode(), digest_size=4).hexdigest(), 16)
        vec[h % DIM] += 1.0
    if not vec.any():
        vec[0] = 1.0
    return (vec / np.linalg.norm(vec)).tolist()


class FakeMediaOpenAIServer(FakeOpenAIServer):
    """Chat (images + audio parts), embeddings and transcription on one loopback server."""

    def __init__(self, *args: Any, transcript: str = "hello from the clip", **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.transcript = transcript

    def _completion(self, request: RecordedRequest, reply: FakeReply) -> dict[str, Any]:
        if request.path.rstrip("/").endswith("/embeddings"):
            texts = (request.json or {}).get("input")
            texts = [texts] if isinstance(texts, str) else list(texts or [])
            return {"object": "list", "model": (request.json or {}).get("model", self.model),
                    "data": [{"object": "embedding", "index": i, "embedding": hash_vector(t)} for i, t in enumerate(texts)],
                    "usage": {"prompt_tokens": 1, "total_tokens": 1}}
        if request.path.rstrip("/").endswith("/audio/transcriptions"):
            if "multipart/form-data" not in request.headers.get("content-type", ""):
                return {"error": "expected multipart"}
            return {"text": self.transcript}
        return super()._completion(request, reply)

    def audio_parts(self) -> list[dict[str, Any]]:
        """Every ``input_audio`` part of every chat request, in order."""
        parts = []
        for req in self.requests:
            for message in req.messages:
                content = message.get("content")
                if isinstance(content, list):
                    parts += [p for p in content if p.get("type") == "input_audio"]
        return parts

    def paths(self) -> list[str]:
        return [r.path for r in self.requests]


__all__ = ["FakeMediaOpenAIServer", "hash_vector", "FakeReply", "time"]
