"""One explain input, whatever it is: an image goes to the pipeline as it is; a clip or a sound goes
through the runner's media preparation (sampled frames, OCR of each frame in the pipeline, native
audio or a transcript per ``KAR_ASR_*``/``KAR_MEDIA_AUDIO``), within the explain limits
(:class:`~agents.media.frames.MediaLimits`).  ``kar explain``, ``POST /v1/explain`` and the web page
all call :func:`prepare_media`; the benchmark runner builds its clip inputs with :func:`clip_inputs`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.media.frames import MediaError, MediaLimits, open_container, sample_animation
from agents.media.prepare import MediaBundle, prepare_audio, prepare_video
from agents.media.sniff import Sniffed, sniff

__all__ = ["MediaError", "MediaInput", "clip_inputs", "media_context", "prepare_media", "sniff_file"]

_AUDIO_SAID = {"native": "its audio track is attached", "transcribed": "its audio is transcribed below",
               "no_audio_track": "it has no audio track", "none": "its audio is not provided",
               "failed": "its audio could not be transcribed"}


def media_context(bundle: MediaBundle) -> dict[str, str]:
    """Context lines describing a clip or a sound: its frames' timestamps and the transcript when there is one."""
    if bundle.kind == "audio":
        text = f"a {bundle.duration_s:.1f} s sound (no picture)"
    else:
        times = ", ".join(f"{f.t:.1f}" for f in bundle.frames)
        text = f"{len(bundle.frames)} frames of a {bundle.duration_s:.1f} s video, at {times} s"
        if bundle.truncated:
            text += f" (only the first {bundle.read_s:.0f} s were read)"
    out = {"media": f"{text}; {_AUDIO_SAID.get(bundle.audio_mode, bundle.audio_mode)}"}
    if bundle.transcript:
        out["transcript"] = bundle.transcript
    return out


def clip_inputs(bundle: MediaBundle, prepare_s: float | None = None, audio_only: bool = False) -> tuple[bytes, dict[str, Any]]:
    """The pipeline's ``image`` (the first frame; empty for a sound) and ``extras`` for a prepared clip or sound."""
    audio_only = audio_only or bundle.kind == "audio"
    extras: dict[str, Any] = {}
    if audio_only:  # no frames, no OCR of them: the audio (native or transcribed) alone
        extras["audio_only"] = True
    else:
        extras["frames"] = [f.jpeg for f in bundle.frames]
    if bundle.audio_wav:
        extras["audio"] = bundle.audio_wav
    media = bundle.trace()
    if prepare_s is not None:
        media["prepare_s"] = round(prepare_s, 4)
    if audio_only:
        media["audio_only"] = True
    extras["media"] = media
    if audio_only:
        extras["context"] = {"transcript": bundle.transcript} if bundle.transcript else {}
        if bundle.kind == "audio":
            extras["context"]["media"] = media_context(bundle)["media"]
    else:
        extras["context"] = media_context(bundle)
    return (bundle.frames[0].jpeg if bundle.frames else b""), extras


@dataclass
class MediaInput:
    """What one explain input became: ``kind`` image | video | audio, its format, the pipeline's image and extras."""

    kind: str
    format: str
    image: bytes
    extras: dict[str, Any] = field(default_factory=dict)
    bundle: MediaBundle | None = None

    def describe(self) -> dict[str, Any]:
        """The reply's ``media`` record (the trace has the full one)."""
        if self.bundle is None:
            return {"kind": self.kind, "format": self.format}
        b = self.bundle
        return {"kind": self.kind, "format": self.format, "duration_s": round(b.duration_s, 3), "frames": len(b.frames),
                "audio_mode": b.audio_mode, "transcript": b.transcript}


    def thumbnails(self, side: int = 160) -> list[dict[str, Any]]:
        """The sampled frames as small JPEG data URLs with their times (what the web page shows)."""
        import base64
        import io

        from PIL import Image

        out = []
        for frame in self.bundle.frames if self.bundle is not None else []:
            with Image.open(io.BytesIO(frame.jpeg)) as img:
                img.thumbnail((side, side))
                buffer = io.BytesIO()
                img.convert("RGB").save(buffer, format="JPEG", quality=70)
            out.append({"t": round(frame.t, 3), "src": "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()})
        return out


def sniff_file(path: Path, head: bytes | None = None) -> Sniffed:
    """:func:`~agents.media.sniff.sniff` of a file's bytes (its first 64 KiB unless given)."""
    if head is None:
        with Path(path).open("rb") as fh:
            head = fh.read(65536)
    return sniff(head)


def _has_video(path: Path) -> bool:
    container = open_container(path)
    try:
        return bool(container.streams.video)
    finally:
        container.close()


def prepare_media(
    path: Path, sniffed: Sniffed, settings: Any, *, language: str | None = None, transcriber: Any = None,
    limits: MediaLimits | None = None,
) -> MediaInput:
    """A clip or a sound (``sniffed`` by :func:`sniff_file`) prepared for the pipeline within ``limits``
    (default: the settings' ``KAR_MEDIA_MAX_*``); raises :class:`~agents.media.frames.MediaError` (a
    :class:`~agents.media.frames.MediaLimitError` names the limit)."""
    if sniffed.kind == "image":
        raise ValueError("prepare_media takes a clip or a sound; an image goes to the pipeline as it is")
    limits = limits or MediaLimits.from_settings(settings)
    kind = sniffed.kind
    if kind == "container":
        kind = "video" if _has_video(path) else "audio"
    started = time.perf_counter()
    if kind == "video" and sniffed.format in ("gif", "webp"):  # an animated image: its frames, no sound
        sample = sample_animation(path, settings.media_frames, frame_side=settings.media_frame_side, limits=limits)
        bundle = MediaBundle(str(path), sample.frames, sample.duration_s, sample.read_s, False, "no_audio_track")
    elif kind == "video":
        bundle = prepare_video(path, settings=settings, transcriber=transcriber, language=language, limits=limits)
    else:
        bundle = prepare_audio(path, settings=settings, transcriber=transcriber, language=language, limits=limits)
    prepare_s = time.perf_counter() - started
    image, extras = clip_inputs(bundle, prepare_s)
    extras["media"]["format"] = sniffed.format
    return MediaInput(kind, sniffed.format, image, extras, bundle)
