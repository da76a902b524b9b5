"""Generated social-media layouts for ``bench/templates.py``: a meme inside the chrome of a feed.

Every axis a real feed varies is drawn at random (seeded): six chrome *families* (English: an
X/Twitter-like post, a Facebook-like card on a grey feed, a Reddit-like post; Chinese: a
Weibo-like post, a WeChat-Moments-like entry, a Xiaohongshu-like two-column card feed), light
or dark theme, a phone status bar or none, a quote post nesting the post with the meme, the
meme alone or in a 2×2 or 1×3 image grid, rounded corners and/or a border on the pictures, the
picture at 25-70 % of the screenshot's width, a watermark over one of its corners, mirrored
pictures, the whole screenshot rotated up to 5°, JPEG quality 40-70.

Chinese chrome is drawn with a CJK font when one is found (``BENCH_CJK_FONT`` or the usual
Noto/WenQuanYi paths); without one, with pseudo-Han glyphs (strokes in an em square, the
texture a line of Chinese gives a feature detector).  Families are split for tuning:
:data:`TUNING_FAMILIES` are the only ones thresholds were chosen on; :data:`HELD_OUT_FAMILIES`
are reported apart.
"""

from __future__ import annotations

import io
import os
import random
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont, ImageOps

FAMILIES = ("x_en", "weibo_zh", "wechat_zh", "facebook_en", "reddit_en", "xhs_zh")
TUNING_FAMILIES = ("x_en", "weibo_zh", "wechat_zh")
HELD_OUT_FAMILIES = ("facebook_en", "reddit_en", "xhs_zh")
#: a narrow grid's block, in shares of the post's width (cells then 10-23 % of it: small, as in one column of a card feed)
NARROW_BLOCK = (0.30, 0.45)

WORDS = (
    "when you finally understand the meme but nobody asked me explaining to my cat why monday is the worst day ever "
    "boss said deadline tomorrow coffee again my code works on my machine friday night plans cancelled"
).split()
HAN = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坐集编宝谈府拉黑且随格尽剑讲布杀微怕母调局根曾准团段终乐切级克精哪官示冷域读"


def _font(size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.load_default(size=size)


def cjk_font_path() -> str | None:
    """A font that draws Chinese, when this machine has one (``BENCH_CJK_FONT`` first)."""
    candidates = [os.environ.get("BENCH_CJK_FONT", ""), "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
                  "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc", "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
                  "/usr/share/fonts/opentype/noto/NotoSansCJKsc-Regular.otf"]
    return next((p for p in candidates if p and Path(p).is_file()), None)


CJK_FONT = cjk_font_path()


@dataclass
class Theme:
    page: tuple[int, int, int]
    card: tuple[int, int, int]
    ink: tuple[int, int, int]
    grey: tuple[int, int, int]
    line: tuple[int, int, int]
    accent: tuple[int, int, int]


def theme(dark: bool, family: str, rng: random.Random) -> Theme:
    accent = {"x_en": (29, 155, 240), "weibo_zh": (255, 130, 0), "wechat_zh": (87, 107, 149), "facebook_en": (8, 102, 255),
              "reddit_en": (255, 69, 0), "xhs_zh": (255, 36, 66)}[family]
    if dark:
        base = rng.choice([(0, 0, 0), (21, 32, 43), (25, 25, 25), (18, 18, 18)])
        card = tuple(min(255, c + rng.choice([0, 12, 20])) for c in base)
        return Theme(base, card, (231, 233, 234), (113, 118, 123), (56, 68, 77), accent)
    base = rng.choice([(255, 255, 255), (240, 242, 245), (247, 247, 247), (237, 237, 237)])
    return Theme(base, (255, 255, 255), (15, 20, 25), (110, 118, 125), (220, 224, 228), accent)


def words(rng: random.Random, lo: int = 2, hi: int = 7) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def han(rng: random.Random, lo: int = 3, hi: int = 14) -> str:
    return "".join(rng.choice(HAN) for _ in range(rng.randint(lo, hi)))


def draw_text(d: ImageDraw.ImageDraw, xy: tuple[int, int], text: str, size: int, fill, zh: bool, rng: random.Random) -> int:
    """Draw a line (Chinese with a CJK font, or pseudo-Han glyphs without one); returns its width."""
    x, y = xy
    if not zh:
        font = _font(size)
        d.text((x, y), text, font=font, fill=fill)
        return int(d.textlength(text, font=font))
    if CJK_FONT:
        font = ImageFont.truetype(CJK_FONT, size)
        d.text((x, y), text, font=font, fill=fill)
        return int(d.textlength(text, font=font))
    w = max(1, size // 12)
    for ch in text:  # pseudo-Han: 3-7 strokes inside the em square, seeded by the character
        r = random.Random(ord(ch))
        for _ in range(r.randint(3, 7)):
            if r.random() < 0.55:  # horizontal or vertical stroke
                if r.random() < 0.5:
                    yy = y + r.randint(1, size - 2)
                    x0 = x + r.randint(0, size // 3)
                    d.line([(x0, yy), (x0 + r.randint(size // 3, size - 2), yy)], fill=fill, width=w)
                else:
                    xx = x + r.randint(1, size - 2)
                    y0 = y + r.randint(0, size // 3)
                    d.line([(xx, y0), (xx, y0 + r.randint(size // 3, size - 2))], fill=fill, width=w)
            else:  # a slanted stroke
                x0, y0 = x + r.randint(0, size - 2), y + r.randint(0, size // 2)
                d.line([(x0, y0), (x0 + r.randint(-size // 2, size // 2), y0 + r.randint(size // 4, size // 2))], fill=fill, width=w)
        x += size + max(1, size // 10)
    return x - xy[0]


def rounded(img: Image.Image, radius: int, bg) -> Image.Image:
    """The picture with rounded corners on the background colour."""
    if radius <= 0:
        return img
    mask = Image.new("L", img.size, 0)
    ImageDraw.Draw(mask).rounded_rectangle((0, 0, img.width - 1, img.height - 1), radius, fill=255)
    out = Image.new("RGB", img.size, bg)
    out.paste(img, (0, 0), mask)
    return out


def watermark(img: Image.Image, rng: random.Random, zh: bool) -> Image.Image:
    """A site watermark over one corner (semi-transparent text with a shadow)."""
    img = img.convert("RGBA")
    layer = Image.new("RGBA", img.size, (0, 0, 0, 0))
    d = ImageDraw.Draw(layer)
    size = max(10, img.width // rng.randint(14, 22))
    text = ("@" + han(rng, 2, 5)) if zh else rng.choice(["@memes_daily", "imgflip.com", "9GAG", "@dankest", "ifunny.co"])
    tmp = Image.new("RGBA", (img.width, size * 2), (0, 0, 0, 0))
    tw = draw_text(ImageDraw.Draw(tmp), (0, 0), text, size, (255, 255, 255, 200), zh, rng)
    corner = rng.choice(["tl", "tr", "bl", "br"])
    x = 6 if corner[1] == "l" else max(0, img.width - tw - 8)
    y = 6 if corner[0] == "t" else max(0, img.height - size - 10)
    draw_text(d, (x + 1, y + 1), text, size, (0, 0, 0, 140), zh, rng)
    draw_text(d, (x, y), text, size, (255, 255, 255, 190), zh, rng)
    return Image.alpha_composite(img, layer).convert("RGB")


def fit_cell(img: Image.Image, w: int, h: int) -> Image.Image:
    """Centre-crop to the cell's aspect and scale to it (what a feed's image grid does)."""
    return ImageOps.fit(img.convert("RGB"), (max(8, w), max(8, h)), Image.Resampling.LANCZOS)


def status_bar(width: int, th: Theme, rng: random.Random) -> Image.Image:
    h = max(20, width // rng.randint(14, 20))
    bar = Image.new("RGB", (width, h), th.page if rng.random() < 0.7 else (0, 0, 0))
    d = ImageDraw.Draw(bar)
    ink = th.ink if bar.getpixel((0, 0)) == th.page else (255, 255, 255)
    d.text((h // 2, h // 5), f"{rng.randint(7, 23)}:{rng.randint(0, 59):02d}", font=_font(int(h * 0.6)), fill=ink)
    x = width - h // 2
    bw = int(h * 1.2)  # battery
    d.rounded_rectangle((x - bw, h // 4, x, h - h // 4), 3, outline=ink, width=2)
    d.rectangle((x - bw + 3, h // 4 + 3, x - bw + 3 + int((bw - 6) * rng.uniform(0.2, 1)), h - h // 4 - 3), fill=ink)
    x -= bw + h // 3
    for i in range(4):  # signal bars
        bh = int((i + 1) * h / 8)
        d.rectangle((x - (4 - i) * 5, h - h // 4 - bh, x - (4 - i) * 5 + 3, h - h // 4), fill=ink)
    return bar


@dataclass
class Layout:
    """What was drawn (the axes, for per-axis figures)."""

    family: str
    dark: bool
    grid: str  # single | 2x2 | 1x3
    quote: bool
    status_bar: bool
    radius: int
    border: bool
    share: float
    rotation: float
    quality: int
    watermark: bool
    mirrored: bool
    cell: int


def picture_block(pictures: list[Image.Image], grid: str, width: int, th: Theme, radius: int, border: bool, gap: int) -> Image.Image:
    """The post's pictures: one (its own aspect) or a grid of cells."""
    if grid == "single":
        img = pictures[0].convert("RGB")
        h = max(8, int(img.height * width / img.width))
        cells = [(img.resize((width, h), Image.Resampling.LANCZOS), 0, 0)]
        total = (width, h)
    else:
        cols, rows = (2, 2) if grid == "2x2" else (3, 1)
        cw = (width - gap * (cols - 1)) // cols
        ch = cw if grid == "2x2" or cw < 200 else int(cw * 1.0)
        cells = []
        for i, p in enumerate(pictures[: cols * rows]):
            c, r = i % cols, i // cols
            cells.append((fit_cell(p, cw, ch), c * (cw + gap), r * (ch + gap)))
        total = (cols * cw + gap * (cols - 1), rows * ch + gap * (rows - 1))
    block = Image.new("RGB", total, th.card)
    for img, x, y in cells:
        if border:
            ImageDraw.Draw(img).rectangle((0, 0, img.width - 1, img.height - 1), outline=th.line, width=max(1, width // 400))
        block.paste(rounded(img, radius, th.card), (x, y))
    return block


def _header(d: ImageDraw.ImageDraw, x: int, y: int, width: int, th: Theme, family: str, rng: random.Random, scale: int) -> int:
    """Avatar, name and time line of a post in the family's style; returns the y below it."""
    zh = family.endswith("_zh")
    r = scale
    shape = d.rounded_rectangle if family == "wechat_zh" else d.ellipse
    kwargs = {"radius": r // 4} if family == "wechat_zh" else {}
    shape((x, y, x + 2 * r, y + 2 * r), fill=tuple(rng.randint(30, 230) for _ in range(3)), **kwargs)
    size = max(11, int(scale * 0.75))
    name_ink = th.accent if family in ("wechat_zh", "weibo_zh") else th.ink
    if zh:
        draw_text(d, (x + 2 * r + 10, y), han(rng, 2, 6), size, name_ink, True, rng)
        meta = han(rng, 4, 8) if family != "weibo_zh" else f"{rng.randint(1, 12)}-{rng.randint(1, 28)} " + han(rng, 2, 5)
        draw_text(d, (x + 2 * r + 10, y + size + 6), meta, int(size * 0.8), th.grey, family != "weibo_zh", rng)
    else:
        handle = f"{rng.choice(WORDS).title()} {rng.choice(WORDS).title()}"
        d.text((x + 2 * r + 10, y), handle, font=_font(size), fill=th.ink)
        meta = {"x_en": f"@{rng.choice(WORDS)}_{rng.randint(1, 999)} · {rng.randint(1, 23)}h",
                "facebook_en": f"{rng.randint(1, 23)}h · Public",
                "reddit_en": f"r/{rng.choice(['memes', 'dankmemes', 'me_irl', 'funny'])} · Posted by u/{rng.choice(WORDS)}{rng.randint(1, 99)}"}[family]
        d.text((x + 2 * r + 10, y + size + 6), meta, font=_font(int(size * 0.8)), fill=th.grey)
    return y + max(2 * r, 2 * size + 8) + 10


def _body(d: ImageDraw.ImageDraw, x: int, y: int, width: int, th: Theme, family: str, rng: random.Random, size: int, lines: int) -> int:
    zh = family.endswith("_zh")
    for _ in range(lines):
        draw_text(d, (x, y), han(rng, 6, max(7, width // (size + 2) - 1)) if zh else words(rng, 3, 9), size, th.ink, zh, rng)
        y += size + 8
    return y


def _footer(d: ImageDraw.ImageDraw, x: int, y: int, width: int, th: Theme, family: str, rng: random.Random, size: int) -> int:
    zh = family.endswith("_zh")
    if family == "wechat_zh":  # likes and comments box
        h = size * 3
        d.rounded_rectangle((x, y, x + width, y + h), 4, fill=tuple(max(0, c - 12) for c in th.card))
        draw_text(d, (x + 8, y + 6), "♡ " + "，".join(han(rng, 2, 3) for _ in range(rng.randint(2, 5))), size, th.accent, True, rng)
        draw_text(d, (x + 8, y + 6 + size + 6), han(rng, 2, 3) + "：" + han(rng, 4, 12), size, th.ink, True, rng)
        return y + h + 8
    labels = (["转发", "评论", "赞"] if family == "weibo_zh" else ["收藏", "评论", "赞"]) if zh else \
        (["Like", "Comment", "Share"] if family == "facebook_en" else [f"{rng.randint(1, 99)}", f"{rng.randint(1, 9)}.{rng.randint(0, 9)}K", f"{rng.randint(1, 99)}K"])
    d.line((x, y, x + width, y), fill=th.line, width=1)
    step = width // len(labels)
    for i, label in enumerate(labels):
        cx = x + i * step + step // 3
        d.ellipse((cx - size - 4, y + 8, cx - 4, y + 8 + size), outline=th.grey, width=2)
        draw_text(d, (cx + 2, y + 8), (label + " " + str(rng.randint(1, 999))) if zh else label, size, th.grey, zh, rng)
    return y + size + 20


def post(pictures: list[Image.Image], layout: Layout, th: Theme, rng: random.Random, width: int) -> Image.Image:
    """One post of the family around the picture block (nested as a quote post when asked)."""
    family = layout.family
    margin = max(10, width // 30)
    size = max(12, width // rng.randint(32, 42))
    scale = max(14, width // 22)
    canvas = Image.new("RGB", (width, width * 4), th.card)
    d = ImageDraw.Draw(canvas)
    indent = margin + (2 * scale + 10 if family == "wechat_zh" else 0)
    y = margin
    if family == "xhs_zh":  # a two-column card feed: the pictures are the cover of one card
        return xhs_feed(pictures, layout, th, rng, width)
    y = _header(d, margin, y, width, th, family, rng, scale)
    if family == "reddit_en":  # a bold title above the picture
        d.text((margin, y), words(rng, 3, 8).capitalize(), font=_font(int(size * 1.3)), fill=th.ink)
        y += int(size * 1.3) + 12
    else:
        y = _body(d, indent, y, width - indent - margin, th, family, rng, size, rng.randint(0, 3))
    block_w = _block_width(layout, width)
    if layout.quote:  # a quote post: a bordered card with its own small header around the pictures
        qw = min(width - indent - margin, block_w + 2 * margin)
        qx = indent
        quote_top = y
        y += margin // 2
        y = _header(d, qx + margin // 2, y, qw, th, family, rng, max(10, scale * 2 // 3))
        y = _body(d, qx + margin // 2, y, qw - margin, th, family, rng, max(11, size - 2), rng.randint(0, 2))
        block = picture_block(pictures, layout.grid, block_w, th, layout.radius, layout.border, max(2, width // 150))
        bx = qx + (qw - block.width) // 2
        canvas.paste(block, (bx, y))
        y += block.height + margin // 2
        d.rounded_rectangle((qx, quote_top, qx + qw, y), max(4, margin // 2), outline=th.line, width=max(1, width // 400))
        y += margin // 2
    else:
        block = picture_block(pictures, layout.grid, block_w, th, layout.radius, layout.border, max(2, width // 150))
        if family == "reddit_en":  # centred on a letterbox band
            band = Image.new("RGB", (width, block.height), th.page if rng.random() < 0.5 else (0, 0, 0))
            band.paste(block, ((width - block.width) // 2, 0))
            canvas.paste(band, (0, y))
        elif family == "facebook_en" and rng.random() < 0.5:
            canvas.paste(block, ((width - block.width) // 2, y))
        else:
            canvas.paste(block, (indent, y))
        y += block.height + margin // 2
    y = _footer(d, margin if family != "wechat_zh" else indent, y + 4, width - 2 * margin, th, family, rng, max(11, size - 2))
    return canvas.crop((0, 0, width, y + margin // 2))


def _block_width(layout: Layout, width: int) -> int:
    """The picture block's width for the drawn share of the template (a grid cell holds the template)."""
    if layout.grid == "single":
        return int(layout.share * width)
    cols = 2 if layout.grid == "2x2" else 3
    return min(width - 20, int(layout.share * width * cols))


def xhs_feed(pictures: list[Image.Image], layout: Layout, th: Theme, rng: random.Random, width: int) -> Image.Image:
    """A Xiaohongshu-like feed: two columns of cards, a cover picture (or grid) on top of each, a title and a like count."""
    gap = max(6, width // 60)
    col_w = (width - 3 * gap) // 2
    canvas = Image.new("RGB", (width, width * 3), th.page)
    d = ImageDraw.Draw(canvas)
    size = max(12, width // 34)
    block_w = min(col_w, _block_width(layout, width))
    heights = [gap, gap]
    target_col = rng.randrange(2)
    for col in (target_col, 1 - target_col):
        x = gap + col * (col_w + gap)
        y = heights[col]
        if col == target_col:
            cover = picture_block(pictures, layout.grid, block_w, th, 0, layout.border, max(2, width // 150))
        else:
            other = pictures[-1].convert("RGB")
            cover = other.resize((col_w, max(8, int(other.height * col_w / other.width))))
        card_h = cover.height + 3 * size + 40
        d.rounded_rectangle((x, y, x + col_w, y + card_h), max(6, layout.radius), fill=th.card)
        canvas.paste(rounded(cover, layout.radius, th.card), (x + (col_w - cover.width) // 2, y))
        ty = y + cover.height + 8
        draw_text(d, (x + 8, ty), han(rng, 5, max(6, col_w // (size + 2) - 2)), size, th.ink, True, rng)
        ty += size + 10
        d.ellipse((x + 8, ty, x + 8 + size, ty + size), fill=tuple(rng.randint(30, 230) for _ in range(3)))
        draw_text(d, (x + 14 + size, ty), han(rng, 2, 4), int(size * 0.8), th.grey, True, rng)
        d.text((x + col_w - 60, ty), f"♡ {rng.randint(1, 9999)}", font=_font(int(size * 0.8)), fill=th.grey)
        heights[col] = y + card_h + gap
    return canvas.crop((0, 0, width, max(heights)))


def draw_layout(
    template: Image.Image, fillers: list[Image.Image], rng: random.Random, family: str | None = None, grid: str | None = None,
    narrow: bool = False,
) -> tuple[bytes, Layout]:
    """A screenshot of a feed showing ``template`` (in one cell of a grid when ``grid`` is not single;
    ``fillers`` fill the other cells and the other card); returns JPEG bytes and the axes drawn.  ``narrow``:
    a grid's whole block at :data:`NARROW_BLOCK` of the post's width (small cells, as a card feed's column
    draws them), in any family."""
    family = family or rng.choice(FAMILIES)
    grid = grid or "single"
    cols = 1 if grid == "single" else (2 if grid == "2x2" else 3)
    if narrow and grid != "single":
        share = rng.uniform(*NARROW_BLOCK) / cols
    else:
        share = rng.uniform(0.25, 0.7) if grid == "single" else rng.uniform(0.25, 0.45 if grid == "2x2" else 0.32)
    layout = Layout(
        family=family, dark=rng.random() < 0.4, grid=grid, quote=rng.random() < 0.3, status_bar=rng.random() < 0.5,
        radius=rng.choice([0, 0, 8, 16, 24]), border=rng.random() < 0.4, share=share,
        rotation=rng.uniform(-5, 5) if rng.random() < 0.5 else 0.0, quality=rng.randint(40, 70),
        watermark=rng.random() < 0.35, mirrored=rng.random() < 0.15, cell=0,
    )
    th = theme(layout.dark, family, rng)
    meme = template.convert("RGB")
    if layout.mirrored:
        meme = ImageOps.mirror(meme)
    if layout.watermark:
        meme = watermark(meme, rng, family.endswith("_zh"))
    n = 1 if grid == "single" else (4 if grid == "2x2" else 3)
    others = [f.convert("RGB") for f in fillers]
    pictures = [others[i % len(others)] for i in range(n)] if others else [meme] * n
    layout.cell = rng.randrange(n)
    pictures[layout.cell] = meme
    pictures.append(others[-1] if others else meme)  # the other card of a two-column feed
    width = rng.choice([720, 828, 1080]) if rng.random() < 0.6 else rng.randint(600, 1100)
    body = post(pictures, layout, th, rng, width)
    parts = [status_bar(width, th, rng)] if layout.status_bar else []
    page = Image.new("RGB", (width, sum(p.height for p in parts) + body.height + (0 if family == "xhs_zh" else 2 * max(6, width // 60))), th.page)
    y = 0
    for p in parts:
        page.paste(p, (0, y))
        y += p.height
    page.paste(body, (0, y + (0 if family == "xhs_zh" else max(6, width // 60))))
    if layout.rotation:
        page = page.rotate(layout.rotation, resample=Image.Resampling.BICUBIC, expand=True, fillcolor=rng.choice([th.page, (0, 0, 0), (128, 128, 128)]))
    s = rng.uniform(0.6, 1.0)
    page = page.resize((max(64, int(page.width * s)), max(64, int(page.height * s))), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    page.save(buf, "JPEG", quality=layout.quality)
    return buf.getvalue(), layout
