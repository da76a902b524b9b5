"""The import report: what happened to every entry of a dump, by reason."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from culturebase.identity import JoinLog

#: notes (fields left out of an entry that was stored) kept in full; beyond this only counted
MAX_NOTES = 1000


def format_validation_error(exc: ValidationError) -> str:
    """One line naming each failing field: ``field 'aliases.2': Input should be a valid string``."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "record"
        parts.append(f"field {loc!r}: {err['msg']}")
    return "; ".join(parts)


@dataclass
class Rejected:
    """An input entry that was not stored, and why (``line`` is the line of a JSONL file, else the entry's 1-based index)."""

    line: int
    reason: str


@dataclass
class Note:
    """A field of a stored entry that was left out or shortened, and why (``details.year: '9999' is not a year``)."""

    line: int
    field: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "field": self.field, "reason": self.reason}


@dataclass
class ImportReport:
    """What an import did: stored, joined by identity rule (:mod:`culturebase.identity`: every merge, record
    kept apart and split, with both sides), skipped by category, rejected (by line or index and field),
    fields left out, images stored / left out, and where a cut dump stopped."""

    path: str
    format: str = "jsonl"
    unit: str = "line"
    read: int = 0
    stored: int = 0
    joins: JoinLog = field(default_factory=JoinLog)
    skipped_category: dict[str, int] = field(default_factory=dict)
    rejected: list[Rejected] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    notes_total: int = 0
    images: int = 0
    image_problems: list[Any] = field(default_factory=list)  # retrieval.images.importing.ImageProblem
    images_not_fetched: int = 0
    stopped: str | None = None
    #: read and validated only: ``stored`` is what would have been stored
    dry_run: bool = False

    def note(self, line: int, field_name: str, reason: str) -> None:
        """Record a field left out of a stored entry (the first :data:`MAX_NOTES` are kept, all are counted)."""
        self.notes_total += 1
        if len(self.notes) < MAX_NOTES:
            self.notes.append(Note(line, field_name, reason))

    @property
    def merged_duplicates(self) -> int:
        """Records joined into another entity (by any rule)."""
        return self.joins.merged

    @property
    def skipped(self) -> int:
        """Entries left out by the category filter."""
        return sum(self.skipped_category.values())

    @property
    def complete(self) -> bool:
        """Whether every entry read was stored or merged (nothing rejected, the dump read to its end)."""
        return not self.rejected and self.stopped is None

    def jsonl_rows(self) -> list[dict[str, Any]]:
        """The report as JSON Lines rows (``kar kb import --report FILE``): every join, record kept apart
        and split, every rejected entry, every note kept, then one ``summary`` row."""
        rows: list[dict[str, Any]] = [{"kind": e.kind, **{k: v for k, v in e.to_dict().items() if k != "kind"}} for e in self.joins.events]
        rows += [{"kind": "rejected", self.unit: r.line, "reason": r.reason} for r in self.rejected]
        rows += [{"kind": "note", self.unit: n.line, "field": n.field, "reason": n.reason} for n in self.notes]
        summary = {k: v for k, v in self.to_dict().items() if k not in ("joins", "rejected", "notes", "image_problems")}
        return [*rows, {"kind": "summary", **summary}]

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": self.format,
            "unit": self.unit,
            "read": self.read,
            "stored": self.stored,
            "merged_duplicates": self.merged_duplicates,
            "merged_by_rule": dict(sorted(self.joins.merged_by_rule.items())),
            "kept_apart": self.joins.kept_apart,
            "split": self.joins.split,
            "joins": [e.to_dict() for e in self.joins.events],
            "skipped_category": self.skipped,
            "skipped_by_category": dict(sorted(self.skipped_category.items())),
            "rejected": [{"line": r.line, "reason": r.reason} for r in self.rejected],
            "notes": [n.to_dict() for n in self.notes],
            "notes_total": self.notes_total,
            "images": self.images,
            "image_problems": [p.to_dict() for p in self.image_problems],
            "images_not_fetched": self.images_not_fetched,
            "stopped": self.stopped,
            "dry_run": self.dry_run,
        }
