"""Caption images: does offline `kar explain` ground the entity whose catchphrase is written on an image?

Renders each caption of :data:`CAPTIONS` (a catchphrase of a sample CultureBase entity, zh
and en, as several lines) with Pillow in black on a plain background, then runs the
pipeline exactly as offline ``kar explain IMG`` does (no VLM: rapidocr OCR → grounding; web
search off), on the sample CultureBase with the bundled embedder.  Prints JSON: per image
the OCR text, the top hit, its score and winning route, whether it passed τ; and how many
of the images grounded their entity.

    python bench/caption_images.py [--out DIR]   # DIR keeps the rendered PNGs
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: (caption as written on the image, the sample entity it quotes)
CAPTIONS: list[tuple[str, str]] = [
    ("我从未见过\n有如此厚颜无耻之人", "王司徒"),
    ("年轻人不讲武德\n耗子尾汁", "马保国"),
    ("打工是不可能打工的\n这辈子不可能打工的", "窃格瓦拉"),
    ("哥们儿，这瓜多少钱一斤？", "华强买瓜"),
    ("三十年河东，三十年河西\n莫欺少年穷！", "萧炎"),
    ("我的烤面筋\n融化你的心", "面筋哥"),
    ("小猪佩奇身上纹\n掌声送给社会人", "小猪佩奇"),
    ("SUCH WOW\nMUCH AMAZE\nVERY SKILL", "Doge"),
    ("NEVER GONNA GIVE YOU UP\nNEVER GONNA LET YOU DOWN", "Rickroll"),
    ("ONE DOES NOT SIMPLY\nWALK INTO MORDOR", "One Does Not Simply"),
    ("I HAD FUN ONCE.\nIT WAS AWFUL.", "Grumpy Cat"),
    ("ALL YOUR BASE\nARE BELONG TO US", "All Your Base Are Belong to Us"),
]

CJK_FONTS = [
    "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
    "/System/Library/Fonts/PingFang.ttc",
]
LATIN_FONTS = ["/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf", *CJK_FONTS]


def find_font(cjk: bool) -> str | None:
    """A font file that can draw the caption (CJK captions need a CJK font, e.g. fonts-wqy-microhei)."""
    for path in CJK_FONTS if cjk else LATIN_FONTS:
        if Path(path).exists():
            return path
    return None


def render(text: str, path: Path, size: int = 40) -> Path:
    """Draw ``text`` (one caption line per line) centred on a plain 640-px-wide background."""
    from PIL import Image, ImageDraw, ImageFont

    cjk = any("\u4e00" <= ch <= "\u9fff" for ch in text)
    font_path = find_font(cjk)
    if font_path is None:
        raise RuntimeError("no font for the caption: install fonts-wqy-microhei (CJK) / fonts-dejavu")
    font = ImageFont.truetype(font_path, size)
    lines = text.splitlines()
    height = 80 + len(lines) * (size + 24)
    img = Image.new("RGB", (640, height), (255, 255, 250))
    draw = ImageDraw.Draw(img)
    for i, line in enumerate(lines):
        draw.text((320, 40 + i * (size + 24) + size // 2), line, font=font, fill=(0, 0, 0), anchor="mm")
    img.save(path)
    return path


async def explain_all(images: list[tuple[Path, str]], kb_path: Path) -> list[dict]:
    """Run offline `kar explain` (condition kar, no VLM, no web search) on each image."""
    from agents.factory import build_pipeline
    from culturebase.settings import Settings

    settings = Settings(kb_path=kb_path, search_backend="none", ocr_enabled=True)
    resources = build_pipeline(settings, ("kar",))
    rows = []
    try:
        for path, expected in images:
            started = time.perf_counter()
            result = await resources.pipeline.explain(path.read_bytes(), "kar", None, item_id=path.stem, image_path=str(path))
            g = result.trace.get("grounding") or {}
            hits = g.get("hits") or []
            cands = g.get("candidates") or []
            top = hits[0] if hits else (cands[0] if cands else None)
            rows.append(
                {
                    "image": path.name,
                    "expected": expected,
                    "ocr": ((result.trace.get("ocr") or {}).get("text") or ""),
                    "top": top["name"] if top else None,
                    "score": top["score"] if top else None,
                    "route": top["route"] if top else None,
                    "tau": g.get("tau"),
                    "grounded": any(h["name"] == expected for h in hits),
                    "seconds": round(time.perf_counter() - started, 2),
                }
            )
    finally:
        await resources.aclose()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="Keep the rendered images in this folder.")
    ap.add_argument("--sample", type=Path, default=REPO / "examples" / "culturebase_sample.jsonl")
    args = ap.parse_args()
    from culturebase.settings import Settings
    from retrieval.knowledge_base import KnowledgeBase

    with tempfile.TemporaryDirectory(prefix="kar-captions-") as tmp:
        out = args.out or Path(tmp) / "images"
        out.mkdir(parents=True, exist_ok=True)
        images = [(render(text, out / f"caption_{i:02d}.png"), expected) for i, (text, expected) in enumerate(CAPTIONS)]
        kb_path = Path(tmp) / "kb"
        with KnowledgeBase.open(Settings(kb_path=kb_path)) as kb:
            kb.import_file(args.sample)
        rows = asyncio.run(explain_all(images, kb_path))
    grounded = sum(r["grounded"] for r in rows)
    print(
        json.dumps(
            {
                "benchmark": "caption_images",
                "images": len(rows),
                "grounded": grounded,
                "all_grounded": grounded == len(rows),
                "rows": rows,
            },
            ensure_ascii=False,
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
