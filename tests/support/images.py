"""Generated test images: distinct synthetic "templates" and memes made from them (captions, scaling, crop, JPEG)."""

from __future__ import annotations

import io
import random

from PIL import Image, ImageDraw, ImageFont


def template_image(seed: int, size: tuple[int, int] = (320, 240)) -> Image.Image:
    """A deterministic picture of random shapes on a gradient (different seeds look unrelated)."""
    rng = random.Random(seed)
    w, h = size
    img = Image.new("RGB", size)
    d = ImageDraw.Draw(img)
    c0 = [rng.randint(0, 255) for _ in range(3)]
    c1 = [rng.randint(0, 255) for _ in range(3)]
    for y in range(h):
        t = y / h
        d.line([(0, y), (w, y)], fill=tuple(int(a + (b - a) * t) for a, b in zip(c0, c1)))
    for _ in range(rng.randint(6, 10)):
        x0, y0 = rng.randint(-40, w), rng.randint(-40, h)
        x1, y1 = x0 + rng.randint(30, w // 2), y0 + rng.randint(30, h // 2)
        fill = tuple(rng.randint(0, 255) for _ in range(3))
        (d.ellipse if rng.random() < 0.5 else d.rectangle)([x0, y0, x1, y1], fill=fill)
    return img


def to_bytes(img: Image.Image, fmt: str = "PNG", **kw: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def meme_of(img: Image.Image, seed: int, band: bool = False) -> bytes:
    """The template with captions drawn on (or a white caption band above), down-scaled, cropped, JPEG-compressed."""
    rng = random.Random(seed)
    img = img.convert("RGB").copy()
    size = max(12, img.height // 10)
    font = ImageFont.load_default(size=size)
    if band:
        bh = int(img.height * 0.25)
        canvas = Image.new("RGB", (img.width, img.height + bh), "white")
        canvas.paste(img, (0, bh))
        ImageDraw.Draw(canvas).text((8, bh // 3), "me when the tests pass", font=font, fill="black")
        img = canvas
    else:
        d = ImageDraw.Draw(img)
        for y, text in ((4, "TOP TEXT"), (img.height - size - 8, "BOTTOM TEXT")):
            d.text((img.width // 6, y), text, font=font, fill="white", stroke_width=2, stroke_fill="black")
    s = rng.uniform(0.7, 0.95)
    img = img.resize((int(img.width * s), int(img.height * s)))
    dx, dy = int(img.width * 0.03), int(img.height * 0.03)
    img = img.crop((dx, dy, img.width - dx, img.height - dy))
    return to_bytes(img, "JPEG", quality=70)
