"""Perceptual hashes of images, as ±1 vectors a vector store can search by dot product.

Why these hashes (measured with ``bench/templates.py`` on the memegen templates):

* **dHash** (64 bits: horizontal gradient signs on a 9×8 grey thumbnail) survives the
  edits a meme makes (captions drawn on, down-scaling, light crops, JPEG) best: the right
  template is the nearest one for ~98 % of memes.  Alone it also sits close to unrelated
  images now and then (flat backgrounds agree on many gradient signs).
* **pHash** (64 bits: signs of the low DCT frequencies of a 32×32 thumbnail against their
  median) is coarser and almost never close to an unrelated image, but drifts more under
  captions.

Each hash is stored as a vector of ±1; for two such n-bit vectors the dot product is
``n − 2·Hamming``, so the store ranks by Hamming distance without knowing about bits.  The
two hashes are concatenated into one 128-d vector: one search per query crop, and the
summed distance ``dHash + pHash`` (0–128) separates right from wrong templates better than
either alone.  The store's cosine on ±1 vectors equals ``dot / n`` exactly, so
``distance = n·(1 − cos)/2`` is exact for either backend.

A meme typically adds a caption band (a white or black strip with text above/below the
picture) or a border; :func:`query_variants` yields the image as is plus those trims, and
the image route keeps the smallest distance over them.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps

HASH_BITS = 64
VECTOR_DIM = 2 * HASH_BITS  # dHash ‖ pHash
HASHER_NAME = "imagehash-dhash8+phash8"


@dataclass(frozen=True)
class HashParams:
    """The hashes' tuned values.  Provenance: *tuning* is :data:`~retrieval.images.provenance.TUNING_RUN` (top-1 and
    false claims of the hash-only rule, printed beside the route's, and the index time per image)."""

    #: hash thumbnails are taken in two steps (PIL's ``reducing_gap``: a box reduction by an integer factor to at
    #: least this many times the thumbnail, then Lanczos): 2.6 ms against 16.7 for a 1,100 px wide query, 0.6
    #: against 2.7 ms for a template frame, and 1.4 bits of 128 off the one-step hash on average (at most 5, over
    #: the 139 memegen templates at 1,100 px), far below the near-copy distance (chosen by: tuning, latency)
    reducing_gap: float = 3.0
    #: frames of an animated entity image indexed, evenly spread over its first ``frame_scan`` frames (chosen by:
    #: tuning, the animated style against the index time per image)
    max_frames: int = 4
    frame_scan: int = 60


PARAMS = HashParams()


@dataclass(frozen=True)
class ImageHash:
    """The bits of one image's dHash and pHash."""

    dhash: np.ndarray  # bool (64,)
    phash: np.ndarray  # bool (64,)

    def vector(self) -> np.ndarray:
        """The ±1 vector (float32, 128-d): dot(a, b) = 128 − 2·(Hamming of dHash + Hamming of pHash)."""
        bits = np.concatenate([self.dhash, self.phash])
        return np.where(bits, 1.0, -1.0).astype(np.float32)

    def hex(self) -> dict[str, str]:
        """Both hashes as hex strings (what imagehash prints)."""
        return {"dhash": _hex(self.dhash), "phash": _hex(self.phash)}

    def distance(self, other: "ImageHash") -> int:
        """Summed Hamming distance (0–128)."""
        return int(np.count_nonzero(self.dhash != other.dhash) + np.count_nonzero(self.phash != other.phash))


def _hex(bits: np.ndarray) -> str:
    return "".join(f"{int(''.join('1' if b else '0' for b in bits[i:i + 4]), 2):x}" for i in range(0, len(bits), 4))


def distance_from_score(score: float, dim: int = VECTOR_DIM) -> int:
    """Hamming distance from a store score on ±1 vectors (cosine = dot/dim)."""
    return int(round(dim * (1.0 - score) / 2.0))


def flatten_grey(img: Image.Image) -> Image.Image:
    """Upright greyscale copy with transparency flattened on white (what hashes and features read)."""
    img = ImageOps.exif_transpose(img) if hasattr(img, "getexif") else img
    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        bg = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        img = Image.alpha_composite(bg, rgba)
    return img.convert("L")


_grey = flatten_grey


#: side of the pHash thumbnail (8 bits a side × imagehash's high-frequency factor 4)
PHASH_SIDE = 32
#: the rows of the unnormalised DCT-II matrix (scipy.fftpack.dct's type 2) for the 8 lowest frequencies
_DCT_LOW = 2.0 * np.cos(np.pi * np.arange(8)[:, None] * (2 * np.arange(PHASH_SIDE)[None, :] + 1) / (2 * PHASH_SIDE))


def phash_bits(grey: Image.Image, reducing_gap: float | None = None) -> np.ndarray:
    """imagehash's pHash (8×8) bits, computed with one small matrix product instead of
    ``scipy.fftpack`` (whose import alone cost a cold ``kar explain`` ~0.5 s): the 32×32 Lanczos
    thumbnail's 8×8 lowest DCT-II frequencies against their median.  Same bits as
    ``imagehash.phash(grey, 8)`` (tests/retrieval/images/test_hashes.py compares them); with
    ``reducing_gap`` the thumbnail is PIL's two-step one (see :func:`hash_image`)."""
    pixels = np.asarray(grey.convert("L").resize((PHASH_SIDE, PHASH_SIDE), Image.Resampling.LANCZOS, reducing_gap=reducing_gap),
                        dtype=np.float64)
    low = (_DCT_LOW @ pixels @ _DCT_LOW.T).reshape(-1)
    middle = np.sort(low)[31:33]  # the median of 64 values, as np.median takes it (without importing numpy.ma)
    return low > (middle[0] + middle[1]) / 2.0


def dhash_bits(grey: Image.Image, reducing_gap: float | None = None) -> np.ndarray:
    """imagehash's dHash (8×8) bits: horizontal gradient signs of the 9×8 Lanczos thumbnail (the same bits as
    ``imagehash.dhash(grey, 8)``; with ``reducing_gap`` the thumbnail is PIL's two-step one)."""
    pixels = np.asarray(grey.convert("L").resize((9, 8), Image.Resampling.LANCZOS, reducing_gap=reducing_gap), dtype=np.int16)
    return (pixels[:, 1:] > pixels[:, :-1]).reshape(-1)


def hash_image(img: Image.Image, reducing_gap: float | None = PARAMS.reducing_gap) -> ImageHash:
    """dHash and pHash (8×8 each) of a PIL image (transparency flattened on white), thumbnails taken in two
    steps (:attr:`HashParams.reducing_gap`; ``None``: one Lanczos step, imagehash's own bits)."""
    grey = _grey(img)
    return ImageHash(dhash=dhash_bits(grey, reducing_gap), phash=phash_bits(grey, reducing_gap))


def open_image(data: bytes) -> Image.Image:
    """Decode image bytes (first frame) fully; raises the PIL error when they are not a readable image."""
    img = Image.open(io.BytesIO(data))
    img.seek(0)
    img.load()
    return img


def sample_frames(data: bytes, count: int = PARAMS.max_frames, scan: int = PARAMS.frame_scan) -> list[tuple[int, Image.Image]]:
    """Up to ``count`` frames (index, RGB/L copy) of an image, evenly spread over its first ``scan`` frames.

    A still image gives its one frame.  The frame count is read without decoding and only frames
    below ``scan`` are ever decoded, so a 500-frame GIF costs at most ``scan`` frame decodes.
    """
    img = Image.open(io.BytesIO(data))
    n = min(int(getattr(img, "n_frames", 1) or 1), scan)
    if n <= 1:
        img.seek(0)
        img.load()
        return [(0, img)]
    wanted = sorted({round(i * (n - 1) / max(1, count - 1)) for i in range(count)})
    out: list[tuple[int, Image.Image]] = []
    for index in wanted:
        img.seek(index)
        img.load()
        out.append((index, img.convert("RGBA") if img.mode in ("P", "PA", "LA", "RGBA") else img.convert("RGB")))
    return out


# -- query crops ---------------------------------------------------------------------------
def _edge_run(plain: np.ndarray) -> int:
    """Length of the run of ``plain`` rows at the start."""
    n = 0
    for flag in plain:
        if not flag:
            break
        n += 1
    return n


def trim_borders(img: Image.Image, tolerance: float = 10.0, max_share: float = 0.25) -> Image.Image | None:
    """The image without uniform borders (rows/columns of one flat colour at the edges); None when there are none."""
    grey = np.asarray(_grey(img), dtype=np.float32)
    h, w = grey.shape
    if h < 16 or w < 16:
        return None
    rows_std, cols_std = grey.std(axis=1), grey.std(axis=0)
    top = _edge_run(rows_std < tolerance)
    bottom = _edge_run(rows_std[::-1] < tolerance)
    left = _edge_run(cols_std < tolerance)
    right = _edge_run(cols_std[::-1] < tolerance)
    cuts = [min(c, int(max_share * n)) for c, n in ((top, h), (bottom, h), (left, w), (right, w))]
    if max(cuts) < max(2, int(0.01 * min(h, w))):
        return None
    top, bottom, left, right = cuts
    if h - top - bottom < h // 2 or w - left - right < w // 2:
        return None
    return img.crop((left, top, w - right, h - bottom))


def _band(grey: np.ndarray, from_top: bool, min_share: float = 0.06, max_share: float = 0.45) -> int:
    """Height of a caption band (a white or black strip, text allowed) at the top or bottom; 0 when none.

    A band row holds only the band colour and text ink (dark on white, light on black); the
    picture begins at the first run of rows with a real share of other tones.
    """
    h = grey.shape[0]
    run = max(3, int(0.03 * h))
    # only the rows a band may span are read (a picture run starting past max_share·h gives no band either
    # way), never the last one
    reach = min(h - 1, int(max_share * h) + run + 1)
    if reach < run:
        return 0
    rows = grey[:reach] if from_top else grey[::-1][:reach]
    for plain, ink in ((rows >= 225, rows <= 100), (rows <= 30, rows >= 155)):
        plain_share = plain.mean(axis=1)
        if plain_share[:2].min() < 0.9:  # a band starts with a clean strip of its colour
            continue
        ink_share = ink.mean(axis=1)
        other = 1.0 - plain_share - ink_share
        # mid tones beyond a text line's anti-aliasing, or a dark (light) area no text line fills
        picture = ((other >= 0.15) & (plain_share < 0.4)) | (other >= 0.35) | (ink_share >= 0.6)
        # the first row that starts `run` picture rows in a row (0: none)
        starts = np.flatnonzero(np.lib.stride_tricks.sliding_window_view(picture, run).all(axis=1))
        end = int(starts[0]) if starts.size else 0
        if min_share * h <= end <= max_share * h:
            return end
    return 0


def remove_caption_bands(img: Image.Image) -> Image.Image | None:
    """The image without a caption band above and/or below it; None when there is none."""
    grey = np.asarray(_grey(img), dtype=np.uint8)
    h, w = grey.shape
    if h < 32 or w < 16:
        return None
    top, bottom = _band(grey, True), _band(grey, False)
    if not top and not bottom:
        return None
    if h - top - bottom < h // 3:
        return None
    return img.crop((0, top, w, h - bottom))


def _longest_run(flags: np.ndarray, gap: int) -> tuple[int, int]:
    """(start, end) of the longest run of True allowing holes of at most ``gap`` False values; (0, 0) when none."""
    best = (0, 0)
    start = last = -1
    for i, flag in enumerate(flags):
        if not flag:
            continue
        if start < 0 or i - last > gap + 1:
            start = i
        last = i
        if last + 1 - start > best[1] - best[0]:
            best = (start, last + 1)
    return best


def picture_region(img: Image.Image, fill: float = 0.3) -> Image.Image | None:
    """The picture inside a screenshot of a post (a meme under a header, above a footer, on a plain page).

    The page's colour is the median of the outermost pixels; a row belongs to the picture when at
    least ``fill`` of it differs from the page (text lines stay below that), the picture is the
    longest run of such rows (small holes allowed: white areas inside the picture), then the
    longest run of such columns within it.  None when the region is most of the image already or
    too small to be a picture.
    """
    grey = np.asarray(_grey(img), dtype=np.int16)
    h, w = grey.shape
    if h < 48 or w < 48:
        return None
    ring = np.concatenate([grey[0], grey[-1], grey[:, 0], grey[:, -1]])
    page = int(np.median(ring))
    if np.mean(np.abs(ring - page) <= 12) < 0.6:  # no plain page around the picture
        return None
    off = np.abs(grey - page) > 16
    top, bottom = _longest_run(off.mean(axis=1) >= fill, gap=max(2, h // 50))
    if bottom - top < 0.15 * h:
        return None
    left, right = _longest_run(off[top:bottom].mean(axis=0) >= fill, gap=max(2, w // 50))
    if right - left < 0.2 * w:
        return None
    if (bottom - top) * (right - left) > 0.85 * h * w:
        return None
    return img.crop((left, top, right, bottom))


def query_variants(img: Image.Image) -> list[tuple[str, Image.Image]]:
    """The query image as is, plus caption bands removed, borders trimmed and the picture inside a
    screenshot (when the image has them)."""
    out: list[tuple[str, Image.Image]] = [("full", img)]
    region = picture_region(img)
    if region is not None:
        out.append(("picture_region", region))
    banded = remove_caption_bands(img)
    if banded is not None:
        out.append(("no_caption_band", banded))
    base = banded or img
    trimmed = trim_borders(base)
    if trimmed is not None:
        out.append(("borders_trimmed", trimmed))
    return out


@dataclass(frozen=True)
class QueryHashes:
    """A query image hashed once per request: one hash per crop variant."""

    variants: tuple[tuple[str, ImageHash], ...]
    width: int
    height: int


def hash_query(img: Image.Image, crops: bool = True) -> QueryHashes:
    """Hash the query image (and its meme crops when ``crops``)."""
    variants = query_variants(img) if crops else [("full", img)]
    return QueryHashes(tuple((name, hash_image(v)) for name, v in variants), img.width, img.height)
