"""Loaders: MemeBench benchmark items, prediction files, judge files, MemeCULT and MemeCap.

Every loader validates strictly and raises :class:`DatasetError` with one line naming
the file, the item (index and id) and the field.  JSON lists and JSONL are both read
(by content, not by extension).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from eval.verdicts import DIMENSIONS


class DatasetError(ValueError):
    """A data file is malformed; the message names the file, the item and the field."""


class BenchmarkItem(BaseModel):
    """One MemeBench item (extra fields of the release are kept)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str
    image_path: str
    visual: str
    identity: str
    knowledge: str
    reasoning: str
    eval_checklist: dict[str, list[str]]
    language: str | None = None
    domain: str | None = None

    def checklist(self, dim: str) -> list[str]:
        return self.eval_checklist[dim]


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


def _where(path: Path, index: int, record: dict[str, Any]) -> str:
    return f"{path}: item {index} (id={record.get('id', '?')})"


def resolve_image(image_path: str, bench_path: Path, image_root: Path | None) -> Path | None:
    """The image file: absolute, or under ``image_root``, the benchmark's folder, or the cwd."""
    candidate = Path(image_path)
    if candidate.is_absolute():
        return candidate if candidate.is_file() else None
    for root in (image_root, bench_path.parent, Path.cwd()):
        if root is not None and (root / candidate).is_file():
            return root / candidate
    return None


def validate_benchmark_record(record: dict[str, Any], where: str) -> BenchmarkItem:
    """Validate one raw benchmark record; the error names the field."""
    for name in ("id", "image_path"):
        if record.get(name) in (None, ""):
            raise DatasetError(f"{where}: field '{name}' is missing")
    for dim in DIMENSIONS:
        if dim not in record:
            raise DatasetError(f"{where}: field '{dim}' (VIKR dimension) is missing")
        if not isinstance(record[dim], str):
            raise DatasetError(f"{where}: field '{dim}' must be a string")
    checklist = record.get("eval_checklist")
    if not isinstance(checklist, dict):
        raise DatasetError(f"{where}: field 'eval_checklist' is missing or not an object")
    for dim in DIMENSIONS:
        rows = checklist.get(dim)
        if not isinstance(rows, list):
            raise DatasetError(f"{where}: field 'eval_checklist.{dim}' is missing")
        if not rows:
            raise DatasetError(f"{where}: field 'eval_checklist.{dim}' is an empty checklist")
        for j, row in enumerate(rows):
            if not isinstance(row, str) or not row.strip():
                raise DatasetError(f"{where}: field 'eval_checklist.{dim}[{j}]' must be a non-empty string")
    for name in ("language", "domain"):
        if record.get(name) is not None and not isinstance(record[name], str):
            raise DatasetError(f"{where}: field '{name}' must be a string")
    data = dict(record)
    data["id"] = str(record["id"])
    data["eval_checklist"] = {dim: list(checklist[dim]) for dim in DIMENSIONS} | {
        k: v for k, v in checklist.items() if k not in DIMENSIONS
    }
    return BenchmarkItem.model_validate(data)


def load_benchmark(
    path: str | Path, *, image_root: str | Path | None = None, check_images: bool = True
) -> list[BenchmarkItem]:
    """Load and validate a MemeBench benchmark file (JSON list or JSONL)."""
    path = Path(path)
    root = Path(image_root) if image_root is not None else None
    items: list[BenchmarkItem] = []
    seen: dict[str, int] = {}
    for index, record in enumerate(read_records(path)):
        where = _where(path, index, record)
        item = validate_benchmark_record(record, where)
        if item.id in seen:
            raise DatasetError(f"{where}: field 'id' duplicates item {seen[item.id]}")
        seen[item.id] = index
        if check_images and resolve_image(item.image_path, path, root) is None:
            raise DatasetError(f"{where}: field 'image_path': image file not found: {item.image_path}")
        items.append(item)
    if not items:
        raise DatasetError(f"{path}: no benchmark items")
    return items


def load_predictions(path: str | Path) -> list[Prediction]:
    """Load a prediction file (``{id, image_path, response}`` per item; JSON list or JSONL)."""
    path = Path(path)
    predictions: list[Prediction] = []
    seen: set[str] = set()
    for index, record in enumerate(read_records(path)):
        where = _where(path, index, record)
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
            raise DatasetError(f"{_where(path, index, record)}: fields 'id' and 'image_path' are both missing")
        evaluation = record.get("evaluation")
        if evaluation is not None and not isinstance(evaluation, dict):
            raise DatasetError(f"{_where(path, index, record)}: field 'evaluation' must be an object or null")
    return records


# -- reference-based datasets ------------------------------------------------------------


def load_memecult(path: str | Path, *, image_dir: str | Path | None = None) -> list[ReferenceItem]:
    """MemeCULT-1K CSV: ``Filename, Language, Context, Explanation_1..3`` (empty explanations skipped)."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    base = Path(image_dir) if image_dir is not None else path.parent
    items: list[ReferenceItem] = []
    with path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle)
        header = {name.strip() for name in reader.fieldnames or []}
        for column in ("Filename", "Language"):
            if column not in header:
                raise DatasetError(f"{path}: column '{column}' is missing (have: {sorted(header)})")
        explanation_columns = sorted(c for c in header if c.startswith("Explanation_"))
        if not explanation_columns:
            raise DatasetError(f"{path}: no 'Explanation_N' columns")
        for row_number, row in enumerate(reader, 2):
            row = {(k or "").strip(): (v or "").strip() for k, v in row.items()}
            filename = row.get("Filename", "")
            if not filename:
                raise DatasetError(f"{path}: row {row_number}: field 'Filename' is empty")
            references = tuple(row[c] for c in explanation_columns if row.get(c))
            if not references:
                raise DatasetError(f"{path}: row {row_number} ({filename}): no reference explanation")
            items.append(
                ReferenceItem(
                    id=filename,
                    image_path=str(base / filename),
                    references=references,
                    language=row.get("Language") or None,
                    context=row.get("Context") or None,
                )
            )
    return items


def load_memecap(path: str | Path, *, image_dir: str | Path | None = None) -> list[ReferenceItem]:
    """MemeCap test split (JSON list with ``post_id``, ``img_fname``, ``title``, ``meme_captions``)."""
    path = Path(path)
    base = Path(image_dir) if image_dir is not None else path.parent
    items: list[ReferenceItem] = []
    for index, record in enumerate(read_records(path)):
        where = f"{path}: item {index} (post_id={record.get('post_id', '?')})"
        fname = record.get("img_fname")
        if not fname:
            raise DatasetError(f"{where}: field 'img_fname' is missing")
        captions = record.get("meme_captions")
        if not isinstance(captions, list) or not [c for c in captions if isinstance(c, str) and c.strip()]:
            raise DatasetError(f"{where}: field 'meme_captions' is missing or empty")
        items.append(
            ReferenceItem(
                id=str(record.get("post_id") or fname),
                image_path=str(base / fname),
                references=tuple(c.strip() for c in captions if isinstance(c, str) and c.strip()),
                language="en",
                context=record.get("title") or None,
            )
        )
    return items
