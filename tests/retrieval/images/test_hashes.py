"""The pHash computed without scipy and the dHash without imagehash give imagehash's bits; the two-step
thumbnails every hash is taken with now stay near them (a KB indexed before holds one-step hashes)."""

from __future__ import annotations

from pathlib import Path

import imagehash
import numpy as np
import pytest
from PIL import Image, ImageDraw

from retrieval.images.hashes import PARAMS as HASH_PARAMS, dhash_bits, hash_image, phash_bits

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "images"


def _images() -> list[Image.Image]:
    rng = np.random.default_rng(7)
    images = [Image.open(p).convert("RGB") for p in sorted(EXAMPLES.glob("*.png"))]
    for i in range(40):
        size = (int(rng.integers(40, 900)), int(rng.integers(40, 900)))
        base = rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8)
        img = Image.fromarray(base).resize(size, Image.Resampling.BICUBIC)  # smooth colour fields, like photos
        draw = ImageDraw.Draw(img)
        draw.rectangle((0, 0, size[0], size[1] // 6), fill=(255, 255, 255))  # a caption band
        draw.text((5, 2), f"CAPTION {i}", fill=(0, 0, 0))
        images.append(img)
    return images


def test_phash_bits_equal_imagehash_phash():
    images = _images()
    assert len(images) > 40
    for img in images:
        grey = img.convert("L")
        expected = np.asarray(imagehash.phash(grey, hash_size=8).hash, dtype=bool).reshape(-1)
        assert np.array_equal(phash_bits(grey), expected)


@pytest.mark.parametrize("mode", ["RGBA", "P", "L"])
def test_hash_image_reads_every_mode(mode):
    img = _images()[-1].convert(mode)
    h = hash_image(img)
    assert h.dhash.shape == h.phash.shape == (64,) and h.vector().shape == (128,)


def test_dhash_bits_equal_imagehash_dhash():
    for img in _images():
        grey = img.convert("L")
        expected = np.asarray(imagehash.dhash(grey, hash_size=8).hash, dtype=bool).reshape(-1)
        assert np.array_equal(dhash_bits(grey), expected)


def test_two_step_hashes_stay_near_the_one_step_hashes_an_older_kb_holds():
    """Hashes are taken with two-step thumbnails (HASH_PARAMS.reducing_gap, the default); a KB indexed before holds one-step
    hashes: a few of the 128 bits apart, far below the near-copy distance (16)."""
    from retrieval.images.hashes import ImageHash

    gaps = []
    for img in _images():
        big = img.resize((img.width * 3, img.height * 3), Image.Resampling.BICUBIC)  # a picture to reduce
        one, two = hash_image(big, None), hash_image(big)
        assert np.array_equal(two.vector(), hash_image(big, HASH_PARAMS.reducing_gap).vector())
        assert isinstance(two, ImageHash)
        gaps.append(int((one.vector() != two.vector()).sum()))
    assert max(gaps) <= 8 and np.mean(gaps) <= 3


def _banded(height: int, top: int = 0, bottom: int = 0, width: int = 300) -> Image.Image:
    """A smooth colour picture with a white caption band (black text) of ``top`` rows above it and a black
    one (white text) of ``bottom`` rows below it."""
    rng = np.random.default_rng(height + top + bottom)
    img = Image.fromarray(rng.integers(60, 200, size=(6, 6, 3), dtype=np.uint8)).resize((width, height), Image.Resampling.BICUBIC)
    draw = ImageDraw.Draw(img)
    if top:
        draw.rectangle((0, 0, width, top - 1), fill=(255, 255, 255))
        draw.text((10, top // 3), "WHEN THE CAPTION", fill=(0, 0, 0))
    if bottom:
        draw.rectangle((0, height - bottom, width, height), fill=(0, 0, 0))
        draw.text((10, height - 2 * bottom // 3), "SAYS IT ALL", fill=(255, 255, 255))
    return img


@pytest.mark.parametrize(("height", "top", "bottom"), [(400, 60, 0), (400, 0, 50), (333, 70, 40), (900, 120, 100)])
def test_caption_bands_are_cut_where_the_picture_begins(height, top, bottom):
    from retrieval.images.hashes import remove_caption_bands

    out = remove_caption_bands(_banded(height, top, bottom))
    assert out is not None and out.size == (300, height - top - bottom)


@pytest.mark.parametrize(("height", "top", "bottom"), [(400, 0, 0), (400, 200, 0), (400, 0, 190), (400, 10, 0)])
def test_no_band_is_cut_from_a_picture_without_one_or_with_one_past_the_limits(height, top, bottom):
    """None for a plain picture, a band over 45 % of the height, or one under 6 % of it."""
    from retrieval.images.hashes import remove_caption_bands

    assert remove_caption_bands(_banded(height, top, bottom)) is None
