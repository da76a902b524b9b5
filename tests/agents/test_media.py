"""Video/audio preparation with PyAV on generated clips: frames, scene changes, audio, bad input."""

from __future__ import annotations

import io
import wave

import pytest

from agents.media import MediaError, Transcriber, extract_wav, prepare_video, sample_frames
from culturebase.settings import Settings
from tests.fakes.media_openai import FakeMediaOpenAIServer
from tests.support.clips import make_clip


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return make_clip(tmp_path_factory.mktemp("clips") / "c.mp4", 6.0, scenes=3, text="MONDAY")


def test_uniform_and_scene_frames_keep_timestamps(clip):
    sample = sample_frames(clip, 2, scene_frames=4, scene_threshold=0.2)
    kinds = [(round(f.t, 1), f.kind) for f in sample.frames]
    # 2 uniform targets at 1.5 s and 4.5 s; the colour changes at 2.0 s and 4.0 s are scene frames
    assert kinds == [(1.5, "uniform"), (2.0, "scene"), (4.0, "scene"), (4.5, "uniform")]
    assert sample.duration_s == pytest.approx(6.0, abs=0.2) and not sample.truncated
    assert all(f.jpeg[:2] == b"\xff\xd8" for f in sample.frames)
    assert len(sample_frames(clip, 8, scene_frames=0).frames) == 8


def test_duration_cap_reads_only_the_first_seconds(clip):
    sample = sample_frames(clip, 4, scene_frames=0, max_duration_s=2.0)
    assert sample.truncated and all(f.t <= 2.0 for f in sample.frames)
    assert "only the first 2 s were read" in sample.notes[0]


def test_audio_native_transcribed_or_absent(clip, tmp_path):
    wav = extract_wav(clip)
    with wave.open(io.BytesIO(wav)) as handle:
        assert handle.getframerate() == 16_000 and handle.getnchannels() == 1
        assert handle.getnframes() / 16_000 == pytest.approx(6.0, abs=0.1)
    silent = make_clip(tmp_path / "silent.mp4", 1.0, tone_hz=None)
    assert extract_wav(silent) is None
    settings = Settings(media_frames=3, media_scene_frames=0)
    bundle = prepare_video(silent, settings=settings, audio_mode="native")
    assert bundle.audio_mode == "no_audio_track" and bundle.audio_wav is None and "no audio track" in bundle.notes[0]
    assert prepare_video(clip, settings=settings, audio_mode="native").audio_wav == wav
    assert prepare_video(clip, settings=settings).audio_mode == "none"  # auto without an ASR endpoint
    with FakeMediaOpenAIServer(transcript="it is monday again") as server:
        asr = Settings(media_frames=3, asr_base_url=server.base_url, asr_model="whisper")
        bundle = prepare_video(clip, settings=asr)  # auto → transcribe
        assert bundle.audio_mode == "transcribed" and bundle.transcript == "it is monday again"
        upload = server.requests[-1]
        assert upload.path == "/v1/audio/transcriptions" and int(upload.headers["content-length"]) > len(wav)
    with pytest.raises(MediaError, match="KAR_ASR_BASE_URL"):
        Transcriber.from_settings(Settings())


def test_failed_transcription_is_recorded_not_fatal(clip):
    settings = Settings(media_frames=2, asr_base_url="http://127.0.0.1:9/v1", asr_model="whisper", vlm_timeout_s=2)
    bundle = prepare_video(clip, settings=settings, audio_mode="transcribe")
    assert bundle.audio_mode == "failed" and bundle.notes[-1].startswith("transcription failed")


def test_bad_videos(tmp_path):
    fake = tmp_path / "fake.mp4"
    fake.write_bytes(b"this is not a video at all" * 10)
    with pytest.raises(MediaError, match=r"fake\.mp4: not a readable video"):
        sample_frames(fake)
    with pytest.raises(MediaError, match="file not found"):
        sample_frames(tmp_path / "nope.mp4")
    import av  # an audio-only file is not a video either

    wav = tmp_path / "tone.wav"
    clip = make_clip(tmp_path / "c.mp4", 1.0)
    wav.write_bytes(extract_wav(clip))
    with pytest.raises(MediaError, match="has no video stream"):
        sample_frames(wav)
    assert av is not None


def test_two_hour_video_is_capped(tmp_path, clip):
    long = make_clip(tmp_path / "two_hours.mp4", 7200, fps=1, size=(64, 48), scenes=4, tone_hz=None)
    settings = Settings(media_frames=6, media_scene_frames=2, media_max_duration_s=600)
    bundle = prepare_video(long, settings=settings, audio_mode="native")
    assert bundle.duration_s == pytest.approx(7200, abs=1) and bundle.truncated and bundle.read_s <= 600
    assert len(bundle.frames) <= 6 + 2 and all(f.t <= 600 for f in bundle.frames)  # frame cap and duration cap
    trace = bundle.trace()
    assert trace["truncated"] and "only the first 600 s were read" in trace["notes"][0]
    # the audio is cut at the same cap (a 6 s clip read with a 2 s cap)
    short = prepare_video(clip, settings=Settings(media_frames=2, media_max_duration_s=2), audio_mode="native")
    with wave.open(io.BytesIO(short.audio_wav)) as handle:
        assert handle.getnframes() / handle.getframerate() == pytest.approx(2.0, abs=0.01)
