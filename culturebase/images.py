"""The image folder: entity images stored once by content hash (``KAR_DATA_DIR/images/ab/<sha256>.<ext>``).

:func:`check_image_bytes` judges bytes, never a file name or a declared content type: it
accepts PNG, JPEG, WebP and GIF (first frame) and rejects everything else with a short
reason code that crawl jobs count (``kar/images_failed/<reason>``) and imports report:

==================  =====================================================================
reason              what
==================  =====================================================================
``empty``           0 bytes
``too_large``       more bytes than the limit (``KAR_IMAGE_MAX_MB``)
``html``            an HTML page (a login wall, an error page) instead of an image
``svg``             an SVG document (not rasterised: scripts, external references)
``not_an_image``    any other non-image bytes
``too_many_pixels`` width × height above ``KAR_MAX_IMAGE_PIXELS`` (decompression bomb),
                    read from the header before any pixel is decoded
``metadata_too_large`` a PNG metadata chunk (iCCP, zTXt, iTXt) decompressing past 1 MB
``corrupt``         truncated or undecodable image data
==================  =====================================================================

It is the one checker of image bytes: the crawler and imports call it as is (the original
bytes are kept, an animated GIF with all its frames); the API, ``kar explain`` and ``kar run``
call it with ``work_side`` and get, from the same single decode, the bounded working copy
(:func:`culturebase.bounded_image.bounded_bytes`: first frame, upright, longest side capped)
that OCR, grounding and the VLM read.  One result type, :class:`CheckedImage`, serves all.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from pathlib import Path

from culturebase.bounded_image import ImageDecodeError, bounded_bytes, draft_eighth
from culturebase.entity import EntityImage

FORMATS = {"png": "png", "jpeg": "jpg", "gif": "gif", "webp": "webp"}
MIME = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp", "gif": "image/gif"}
_MAGIC = ((b"\x89PNG\r\n\x1a\n", "png"), (b"\xff\xd8\xff", "jpeg"), (b"GIF87a", "gif"), (b"GIF89a", "gif"))


class ImageRejected(ValueError):
    """Bytes that are not an acceptable image; ``reason`` is a short code, the message says why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def sniff_format(data: bytes) -> str | None:
    """``png`` / ``jpeg`` / ``gif`` / ``webp`` from the leading bytes, else None."""
    for magic, kind in _MAGIC:
        if data.startswith(magic):
            return kind
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


def _what_else(data: bytes) -> tuple[str, str]:
    head = data[:1024].lstrip().lower()
    if b"<svg" in head or head.startswith(b"<?xml") and b"svg" in head:
        return "svg", "an SVG document"
    if head.startswith((b"<!doctype html", b"<html")) or b"<html" in head or b"<body" in head:
        return "html", "an HTML page"
    if head.startswith(b"%pdf"):
        return "not_an_image", "a PDF document"
    if data.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "not_an_image", "a ZIP archive"
    if head.startswith(b"<?xml"):
        return "not_an_image", "an XML document"
    try:
        data[:512].decode("utf-8")
        return "not_an_image", "text"
    except UnicodeDecodeError:
        return "not_an_image", "not a PNG, JPEG, GIF or WebP image"


@dataclass(frozen=True)
class CheckedImage:
    """Bytes that passed :func:`check_image_bytes`.

    ``data`` is the original, or with ``work_side`` the bounded working copy (its ``format``:
    a GIF's copy is its first frame as PNG); ``width`` × ``height`` are the original's (upright);
    ``sha256`` and ``source_bytes`` describe the original bytes.
    """

    data: bytes
    format: str
    width: int
    height: int
    sha256: str
    source_bytes: int = 0

    @property
    def ext(self) -> str:
        return FORMATS[self.format]

    @property
    def mime(self) -> str:
        return MIME[self.format]


def check_image_bytes(data: bytes, max_bytes: int, max_pixels: int, work_side: int | None = None) -> CheckedImage:
    """Sniff, size-check and fully decode image bytes; raises :class:`ImageRejected` (see module doc).

    With ``work_side`` the returned ``data`` is the bounded working copy, made in the same decode
    that checks the pixels (the original bytes when already small, upright and lean).
    """
    from PIL import Image, UnidentifiedImageError

    from culturebase.cpu import decode_budget

    if not data:
        raise ImageRejected("empty", "the image is empty (0 bytes)")
    if len(data) > max_bytes:
        raise ImageRejected("too_large", f"the image is {len(data)} bytes; the limit is {max_bytes} bytes")
    kind = sniff_format(data)
    if kind is None:
        reason, what = _what_else(data)
        raise ImageRejected(reason, f"the bytes are {what}, not an image")
    digest = hashlib.sha256(data).hexdigest()
    out_format = kind
    try:
        with Image.open(io.BytesIO(data)) as img:
            width, height = img.size
            if width * height > max_pixels:
                raise ImageRejected(
                    "too_many_pixels", f"the image is {width}x{height} = {width * height} pixels; the limit is {max_pixels}"
                )
            if work_side is None:
                draft_eighth(img)  # a truncated JPEG still fails
                with decode_budget().hold(img.size[0] * img.size[1] / 1e6):  # the process's decode budget
                    img.seek(0)
                    img.load()
        work = data
        if work_side is not None:
            work, copy = bounded_bytes(data, work_side)
            if copy is None:  # passed through (a small, upright still PNG/JPEG/WebP): decode once to check the pixels
                with Image.open(io.BytesIO(data)) as img, decode_budget().hold(width * height / 1e6):
                    img.seek(0)
                    img.load()
            else:
                width, height = copy.source_size
                out_format = "png" if copy.source_format not in ("JPEG", "WEBP") else "jpeg"  # a GIF: its first frame
    except ImageRejected:
        raise
    except Image.DecompressionBombError as exc:
        raise ImageRejected("too_many_pixels", f"decompression bomb refused: {exc}") from None
    except (UnidentifiedImageError, ImageDecodeError, OSError, SyntaxError, ValueError, EOFError) as exc:
        if "MAX_TEXT_CHUNK" in str(exc) or "MAX_TEXT_MEMORY" in str(exc):
            raise ImageRejected(
                "metadata_too_large",
                "a PNG metadata chunk (iCCP, zTXt or iTXt) decompresses past the 1 MB limit; strip the image's metadata and resend",
            ) from None
        raise ImageRejected("corrupt", f"the {kind.upper()} image is truncated or corrupt: {exc}") from None
    return CheckedImage(work, out_format, width, height, digest, len(data))


class ImageStore:
    """Entity images under one folder, one file per content hash (writes are atomic and idempotent)."""

    def __init__(self, root: Path | str, max_bytes: int = 20 * 1024 * 1024, max_pixels: int = 40_000_000) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.max_pixels = max_pixels

    @staticmethod
    def relative_path(sha256: str, ext: str) -> str:
        return f"{sha256[:2]}/{sha256}.{ext}"

    def path_of(self, image: EntityImage | str) -> Path:
        """Absolute path of a stored image (an :class:`EntityImage` or its relative path)."""
        rel = image.path if isinstance(image, EntityImage) else image
        return self.root / rel

    def exists(self, image: EntityImage) -> bool:
        return self.path_of(image).is_file()

    def put(self, data: bytes, url: str | None = None, kind: str = "template") -> EntityImage:
        """Check and store image bytes; returns the record to attach to an entity (raises :class:`ImageRejected`)."""
        checked = check_image_bytes(data, self.max_bytes, self.max_pixels)
        return self.put_checked(checked, url=url, kind=kind)

    def put_checked(self, checked: CheckedImage, url: str | None = None, kind: str = "template") -> EntityImage:
        rel = self.relative_path(checked.sha256, checked.ext)
        target = self.root / rel
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(target.suffix + f".tmp{id(checked)}")
            tmp.write_bytes(checked.data)
            tmp.replace(target)
        return EntityImage(url=url, path=rel, sha256=checked.sha256, width=checked.width, height=checked.height, kind=kind)  # type: ignore[arg-type]

    def read(self, image: EntityImage) -> bytes:
        """The stored bytes (FileNotFoundError when the file is gone)."""
        return self.path_of(image).read_bytes()


def image_store_for(data_dir: Path | str, max_mb: float, max_pixels: int) -> ImageStore:
    """The image folder of a data directory."""
    return ImageStore(Path(data_dir) / "images", max_bytes=int(max_mb * 1024 * 1024), max_pixels=max_pixels)
