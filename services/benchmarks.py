"""Benchmark files for ablation runs: ``eval.datasets.load_benchmark`` (the one loader that
``kar judge`` and ``kar report`` use too) turned into the runner's :class:`agents.runner.RunItem`.

``kar run`` and the ablation API both load through :func:`load_run_items`, so a file that
the judge would reject is rejected before anything runs, with the same errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agents.runner import RunItem
from eval.datasets import BenchmarkItem, load_benchmark


def run_item(item: BenchmarkItem, image_root: str | Path | None = None) -> RunItem:
    """The runner's view of a benchmark item (an unresolved image stays as written: the run records it as failed)."""
    record: dict[str, Any] = item.model_dump()
    record["id"] = item.source_id
    image_file = item.resolve_image(image_root) or Path(item.image_path)
    return RunItem.from_record(record, image_file, language=item.language)


def load_run_items(
    path: str | Path, *, image_root: str | Path | None = None, check_images: bool = True, limit: int | None = None
) -> list[RunItem]:
    """Validate a MemeBench benchmark (file or folder) and return its first ``limit`` items to run.

    Raises :class:`eval.datasets.DatasetError` naming every bad item (file, index, id, field).
    """
    items = load_benchmark(path, image_root=image_root, check_images=check_images)
    if limit:
        items = items[:limit]
    return [run_item(item, image_root) for item in items]
