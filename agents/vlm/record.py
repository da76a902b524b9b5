"""What a VLM call was sent, as a trace records it: the messages with their text parts verbatim (up to a
cap) and their images and audio clips by SHA-256, byte size and (images) the dimensions of the copy sent.

A backend that re-encodes media (:class:`~agents.vlm.openai_compat.OpenAICompatibleVLM` down-scales images to
``KAR_VLM_MAX_IMAGE_SIDE``) reports the copies it put in the request (``ChatResult.sent_media``, described by
:func:`describe_image` / :func:`describe_audio`); for a backend that reports none, the media handed to it are
described instead, and each such part says so (``"described": "input"``).

A text part longer than the cap keeps its first ``max_chars`` characters and is marked ``"cut": true`` with
its original length in ``"chars"``; a prompt within the cap is recorded whole.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence
from typing import Any

from agents.vlm.base import AudioInput, ChatMessage, ImageInput

#: where each described part's bytes came from: the request the backend built, or the input handed to it
FROM_REQUEST = "request"
FROM_INPUT = "input"


def describe_image(data: bytes) -> dict[str, Any]:
    """An image part by its bytes: ``sha256``, ``bytes``, ``width``/``height`` and ``format`` (read from the
    header only; None where the bytes do not decode)."""
    from PIL import Image

    width = height = fmt = None
    try:
        with Image.open(io.BytesIO(data)) as img:
            (width, height), fmt = img.size, (img.format or "").lower() or None
    except Exception:  # PIL raises many types for bad data: the part is still recorded by hash and size
        pass
    return {"type": "image", "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
            "width": width, "height": height, "format": fmt}


def describe_audio(data: bytes, fmt: str) -> dict[str, Any]:
    """An audio part by its bytes: ``sha256``, ``bytes`` and the ``format`` it was sent as."""
    return {"type": "audio", "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "format": fmt}


def text_part(text: str, max_chars: int) -> dict[str, Any]:
    """A text part, verbatim within ``max_chars``; beyond it cut there and marked with its original length."""
    if len(text) <= max_chars:
        return {"type": "text", "text": text}
    return {"type": "text", "text": text[:max_chars], "cut": True, "chars": len(text)}


def _input_media(message: ChatMessage) -> list[dict[str, Any]]:
    images: Sequence[ImageInput] = message.images
    audio: Sequence[AudioInput] = getattr(message, "audio", ())
    found = [describe_image(image.data) for image in images] + [describe_audio(clip.data, clip.format) for clip in audio]
    return [{**part, "described": FROM_INPUT} for part in found]


def record_messages(messages: Sequence[ChatMessage], sent_media: Sequence[dict[str, Any]] | None, max_chars: int) -> list[dict[str, Any]]:
    """The messages as sent: ``[{role, content: [parts]}]``, each turn's media parts first (the order the
    OpenAI-compatible request has), then its text.  ``sent_media``: the backend's description of every media
    part of the request, in order (None: the inputs are described instead)."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, got {max_chars}")
    queue = list(sent_media) if sent_media is not None else None
    out = []
    for message in messages:
        n = len(message.images) + len(getattr(message, "audio", ()))
        if queue is not None and len(queue) >= n:
            media = [{**part, "described": FROM_REQUEST} for part in queue[:n]]
            del queue[:n]
        else:
            media = _input_media(message)
        out.append({"role": message.role, "content": [*media, text_part(message.text, max_chars)]})
    return out


def cut_parts(record: dict[str, Any]) -> int:
    """How many text parts of a call's record were cut."""
    return sum(1 for m in record.get("messages") or [] for p in m.get("content") or [] if p.get("cut"))
