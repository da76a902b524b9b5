"""The bounded copy: one decode, first frame, EXIF-upright, longest side capped; small upright images pass through."""

from __future__ import annotations

import io

import pytest

from culturebase.bounded_image import ImageDecodeError, bounded_bytes, open_bounded
from retrieval.ocr import OCR


def _text_image(text: str, size: tuple[int, int]):
    from PIL import Image, ImageDraw, ImageFont

    img = Image.new("RGB", size, "white")
    ImageDraw.Draw(img).text((size[0] // 2, size[1] // 2), text, fill="black", font=ImageFont.load_default(size=size[1] // 4), anchor="mm")
    return img


def _encode(img, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


def test_a_large_jpeg_is_decoded_at_reduced_scale_straight_to_the_bound():
    from PIL import Image

    data = _encode(Image.new("RGB", (6000, 4000), "gray"), "JPEG", quality=70)
    copy = open_bounded(data, 1600)
    assert copy.image.size == (1600, 1067) and copy.source_size == (6000, 4000) and copy.image.mode == "RGB"
    assert copy.scale == pytest.approx(1600 / 6000, rel=0.01)


def test_small_upright_images_pass_through_untouched_and_others_become_a_bounded_copy():
    from PIL import Image

    small = _encode(Image.new("RGB", (640, 480), "red"), "PNG")
    assert bounded_bytes(small, 1600) == (small, None)
    big = _encode(Image.new("RGB", (3000, 1000), "red"), "PNG")
    data, copy = bounded_bytes(big, 1600)
    assert copy is not None and Image.open(io.BytesIO(data)).size == (1600, 533)


def test_transparent_pixels_become_white_so_dark_text_stays_readable():
    from PIL import Image

    img = Image.new("RGBA", (10, 10), (0, 0, 0, 0))
    img.putpixel((5, 5), (0, 0, 0, 255))
    copy = open_bounded(_encode(img, "PNG"), 100)
    assert copy.image.getpixel((0, 0)) == (255, 255, 255) and copy.image.getpixel((5, 5)) == (0, 0, 0)


def test_undecodable_bytes_are_a_clear_error():
    with pytest.raises(ImageDecodeError, match="cannot decode image"):
        open_bounded(b"\x89PNG\r\n\x1a\n broken", 100)


def test_ocr_applies_the_exif_rotation_that_makes_the_caption_readable():
    from PIL import Image, ImageDraw, ImageFont

    upright = Image.new("RGB", (900, 600), "white")
    draw = ImageDraw.Draw(upright)
    font = ImageFont.load_default(size=70)
    draw.text((450, 100), "TOP LINE", fill="black", font=font, anchor="mm")
    draw.text((450, 500), "BOTTOM LINE", fill="black", font=font, anchor="mm")
    stored = upright.transpose(Image.Transpose.ROTATE_270)  # the camera stored it sideways (top line on the right)
    exif = Image.Exif()
    exif[0x0112] = 8  # display: rotate 90 degrees counter-clockwise
    ocr = OCR(max_side=1280)
    with_exif = ocr.read(_encode(stored, "JPEG", quality=95, exif=exif.tobytes()))
    without = ocr.read(_encode(stored, "JPEG", quality=95))
    assert [ln.text.upper() for ln in with_exif.lines] == ["TOP LINE", "BOTTOM LINE"]
    assert with_exif.rotated and with_exif.to_dict()["exif_rotated"] and with_exif.read_size == (900, 600)
    assert [ln.text.upper() for ln in without.lines] != ["TOP LINE", "BOTTOM LINE"], "the rotation matters: sideways, the caption reads in the wrong order"


def test_ocr_reads_a_bounded_copy_of_a_large_image():
    img = _text_image("BOUNDED COPY", (4000, 1200))
    result = OCR(max_side=1280).read(_encode(img, "JPEG", quality=90))
    assert "BOUNDED" in result.text.upper()
    assert result.read_size == (1280, 384) and result.source_size == (4000, 1200)


def test_lines_are_detected_on_a_smaller_copy_and_read_from_the_bounded_copy():
    """Detection (whose memory grows with its pixels) sees the det_side copy; recognition reads
    each line cropped from the max_side copy, area-averaged to the recognizer's 48 px height."""
    import numpy as np

    from retrieval.ocr import REC_HEIGHT

    img = _text_image("BOUNDED COPY", (4000, 1200))
    result = OCR(max_side=1600, det_side=800).read(_encode(img, "JPEG", quality=90))
    assert result.read_size == (1600, 480) and result.detect_size == (800, 240)
    assert result.to_dict()["detect_size"] == [800, 240]
    assert "BOUNDED COPY" in result.text.upper()
    # the line boxes are in the read copy's coordinates (not the detection copy's)
    assert max(x for ln in result.lines for x, _ in ln.box) > 800
    tall = np.zeros((200, 2000, 3), dtype=np.uint8)
    assert OCR._to_rec_height(tall).shape == (REC_HEIGHT, 480, 3)
    short = np.zeros((30, 300, 3), dtype=np.uint8)
    assert OCR._to_rec_height(short) is short
