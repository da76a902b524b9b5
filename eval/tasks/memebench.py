"""MemeBench: meme images with VIKR layers and checklists, as the release ships them.

Item shape (``id, image_path, visual, identity, knowledge, reasoning, eval_checklist{visual[],
identity[], knowledge[], reasoning[]}`` plus optional ``language``/``domain``), the strict
loader every command uses (:func:`load_benchmark`: a JSON list, JSONL, or a folder of them;
every bad item listed with file, index, id and field), and the runner's view of it
(:func:`load_run_items`, what ``kar run`` and the API's ablation jobs run).  Judged with the
checklist judge (:mod:`eval.judges.checklist`), scored by :mod:`eval.metrics.vikr`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from eval.records import DatasetError, record_where, read_records
from eval.verdicts import DIMENSIONS

if TYPE_CHECKING:
    from agents.runner import RunItem

NAME = "memebench"
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
            where = record_where(file, index, record)
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


def run_item(item: BenchmarkItem, image_root: str | Path | None = None) -> RunItem:
    """The runner's view of a benchmark item (an unresolved image stays as written: the run records it as failed)."""
    from agents.runner import RunItem

    record: dict[str, Any] = item.model_dump()
    record["id"] = item.source_id
    image_file = item.resolve_image(image_root) or Path(item.image_path)
    return RunItem.from_record(record, image_file, language=item.language)


def load_run_items(
    path: str | Path, *, image_root: str | Path | None = None, check_images: bool = True, limit: int | None = None
) -> list[RunItem]:
    """Validate a MemeBench benchmark (file or folder) and return its first ``limit`` items to run.

    Raises :class:`eval.records.DatasetError` naming every bad item (file, index, id, field).
    """
    items = load_benchmark(path, image_root=image_root, check_images=check_images)
    if limit:
        items = items[:limit]
    return [run_item(item, image_root) for item in items]
