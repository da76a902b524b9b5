"""POST /v1/explain with clips and sounds: the same reply shape and stream as an image, plus ``media``;
what is none of them is a 415 naming the formats; a clip over a limit a 4xx naming the limit."""

from __future__ import annotations

import struct
import zipfile
from fractions import Fraction
from io import BytesIO

import numpy as np

from tests.services.conftest import assert_healthy
from tests.services.test_explain import parse_sse
from tests.support.clips import make_animated, make_clip, make_sound


def media(data: bytes, name: str = "upload.bin", ctype: str = "application/octet-stream", **fields) -> dict:
    return {"files": {"media": (name, data, ctype)}, "data": {"condition": "kar", **fields}}


async def test_a_clip_is_explained_with_its_frames_and_the_same_reply_shape(make_client, tmp_path):
    clip = make_clip(tmp_path / "clip.mp4", seconds=2.0, text="SUCH WOW").read_bytes()
    async with make_client() as (client, services):
        r = await client.post("/v1/explain", **media(clip, name="clip.bin"))  # named .bin: the bytes decide
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["media"]["kind"] == "video" and body["media"]["format"] == "mp4" and body["media"]["frames"] >= 2
        thumbs = body["media"]["thumbnails"]  # the web page shows the sampled frames
        assert len(thumbs) == body["media"]["frames"] and thumbs[0]["src"].startswith("data:image/jpeg;base64,")
        assert body["image"]["format"] == "mp4" and body["image"]["width"] > 0 and body["image"]["bytes"] == len(clip)
        trace_media = body["trace"]["media"]
        assert trace_media["kind"] == "video" and len(trace_media["frames"]) == body["media"]["frames"]
        assert body["response"] == "EXPLANATION"
        sent = services.vlm.calls[-1].messages[0]
        assert len(sent.images) == body["media"]["frames"]  # the VLM saw the sampled frames, not one image
        r = await client.post("/v1/explain", params={"stream": "true"}, **media(clip))
        events = parse_sse(r.text)
        final = dict(events)["final"]
        assert final["media"]["kind"] == "video" and [e for e, _ in events][0] == "extraction"


async def test_a_sound_is_explained_as_a_sound(make_client, tmp_path):
    sound = make_sound(tmp_path / "s.mp3", "mp3").read_bytes()
    async with make_client(media_audio="native") as (client, services):
        r = await client.post("/v1/explain", **media(sound, name="sound.mp3", ctype="audio/mpeg"))
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["media"] == {"kind": "audio", "format": "mp3", "duration_s": body["media"]["duration_s"], "frames": 0,
                                 "audio_mode": "native", "transcript": None, "thumbnails": []}
        sent = services.vlm.calls[-1].messages[0]
        assert not sent.images and sent.audio  # native audio, no picture


async def test_no_media_is_a_415_naming_the_formats(make_client, tmp_path):
    buffer = BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("a.txt", "hello")
    async with make_client() as (client, services):
        r = await client.post("/v1/explain", **media(buffer.getvalue(), name="clip.mp4", ctype="video/mp4"))
        assert r.status_code == 415, r.text
        message = r.json()["error"]["message"]
        assert "ZIP" in message and "MP4" in message and "MP3" in message and "PNG" in message
        await assert_healthy(client)


def _long_claim() -> bytes:
    import av

    buffer = BytesIO()
    with av.open(buffer, "w", format="mp4") as out:
        stream = out.add_stream("mpeg4", rate=1)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for t in (0, 3600, 7200):  # a few KB whose container says two hours
            frame = av.VideoFrame.from_ndarray(np.zeros((48, 64, 3), np.uint8), format="rgb24")
            frame.pts, frame.time_base = t, Fraction(1, 1)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buffer.getvalue()


async def test_a_clip_over_a_limit_is_a_4xx_naming_the_limit(make_client, tmp_path):
    gif = bytearray(make_animated(tmp_path / "a.gif", "gif").read_bytes())
    gif[6:10] = struct.pack("<HH", 10_000, 10_000)  # the header says 10,000 x 10,000
    clip = make_clip(tmp_path / "c.mp4", seconds=2.0).read_bytes()
    cases = [
        (_long_claim(), {}, 422, "media_too_long", "KAR_MEDIA_MAX_S"),
        (bytes(gif), {}, 422, "media_too_many_pixels", "KAR_MEDIA_MAX_PIXELS"),
        (clip[: len(clip) // 2], {}, 422, "media_unreadable", "cannot be read"),  # cut short: its index is at the end
        (clip, {"media_max_mb": 0.01}, 413, "media_too_large", "KAR_MEDIA_MAX_MB"),
    ]
    for data, overrides, status, code, named in cases:
        async with make_client(**overrides) as (client, services):
            calls = len(services.vlm.calls)
            r = await client.post("/v1/explain", **media(data))
            assert r.status_code == status and r.json()["error"]["code"] == code, r.text
            assert named in r.json()["error"]["message"] and "upload." not in r.json()["error"]["message"]
            assert len(services.vlm.calls) == calls
            await assert_healthy(client)
