"""A small benchmark in the MemeBench release's documented shape, with the fake VLM and two
fake judges that drive the end-to-end tests, and the figures the report must print.

The release documents an item as ``{"id": 1, "image_path": "meme_images/image_0001.png",
"visual": {}, "identity": {}, "knowledge": {}, "reasoning": {}, "eval_checklist": {...}}``
(VIKR layers are JSON objects) and ships CultureBase as ``kb_entries.json`` (``name,
aliases, source, description, cultural_usage, visual_desc, meme_ids``).  These files are
written by hand here, in that shape.

Each item has its own solid-colour image; the fake VLM tells items apart by decoding the
image it is sent.  What the VLM answers per condition is scripted in :data:`COVERS`: the
layers the answer covers plus two flags the judges react to (``detail`` satisfies judge B's
second visual item, ``vague`` makes judge A fail reasoning).  The KAR answer follows its
script only when the grounded CultureBase entry (its :data:`KB_MARK`) is in the prompt;
otherwise it answers like Search-CoT, which would change every KAR figure.
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

KB_MARK = "KBMARK-骂死王朗"
EXTRACT_MARKER = "You are the extraction step"
REASON_MARKERS = ("What an extraction step read off the image", "提取步骤从图片中读出的信息")  # reason.en / reason.zh
COLORS = [(30, 200, 40), (90, 40, 200), (150, 200, 200), (210, 60, 60)]
IDS: list[int | str] = [1, 2, 3, "m-4"]

# (layers the answer covers, flags) per item index and condition
COVERS: dict[tuple[int, str], tuple[str, str]] = {
    (0, "vanilla"): ("visual identity", "detail"),
    (0, "search_cot"): ("visual identity knowledge reasoning", ""),
    (0, "kar"): ("visual identity knowledge reasoning", "detail"),
    (1, "vanilla"): ("visual identity knowledge reasoning", "detail"),
    (1, "search_cot"): ("visual identity knowledge reasoning", "detail vague"),
    (1, "kar"): ("visual identity knowledge reasoning", "detail"),
    (2, "vanilla"): ("visual identity knowledge reasoning", "detail"),
    (2, "search_cot"): ("visual identity knowledge", "detail"),
    (2, "kar"): ("visual identity", "detail"),
    (3, "vanilla"): ("", ""),
    (3, "search_cot"): ("visual identity knowledge reasoning", "detail"),
    (3, "kar"): ("visual identity knowledge reasoning", "detail"),
}

# merged (A ∧ B, item level) verdicts [V, I, K, R] per condition, item by item
MERGED = {
    "vanilla": [[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0]],
    "search_cot": [[0, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 1]],
    "kar": [[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1]],
}
EXPECTED_SUCCESS = {"vanilla": 0.5, "search_cot": 0.25, "kar": 0.75}
EXPECTED_COVERAGE = {
    "vanilla": {"V": 0.75, "I": 0.75, "K": 0.5, "R": 0.5},
    "search_cot": {"V": 0.75, "I": 1.0, "K": 1.0, "R": 0.5},
    "kar": {"V": 1.0, "I": 1.0, "K": 0.75, "R": 0.75},
}
# (repair, damage, ratio, ratio_status) against vanilla
EXPECTED_PAIRED = {
    "search_cot": {"Success": (0.5, 1.0, 0.5, "finite"), "V": (1.0, 1 / 3, 3.0, "finite"),
                   "I": (1.0, 0.0, None, "infinite"), "K": (1.0, 0.0, None, "infinite"),
                   "R": (1.0, 1.0, 1.0, "finite")},
    "kar": {"Success": (1.0, 0.5, 2.0, "finite"), "V": (1.0, 0.0, None, "infinite"),
            "I": (1.0, 0.0, None, "infinite"), "K": (1.0, 0.5, 2.0, "finite"),
            "R": (1.0, 0.5, 2.0, "finite")},
}


def release_items() -> list[dict[str, Any]]:
    """Four items as the release documents them: object layers, int and string ids, lang/category metadata."""
    meta: list[dict[str, Any]] = [{"lang": "zh", "category": "anime"}, {"language": "en", "domain": "internet"}, {}, {"lang": "zh"}]
    items = []
    for i, item_id in enumerate(IDS):
        items.append({
            "id": item_id,
            "image_path": f"meme_images/image_{i + 1:04d}.png",
            "visual": {"ocr": f"caption {i}", "entities": [{"eid": "E1", "appearance": f"figure {i} with a feather fan"}]},
            "identity": {"entities": [{"eid": "E1", "name": "诸葛亮", "source_work": "三国演义"}]},
            "knowledge": {"background": [f"background fact {i}"], "internet_usage": "鬼畜素材"},
            "reasoning": {"mechanism": f"mechanism {i}", "intent": "mockery"},
            "eval_checklist": {
                "visual": [f"describes figure {i}", {"text": f"reads caption {i}", "weight": 1}],
                "identity": [{"requirement": "names 诸葛亮"}],
                "knowledge": [f"states background fact {i}"],
                "reasoning": [f"explains mechanism {i}"],
            },
            "source_platform": "weibo",
            **meta[i],
        })
    return items


def kb_entries() -> list[dict[str, Any]]:
    """CultureBase entries in the release's kb_entries.json shape."""
    return [
        {"name": "诸葛亮", "aliases": ["孔明", "卧龙"], "source": "三国演义",
         "description": "蜀汉丞相，《三国演义》中的军师。", "cultural_usage": f"{KB_MARK}：我从未见过有如此厚颜无耻之人",
         "visual_desc": "手持羽扇、头戴纶巾的文人", "meme_ids": [1, 2]},
        {"name": "Doge", "aliases": ["Kabosu"], "source": "Internet",
         "description": "A Shiba Inu meme with broken English phrases.", "cultural_usage": "such wow, much meme",
         "visual_desc": "a Shiba Inu looking sideways", "meme_ids": []},
    ]


def write_release(root: Path, image_root: Path | None = None) -> tuple[Path, Path]:
    """``root/annotations.json`` + ``root/kb_entries.json``; images under ``image_root`` (default ``root``)."""
    image_root = image_root or root
    (image_root / "meme_images").mkdir(parents=True, exist_ok=True)
    for item, color in zip(release_items(), COLORS, strict=True):
        Image.new("RGB", (48, 40), color).save(image_root / item["image_path"])
    root.mkdir(parents=True, exist_ok=True)
    bench = root / "annotations.json"
    bench.write_text(json.dumps(release_items(), ensure_ascii=False, indent=2), "utf-8")
    kb = root / "kb_entries.json"
    kb.write_text(json.dumps(kb_entries(), ensure_ascii=False, indent=2), "utf-8")
    return bench, kb


def item_of(request: RecordedRequest) -> int:
    """Which item a request is about, from the colour of the image it carries."""
    url = request.image_urls()[0]
    data = base64.b64decode(url.split(",", 1)[1])
    pixel = Image.open(io.BytesIO(data)).convert("RGB").getpixel((5, 5))
    return min(range(len(COLORS)), key=lambda i: sum(abs(a - b) for a, b in zip(COLORS[i], pixel)))


EXTRACTION = {
    "ocr_text": "我从未见过有如此厚颜无耻之人",
    "visual_handle": "手持羽扇、头戴纶巾的文人",
    "entities": [{"name": "诸葛亮", "source": "三国演义", "confidence": "high"}],
    "suggested_queries": ["诸葛亮 骂死王朗"],
}


def condition_of(request: RecordedRequest) -> str:
    """The condition a VLM request belongs to, as far as the prompt shows it."""
    text = request.user_text()
    if EXTRACT_MARKER in text:
        return "extract"
    if any(marker in text for marker in REASON_MARKERS):
        return "kar" if KB_MARK in text else "search_cot"
    return "vanilla"


def vlm_responder(request: RecordedRequest) -> FakeReply:
    stage = condition_of(request)
    if stage == "extract":
        return FakeReply(text=json.dumps(EXTRACTION, ensure_ascii=False), prompt_tokens=300, completion_tokens=40)
    i = item_of(request)
    covers, flags = COVERS[(i, stage)]
    return FakeReply(text=f"answer for item {i} ({stage}). covers: {covers or 'nothing'}. flags: {flags or 'none'}.",
                     prompt_tokens=500, completion_tokens=60)


def _candidate(prompt: str) -> str:
    return prompt.split("<<<CANDIDATE", 1)[1].split("CANDIDATE>>>", 1)[0]


def _checklist(prompt: str) -> dict[str, list[int]]:
    section = prompt.split("## Checklist", 1)[1].split("## Candidate explanation", 1)[0]
    out: dict[str, list[int]] = {}
    current = None
    for line in section.splitlines():
        header = re.match(r"### (\w+)", line.strip())
        if header:
            current = header.group(1)
            out[current] = []
        elif current and re.match(r"\d+\. ", line.strip()):
            out[current].append(int(line.strip().split(".", 1)[0]))
    return out


def judge_responder(strict: bool):
    """Judge A (``strict=False``) fails reasoning on a vague answer; judge B (strict) fails the
    second visual item unless the answer has detail.  Both fail the layers an answer does not cover."""

    def respond(request: RecordedRequest) -> FakeReply:
        prompt = request.user_text()
        answer = _candidate(prompt)
        covers = answer.split("covers:", 1)[1].split(".", 1)[0].split()
        flags = answer.split("flags:", 1)[1].split()
        results = {}
        for dim, numbers in _checklist(prompt).items():
            rows = []
            for n in numbers:
                ok = dim in covers
                if strict and dim == "visual" and n == 2 and "detail" not in " ".join(flags):
                    ok = False
                if not strict and dim == "reasoning" and "vague" in " ".join(flags):
                    ok = False
                rows.append({"index": n, "pass": int(ok), "reason": f"{'B' if strict else 'A'} {dim} {n}"})
            results[dim] = rows
        return FakeReply(text=json.dumps({"item_results": results}), prompt_tokens=800, completion_tokens=90)

    return respond


def assert_report_figures(metrics: dict[str, Any], prefix: str = "") -> None:
    """The exact figures of the report over the merged judge files."""
    import pytest

    for cond in ("vanilla", "search_cot", "kar"):
        m = metrics["conditions"][prefix + cond]["metrics"]
        assert m["n"] == 4 and m["n_unscored"] == 0, (cond, m)
        assert m["success"] == EXPECTED_SUCCESS[cond], (cond, m["success"])
        assert m["coverage"] == EXPECTED_COVERAGE[cond], (cond, m["coverage"])
    for cond, layers in EXPECTED_PAIRED.items():
        paired = metrics["paired"][prefix + cond]
        assert paired["baseline"] == prefix + "vanilla"
        for layer, (repair, damage, ratio, status) in layers.items():
            got = paired["layers"][layer]
            assert got["repair"] == pytest.approx(repair) and got["damage"] == pytest.approx(damage), (cond, layer, got)
            assert got["ratio_status"] == status, (cond, layer, got)
            if ratio is None:
                assert got["ratio"] is None
            else:
                assert got["ratio"] == pytest.approx(ratio), (cond, layer, got)
    kar = metrics["conditions"][prefix + "kar"]
    assert kar["by_language"]["zh"]["n"] == 2 and kar["by_language"]["en"]["n"] == 1
    assert kar["by_language"]["unknown"]["n"] == 1 and kar["by_language"]["unknown"]["success"] == 0.0
    assert kar["by_domain"]["anime"]["n"] == 1 and kar["by_domain"]["unknown"]["n"] == 2
