"""What an explain input is, from its bytes (never its name): an image, a video or a sound.

Images: PNG, JPEG, still GIF/WebP.  Video: MP4, MOV (ISO BMFF), WebM/Matroska, and an animated
GIF or WebP (read as a clip).  Audio: MP3, WAV, OGG, M4A (ISO BMFF with an audio brand), FLAC.
A container that can hold either (MP4, WebM, OGG) is a video when PyAV finds a video stream in
it and a sound when it finds only audio; that is decided by :func:`agents.media.explain.prepare_media`.
Anything else is refused with the formats named (``kar explain`` exit 2, the API 415).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

IMAGE_FORMATS = "PNG, JPEG, WebP, GIF"
VIDEO_FORMATS = "MP4, WebM, MOV, animated GIF/WebP"
AUDIO_FORMATS = "MP3, WAV, OGG, M4A, FLAC"
ACCEPTED = f"an image ({IMAGE_FORMATS}), a video ({VIDEO_FORMATS}) or a sound ({AUDIO_FORMATS})"

#: ISO BMFF major brands of audio-only files (M4A, M4B audiobooks, 3GPP audio)
_AUDIO_BRANDS = {b"M4A ", b"M4B ", b"M4P ", b"F4A ", b"F4B "}
_QUICKTIME = {b"qt  "}


class UnsupportedMedia(ValueError):
    """Bytes that are no image, video or sound we read; the message names what they look like and the formats."""


@dataclass(frozen=True)
class Sniffed:
    """``kind``: image | video | audio | container (MP4/WebM/OGG: video or audio by its streams); ``format``: what the bytes are."""

    kind: str
    format: str


def _animated_webp(data: bytes) -> bool:
    return data[12:16] == b"VP8X" and len(data) > 20 and bool(data[20] & 0x02)


def _animated_gif(data: bytes) -> bool:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as img:
            return bool(getattr(img, "is_animated", False))
    except Exception:  # noqa: BLE001 - a broken GIF: the image checker says why
        return False


def _what_else(data: bytes) -> str:
    head = data[:64].lstrip()
    if data.startswith(b"PK\x03\x04") or data.startswith(b"PK\x05\x06"):
        return "a ZIP archive"
    if data.startswith(b"%PDF"):
        return "a PDF document"
    if head[:1] == b"<":
        return "an HTML or XML document"
    if head[:1] in (b"{", b"["):
        return "JSON text"
    if not data:
        return "empty (0 bytes)"
    return "not a format we read"


def sniff(data: bytes) -> Sniffed:
    """The kind and format of explain input bytes; raises :class:`UnsupportedMedia` naming the formats."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return Sniffed("image", "png")
    if data.startswith(b"\xff\xd8\xff"):
        return Sniffed("image", "jpeg")
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return Sniffed("video", "gif") if _animated_gif(data) else Sniffed("image", "gif")
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return Sniffed("video", "webp") if _animated_webp(data) else Sniffed("image", "webp")
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return Sniffed("audio", "wav")
    if data[4:8] == b"ftyp":
        brand = data[8:12]
        if brand in _AUDIO_BRANDS:
            return Sniffed("audio", "m4a")
        return Sniffed("container", "mov" if brand in _QUICKTIME else "mp4")
    if data.startswith(b"\x1a\x45\xdf\xa3"):
        return Sniffed("container", "webm")
    if data.startswith(b"OggS"):
        return Sniffed("container", "ogg")
    if data.startswith(b"fLaC"):
        return Sniffed("audio", "flac")
    if data.startswith(b"ID3") or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0 and data[1] & 0x06):
        return Sniffed("audio", "mp3")
    raise UnsupportedMedia(f"the bytes are {_what_else(data)}; send {ACCEPTED}")
