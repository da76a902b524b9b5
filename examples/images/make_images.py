"""Regenerate the sample meme images (Pillow; Chinese captions need a CJK font, e.g. fonts-wqy-microhei).

    .venv/bin/python examples/images/make_images.py
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

HERE = Path(__file__).resolve().parent
CJK_FONTS = [
    "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
    "/System/Library/Fonts/PingFang.ttc",
]
LATIN_FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"


def font(size: int, cjk: bool) -> ImageFont.FreeTypeFont:
    for path in (CJK_FONTS if cjk else [LATIN_FONT, *CJK_FONTS]):
        if Path(path).exists():
            return ImageFont.truetype(path, size)
    raise SystemExit("no suitable font found; install fonts-wqy-microhei")


def caption(draw: ImageDraw.ImageDraw, xy: tuple[int, int], text: str, size: int, cjk: bool, fill="black") -> None:
    draw.text(xy, text, font=font(size, cjk), fill=fill, anchor="mm")


def strategist() -> Image.Image:
    img = Image.new("RGB", (640, 480), (250, 245, 230))
    d = ImageDraw.Draw(img)
    d.ellipse((270, 90, 370, 190), fill=(240, 210, 180), outline="black", width=3)  # head
    d.rectangle((285, 60, 355, 95), fill=(60, 60, 60))  # scholar's cap
    d.polygon([(250, 200), (390, 200), (420, 360), (220, 360)], fill=(90, 120, 170), outline="black")  # robe
    d.polygon([(400, 220), (470, 170), (490, 250)], fill=(245, 245, 245), outline="black")  # feather fan
    caption(d, (320, 410), "我从未见过有如此厚颜无耻之人", 34, True)
    caption(d, (320, 450), "—— 诸葛亮 骂死王朗", 24, True, fill=(120, 0, 0))
    return img


def doge() -> Image.Image:
    img = Image.new("RGB", (640, 480), (255, 255, 255))
    d = ImageDraw.Draw(img)
    d.ellipse((220, 140, 420, 330), fill=(226, 180, 90), outline="black", width=3)  # shiba head
    d.polygon([(235, 175), (250, 95), (300, 150)], fill=(226, 180, 90), outline="black")
    d.polygon([(405, 175), (390, 95), (340, 150)], fill=(226, 180, 90), outline="black")
    d.ellipse((270, 200, 295, 225), fill="black")
    d.ellipse((345, 200, 370, 225), fill="black")
    d.ellipse((305, 250, 335, 270), fill="black")
    caption(d, (140, 60), "such meme", 30, False, fill=(200, 0, 200))
    caption(d, (500, 110), "very culture", 30, False, fill=(0, 150, 0))
    caption(d, (150, 400), "much explain", 30, False, fill=(0, 0, 220))
    caption(d, (490, 420), "wow", 36, False, fill=(220, 120, 0))
    caption(d, (320, 455), "Doge", 22, False, fill=(90, 90, 90))
    return img


def luxun() -> Image.Image:
    img = Image.new("RGB", (640, 480), (235, 235, 235))
    d = ImageDraw.Draw(img)
    d.ellipse((260, 80, 380, 200), fill=(225, 205, 185), outline="black", width=3)
    d.rectangle((290, 150, 350, 160), fill="black")  # moustache
    d.rectangle((240, 210, 400, 340), fill=(70, 70, 70), outline="black")  # long gown
    caption(d, (320, 390), "鲁迅：这句话我没说过", 36, True)
    caption(d, (320, 440), "“我没说过”", 28, True, fill=(150, 0, 0))
    return img


def distracted() -> Image.Image:
    img = Image.new("RGB", (640, 480), (200, 225, 245))
    d = ImageDraw.Draw(img)
    for x, color in ((140, (200, 40, 60)), (330, (60, 100, 200)), (500, (40, 160, 90))):
        d.ellipse((x - 35, 120, x + 35, 190), fill=(235, 200, 170), outline="black", width=2)
        d.rectangle((x - 45, 195, x + 45, 360), fill=color, outline="black")
    d.line((330, 150, 170, 150), fill="black", width=2)  # the glance
    caption(d, (140, 390), "NEW MEME", 26, False)
    caption(d, (330, 390), "ME", 26, False)
    caption(d, (500, 390), "MY THESIS", 26, False)
    caption(d, (320, 450), "Distracted Boyfriend", 22, False, fill=(80, 80, 80))
    return img


IMAGES = {
    "zhuge_liang_wang_lang.png": strategist,
    "doge_such_culture.png": doge,
    "lu_xun_never_said.png": luxun,
    "distracted_boyfriend_thesis.png": distracted,
}


def main() -> None:
    for name, make in IMAGES.items():
        make().save(HERE / name, optimize=True)
        print(HERE / name)


if __name__ == "__main__":
    main()
