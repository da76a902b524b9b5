"""Everything a video item needs before the model call: frames, audio (native WAV or a
transcript, or neither) and a trace record saying which."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.media.audio import Transcriber, extract_wav
from agents.media.frames import Frame, MediaError, MediaLimits, container_duration, open_container, sample_frames

AUDIO_MODES = ("auto", "native", "transcribe", "none")


@dataclass
class MediaBundle:
    """Frames, audio and transcript of one clip, plus how they were obtained."""

    path: str
    frames: list[Frame]
    duration_s: float
    read_s: float
    truncated: bool
    audio_mode: str  # native | transcribed | none | no_audio_track | failed
    audio_wav: bytes | None = None
    transcript: str | None = None
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    kind: str = "video"  # video | audio (a sound: no frames)

    def trace(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "duration_s": round(self.duration_s, 3),
            "read_s": round(self.read_s, 3),
            "truncated": self.truncated,
            "frames": [f.describe() for f in self.frames],
            "audio_mode": self.audio_mode,
            "audio_bytes": len(self.audio_wav) if self.audio_wav else 0,
            "transcript": self.transcript,
            "notes": self.notes,
            "timings": {k: round(v, 4) for k, v in self.timings.items()},
        }


def resolve_audio_mode(mode: str, settings: Any) -> str:
    if mode not in AUDIO_MODES:
        raise MediaError(f"unknown audio mode {mode!r}; choose from {', '.join(AUDIO_MODES)}")
    if mode == "auto":
        return "transcribe" if getattr(settings, "asr_base_url", None) else "none"
    return mode


def prepare_video(
    path: str | Path,
    *,
    settings: Any,
    frames: int | None = None,
    audio_mode: str | None = None,
    audio_path: str | Path | None = None,
    transcriber: Transcriber | None = None,
    language: str | None = None,
    limits: MediaLimits | None = None,
) -> MediaBundle:
    """Sample frames and handle the audio as configured; MediaError for an unusable video.

    A clip without an audio track is not an error: ``audio_mode`` says ``no_audio_track``.
    A failed transcription is recorded (``failed`` + the reason in notes), not fatal.  With ``limits``
    (explain inputs) a clip over a limit is refused while decoding (:class:`MediaLimits`)."""
    started = time.perf_counter()
    sample = sample_frames(
        path,
        frames or settings.media_frames,
        scene_frames=settings.media_scene_frames,
        scene_threshold=settings.media_scene_threshold,
        max_duration_s=settings.media_max_duration_s,
        frame_side=settings.media_frame_side,
        limits=limits,
    )
    bundle = MediaBundle(str(path), sample.frames, sample.duration_s, sample.read_s, sample.truncated, "none", notes=list(sample.notes))
    bundle.timings["frames"] = time.perf_counter() - started
    mode = resolve_audio_mode(audio_mode or settings.media_audio, settings)
    if mode == "none":
        return bundle
    return _with_audio(bundle, audio_path or path, mode, settings, transcriber, language, limits)


def prepare_audio(
    path: str | Path,
    *,
    settings: Any,
    audio_mode: str | None = None,
    transcriber: Transcriber | None = None,
    language: str | None = None,
    limits: MediaLimits | None = None,
) -> MediaBundle:
    """A sound (no frames): its audio decoded within ``limits`` whatever the mode (a sound over a limit is
    refused even when it is not sent on), then sent natively, transcribed, or neither, as configured."""
    started = time.perf_counter()
    container = open_container(path)
    try:
        duration = container_duration(container, container.streams.audio[0] if container.streams.audio else None)
    finally:
        container.close()
    wav = extract_wav(path, settings.media_max_duration_s, limits=limits)
    if wav is None:
        raise MediaError(f"{path}: has no audio stream")
    read_s = max(0.0, (len(wav) - 44) / 2 / 16_000)
    bundle = MediaBundle(str(path), [], duration or read_s, read_s, False, "none", kind="audio")
    bundle.timings["audio"] = time.perf_counter() - started
    mode = resolve_audio_mode(audio_mode or settings.media_audio, settings)
    if mode == "none":
        bundle.notes.append("the sound is not sent on: set KAR_ASR_BASE_URL and KAR_ASR_MODEL to transcribe it, "
                            "or KAR_MEDIA_AUDIO=native to send it to the VLM")
        return bundle
    return _with_audio(bundle, path, mode, settings, transcriber, language, limits, wav=wav)


def _with_audio(
    bundle: MediaBundle, path: str | Path, mode: str, settings: Any, transcriber: Transcriber | None, language: str | None,
    limits: MediaLimits | None, wav: bytes | None = None,
) -> MediaBundle:
    if wav is None:
        started = time.perf_counter()
        wav = extract_wav(path, settings.media_max_duration_s, limits=limits)
        bundle.timings["audio"] = time.perf_counter() - started
    if wav is None:
        bundle.audio_mode = "no_audio_track"
        bundle.notes.append("the clip has no audio track: sent without audio")
        return bundle
    if mode == "native":
        bundle.audio_mode, bundle.audio_wav = "native", wav
        return bundle
    started = time.perf_counter()
    try:
        bundle.transcript = (transcriber or Transcriber.from_settings(settings)).transcribe(wav, language)
        bundle.audio_mode = "transcribed"
    except MediaError:
        raise
    except Exception as exc:  # the endpoint failed: recorded, the item still runs on its frames
        bundle.audio_mode = "failed"
        bundle.notes.append(f"transcription failed: {type(exc).__name__}: {exc}")
    bundle.timings["transcribe"] = time.perf_counter() - started
    return bundle
