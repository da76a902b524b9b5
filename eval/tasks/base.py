"""What every benchmark module of :mod:`eval.tasks` builds on.

* :class:`BenchItem`: the fields every benchmark-family JSONL line has (``benchmark``, ``task``,
  ``id``, ``language``); each benchmark module subclasses it with its own fields and says, on
  the item, how it is asked (:meth:`BenchItem.instruction`) and what context goes with it
  (:meth:`BenchItem.explain_context`).
* :class:`Task`: one benchmark's registry entry (item type, conditions, converter, what its
  release publishes); :func:`register` adds it.  ``eval.tasks`` imports every module, so the
  registry is complete once the package is imported.
* The loader's pieces (:class:`BenchSet`, :class:`BenchFormatError`, :func:`resolve_media`) and
  :func:`write_jsonl`.

Media paths are relative to the JSONL file's folder (or ``--media-root``) unless absolute.
"""

from __future__ import annotations

import json
import string
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from eval.records import DatasetError

if TYPE_CHECKING:
    from agents.pipeline.state import ExplainContext

TASK_PROMPTS = Path(__file__).resolve().parent.parent / "prompts" / "tasks"
LETTERS = string.ascii_uppercase
MAX_OPTIONS = 10


TaskKind = Literal["mcq", "classify", "generate"]


def norm_key(value: str) -> str:
    """A label as a key: trimmed, lower case, spaces and hyphens as underscores."""
    return value.strip().lower().replace(" ", "_").replace("-", "_")


class BenchItem(BaseModel):
    """Fields every benchmark line has (extra fields are kept verbatim)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    benchmark: str
    task: str
    id: str = Field(min_length=1)
    language: str | None = None

    kind: ClassVar[dict[str, TaskKind]] = {}

    @field_validator("id", mode="before")
    @classmethod
    def _id_str(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) else value

    @property
    def task_kind(self) -> TaskKind:
        return self.kind[self.task]

    @property
    def media_paths(self) -> dict[str, str]:
        """Media fields of this item that name a file: image / video / audio."""
        return {k: getattr(self, k) for k in ("image", "video", "audio") if getattr(self, k, None)}

    @property
    def label_set(self) -> tuple[str, ...]:
        return ()

    @property
    def references(self) -> list[str]:
        return []

    def group_values(self) -> dict[str, str]:
        """Breakdown keys of this item (language plus benchmark-specific ones)."""
        return {"language": self.language or "unknown"}

    def split_values(self) -> list[str]:
        """The splits this item belongs to (a benchmark with splits overrides it)."""
        return []

    def instruction(self) -> str | None:
        """The task instruction shown after the media and context (None: plain explanation)."""
        return None

    def explain_context(self) -> ExplainContext:
        """The post / comment / note context given with the media."""
        from agents.pipeline.state import ExplainContext

        return ExplainContext()

    @property
    def run_kind(self) -> str:
        """How the runner treats the item: its task kind (a plain explanation reads "explain")."""
        return self.task_kind


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


def field_errors(exc: ValidationError) -> str:
    """A validation error as one line naming each failing field."""
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


def dump_item(item: BenchItem) -> dict[str, Any]:
    """The JSONL record of an item (aliases as in the documented shape, unset defaults left out)."""
    return item.model_dump(by_alias=True, exclude_none=True)


class ConversionUnavailableError(DatasetError):
    """No converter exists for this benchmark (its release layout is not published)."""


def write_jsonl(records: Iterable[dict[str, Any]], out: str | Path) -> int:
    """Write records as JSONL (UTF-8, one object per line); the number written."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with out.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            n += 1
    return n


@lru_cache(maxsize=32)
def _task_template(name: str) -> str:
    return (TASK_PROMPTS / f"{name}.md").read_text("utf-8")


def task_prompt(name: str, **values: Any) -> str:
    """A task instruction from ``eval/prompts/tasks/NAME.md``, its ``{{x}}`` placeholders filled."""
    from eval.judges.base import fill

    return fill(_task_template(name), **values)


Converter = Callable[..., tuple[list[dict[str, Any]], list[str]]]


@dataclass(frozen=True)
class Task:
    """One benchmark of the registry: everything a command needs to know about it.

    ``conditions``: the run conditions that make sense for it (``context_note`` is dropped per
    item when the item has no note).  ``convert``: reads the benchmark's released files into
    our JSONL shape; ``None`` when nothing is released, and ``release`` then says why.
    """

    name: str
    title: str
    item_type: type[BenchItem]
    conditions: tuple[str, ...]
    release: str
    convert: Converter | None = None
    metrics: dict[str, str] = field(default_factory=dict)  # task → what it is scored with
    #: scores across tasks (``{task: items}``, ``{task: {run: per-item rows}}``) → extra report sections
    combine: Callable[[dict[str, list[BenchItem]], dict[str, dict[str, list[dict[str, Any]]]]], dict[str, Any]] | None = None


REGISTRY: dict[str, Task] = {}


def register(task: Task) -> Task:
    """Add a benchmark to the registry (its module calls this once, at import)."""
    if task.name in REGISTRY:
        raise ValueError(f"benchmark {task.name!r} registered twice")
    REGISTRY[task.name] = task
    return task
