"""Record files every command reads: predictions ``{id, image_path, response}``, judge files
(ours or the official MemeBench judge's), and the reference items of MemeCULT/MemeCap.

Every reader validates strictly and raises :class:`DatasetError` with one line naming the
file, the item (index and id) and the field.  JSON lists and JSONL are both read (by content,
not by extension).  Benchmark items live with their benchmark in :mod:`eval.tasks`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class DatasetError(ValueError):
    """A data file is malformed; the message names the file, the item and the field."""


@dataclass(frozen=True)
class Prediction:
    """A model response for one item (``response`` is None when the model produced none)."""

    id: str | None
    image_path: str | None
    response: str | None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReferenceItem:
    """An image with human reference explanations (MemeCULT-1K, MemeCap)."""

    id: str
    image_path: str
    references: tuple[str, ...]
    language: str | None = None
    context: str | None = None


def item_key(record: dict[str, Any]) -> str:
    """How records are matched across files: the id, else the image path (as the release does)."""
    if record.get("id") is not None:
        return f"id:{record['id']}"
    return f"image_path:{record.get('image_path')}"


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """A JSON list of objects or JSONL; :class:`DatasetError` on anything else."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    text = path.read_text(encoding="utf-8-sig")
    stripped = text.lstrip()
    if not stripped:
        return []
    records: list[Any]
    if stripped.startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}: invalid JSON at line {exc.lineno}: {exc.msg}") from None
    else:
        records = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}: line {lineno}: invalid JSON ({exc.msg})") from None
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise DatasetError(f"{path}: item {index}: expected an object, got {type(record).__name__}")
    return records


def record_where(path: Path, index: int, record: dict[str, Any]) -> str:
    """Where a record sits, for error messages: the file, its index and its id."""
    return f"{path}: item {index} (id={record.get('id', '?')})"


def load_predictions(path: str | Path) -> list[Prediction]:
    """Load a prediction file (``{id, image_path, response}`` per item; JSON list or JSONL)."""
    path = Path(path)
    predictions: list[Prediction] = []
    seen: set[str] = set()
    for index, record in enumerate(read_records(path)):
        where = record_where(path, index, record)
        if record.get("id") is None and not record.get("image_path"):
            raise DatasetError(f"{where}: fields 'id' and 'image_path' are both missing")
        response = record.get("response")
        if response is not None and not isinstance(response, str):
            raise DatasetError(f"{where}: field 'response' must be a string or null")
        key = item_key(record)
        if key in seen:
            raise DatasetError(f"{where}: duplicate prediction for {key}")
        seen.add(key)
        extra = {k: v for k, v in record.items() if k not in {"id", "image_path", "response"}}
        predictions.append(
            Prediction(
                id=str(record["id"]) if record.get("id") is not None else None,
                image_path=record.get("image_path"),
                response=response,
                extra=extra,
            )
        )
    return predictions


class RecordIndex:
    """Look records up by a benchmark item: by id first, then by image path."""

    def __init__(self, records: Iterable[dict[str, Any]]):
        self.by_id: dict[str, dict[str, Any]] = {}
        self.by_image: dict[str, dict[str, Any]] = {}
        for record in records:
            if record.get("id") is not None:
                self.by_id.setdefault(str(record["id"]), record)
            if record.get("image_path"):
                self.by_image.setdefault(str(record["image_path"]), record)

    def get(self, item_id: str | None, image_path: str | None = None) -> dict[str, Any] | None:
        if item_id is not None and str(item_id) in self.by_id:
            return self.by_id[str(item_id)]
        if image_path and image_path in self.by_image:
            record = self.by_image[image_path]
            # an image-path match must not belong to a different id
            if record.get("id") is None or item_id is None:
                return record
        return None


def load_judged(path: str | Path) -> list[dict[str, Any]]:
    """Load a judge file (ours or the official MemeBench judge's; JSON list or JSONL).

    Records are ``{id, image_path, response, evaluation}`` (optionally with the benchmark
    fields too); ``evaluation`` may be null (unscored).  A malformed ``evaluation`` is an
    error naming the item.
    """
    path = Path(path)
    records = read_records(path)
    for index, record in enumerate(records):
        if record.get("id") is None and not record.get("image_path"):
            raise DatasetError(f"{record_where(path, index, record)}: fields 'id' and 'image_path' are both missing")
        evaluation = record.get("evaluation")
        if evaluation is not None and not isinstance(evaluation, dict):
            raise DatasetError(f"{record_where(path, index, record)}: field 'evaluation' must be an object or null")
    return records


# -- reference-based datasets ------------------------------------------------------------


