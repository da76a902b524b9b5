"""MemeCULT-1K: meme images with human reference explanations and a cultural context note.

Two readers: :func:`load_memecult` reads a CSV into reference items for ``kar report-refs``,
and :func:`convert_memecult` turns that CSV into MemeCULT JSONL for ``kar run``.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from eval.records import DatasetError, ReferenceItem
from eval.tasks.base import BenchItem, Task, TaskKind, dump_item, register

if TYPE_CHECKING:
    from agents.pipeline.state import ExplainContext


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


class MemeCultItem(BenchItem):
    """A meme image with human reference explanations and its cultural context note."""

    benchmark: Literal["memecult"]
    task: Literal["EXPLAIN-G"] = "EXPLAIN-G"
    image: str = Field(min_length=1)
    context_note: str | None = None
    refs: list[str] = Field(min_length=1, alias="references")

    kind: ClassVar[dict[str, TaskKind]] = {"EXPLAIN-G": "generate"}

    @property
    def references(self) -> list[str]:
        return [r for r in self.refs if r.strip()]

    @property
    def run_kind(self) -> str:
        return "explain"

    def explain_context(self) -> ExplainContext:
        from agents.pipeline.state import ExplainContext

        return ExplainContext(context_note=self.context_note)


def convert_memecult(path: str | Path, *, image_dir: str | Path | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """The MemeCULT-1K CSV → MemeCULT JSONL records (image paths relative to the output file's folder)."""
    items = load_memecult(path, image_dir=image_dir)
    out = []
    for item in items:
        record = {
            "benchmark": "memecult",
            "task": "EXPLAIN-G",
            "id": item.id,
            "image": item.image_path,
            "language": item.language,
            "context_note": item.context,
            "references": list(item.references),
        }
        out.append(dump_item(MemeCultItem.model_validate({k: v for k, v in record.items() if v is not None})))
    return out, []


def convert(source: str | Path, *, media_dir: str | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """The registry's converter: :func:`convert_memecult`."""
    return convert_memecult(source, image_dir=media_dir)


TASK = register(Task(
    name="memecult", title="MemeCULT-1K", item_type=MemeCultItem,
    conditions=("vanilla", "cot", "search_cot", "kar", "context_note"),
    release="CSV", convert=convert,
    metrics={"EXPLAIN-G": "ROUGE-L, embedding similarity, 1-5 rubric"},
))
