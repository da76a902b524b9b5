"""Moved to :mod:`culturebase.bounded_image` (the one image checker, :func:`culturebase.images.check_image_bytes`,
makes the bounded working copy in the same decode); these names stay importable from here."""

from culturebase.bounded_image import (  # noqa: F401
    ORIENTATION, BoundedImage, ImageDecodeError, bounded_bytes, decode_megapixels, draft_to, encode, open_bounded,
)
