"""OCR with the bundled rapidocr models on the sample images."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrieval.ocr import OCR, OCRError

IMAGES = Path(__file__).resolve().parents[2] / "examples" / "images"


@pytest.fixture(scope="module")
def ocr():
    return OCR()


def test_reads_chinese_caption(ocr):
    result = ocr.read((IMAGES / "zhuge_liang_wang_lang.png").read_bytes())
    assert "厚颜无耻" in result.text and "诸葛亮" in result.text
    assert result.to_dict()["lines"][0]["score"] > 0.5


async def test_reads_english_caption_async(ocr):
    result = await ocr.read_async((IMAGES / "doge_such_culture.png").read_bytes())
    assert "wow" in result.text and "Doge" in result.text


def test_undecodable_image_is_a_clear_error(ocr):
    with pytest.raises(OCRError, match="cannot decode image"):
        ocr.read(b"not an image")
