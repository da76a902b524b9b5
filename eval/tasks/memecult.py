"""MemeCULT-1K: meme images with human reference explanations and a cultural context note.

**Nothing of MemeCULT-1K is released yet** (its repository says "coming soon"), so both shapes
read here are ours, documented in docs/evaluation.md, and claim no release: the JSONL item
(:class:`MemeCultItem`: ``image``, ``language``, ``context_note``, ``references``) that
``kar run`` reads, and the CSV (:func:`load_memecult`: ``Filename, Language, Context,
Explanation_1..N``) that ``kar report-refs`` reads.  There is no converter: ``kar bench
convert memecult`` refuses, as for MemeReaCon, until a release exists.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from eval.records import DatasetError, ReferenceItem
from eval.tasks.base import BenchItem, Task, TaskKind, register

if TYPE_CHECKING:
    from agents.pipeline.state import ExplainContext


def load_memecult(path: str | Path, *, image_dir: str | Path | None = None) -> list[ReferenceItem]:
    """Our MemeCULT CSV shape (not a release's): ``Filename, Language, Context, Explanation_1..N`` (empty explanations skipped)."""
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


TASK = register(Task(
    name="memecult", title="MemeCULT-1K", item_type=MemeCultItem,
    conditions=("vanilla", "cot", "search_cot", "kar", "context_note"),
    release="nothing is released yet (its repository says 'coming soon'); the JSONL and CSV shapes are ours",
    metrics={"EXPLAIN-G": "ROUGE-L, embedding similarity, 1-5 rubric"},
))
