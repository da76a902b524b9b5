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


class MediaError(ValueError):
    """The media file cannot be used (not a video, no video stream, undecodable); names the file."""


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


def sample_frames(
    path: str | Path,
    n: int = 8,
    *,
    scene_frames: int = 4,
    scene_threshold: float = 0.2,
    max_duration_s: float = 600.0,
    frame_side: int = 768,
) -> FrameSample:
    """Sample ``n`` uniform frames plus up to ``scene_frames`` scene-change frames."""
    import av

    container = open_container(path)
    try:
        if not container.streams.video:
            raise MediaError(f"{path}: has no video stream (an audio-only or non-video file)")
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        duration = container_duration(container, stream)
        fps = float(stream.average_rate) if stream.average_rate else None
        read_s = min(duration, max_duration_s) if duration > 0 else max_duration_s
        truncated = duration > max_duration_s
        targets = [(i + 0.5) * read_s / n for i in range(n)] if duration > 0 else []
        uniform: list[Frame] = []
        scene: list[tuple[float, float, Any]] = []  # (change, t, frame)
        previous: np.ndarray | None = None
        first: Any = None
        last: Any = None
        next_target = 0
        # scene changes are looked for about 4 times a second (every frame is still decoded)
        stride = max(1, round((fps or 4.0) / 4.0))
        index = -1
        try:
            for frame in container.decode(stream):
                index += 1
                t = float(frame.time) if frame.time is not None else 0.0
                if t > read_s:
                    break
                first = first if first is not None else frame
                last = frame
                while next_target < len(targets) and t >= targets[next_target]:
                    if not uniform or uniform[-1].t != t:
                        uniform.append(Frame(t, _jpeg(frame, frame_side), "uniform"))
                    next_target += 1
                if scene_frames and index % stride == 0:
                    grey = frame.to_ndarray(format="rgb24", width=32, height=18).astype(np.float32)
                    if previous is not None:
                        change = float(np.abs(grey - previous).mean() / 255.0)
                        if change >= scene_threshold:
                            scene.append((change, t, frame))
                            scene.sort(key=lambda c: -c[0])
                            del scene[scene_frames:]
                    previous = grey
        except av.error.FFmpegError as exc:
            if first is None:
                raise MediaError(f"{path}: video stream cannot be decoded ({exc})") from None
        if first is None:
            raise MediaError(f"{path}: the video stream has no decodable frame")
        notes = []
        if not targets or not uniform:  # unknown duration or a very short clip: take what exists
            uniform = [Frame(float(first.time or 0.0), _jpeg(first, frame_side), "uniform")]
            if last is not first:
                uniform.append(Frame(float(last.time or 0.0), _jpeg(last, frame_side), "uniform"))
        if truncated:
            notes.append(f"video is {duration:.0f} s long: only the first {max_duration_s:.0f} s were read (KAR_MEDIA_MAX_DURATION_S)")
        taken = {f.t for f in uniform}
        extra = [Frame(t, _jpeg(frame, frame_side), "scene") for _, t, frame in scene if all(abs(t - u) > 0.1 for u in taken)]
        frames = sorted(uniform + extra, key=lambda f: f.t)
        return FrameSample(frames, duration, min(read_s, float(last.time or 0.0)) if last is not None else 0.0, truncated, fps, notes)
    finally:
        container.close()
