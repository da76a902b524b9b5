"""Builders for eval tests: benchmark items, real PNGs, official-format evaluations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PIL import Image

DIMS = ("visual", "identity", "knowledge", "reasoning")


def make_item(i: int, n_checks=(1, 1, 1, 1), language: str | None = "en", domain: str | None = "anime") -> dict[str, Any]:
    return {
        "id": f"m{i}",
        "image_path": f"images/m{i}.png",
        "visual": f"visual note {i}",
        "identity": f"identity note {i}",
        "knowledge": f"knowledge note {i}",
        "reasoning": f"reasoning note {i}",
        "eval_checklist": {d: [f"{d} check {j} of item {i}" for j in range(k)] for d, k in zip(DIMS, n_checks)},
        "language": language,
        "domain": domain,
    }


def write_bench(folder: Path, items: list[dict[str, Any]], name: str = "bench.json") -> Path:
    (folder / "images").mkdir(parents=True, exist_ok=True)
    for item in items:
        target = folder / item["image_path"]
        if not target.exists():
            Image.new("RGB", (16, 12), (10 * (len(str(item["id"])) % 20), 100, 200)).save(target)
    path = folder / name
    path.write_text(json.dumps(items, ensure_ascii=False), encoding="utf-8")
    return path


def itemized(passes: dict[str, list[int]], reason: str = "r") -> dict[str, list[dict[str, Any]]]:
    return {d: [{"index": j + 1, "pass": p, "reason": f"{reason}{d}{j}"} for j, p in enumerate(ps)] for d, ps in passes.items()}


def official_eval(vector: list[int], items: dict[str, list[int]] | None = None) -> dict[str, Any]:
    """An evaluation shaped like the official MemeBench judge's (itemized_json)."""
    items = items or {d: [v] for d, v in zip(DIMS, vector)}
    return {
        "raw_content": json.dumps({"checklist_result": vector}),
        "checklist_score": sum(vector),
        "checklist_result": vector,
        "overall_correctness": "YES" if vector[1] and vector[2] and vector[3] else "NO",
        "complete_vikr": all(vector),
        "item_results": itemized(items),
        "dimension_result": dict(zip(DIMS, vector)),
        "parse_success": True,
        "parse_error": None,
        "format": "itemized_json",
    }


def judge_reply_for_prompt(prompt: str, fail: set[tuple[str, int]] | frozenset = frozenset()) -> str:
    """A well-formed judge JSON reply for the checklist found in a judge prompt.

    ``fail`` holds (dimension, 1-based index) pairs to mark as failed.
    """
    import re

    results: dict[str, list[dict[str, Any]]] = {}
    section = prompt.split("## Checklist", 1)[1].split("## Candidate explanation", 1)[0]
    current = None
    for line in section.splitlines():
        header = re.match(r"### (\w+)", line.strip())
        if header:
            current = header.group(1)
            results[current] = []
            continue
        numbered = re.match(r"(\d+)\. ", line.strip())
        if numbered and current:
            index = int(numbered.group(1))
            results[current].append({"index": index, "pass": 0 if (current, index) in fail else 1, "reason": f"{current} {index}"})
    return json.dumps({"item_results": results})
