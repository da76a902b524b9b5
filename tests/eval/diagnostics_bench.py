"""A small benchmark in the MemeBench release's shape whose items each fall in a known diagnostics cell,
the scripted fake VLM that answers it, and the fake knowledge judge.

Items (gold identity entity, what the KAR run meets, what the judged answers do against Vanilla):

0. ``present``: gold 诸葛亮 is in CultureBase and grounded; its knowledge unit is written in the KB
   entry's cultural usage → Vanilla fails, KAR passes: ``repair.grounded.knowledge``.
1. ``missing``: gold Doge is in CultureBase and grounded; its knowledge unit is in no KB text and no
   evidence → Vanilla fails, KAR passes: ``repair.grounded.no_knowledge``.
2. ``wrong``: gold Distracted Boyfriend is in CultureBase, but the extraction names Doge, which is
   grounded and injected → Vanilla passes, KAR fails: ``damage.extra_entity``.
3. ``not_in_kb``: gold 鲁迅 is not in CultureBase (nothing grounded); the evidence is about him →
   Vanilla passes, KAR fails: ``damage.neither``.
4. ``off_entity``: gold Pepe the Frog is in CultureBase, the extraction names nothing and suggests an
   unrelated query with a distinctive word (so its results pass the evidence floor), so the evidence is about something else → Vanilla passes, KAR fails:
   ``damage.off_entity``.

Items 3 and 4 ground nothing, so KAR's reasoning prompt is exactly Search-CoT's and both answer
alike (Search-CoT damages them too); items 0–2 Search-CoT answers as Vanilla does.  The web search is the fake Tavily
server (its default results name the query they answer).
"""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path
from typing import Any

from PIL import Image

from tests.fakes.openai_server import FakeReply, RecordedRequest

EXTRACT_MARKER = "You are the extraction step"
REASON_MARKERS = ("What an extraction step read off the image", "提取步骤从图片中读出的信息")
KB_BLOCK = "CultureBase entries matched to this image"
COLORS = [(30, 200, 40), (90, 40, 200), (150, 200, 200), (210, 60, 60), (240, 200, 20)]
NAMES = ["present", "missing", "[wrong]", "not_in_kb", "off_entity"]  # "[wrong]": rich would eat it as markup
GOLD = ["诸葛亮", "Doge", "Distracted Boyfriend", "鲁迅", "Pepe the Frog"]
KNOWLEDGE = [
    "诸葛亮阵前骂死王朗",
    "Kabosu passed away in May 2024 at the age of eighteen",
    "Antonio Guillem shot the stock photo in 2015",
    "网上常把编造的名言安到鲁迅头上",
    "Matt Furie drew the frog in the comic Boy's Club",
]
EXTRACTIONS: list[dict[str, Any]] = [
    {"ocr_text": "", "visual_handle": "a scholar with a feather fan",
     "entities": [{"name": "诸葛亮", "source": "三国演义", "confidence": "high"}], "suggested_queries": []},
    {"ocr_text": "", "visual_handle": "a shiba inu",
     "entities": [{"name": "Doge", "source": "Internet", "confidence": "high"}], "suggested_queries": []},
    {"ocr_text": "", "visual_handle": "a shiba inu",
     "entities": [{"name": "Doge", "source": "Internet", "confidence": "high"}], "suggested_queries": []},
    {"ocr_text": "", "visual_handle": "a portrait of a writer",
     "entities": [{"name": "鲁迅", "source": "", "confidence": "high"}], "suggested_queries": []},
    {"ocr_text": "", "visual_handle": "a bar chart on a whiteboard",
     "entities": [], "suggested_queries": ["Tamagotchi battery replacement"]},
]
# layers each answer covers per (item, condition); the judge passes exactly the covered layers
ALL, NONE = "visual identity knowledge reasoning", "visual"
COVERS = {
    "vanilla": [NONE, NONE, ALL, ALL, ALL],
    "search_cot": [NONE, NONE, ALL, NONE, NONE],  # items 3, 4 ground nothing: KAR's prompt is Search-CoT's
    "kar": [ALL, ALL, NONE, NONE, NONE],
}
EXPECTED_CELLS = {
    "repair.grounded.knowledge": ["present"], "repair.grounded.no_knowledge": ["missing"],
    "repair.ungrounded.knowledge": [], "repair.ungrounded.no_knowledge": [],
    "damage.extra_entity": ["[wrong]"], "damage.off_entity": ["off_entity"], "damage.neither": ["not_in_kb"],
}


def items() -> list[dict[str, Any]]:
    """The release's item shape: object layers, an entity list in ``identity``, checklists."""
    out = []
    for i, name in enumerate(NAMES):
        out.append({
            "id": name,
            "image_path": f"meme_images/item{i}.png",
            "visual": {"ocr": "", "entities": [{"eid": "E1", "appearance": EXTRACTIONS[i]["visual_handle"]}]},
            "identity": {"entities": [{"eid": "E1", "name": GOLD[i], "source_work": ""}]},
            "knowledge": {"background": [KNOWLEDGE[i]]},
            "reasoning": {"mechanism": f"mechanism {i}"},
            "eval_checklist": {"visual": [f"describes {name}"], "identity": [f"names {GOLD[i]}"],
                               "knowledge": [KNOWLEDGE[i]], "reasoning": [f"explains mechanism {i}"]},
        })
    return out


def kb_entries() -> list[dict[str, Any]]:
    """kb_entries.json (the release's shape): 诸葛亮 (its usage states item 0's knowledge), Doge,
    Distracted Boyfriend, Pepe the Frog; no 鲁迅."""
    return [
        {"name": "诸葛亮", "aliases": ["孔明"], "source": "三国演义", "description": "蜀汉丞相，《三国演义》中的军师。",
         "cultural_usage": "94版电视剧里诸葛亮阵前骂死王朗，台词成为鬼畜素材", "visual_desc": "手持羽扇的文人", "meme_ids": []},
        {"name": "Doge", "aliases": ["Kabosu"], "source": "Internet", "description": "A Shiba Inu meme with broken English.",
         "cultural_usage": "such wow, much meme", "visual_desc": "a Shiba Inu looking sideways", "meme_ids": []},
        {"name": "Distracted Boyfriend", "aliases": [], "source": "Stock photo", "description": "A man looks at another woman.",
         "cultural_usage": "temptation away from a commitment", "visual_desc": "a man looking back at a woman", "meme_ids": []},
        {"name": "Pepe the Frog", "aliases": ["Pepe"], "source": "Boy's Club", "description": "A green cartoon frog.",
         "cultural_usage": "feels good man", "visual_desc": "a green frog", "meme_ids": []},
    ]


def write_bench(root: Path) -> tuple[Path, Path]:
    """``root/annotations.json``, ``root/kb_entries.json`` and the images."""
    (root / "meme_images").mkdir(parents=True, exist_ok=True)
    for item, color in zip(items(), COLORS, strict=True):
        Image.new("RGB", (48, 40), color).save(root / item["image_path"])
    bench = root / "annotations.json"
    bench.write_text(json.dumps(items(), ensure_ascii=False, indent=2), "utf-8")
    kb = root / "kb_entries.json"
    kb.write_text(json.dumps(kb_entries(), ensure_ascii=False, indent=2), "utf-8")
    return bench, kb


def item_of(request: RecordedRequest) -> int:
    data = base64.b64decode(request.image_urls()[0].split(",", 1)[1])
    pixel = Image.open(io.BytesIO(data)).convert("RGB").getpixel((5, 5))
    return min(range(len(COLORS)), key=lambda i: sum(abs(a - b) for a, b in zip(COLORS[i], pixel)))


def vlm_responder(request: RecordedRequest) -> FakeReply:
    text = request.user_text()
    i = item_of(request)
    if EXTRACT_MARKER in text:
        return FakeReply(text=json.dumps(EXTRACTIONS[i], ensure_ascii=False))
    condition = "vanilla"
    if any(m in text for m in REASON_MARKERS):
        condition = "kar" if KB_BLOCK in text else "search_cot"
    return FakeReply(text=f"answer for {NAMES[i]} ({condition}). covers: {COVERS[condition][i]}. flags: none.")


def knowledge_judge_responder(request: RecordedRequest) -> FakeReply:
    """The fake knowledge judge: a unit is stated when the material holds its text (case and spaces ignored)."""
    prompt = request.user_text()
    section = prompt.split("## Knowledge units", 1)[1].split("## Material in the prompt", 1)[0]
    material = prompt.split("<<<MATERIAL", 1)[1].split("MATERIAL>>>", 1)[0]
    squash = lambda s: re.sub(r"\s+", " ", s).strip().casefold()  # noqa: E731
    units = []
    for line in section.strip().splitlines():
        match = re.match(r"(\d+)\. (.*)", line.strip())
        if match:
            units.append({"index": int(match.group(1)), "stated": squash(match.group(2)) in squash(material), "reason": "fake"})
    return FakeReply(text=json.dumps({"units": units}))
