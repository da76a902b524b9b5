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
    with av.open(str(path), "w", format="mp4") as out:
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


#: sound formats: (container format, codec, sample rate)
SOUNDS = {"wav": ("wav", "pcm_s16le", 16_000), "mp3": ("mp3", "libmp3lame", 22_050), "ogg": ("ogg", "libopus", 48_000),
          "m4a": ("ipod", "aac", 16_000), "flac": ("flac", "flac", 16_000)}


def make_sound(path: Path, fmt: str, seconds: float = 1.5, tone_hz: float = 440.0) -> Path:
    """Write a sine tone as ``fmt`` (wav, mp3, ogg, m4a, flac) with PyAV."""
    import av

    container_format, codec, rate = SOUNDS[fmt]
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w", format=container_format) as out:
        stream = out.add_stream(codec, rate=rate)
        stream.layout = "mono"
        fmt_name = stream.codec_context.codec.audio_formats[0].name if stream.codec_context.codec.audio_formats else "s16"
        total = int(seconds * rate)
        t = np.arange(total) / rate
        wave = 0.3 * np.sin(2 * np.pi * tone_hz * t)
        chunk = stream.codec_context.frame_size or 1024
        for start in range(0, total, chunk):
            block = wave[start:start + chunk]
            if fmt_name.startswith("s16"):
                data = (block * 32767).astype(np.int16).reshape(1, -1)
            elif fmt_name.startswith("s32"):
                data = (block * 2**31 * 0.99).astype(np.int32).reshape(1, -1)
            else:
                data = block.astype(np.float32).reshape(1, -1)
            frame = av.AudioFrame.from_ndarray(data, format=fmt_name, layout="mono")
            frame.sample_rate = rate
            frame.pts = start
            frame.time_base = Fraction(1, rate)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return path


def make_video(path: Path, fmt: str = "mp4", seconds: float = 2.0, *, frames: list[Image.Image] | None = None, fps: int = 10,
               size: tuple[int, int] = (160, 96)) -> Path:
    """Write a silent clip as ``fmt`` (mp4, mov, webm); ``frames`` (PIL images) are shown in turn, else coloured scenes."""
    import av

    codec, container_format = {"mp4": ("mpeg4", "mp4"), "mov": ("mpeg4", "mov"), "webm": ("libvpx", "webm")}[fmt]
    path.parent.mkdir(parents=True, exist_ok=True)
    pictures = [f.convert("RGB").resize(size) for f in frames] if frames else [Image.new("RGB", size, c) for c in COLORS[:2]]
    n = max(1, int(round(seconds * fps)))
    with av.open(str(path), "w", format=container_format) as out:
        stream = out.add_stream(codec, rate=fps)
        stream.width, stream.height = size
        stream.pix_fmt = "yuv420p"
        for i in range(n):
            frame = av.VideoFrame.from_ndarray(np.asarray(pictures[i * len(pictures) // n]), format="rgb24")
            frame.pts = i
            frame.time_base = Fraction(1, fps)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return path


def make_animated(path: Path, fmt: str = "gif", n: int = 6, size: tuple[int, int] = (64, 48)) -> Path:
    """An animated GIF or WebP of ``n`` coloured frames (100 ms each), written by Pillow."""
    frames = [Image.new("RGB", size, COLORS[i % len(COLORS)]) for i in range(n)]
    path.parent.mkdir(parents=True, exist_ok=True)
    frames[0].save(path, format="GIF" if fmt == "gif" else "WEBP", save_all=True, append_images=frames[1:], duration=100, loop=0)
    return path
