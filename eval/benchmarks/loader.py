"""Load a benchmark-family JSONL file with the MemeBench loader's error discipline.

Every bad line is reported with the file, the line number, the item id and the field (up
to ``max_errors`` of them, then a count of the rest); nothing is dropped silently: either the
whole file loads, or it fails listing what is wrong, or (``skip_invalid=True``) the bad lines
are skipped *and counted* in :attr:`BenchSet.skipped`.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from eval.benchmarks.items import BENCHMARKS, ITEM_TYPES, BenchItem
from eval.datasets import DatasetError

MAX_ERRORS = 20


class BenchFormatError(DatasetError):
    """A benchmark JSONL file is malformed; the message lists each bad line and field."""


@dataclass
class BenchSet:
    """The items of one benchmark file (all of one benchmark) and what was skipped."""

    path: Path
    benchmark: str
    items: list[BenchItem]
    skipped: list[str] = field(default_factory=list)  # one line per skipped item, with the reason

    @property
    def tasks(self) -> dict[str, int]:
        return dict(Counter(item.task for item in self.items))

    def by_id(self) -> dict[str, BenchItem]:
        return {item.id: item for item in self.items}


def _field_errors(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        loc = ".".join(str(p) for p in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        parts.append(f"field '{loc}': {message}" if loc and not message.startswith("field ") else message)
    return "; ".join(parts)


def resolve_media(value: str, bench_path: Path, media_root: Path | None) -> Path | None:
    """The media file: absolute, else under ``media_root``, then next to the JSONL file."""
    candidate = Path(value)
    if candidate.is_absolute():
        return candidate if candidate.is_file() else None
    for root in (media_root, bench_path.parent):
        if root is not None and (root / candidate).is_file():
            return root / candidate
    return None


def is_bench_file(path: str | Path) -> bool:
    """True when the file's first non-empty line is a JSON object naming a family benchmark."""
    try:
        with Path(path).open(encoding="utf-8-sig") as handle:
            for line in handle:
                if line.strip():
                    record = json.loads(line)
                    return isinstance(record, dict) and record.get("benchmark") in BENCHMARKS
    except (OSError, ValueError):
        return False
    return False


def load_bench(
    path: str | Path,
    benchmark: str | None = None,
    *,
    media_root: str | Path | None = None,
    check_media: bool = True,
    skip_invalid: bool = False,
    max_errors: int = MAX_ERRORS,
) -> BenchSet:
    """Load and validate a benchmark JSONL file (one task instance per line)."""
    path = Path(path)
    root = Path(media_root) if media_root is not None else None
    if not path.is_file():
        raise BenchFormatError(f"{path}: file not found")
    if benchmark is not None and benchmark not in BENCHMARKS:
        raise BenchFormatError(f"unknown benchmark {benchmark!r}; choose from {', '.join(BENCHMARKS)}")
    errors: list[str] = []
    items: list[BenchItem] = []
    seen: dict[str, int] = {}
    text = path.read_text(encoding="utf-8-sig")
    if text.lstrip().startswith("["):
        raise BenchFormatError(f"{path}: expected JSONL (one JSON object per line), got a JSON list")
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            errors.append(f"line {lineno}: invalid JSON ({exc.msg})")
            continue
        if not isinstance(record, dict):
            errors.append(f"line {lineno}: expected an object, got {type(record).__name__}")
            continue
        where = f"line {lineno} (id={record.get('id', '?')})"
        name = record.get("benchmark")
        if name not in ITEM_TYPES:
            errors.append(f"{where}: field 'benchmark': {name!r} is not one of {', '.join(BENCHMARKS)}")
            continue
        benchmark = benchmark or name
        if name != benchmark:
            errors.append(f"{where}: field 'benchmark': {name!r} in a {benchmark} file")
            continue
        try:
            item = ITEM_TYPES[name].model_validate(record)
        except ValidationError as exc:
            errors.append(f"{where}: {_field_errors(exc)}")
            continue
        if item.id in seen:
            errors.append(f"{where}: field 'id' duplicates line {seen[item.id]}")
            continue
        if check_media:
            missing = [f"field '{k}': file not found: {v}" for k, v in item.media_paths.items() if resolve_media(v, path, root) is None]
            if missing:
                errors.append(f"{where}: {'; '.join(missing)}")
                continue
        seen[item.id] = lineno
        items.append(item)
    if errors and not skip_invalid:
        shown = "\n".join(f"  {path}: {e}" for e in errors[:max_errors])
        more = f"\n  … and {len(errors) - max_errors} more" if len(errors) > max_errors else ""
        raise BenchFormatError(f"{path}: {len(errors)} bad line(s):\n{shown}{more}")
    if not items:
        raise BenchFormatError(f"{path}: no valid benchmark items" + (f" ({len(errors)} skipped)" if errors else ""))
    return BenchSet(path=path, benchmark=benchmark or items[0].benchmark, items=items, skipped=errors)


def dump_item(item: BenchItem) -> dict[str, Any]:
    """The JSONL record of an item (aliases as in the documented shape, unset defaults left out)."""
    return item.model_dump(by_alias=True, exclude_none=True)
