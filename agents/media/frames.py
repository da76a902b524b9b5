"""Frames of a video with PyAV: N uniformly spaced frames plus the strongest scene changes.

One sequential decoding pass (multi-threaded decoder) up to the duration cap; about four
frames a second are compared at 32×18 RGB with the previous compared one (mean absolute change, 0–1) to find scene
changes; the uniform targets take the first frame at or after ``(i + 0.5)·duration/N``.
Timestamps (seconds, from the stream's PTS) are kept with each frame.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from culturebase.settings import setting_default


class MediaError(ValueError):
    """The media file cannot be used (not a video, no video stream, undecodable); names the file."""


class MediaLimitError(MediaError):
    """A clip over one of the explain limits; ``limit`` names the setting, ``code`` the API error code."""

    def __init__(self, code: str, limit: str, message: str) -> None:
        super().__init__(f"{message} ({limit})")
        self.code = code
        self.limit = limit


@dataclass(frozen=True)
class MediaLimits:
    """What an explain input may hold, enforced while decoding (the container's claims first, then each
    decoded frame and sample): duration ``KAR_MEDIA_MAX_S``, pixels a frame ``KAR_MEDIA_MAX_PIXELS``,
    decoded frames ``KAR_MEDIA_MAX_FRAMES``.  A clip over a limit is refused, never cut silently; a clip
    that decodes to much less than its container claims is refused as truncated."""

    max_s: float = setting_default("media_max_s")
    max_pixels: int = setting_default("media_max_pixels")
    max_frames: int = setting_default("media_max_frames")

    @classmethod
    def from_settings(cls, settings: Any) -> "MediaLimits":
        return cls(settings.media_max_s, settings.media_max_pixels, settings.media_max_frames)

    def check_duration(self, path: Any, claimed: float) -> None:
        if claimed > self.max_s:
            raise MediaLimitError("media_too_long", "KAR_MEDIA_MAX_S",
                                  f"{Path(str(path)).name}: the clip is {claimed:.1f} s long; the limit is {self.max_s:g} s")

    def check_decoded(self, path: Any, t: float, frames: int, pixels: int) -> None:
        name = Path(str(path)).name
        if t > self.max_s + 0.5:
            raise MediaLimitError("media_too_long", "KAR_MEDIA_MAX_S",
                                  f"{name}: decoding passed {self.max_s:g} s (the container did not say how long it is)")
        if frames > self.max_frames:
            raise MediaLimitError("media_too_many_frames", "KAR_MEDIA_MAX_FRAMES",
                                  f"{name}: more than {self.max_frames} frames")
        if pixels > self.max_pixels:
            raise MediaLimitError("media_too_many_pixels", "KAR_MEDIA_MAX_PIXELS",
                                  f"{name}: a frame of {pixels} pixels; the limit is {self.max_pixels}")

    def check_complete(self, path: Any, claimed: float, decoded: float) -> None:
        if claimed > 0 and decoded < claimed - max(1.0, 0.25 * claimed):
            raise MediaLimitError("media_truncated", "a truncated or damaged file",
                                  f"{Path(str(path)).name}: the container says {claimed:.1f} s but only {decoded:.1f} s could be decoded")


@dataclass(frozen=True)
class Frame:
    """One sampled frame: time in seconds, JPEG bytes, why it was picked (uniform/scene)."""

    t: float
    jpeg: bytes
    kind: str

    def describe(self) -> dict[str, Any]:
        return {"t": round(self.t, 3), "kind": self.kind, "bytes": len(self.jpeg)}


@dataclass
class FrameSample:
    frames: list[Frame]
    duration_s: float  # the clip's full duration (as far as known)
    read_s: float  # seconds actually read (≤ the cap)
    truncated: bool
    fps: float | None
    notes: list[str] = field(default_factory=list)


def open_container(path: str | Path) -> Any:
    """``av.open`` with the file named in any error."""
    import av

    path = Path(path)
    if not path.is_file():
        raise MediaError(f"{path}: file not found")
    try:
        return av.open(str(path))
    except (av.error.FFmpegError, OSError, ValueError) as exc:  # InvalidDataError and friends
        raise MediaError(f"{path}: not a readable video or audio file ({type(exc).__name__}: {exc})") from None


def container_duration(container: Any, stream: Any | None) -> float:
    """Duration in seconds from the stream, else the container (0.0 when unknown)."""
    if stream is not None and stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return float(container.duration) / 1_000_000
    return 0.0


def _jpeg(frame: Any, side: int) -> bytes:
    image = frame.to_image()
    image.thumbnail((side, side))
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="JPEG", quality=85)
    return buffer.getvalue()


@dataclass
class SceneChanges:
    """The strongest scene changes seen so far: each compared frame at 32×18 RGB against the previous compared one."""

    keep: int
    threshold: float
    found: list[tuple[float, float, Any]] = field(default_factory=list)  # (change, t, frame), strongest first
    previous: np.ndarray | None = None

    def offer(self, t: float, frame: Any) -> None:
        grey = frame.to_ndarray(format="rgb24", width=32, height=18).astype(np.float32)
        if self.previous is not None:
            change = float(np.abs(grey - self.previous).mean() / 255.0)
            if change >= self.threshold:
                self.found.append((change, t, frame))
                self.found.sort(key=lambda c: -c[0])
                del self.found[self.keep:]
        self.previous = grey


@dataclass
class DecodePass:
    """What one decoding pass kept: the uniform frames, the scene changes, the first and last frames decoded."""

    uniform: list[Frame] = field(default_factory=list)
    first: Any = None
    last: Any = None


def decode_pass(container: Any, stream: Any, path: str | Path, read_s: float, targets: list[float], scenes: SceneChanges,
                stride: int, frame_side: int, limits: MediaLimits | None) -> DecodePass:
    """Decode up to ``read_s``, taking the first frame at or after each target and offering every ``stride``-th
    frame to ``scenes``; a decoding error after the first frame ends the pass (refused as truncated with ``limits``)."""
    import av

    out = DecodePass()
    next_target = 0
    index = -1
    try:
        for frame in container.decode(stream):
            index += 1
            t = float(frame.time) if frame.time is not None else 0.0
            if limits is not None:
                limits.check_decoded(path, t, index + 1, frame.width * frame.height)
            if t > read_s:
                break
            out.first = out.first if out.first is not None else frame
            out.last = frame
            while next_target < len(targets) and t >= targets[next_target]:
                if not out.uniform or out.uniform[-1].t != t:
                    out.uniform.append(Frame(t, _jpeg(frame, frame_side), "uniform"))
                next_target += 1
            if scenes.keep and index % stride == 0:
                scenes.offer(t, frame)
    except av.error.FFmpegError as exc:
        if out.first is None:
            raise MediaError(f"{path}: video stream cannot be decoded ({exc})") from None
        if limits is not None:
            raise MediaLimitError("media_truncated", "a truncated or damaged file",
                                  f"{Path(str(path)).name}: decoding failed after {float(out.last.time or 0.0):.1f} s ({exc})") from None
    return out


def sample_frames(
    path: str | Path,
    n: int = setting_default("media_frames"),
    *,
    scene_frames: int = setting_default("media_scene_frames"),
    scene_threshold: float = setting_default("media_scene_threshold"),
    max_duration_s: float = setting_default("media_max_duration_s"),
    frame_side: int = setting_default("media_frame_side"),
    limits: MediaLimits | None = None,
) -> FrameSample:
    """Sample ``n`` uniform frames plus up to ``scene_frames`` scene-change frames.

    With ``limits`` (explain inputs) a clip over a limit is refused while it is decoded, and one that
    decodes short of its claimed duration or fails mid-way is refused as truncated, instead of being cut."""
    container = open_container(path)
    try:
        if not container.streams.video:
            raise MediaError(f"{path}: has no video stream (an audio-only or non-video file)")
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        duration = container_duration(container, stream)
        if limits is not None:
            limits.check_duration(path, duration)
            limits.check_decoded(path, 0.0, 0, (stream.codec_context.width or 0) * (stream.codec_context.height or 0))
            max_duration_s = limits.max_s + 1.0  # past the limit check_decoded refuses; nothing is cut
        fps = float(stream.average_rate) if stream.average_rate else None
        read_s = min(duration, max_duration_s) if duration > 0 else max_duration_s
        truncated = duration > max_duration_s
        targets = [(i + 0.5) * read_s / n for i in range(n)] if duration > 0 else []
        scenes = SceneChanges(scene_frames, scene_threshold)
        # scene changes are looked for about 4 times a second (every frame is still decoded)
        stride = max(1, round((fps or 4.0) / 4.0))
        decoded = decode_pass(container, stream, path, read_s, targets, scenes, stride, frame_side, limits)
        first, last, uniform = decoded.first, decoded.last, decoded.uniform
        if first is None:
            raise MediaError(f"{path}: the video stream has no decodable frame")
        if limits is not None:
            limits.check_complete(path, duration, float(last.time or 0.0))
        notes = []
        if not targets or not uniform:  # unknown duration or a very short clip: take what exists
            uniform = [Frame(float(first.time or 0.0), _jpeg(first, frame_side), "uniform")]
            if last is not first:
                uniform.append(Frame(float(last.time or 0.0), _jpeg(last, frame_side), "uniform"))
        if truncated:
            notes.append(f"video is {duration:.0f} s long: only the first {max_duration_s:.0f} s were read (KAR_MEDIA_MAX_DURATION_S)")
        taken = {f.t for f in uniform}
        extra = [Frame(t, _jpeg(frame, frame_side), "scene") for _, t, frame in scenes.found if all(abs(t - u) > 0.1 for u in taken)]
        frames = sorted(uniform + extra, key=lambda f: f.t)
        return FrameSample(frames, duration, min(read_s, float(last.time or 0.0)) if last is not None else 0.0, truncated, fps, notes)
    finally:
        container.close()


def sample_animation(path: str | Path, n: int = setting_default("media_frames"), *, frame_side: int = setting_default("media_frame_side"), limits: MediaLimits | None = None) -> FrameSample:
    """Frames of an animated GIF or WebP, read with Pillow (FFmpeg builds differ in animated WebP support):
    ``n`` frames spread evenly over the animation, timed by each frame's duration.  With ``limits`` the
    frame size, the frame count and the total duration are checked before any frame is decoded."""
    from PIL import Image

    path = Path(path)
    try:
        img = Image.open(path)
    except Exception as exc:  # noqa: BLE001 - any unreadable file: named
        raise MediaError(f"{path}: not a readable animation ({type(exc).__name__}: {exc})") from None
    with img:
        count = int(getattr(img, "n_frames", 1) or 1)
        if limits is not None:
            limits.check_decoded(path, 0.0, count, img.size[0] * img.size[1])
        starts: list[float] = []
        t = 0.0
        for index in range(count):  # durations come from the frame headers as Pillow seeks
            img.seek(index)
            starts.append(t)
            t += float(img.info.get("duration") or 100) / 1000.0
            if limits is not None:
                limits.check_decoded(path, t, index + 1, img.size[0] * img.size[1])
        k = min(n, count)
        wanted = sorted({round(i * (count - 1) / max(1, k - 1)) for i in range(k)})
        frames = []
        for index in wanted:
            img.seek(index)
            picture = img.convert("RGB")
            picture.thumbnail((frame_side, frame_side))
            buffer = io.BytesIO()
            picture.save(buffer, format="JPEG", quality=85)
            frames.append(Frame(starts[index], buffer.getvalue(), "uniform"))
    return FrameSample(frames, t, t, False, None)
