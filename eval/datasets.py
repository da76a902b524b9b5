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

from pydantic import BaseModel, ConfigDict, Field

from eval.verdicts import DIMENSIONS


class DatasetError(ValueError):
    """A data file is malformed; the message names the file, the item and the field."""


LAYER_KINDS = "an object, a list, a string or null"
CHECKLIST_TEXT_KEYS = ("text", "item", "requirement", "description")
LANGUAGE_KEYS = ("language", "lang")
DOMAIN_KEYS = ("domain", "category")
MAX_REPORTED_ERRORS = 20


class BenchmarkItem(BaseModel):
    """One MemeBench item as the release documents it.

    The four VIKR layers are kept verbatim (object, list, string or null: whatever the
    file holds); ``source_id`` is the id exactly as written (int or string) and is what
    predictions and judge files carry, ``id`` its string form used to match records.
    Checklist items are their texts (an item given as an object contributes its text
    field).  Extra fields of the release are kept.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str
    source_id: int | str
    image_path: str
    visual: Any
    identity: Any
    knowledge: Any
    reasoning: Any
    eval_checklist: dict[str, list[str]]
    language: str | None = None
    domain: str | None = None
    source_file: str | None = Field(default=None, exclude=True)  # the benchmark file it came from

    def checklist(self, dim: str) -> list[str]:
        return self.eval_checklist[dim]

    def resolve_image(self, image_root: str | Path | None = None) -> Path | None:
        """The image file (``image_root``, then the benchmark's folder, then the cwd); None if absent."""
        bench = Path(self.source_file) if self.source_file else Path.cwd() / "bench.json"
        return resolve_image(self.image_path, bench, Path(image_root) if image_root is not None else None)

    def layers(self) -> dict[str, Any]:
        """The four VIKR layers, verbatim, in V/I/K/R order."""
        return {dim: getattr(self, dim) for dim in DIMENSIONS}


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


def _checklist_text(row: Any) -> str | None:
    """A checklist item's text: a non-empty string, or an object's text field."""
    if isinstance(row, str):
        return row.strip() or None
    if isinstance(row, dict):
        for key in CHECKLIST_TEXT_KEYS:
            value = row.get(key)
            if isinstance(value, str) and value.strip():
                return value.strip()
    return None


def _metadata(record: dict[str, Any], keys: tuple[str, ...], errors: list[str], where: str) -> str | None:
    for key in keys:
        value = record.get(key)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            errors.append(f"{where}: field '{key}' must be a string, got {type(value).__name__}")
            return None
        return value.strip() or None
    return None


def check_benchmark_record(
    record: dict[str, Any], where: str, source_file: Path | None = None
) -> tuple[BenchmarkItem | None, list[str]]:
    """Validate one raw benchmark record: the item, or every error found in it (each names the field)."""
    errors: list[str] = []
    item_id = record.get("id")
    if item_id is None or item_id == "":
        errors.append(f"{where}: field 'id' is missing")
    elif isinstance(item_id, bool) or not isinstance(item_id, (int, str)):
        errors.append(f"{where}: field 'id' must be an integer or a string, got {type(item_id).__name__}")
    image_path = record.get("image_path")
    if image_path is None or image_path == "":
        errors.append(f"{where}: field 'image_path' is missing")
    elif not isinstance(image_path, str):
        errors.append(f"{where}: field 'image_path' must be a string, got {type(image_path).__name__}")
    for dim in DIMENSIONS:
        if dim not in record:
            errors.append(f"{where}: field '{dim}' (VIKR dimension) is missing")
        elif not isinstance(record[dim], (dict, list, str, type(None))):
            errors.append(f"{where}: field '{dim}' (VIKR dimension) must be {LAYER_KINDS}, got {type(record[dim]).__name__}")
    checklist = record.get("eval_checklist")
    texts: dict[str, list[str]] = {}
    if not isinstance(checklist, dict):
        errors.append(f"{where}: field 'eval_checklist' is missing or not an object")
    else:
        for dim in DIMENSIONS:
            rows = checklist.get(dim)
            if not isinstance(rows, list):
                errors.append(f"{where}: field 'eval_checklist.{dim}' is missing or not a list")
                continue
            if not rows:
                errors.append(f"{where}: field 'eval_checklist.{dim}' is an empty checklist")
                continue
            texts[dim] = []
            for j, row in enumerate(rows):
                text = _checklist_text(row)
                if text is None:
                    errors.append(
                        f"{where}: field 'eval_checklist.{dim}[{j}]' must be a non-empty string or an object "
                        f"with a non-empty {'/'.join(CHECKLIST_TEXT_KEYS)} field"
                    )
                else:
                    texts[dim].append(text)
    language = _metadata(record, LANGUAGE_KEYS, errors, where)
    domain = _metadata(record, DOMAIN_KEYS, errors, where)
    if errors:
        return None, errors
    assert isinstance(checklist, dict)
    data = dict(record)
    data.update(
        id=str(item_id),
        source_id=item_id,
        eval_checklist=texts | {k: v for k, v in checklist.items() if k not in DIMENSIONS},
        language=language,
        domain=domain,
        source_file=str(source_file) if source_file is not None else None,
    )
    return BenchmarkItem.model_validate(data), []


def validate_benchmark_record(record: dict[str, Any], where: str) -> BenchmarkItem:
    """Validate one raw benchmark record; :class:`DatasetError` naming the first bad field."""
    item, errors = check_benchmark_record(record, where)
    if item is None:
        raise DatasetError(errors[0])
    return item


class BenchmarkFileError(DatasetError):
    """A benchmark with invalid items: every error (up to a limit) is in the message and in ``errors``."""

    def __init__(self, path: Path, errors: list[str], bad_items: int, limit: int = MAX_REPORTED_ERRORS):
        self.path = path
        self.errors = errors
        self.bad_items = bad_items
        shown = errors[:limit]
        more = f"\n  ... and {len(errors) - limit} more" if len(errors) > limit else ""
        noun = "item is" if bad_items == 1 else "items are"
        head = f"{path}: {bad_items} {noun} invalid ({len(errors)} error{'s' if len(errors) != 1 else ''})"
        if len(errors) == 1:
            super().__init__(errors[0])
        else:
            super().__init__(head + ":\n" + "\n".join(f"  {e}" for e in shown) + more)


def benchmark_files(path: Path) -> list[Path]:
    """A benchmark file, or the ``.json``/``.jsonl`` files of a folder (sorted)."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".json", ".jsonl") and p.is_file())
        if not files:
            raise DatasetError(f"{path}: no .json/.jsonl benchmark files in the folder")
        return files
    if not path.exists():
        raise DatasetError(f"{path}: file not found")
    return [path]


def load_benchmark(
    path: str | Path,
    *,
    image_root: str | Path | None = None,
    check_images: bool = True,
    max_errors: int = MAX_REPORTED_ERRORS,
) -> list[BenchmarkItem]:
    """Load and validate a MemeBench benchmark (a JSON list or JSONL file, or a folder of them).

    Every item is checked before anything fails: the error lists each bad item's file,
    index, id and field (up to ``max_errors`` lines), so one bad item never hides the
    others.  ``image_path`` is resolved against ``image_root``, then the benchmark's
    folder (then the working directory); with ``check_images`` a missing image is an error.
    """
    path = Path(path)
    root = Path(image_root) if image_root is not None else None
    items: list[BenchmarkItem] = []
    errors: list[str] = []
    bad = 0
    seen: dict[str, str] = {}
    for file in benchmark_files(path):
        for index, record in enumerate(read_records(file)):
            where = _where(file, index, record)
            item, item_errors = check_benchmark_record(record, where, file)
            if item is not None:
                if item.id in seen:
                    item_errors.append(f"{where}: field 'id' duplicates {seen[item.id]}")
                elif check_images and resolve_image(item.image_path, file, root) is None:
                    item_errors.append(f"{where}: field 'image_path': image file not found: {item.image_path}")
                seen.setdefault(item.id, f"item {index}" if file == path else f"item {index} of {file}")
            if item_errors:
                bad += 1
                errors.extend(item_errors)
            elif item is not None:
                items.append(item)
    if errors:
        raise BenchmarkFileError(path, errors, bad, max_errors)
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
