"""Small benchmark-family files for the tests (media files are tiny real PNGs / placeholder videos)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PIL import Image


def png(path: Path, color: str = "red") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (32, 32), color).save(path)
    return path


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in records), "utf-8")
    return path


def avmeme(i: int, **kw: Any) -> dict[str, Any]:
    return {"benchmark": "avmeme", "task": "MCQ", "id": f"av{i}", "video": f"v{i}.mp4", "question": f"What is meme {i} about?",
            "options": ["a cat", "a dog", "a bird", "a fish"], "answer": "B", "question_type": "humor",
            "sound_category": "speech", "language": "en", "splits": ["meme-full", "meme-main"]} | kw


def memereacon(i: int, task: str = "CMI-C", **kw: Any) -> dict[str, Any]:
    base = {"benchmark": "memereacon", "task": task, "id": f"mr{i}-{task}", "image": f"m{i}.png", "post_text": f"post {i}"}
    if task == "CMI-C":
        base["label"] = "CEM"
    elif task == "CSAC-S":
        base |= {"comment": "nice", "label": "Support"}
    elif task == "CSAC-A":
        base |= {"comment": "great, just great", "label": "Inconsistent"}
    else:
        base["references"] = ["the poster complains about mondays"]
    return base | kw


def drivelhub(i: int, **kw: Any) -> dict[str, Any]:
    return {"benchmark": "drivelhub", "task": "NARRATIVE-G", "id": f"dh{i}", "video": f"v{i}.mp4",
            "narrative": f"narrative number {i} about irony"} | kw


def memecult(i: int, **kw: Any) -> dict[str, Any]:
    return {"benchmark": "memecult", "task": "EXPLAIN-G", "id": f"mc{i}", "image": f"m{i}.png", "language": "zh",
            "context_note": "a note", "references": ["诸葛亮 骂 王朗"]} | kw
