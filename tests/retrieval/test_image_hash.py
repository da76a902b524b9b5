"""The pHash computed without scipy and the dHash without imagehash give imagehash's bits; the two-step
thumbnails every hash is taken with now stay near them (a KB indexed before holds one-step hashes)."""

from __future__ import annotations

from pathlib import Path

import imagehash
import numpy as np
import pytest
from PIL import Image, ImageDraw

from retrieval.image_hash import REDUCING_GAP, dhash_bits, hash_image, phash_bits

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "images"


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
    """Hashes are taken with two-step thumbnails (REDUCING_GAP, the default); a KB indexed before holds one-step
    hashes: a few of the 128 bits apart, far below the near-copy distance (16)."""
    from retrieval.image_hash import ImageHash

    gaps = []
    for img in _images():
        big = img.resize((img.width * 3, img.height * 3), Image.Resampling.BICUBIC)  # a picture to reduce
        one, two = hash_image(big, None), hash_image(big)
        assert np.array_equal(two.vector(), hash_image(big, REDUCING_GAP).vector())
        assert isinstance(two, ImageHash)
        gaps.append(int((one.vector() != two.vector()).sum()))
    assert max(gaps) <= 8 and np.mean(gaps) <= 3
