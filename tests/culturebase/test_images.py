"""Entity images: byte checks with counted reasons, the content-addressed folder, records merge their images."""

from __future__ import annotations

import pytest

from culturebase.entity import Entity
from culturebase.images import ImageRejected, ImageStore, check_image_bytes
from tests.support.images import template_image, to_bytes

MB = 1024 * 1024


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (b"<!DOCTYPE html><html><head><title>Sign in</title></head><body></body></html>", "html"),
        (b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"></svg>', "svg"),
        (b"%PDF-1.4 not an image", "not_an_image"),
    ],
)
def test_non_images_are_refused_with_a_reason(data, reason):
    with pytest.raises(ImageRejected) as exc:
        check_image_bytes(data, MB, 10_000_000)
    assert exc.value.reason == reason


def test_truncated_bomb_and_oversized_images_are_refused():
    png = to_bytes(template_image(1))
    with pytest.raises(ImageRejected) as exc:
        check_image_bytes(png[: len(png) // 2], MB, 10_000_000)
    assert exc.value.reason == "corrupt"
    from PIL import Image

    bomb = to_bytes(Image.new("L", (6000, 6000)), optimize=True)  # a few KB on the wire, 36 Mpx decoded
    assert len(bomb) < 200_000
    with pytest.raises(ImageRejected) as exc:
        check_image_bytes(bomb, MB, 10_000_000)
    assert exc.value.reason == "too_many_pixels" and "6000x6000" in str(exc.value)
    with pytest.raises(ImageRejected) as exc:
        check_image_bytes(png, 1000, 10_000_000)
    assert exc.value.reason == "too_large"


def test_store_is_content_addressed_and_idempotent(tmp_path):
    store = ImageStore(tmp_path / "images")
    png = to_bytes(template_image(2))
    a = store.put(png, url="https://example.org/a.png")
    b = store.put(png, kind="example")
    assert a.sha256 == b.sha256 and a.path == b.path == f"{a.sha256[:2]}/{a.sha256}.png"
    assert store.read(a) == png and len(list((tmp_path / "images").rglob("*.png"))) == 1


def test_entity_images_merge_by_hash(tmp_path):
    store = ImageStore(tmp_path / "images")
    one, two = store.put(to_bytes(template_image(1))), store.put(to_bytes(template_image(2)))
    a = Entity(name="Doge", description="x" * 30, images=[one, one])
    assert len(a.images) == 1
    b = Entity(name="Doge", description="y" * 30, images=[two, one])
    assert [i.sha256 for i in a.merged_with(b).images] == [one.sha256, two.sha256]
    with pytest.raises(ValueError):
        Entity(name="x", images=[{**one.model_dump(), "path": "../etc/passwd"}])


@pytest.mark.parametrize("progressive", [False, True])
def test_a_jpeg_is_checked_at_reduced_scale_but_every_scan_is_read(progressive):
    """JPEGs are verified with libjpeg's 1/8-scale decode (a 40 MP photo never exists in RAM in
    full); the size reported is the original's, and a truncated file is still refused."""
    import io

    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(0).integers(0, 255, (1600, 2400, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90, progressive=progressive)
    data = buffer.getvalue()
    checked = check_image_bytes(data, 20 * MB, 40_000_000)
    assert (checked.format, checked.width, checked.height) == ("jpeg", 2400, 1600)
    for cut in (0.3, 0.9):
        with pytest.raises(ImageRejected) as exc:
            check_image_bytes(data[: int(len(data) * cut)], 20 * MB, 40_000_000)
        assert exc.value.reason == "corrupt"
