"""Which longest side keeps captions legible?  OCR on bounded copies vs the full-size reading.

Renders the caption sets (the queries of ``examples/grounding_queries.jsonl`` and the
sample memes' captions) onto 12-16 MP photo-like images (JPEG or WebP, with sensor grain so
they weigh what a phone's photos do, caption height 2.5-6 % of the image, meme style: white
with a black outline), reads each at full size
(recognition on crops of the original pixels; see :func:`full_size_reading`) and with each
candidate ``KAR_OCR_MAX_SIDE`` (:class:`retrieval.ocr.OCR`: detection on the
``KAR_OCR_DET_SIDE`` copy, recognition on the bounded copy), and prints per side: share of
images whose text is identical to the full-size reading (whitespace ignored), share with the
same reading (case and punctuation ignored too), share identical to the drawn caption, mean
OCR seconds and the process's peak RSS.  ``--detect-full`` adds the reading with detection on
the full-size pixels too.  Prints one JSON document.

    python bench/ocr_side.py --images 30 --sides 960,1280,1600,2000 [--detect-full]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import resource
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CJK_FONTS = ["/usr/share/fonts/truetype/wqy/wqy-microhei.ttc", "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc"]
LATIN_FONTS = ["/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf", "/usr/share/fonts/truetype/liberation/LiberationSans-Bold.ttf"]
SAMPLE_CAPTIONS = ["我从未见过有如此厚颜无耻之人", "such meme very culture", "鲁迅：这句话我没说过", "NEW MEME", "much explain wow"]


def _is_cjk(text: str) -> bool:
    return any("\u3000" <= ch <= "\u9fff" or "\uff00" <= ch <= "\uffef" for ch in text)


def font_for(text: str, size: int) -> Any:
    """A TrueType font that has the text's glyphs (None when only Latin fonts exist and the text is CJK)."""
    from PIL import ImageFont

    for path in CJK_FONTS if _is_cjk(text) else LATIN_FONTS + CJK_FONTS:
        if Path(path).exists():
            return ImageFont.truetype(path, size)
    if _is_cjk(text):
        return None
    return ImageFont.load_default(size=size)


def caption_set(limit: int | None = None, seed: int = 7) -> list[str]:
    """The caption texts: grounding queries plus sample captions, CJK ones only when a CJK font exists."""
    texts = list(SAMPLE_CAPTIONS)
    for line in (REPO / "examples" / "grounding_queries.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            texts.append(json.loads(line)["query"])
    texts = [t for t in dict.fromkeys(texts) if font_for(t, 12) is not None and 2 <= len(t) <= 40]
    random.Random(seed).shuffle(texts)
    return texts[:limit] if limit else texts


def make_photo(text: str, seed: int, megapixels: float = 14.0, fmt: str = "JPEG") -> bytes:
    """A photo-like image of about ``megapixels`` with ``text`` drawn as a meme caption, encoded."""
    return encode_photo(render_photo(text, seed, megapixels), fmt)


def encode_photo(img: Any, fmt: str) -> bytes:
    """JPEG q90 or WebP q88, as a phone or a web upload would be."""
    buffer = io.BytesIO()
    if fmt == "WEBP":
        img.save(buffer, format="WEBP", quality=88, method=0)
    else:
        img.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def render_photo(text: str, seed: int, megapixels: float = 14.0) -> Any:
    """The photo's pixels (PIL, RGB) before encoding."""
    import numpy as np
    from PIL import Image, ImageDraw, ImageFilter

    rng = random.Random(seed)
    aspect = rng.choice([4 / 3, 3 / 4, 1.0, 16 / 9, 3 / 2])
    height = int((megapixels * 1e6 / aspect) ** 0.5)
    width = int(height * aspect)
    small = np.random.default_rng(seed).integers(0, 255, (12, 16, 3), dtype=np.uint8)
    img = Image.fromarray(small).resize((width, height), Image.Resampling.BICUBIC).filter(ImageFilter.GaussianBlur(3))
    draw = ImageDraw.Draw(img)
    for _ in range(6):  # a few shapes, as a scene has
        x, y = rng.randrange(width), rng.randrange(height)
        r = rng.randrange(height // 12, height // 4)
        draw.ellipse((x - r, y - r, x + r, y + r), fill=tuple(rng.randrange(256) for _ in range(3)))
    # sensor grain (luminance, sigma 5): without it the smooth scene encodes to well under 1 MB,
    # with it a 12-16 MP photo is 3-4 MB of JPEG or 2-3 MB of WebP, as a phone's is
    pixels = np.asarray(img).astype(np.int16)
    pixels += np.random.default_rng([seed, 1]).normal(0, 5, (height, width, 1)).astype(np.int16)
    img = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    del pixels
    draw = ImageDraw.Draw(img)
    size = int(height * rng.uniform(0.025, 0.06))
    font = font_for(text, size)
    # a caption may have several lines (a few grounding queries do): measured and drawn as a block
    multi = "\n" in text

    def text_width(f: Any) -> float:
        return draw.multiline_textbbox((0, 0), text, font=f)[2] if multi else f.getbbox(text)[2]

    while text_width(font) > width * 0.92 and size > 12:
        size = int(size * 0.9)
        font = font_for(text, size)
    y = height * rng.choice([0.08, 0.9])
    style = {"font": font, "fill": "white", "anchor": "mm", "stroke_width": max(2, size // 14), "stroke_fill": "black"}
    if multi:
        draw.multiline_text((width / 2, y), text, align="center", **style)
    else:
        draw.text((width / 2, y), text, **style)
    return img


def norm(text: str) -> str:
    """Whitespace ignored (OCR splits or joins boxes differently at different scales)."""
    return "".join(text.split())


def loose(text: str) -> str:
    """Also case and punctuation ignored: the reading grounding keys on (names, catchphrases)."""
    import unicodedata

    return "".join(ch for ch in norm(text).casefold() if not unicodedata.category(ch).startswith(("P", "S")))


CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "culturekar-bench" / "ocr_full_size.json"


def full_size_reading(data: bytes, detect_full: bool = False) -> str:
    """OCR on the original pixels: the reference reading.

    Recognition reads every line cropped from the full-size pixels; detection runs at the
    detector's working size (``KAR_OCR_DET_SIDE``, what PP-OCR's detector is made for), or
    with ``detect_full`` on the full-size pixels too (no cap anywhere: the detector then sees
    strokes far larger than it was trained on and splits or flips lines; printed apart).
    Readings take seconds (tens of seconds and GBs with ``detect_full``) per 16 MP image, so
    they are cached on disk by the image's SHA-256, the variant and the OCR's
    ``READING_METHOD`` (the photos come from fixed seeds, so the same bytes recur).
    """
    import hashlib

    from retrieval.ocr import READING_METHOD

    from culturebase.settings import Settings

    key = f"{hashlib.sha256(data).hexdigest()}:m{READING_METHOD}:{'detfull' if detect_full else f'det{Settings().ocr_det_side}max'}"
    cache = json.loads(CACHE.read_text()) if CACHE.exists() else {}
    if key not in cache:
        global FULL_COMPUTED
        FULL_COMPUTED += 1
        cache[key] = norm(_full_engine(detect_full).read(data).text)
        CACHE.parent.mkdir(parents=True, exist_ok=True)
        current = json.loads(CACHE.read_text()) if CACHE.exists() else {}
        current.update(cache)
        CACHE.write_text(json.dumps(current, ensure_ascii=False))
    return cache[key]


_FULL: dict[bool, Any] = {}
FULL_COMPUTED = 0  # full-size readings computed in this run (the others came from the cache)


def _full_engine(detect_full: bool) -> Any:
    if detect_full not in _FULL:
        from culturebase.settings import Settings
        from retrieval.ocr import OCR

        if detect_full:  # every pixel to the detector (limit "min": rapidocr would cap a "max" limit at 2000 px)
            _FULL[True] = OCR(max_side=100_000, det_side=100_000, det_limit_type="min")
        else:
            _FULL[False] = OCR(max_side=100_000, det_side=Settings().ocr_det_side)
    return _FULL[detect_full]


def rss_peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=30)
    parser.add_argument("--sides", default="960,1280,1600,2000")
    parser.add_argument("--megapixels", default="12,16", help="min,max megapixels of the rendered photos")
    parser.add_argument("--detect-full", action="store_true", help="also compare with detection on the full-size pixels (slow, GBs)")
    return parser.parse_args()


def compare(args: argparse.Namespace, texts: list[str], readers: dict[int, Any], lo: float, hi: float) -> dict[str, Any]:
    """Each photo read at full size and by every bounded reader; per side, the readings that agree (and timings)."""
    per_side: dict[int, dict[str, Any]] = {
        side: {"identical": 0, "same": 0, "caption": 0, "identical_detect_full": 0, "seconds": 0.0, "mismatches": []} for side in readers
    }
    totals = {"full_s": 0.0, "full_matches_caption": 0, "detect_full_matches_caption": 0}
    for i, text in enumerate(texts):
        rng = random.Random(i)
        data = make_photo(text, seed=i, megapixels=rng.uniform(lo, hi), fmt="WEBP" if i % 3 == 0 else "JPEG")
        t0 = time.perf_counter()
        reference = full_size_reading(data)
        totals["full_s"] += time.perf_counter() - t0
        totals["full_matches_caption"] += reference == norm(text)
        reference_df = full_size_reading(data, detect_full=True) if args.detect_full else None
        totals["detect_full_matches_caption"] += reference_df == norm(text)
        for side, reader in readers.items():
            t0 = time.perf_counter()
            got = norm(reader.read(data).text)
            per_side[side]["seconds"] += time.perf_counter() - t0
            per_side[side]["caption"] += got == norm(text)
            per_side[side]["same"] += loose(got) == loose(reference)
            per_side[side]["identical_detect_full"] += got == reference_df
            if got == reference:
                per_side[side]["identical"] += 1
            elif len(per_side[side]["mismatches"]) < 5:
                per_side[side]["mismatches"].append({"caption": text, "full": reference, "bounded": got})
        print(f"{i + 1}/{len(texts)}", file=sys.stderr, flush=True)
    return {"per_side": per_side, **totals}


def summary(args: argparse.Namespace, n: int, lo: float, hi: float, det_side: int, c: dict[str, Any]) -> dict[str, Any]:
    full_s = c["full_s"]
    return {
        "bench": "ocr_side",
        "images": n,
        "megapixels": [lo, hi],
        "ocr_det_side": det_side,
        "full_size_readings_computed": FULL_COMPUTED,
        "full_size_ocr_s_mean": round(full_s / FULL_COMPUTED, 3) if FULL_COMPUTED else None,
        "full_size_identical_to_drawn_caption": round(c["full_matches_caption"] / n, 3),
        **({"full_size_detection_identical_to_drawn_caption": round(c["detect_full_matches_caption"] / n, 3)} if args.detect_full else {}),
        "sides": {
            str(side): {
                "identical_to_full_size": round(v["identical"] / n, 3),
                "same_reading_as_full_size": round(v["same"] / n, 3),
                "identical_to_drawn_caption": round(v["caption"] / n, 3),
                **({"identical_to_full_size_detection": round(v["identical_detect_full"] / n, 3)} if args.detect_full else {}),
                "ocr_s_mean": round(v["seconds"] / n, 3),
                "speedup_vs_full": round(full_s / v["seconds"], 2) if v["seconds"] and FULL_COMPUTED == n else None,
                "mismatches": v["mismatches"],
            }
            for side, v in c["per_side"].items()
        },
        "process_peak_rss_mb": round(rss_peak_mb(), 1),
        "cpus": os.cpu_count(),
        "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    args = parse_args()
    from culturebase.settings import Settings
    from retrieval.ocr import OCR

    sides = [int(s) for s in args.sides.split(",")]
    lo, hi = (float(x) for x in args.megapixels.split(","))
    texts = caption_set(args.images)
    det_side = Settings().ocr_det_side  # KAR_OCR_DET_SIDE
    readers = {side: OCR(max_side=side, det_side=det_side) for side in sides}
    compared = compare(args, texts, readers, lo, hi)
    print(json.dumps(summary(args, len(texts), lo, hi, det_side, compared), indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
