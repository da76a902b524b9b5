"""Generated clips for the media tests and bench/media.py: drawn text, a tone, scene changes.

Made with PyAV (libx264/mpeg4 + AAC) at a small size so they encode in milliseconds.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

COLORS = [(200, 30, 30), (30, 160, 60), (40, 60, 200), (220, 200, 40)]


def make_clip(
    path: Path,
    seconds: float = 2.0,
    *,
    text: str = "HELLO",
    fps: int = 10,
    size: tuple[int, int] = (160, 96),
    scenes: int = 2,
    tone_hz: float | None = 440.0,
    sample_rate: int = 16_000,
) -> Path:
    """Write an MP4: ``scenes`` solid-colour segments with ``text`` drawn, plus a sine tone."""
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    n_frames = max(1, int(round(seconds * fps)))
    with av.open(str(path), "w") as out:
        codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
        video = out.add_stream(codec, rate=fps)
        video.width, video.height = size
        video.pix_fmt = "yuv420p"
        if codec == "libx264":
            video.options = {"preset": "ultrafast", "tune": "zerolatency"}
        audio = None
        if tone_hz is not None:
            audio = out.add_stream("aac", rate=sample_rate)
            audio.layout = "mono"
        drawn: dict[int, np.ndarray] = {}
        for i in range(n_frames):
            segment = min(scenes - 1, i * scenes // n_frames) if scenes > 0 else 0
            if segment not in drawn:
                image = Image.new("RGB", size, COLORS[segment % len(COLORS)])
                draw = ImageDraw.Draw(image)
                draw.rectangle((8, size[1] // 3, size[0] - 8, 2 * size[1] // 3), fill=(255, 255, 255))
                draw.text((14, size[1] // 3 + 4), text, fill=(0, 0, 0))
                drawn[segment] = np.asarray(image)
            frame = av.VideoFrame.from_ndarray(drawn[segment], format="rgb24")
            frame.pts = i
            frame.time_base = Fraction(1, fps)
            for packet in video.encode(frame):
                out.mux(packet)
        for packet in video.encode(None):
            out.mux(packet)
        if audio is not None:
            total = int(seconds * sample_rate)
            t = np.arange(total) / sample_rate
            samples = (0.3 * np.sin(2 * np.pi * tone_hz * t)).astype(np.float32)
            chunk = 1024
            for start in range(0, total, chunk):
                block = samples[start:start + chunk]
                frame = av.AudioFrame.from_ndarray(block.reshape(1, -1), format="fltp", layout="mono")
                frame.sample_rate = sample_rate
                frame.pts = start
                frame.time_base = Fraction(1, sample_rate)
                for packet in audio.encode(frame):
                    out.mux(packet)
            for packet in audio.encode(None):
                out.mux(packet)
    return path
