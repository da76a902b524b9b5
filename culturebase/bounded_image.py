"""Decode an image once into a bounded copy: first frame, EXIF-upright, longest side capped.

A 16 MP phone photo decoded in full is ~48 MB of RGB and OCR on it costs seconds and
hundreds of MB more; the text a caption carries reads the same on a copy whose longest
side is ``KAR_OCR_MAX_SIDE`` (measured by ``bench/ocr_side.py``).  JPEGs are decoded
straight at a reduced scale (libjpeg's DCT scaling via :meth:`PIL.Image.Image.draft`), so
the full-size pixels of a JPEG never exist in memory; other formats are decoded once and
reduced at once.

* :func:`open_bounded` gives the RGB copy (OCR reads it);
* :func:`bounded_bytes` gives the same copy encoded (PNG from a lossless source, JPEG q95
  from a photo), or the original bytes when they are
  already small enough and upright (what the service hands the pipeline: OCR and the VLM's
  own down-scaled copy both start from it, never from the original again).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: EXIF tag of the orientation (1 = upright; 2-8 = mirrored/rotated)
ORIENTATION = 0x0112


class ImageDecodeError(ValueError):
    """The bytes cannot be decoded as an image (the message says why)."""


@dataclass
class BoundedImage:
    """The bounded copy and what it was made from."""

    image: Any  # PIL.Image.Image, RGB
    source_size: tuple[int, int]  # (width, height) of the original, upright
    source_format: str
    rotated: bool  # an EXIF orientation was applied

    @property
    def scale(self) -> float:
        """Copy side / original side (1.0 when not reduced)."""
        return self.image.size[0] / self.source_size[0] if self.source_size[0] else 1.0


def _orientation(img: Any) -> int:
    try:
        return int(img.getexif().get(ORIENTATION, 1) or 1)
    except Exception:  # a broken EXIF block never stops the read
        return 1


def _flatten(img: Any) -> Any:
    """RGB; transparent pixels become white (dark text on a transparent background stays readable)."""
    from PIL import Image

    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    return img.convert("RGB")


def draft_to(img: Any, max_side: int) -> None:
    """A JPEG larger than ``max_side`` is decoded at 1/2, 1/4 or 1/8 scale, never below it."""
    if (img.format or "").upper() == "JPEG" and max(img.size) > max_side:
        ratio = max_side / max(img.size)
        img.draft(img.mode, (max(1, round(img.size[0] * ratio)), max(1, round(img.size[1] * ratio))))


def draft_eighth(img: Any) -> None:
    """A JPEG is checked at 1/8 scale (every scan still decoded, 1/64 of the pixels in RAM)."""
    if (img.format or "").upper() == "JPEG":
        img.draft(img.mode, (max(1, img.size[0] // 8), max(1, img.size[1] // 8)))


def megapixels_to_decode(data: bytes, prepare: Callable[[Any], None] = draft_eighth) -> float:
    """Megapixels a decode of ``data`` will hold after ``prepare`` (a JPEG draft), from the
    header alone: what a pool job declares to the decode budget before it starts
    (:meth:`culturebase.cpu.CpuPool.run_decode`).  0.0 when the header cannot be read (the
    decode itself then says why)."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as img:
            prepare(img)
            return img.size[0] * img.size[1] / 1e6
    except Exception:  # noqa: BLE001 - any unreadable header: the real decode reports it
        return 0.0


def decode_megapixels(data: bytes, max_side: int) -> float:
    """Megapixels :func:`open_bounded` will decode for ``data`` (header only; 0.0 when unreadable)."""
    return megapixels_to_decode(data, lambda img: draft_to(img, max_side))


def open_bounded(data: bytes, max_side: int) -> BoundedImage:
    """Decode the first frame once, upright, with its longest side ≤ ``max_side`` (within the
    process's decode budget, :func:`culturebase.cpu.decode_budget`)."""
    from PIL import Image, ImageOps

    from culturebase.cpu import decode_budget

    try:
        with Image.open(io.BytesIO(data)) as img:
            fmt = (img.format or "").upper()
            orientation = _orientation(img)
            width, height = img.size
            if orientation in (5, 6, 7, 8):
                width, height = height, width
            draft_to(img, max_side)
            # the decoded pixels (after any draft) hold the process's decode budget until the copy is made
            with decode_budget().hold(img.size[0] * img.size[1] / 1e6):
                img.seek(0)
                img.load()
                if max(img.size) > max_side:
                    img.thumbnail((max_side, max_side), Image.Resampling.LANCZOS, reducing_gap=3.0)  # in place
                frame = ImageOps.exif_transpose(img) if orientation != 1 else img
                frame = _flatten(frame)  # always a new image, valid after the file is closed
    except Image.DecompressionBombError as exc:
        raise ImageDecodeError(f"decompression bomb refused: {exc}") from None
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise ImageDecodeError(f"cannot decode image: {exc}") from None
    return BoundedImage(frame, (width, height), fmt, orientation != 1)


def encode(image: Any, lossless: bool) -> bytes:
    """PNG (fast, level 1) for a lossless source, else JPEG q95."""
    buffer = io.BytesIO()
    if lossless:
        image.save(buffer, format="PNG", compress_level=1)
    else:
        image.save(buffer, format="JPEG", quality=95)
    return buffer.getvalue()


def bounded_bytes(data: bytes, max_side: int) -> tuple[bytes, BoundedImage | None]:
    """The bytes the pipeline should get: the original when small and upright, else the bounded copy.

    Returns ``(bytes, copy)``; ``copy`` is None when the original is passed through.
    """
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as img:
            fmt = (img.format or "").upper()
            small = max(img.size) <= max_side
            upright = _orientation(img) == 1
            animated = getattr(img, "n_frames", 1) > 1
            # bytes far beyond what the pixels need are metadata (text chunks, ICC, EXIF): not passed on
            lean = len(data) <= 4 * img.size[0] * img.size[1] + 256 * 1024
    except Exception as exc:
        raise ImageDecodeError(f"cannot decode image: {exc}") from None
    if small and upright and lean and not animated and fmt in ("PNG", "JPEG", "WEBP"):
        return data, None
    copy = open_bounded(data, max_side)
    # a lossless source (PNG, GIF: screenshots, drawn memes with sharp text) stays lossless; a
    # photo (JPEG, WebP) is re-encoded at q95, a fifth of the PNG of a grainy 1600 px copy that
    # each request in flight holds (bench/service.py checks OCR still reads it as at full size)
    return encode(copy.image, lossless=copy.source_format not in ("JPEG", "WEBP")), copy
