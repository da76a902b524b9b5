"""``kar report-refs`` as functions: read the reference dataset and the predictions, embed, judge the
1–5 rubric (optional), score against a baseline and write the three report files."""

from __future__ import annotations

import asyncio
import csv
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from eval.records import DatasetError, load_predictions

#: ``on_progress(label, done, total)``: one bar per label
Progress = Callable[[str, int, int], None]

FORMATS = ("auto", "memecult", "memecap")


def load_reference_dataset(path: Path, fmt: str, image_dir: Path | None) -> tuple[str, list[Any]]:
    """The items of a MemeCULT CSV or MemeCap JSON (``fmt`` auto: by extension) with unique ids."""
    from eval.tasks.memecap import load_memecap
    from eval.tasks.memecult import load_memecult

    if fmt not in FORMATS:
        raise DatasetError(f"--format must be auto, memecult or memecap, got {fmt!r}")
    if fmt == "auto":
        fmt = "memecult" if path.suffix.lower() in {".csv", ".tsv"} else "memecap"
    loader = load_memecult if fmt == "memecult" else load_memecap
    items = loader(path, image_dir=image_dir)
    if not items:
        raise DatasetError(f"{path}: no items")
    seen: set[str] = set()
    for index, item in enumerate(items):
        if item.id in seen:
            field = "Filename" if fmt == "memecult" else "post_id"
            where = f"row {index + 2}" if fmt == "memecult" else f"item {index}"
            raise DatasetError(f"{path}: {where}: field '{field}' duplicates an earlier item ({item.id})")
        seen.add(item.id)
    return fmt, items


def match_predictions(
    dataset: Path, items: Sequence[Any], pairs: Sequence[tuple[str, Path]]
) -> tuple[dict[str, dict[str, str | None]], dict[str, int]]:
    """Each named prediction file's responses by item, and how many of its predictions matched no item."""
    from eval.metrics.reference import match_responses

    responses: dict[str, dict[str, str | None]] = {}
    unmatched: dict[str, int] = {}
    for name, path in pairs:
        responses[name], unmatched[name] = match_responses(items, load_predictions(path))
        if not responses[name]:
            raise DatasetError(f"{path}: no prediction matches an item of {dataset} (by id, image_path or image file name)")
    return responses, unmatched


def item_images(dataset: Path, items: Sequence[Any]) -> dict[str, bytes | None]:
    """Every item's image bytes (the rubric judge needs them); a missing file is a DatasetError."""
    images: dict[str, bytes | None] = {}
    for item in items:
        image = Path(item.image_path)
        if not image.is_file():
            raise DatasetError(f"{dataset}: item {item.id}: field 'image_path': image file not found: {image} "
                               "(--image-root sets the folder; the rubric judge needs the image)")
        images[item.id] = image.read_bytes()
    return images


def embed_all(encoder: Any, items: Sequence[Any], responses: dict[str, dict[str, str | None]], on_progress: Progress | None = None) -> None:
    """Embed every reference and response once (the caching encoder keeps them for the metrics)."""
    texts = list(dict.fromkeys(
        [ref for item in items for ref in item.references]
        + [r for per_item in responses.values() for r in per_item.values() if (r or "").strip()]
    ))
    label = f"embedding with {encoder.name}"
    for start in range(0, len(texts), 256):
        encoder.encode_documents(texts[start : start + 256])
        if on_progress:
            on_progress(label, min(len(texts), start + 256), len(texts))


def judge_rubric(
    vlm: Any, items: Sequence[Any], responses: dict[str, dict[str, str | None]], images: dict[str, bytes | None],
    *, concurrency: int, max_parse_retries: int, on_progress: Progress | None = None,
) -> dict[str, list[Any]]:
    """The 1–5 fluency / cultural / humor rubric of every named response set (the VLM is closed after)."""
    from eval.judges.reference_rubric import run_rubric

    scores: dict[str, list[Any]] = {}

    async def judge_all() -> None:
        try:
            for name, per_item in responses.items():
                label = f"rubric {name} ({vlm.model_id})"
                scores[name] = await run_rubric(
                    vlm, items, per_item, images, concurrency=concurrency, max_parse_retries=max_parse_retries,
                    on_progress=(lambda done, total, label=label: on_progress(label, done, total)) if on_progress else None,
                )
        finally:
            await vlm.aclose()

    asyncio.run(judge_all())
    return scores


def write_reference_report(metrics: dict[str, Any], out: Path) -> tuple[dict[str, Any], str]:
    """Write reference_metrics.json, reference_metrics.md and reference_items.csv; return the JSON data and the markdown."""
    from eval.report.common import jsonable
    from eval.report.refs import reference_markdown

    out.mkdir(parents=True, exist_ok=True)
    data = jsonable(metrics)
    (out / "reference_metrics.json").write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
    markdown = reference_markdown(metrics)
    (out / "reference_metrics.md").write_text(markdown, encoding="utf-8")
    item_rows = metrics["item_scores"]
    columns = ["id", *next(iter(item_rows.values())).keys()] if item_rows else ["id"]
    with (out / "reference_items.csv").open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        for item_id, row in item_rows.items():
            writer.writerow({"id": item_id, **row})
    return data, markdown
