"""Explain inputs: images, clips and sounds told apart by their bytes, prepared within the explain limits."""

from __future__ import annotations

import struct
import zipfile
from fractions import Fraction

import numpy as np
import pytest

from agents.media.explain import prepare_media, sniff_file
from agents.media.frames import MediaLimitError, MediaLimits
from agents.media.sniff import UnsupportedMedia, sniff
from culturebase.settings import Settings
from tests.support.clips import SOUNDS, make_animated, make_clip, make_sound, make_video


@pytest.fixture
def settings():
    return Settings(media_audio="none")


@pytest.mark.parametrize("fmt", sorted(SOUNDS))
def test_every_sound_format_is_a_sound(tmp_path, settings, fmt):
    path = make_sound(tmp_path / "sound.bin", fmt)  # the name says nothing: the bytes decide
    media = prepare_media(path, sniff_file(path), settings)
    assert media.kind == "audio" and media.image == b"" and media.extras["audio_only"] is True
    assert abs(media.bundle.duration_s - 1.5) < 0.2 and media.extras["media"]["kind"] == "audio"
    assert "sound is not sent on" in " ".join(media.bundle.notes)  # no ASR, no native audio: said


@pytest.mark.parametrize("fmt", ["mp4", "mov", "webm"])
def test_every_video_format_is_a_clip_with_sampled_frames(tmp_path, settings, fmt):
    path = make_video(tmp_path / "clip.bin", fmt)
    media = prepare_media(path, sniff_file(path), settings)
    assert media.kind == "video" and media.format == fmt
    assert len(media.extras["frames"]) >= 2 and media.image == media.extras["frames"][0]
    assert media.extras["context"]["media"].startswith(f"{len(media.extras['frames'])} frames of a 2.0 s video")


@pytest.mark.parametrize("fmt", ["gif", "webp"])
def test_an_animated_image_is_a_clip_and_a_still_one_an_image(tmp_path, settings, fmt):
    animated = make_animated(tmp_path / f"a.{fmt}", fmt, n=6)
    assert sniff_file(animated).kind == "video"
    media = prepare_media(animated, sniff_file(animated), settings)
    assert len(media.extras["frames"]) == 6 and media.bundle.audio_mode == "no_audio_track"
    still = make_animated(tmp_path / f"s.{fmt}", fmt, n=1)
    assert sniff_file(still).kind == "image"


def test_a_clip_with_audio_keeps_its_track_natively(tmp_path):
    path = make_clip(tmp_path / "clip.mp4", text="SUCH WOW")
    media = prepare_media(path, sniff_file(path), Settings(media_audio="native"))
    assert media.bundle.audio_mode == "native" and media.extras["audio"][:4] == b"RIFF"


def test_what_is_no_media_is_refused_naming_the_formats(tmp_path):
    archive = tmp_path / "clip.mp4"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("a.txt", "hello")
    with pytest.raises(UnsupportedMedia, match=r"a ZIP archive; send an image \(PNG.*a video \(MP4.*a sound \(MP3"):
        sniff_file(archive)
    for data, what in [(b"%PDF-1.7", "a PDF document"), (b"<html><body>", "an HTML or XML document"), (b"hello", "not a format")]:
        with pytest.raises(UnsupportedMedia, match=what):
            sniff(data)


def _long_claim(path):
    """A 3-frame MP4 whose frames sit at 0 s, 1 h and 2 h: a few KB claiming two hours."""
    import av

    with av.open(str(path), "w", format="mp4") as out:
        stream = out.add_stream("mpeg4", rate=1)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for t in (0, 3600, 7200):
            frame = av.VideoFrame.from_ndarray(np.zeros((48, 64, 3), np.uint8), format="rgb24")
            frame.pts, frame.time_base = t, Fraction(1, 1)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return path


def _faststart_cut(path):
    """An MP4 with its index first (faststart), cut in the middle of its frames."""
    import av

    rng = np.random.default_rng(0)
    whole = path.with_name("whole.mp4")
    with av.open(str(whole), "w", format="mp4", options={"movflags": "faststart"}) as out:
        stream = out.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for i in range(60):
            frame = av.VideoFrame.from_ndarray(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8), format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, 10)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    data = whole.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _huge_gif(path):
    """An animated GIF whose header says 10,000 × 10,000."""
    data = bytearray(make_animated(path.with_name("small.gif"), "gif").read_bytes())
    data[6:10] = struct.pack("<HH", 10_000, 10_000)
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize(
    ("make", "limits", "code", "limit"),
    [
        (_long_claim, MediaLimits(), "media_too_long", "KAR_MEDIA_MAX_S"),
        (_huge_gif, MediaLimits(), "media_too_many_pixels", "KAR_MEDIA_MAX_PIXELS"),
        (_faststart_cut, MediaLimits(), "media_truncated", "a truncated or damaged file"),
        (lambda p: make_video(p, "mp4", seconds=3.0), MediaLimits(max_frames=10), "media_too_many_frames", "KAR_MEDIA_MAX_FRAMES"),
        (lambda p: make_video(p, "webm", size=(160, 96)), MediaLimits(max_pixels=4096), "media_too_many_pixels", "KAR_MEDIA_MAX_PIXELS"),
        (lambda p: make_sound(p, "mp3", seconds=3.0), MediaLimits(max_s=2.0), "media_too_long", "KAR_MEDIA_MAX_S"),
        (lambda p: make_sound(p, "ogg", seconds=3.0), MediaLimits(max_s=2.0), "media_too_long", "KAR_MEDIA_MAX_S"),
    ],
)
def test_a_clip_over_a_limit_is_refused_naming_the_limit(tmp_path, settings, make, limits, code, limit):
    path = make(tmp_path / "input.bin")
    with pytest.raises(MediaLimitError) as info:
        prepare_media(path, sniff_file(path), settings, limits=limits)
    assert info.value.code == code and limit in str(info.value) and "input.bin" in str(info.value)


def test_a_wav_that_claims_endless_data_decodes_to_its_real_length(tmp_path, settings):
    data = bytearray(make_sound(tmp_path / "w.wav", "wav", seconds=3.0).read_bytes())
    at = data.index(b"data")
    data[4:8] = data[at + 4:at + 8] = struct.pack("<I", 0xFFFFFFFF)  # a stream's header: "the data never ends"
    path = tmp_path / "endless.wav"
    path.write_bytes(bytes(data))
    media = prepare_media(path, sniff_file(path), settings)
    assert abs(media.bundle.read_s - 3.0) < 0.1
    with pytest.raises(MediaLimitError, match="KAR_MEDIA_MAX_S"):
        prepare_media(path, sniff_file(path), settings, limits=MediaLimits(max_s=2.0))
