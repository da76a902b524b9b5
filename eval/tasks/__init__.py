"""The benchmarks, one module each, behind one registry.

=============  ==============================================  ================================
benchmark      module                                          what its release publishes
=============  ==============================================  ================================
MemeBench      :mod:`eval.tasks.memebench`                     items + judge files (read as is)
MemeReaCon     :mod:`eval.tasks.memereacon`                    nothing yet (our JSONL shape)
AVMeme Exam    :mod:`eval.tasks.avmeme`                        dataset rows (official + MTEB)
DrivelHub+     :mod:`eval.tasks.drivelhub`                     metadata.csv, qrels.json, judgments
MemeCULT-1K    :mod:`eval.tasks.memecult`                      nothing yet (our JSONL shape)
MemeCap        :mod:`eval.tasks.memecap`                       the test split JSON (references)
=============  ==============================================  ================================

:func:`load` is what every command and the API's ablation jobs call: it reads a benchmark
file (MemeBench JSON/JSONL/folder, or a family JSONL) and returns its run items with the kind
of runner they need.  Nothing outside this package branches on the benchmark.  Adding a
benchmark: one module here (its item type and a :func:`~eval.tasks.base.register` call; the
package imports every module in it), plus its tests and prompt files (docs/evaluation.md,
"Adding a benchmark").
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from dataclasses import dataclass, field
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from eval.records import DatasetError
from eval.tasks import memebench  # noqa: F401  (MemeBench: the default of load())
from eval.tasks.base import (
    REGISTRY,
    BenchFormatError,
    BenchItem,
    BenchSet,
    MAX_ERRORS,
    ConversionUnavailableError,
    Task,
    field_errors,
    resolve_media,
)

if TYPE_CHECKING:
    from agents.tasks import TaskItem

# every module of this package is imported, and each family benchmark registers itself: adding one is adding a module
for _module in sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name != "base"):
    importlib.import_module(f"{__name__}.{_module}")
from eval.tasks import drivelhub  # noqa: E402  (imported above; named for load_bench's metadata.csv)

ITEM_TYPES: dict[str, type[BenchItem]] = {name: task.item_type for name, task in REGISTRY.items()}
BENCHMARKS: tuple[str, ...] = tuple(ITEM_TYPES)
#: conditions per benchmark: context_note needs a note (AVMeme: the meme's name); text_only needs a question
BENCH_CONDITIONS: dict[str, tuple[str, ...]] = {name: task.conditions for name, task in REGISTRY.items()}


def get_task(benchmark: str) -> Task:
    """The registry entry of a benchmark; :class:`BenchFormatError` naming the known ones."""
    if benchmark not in REGISTRY:
        raise BenchFormatError(f"unknown benchmark {benchmark!r}; choose from {', '.join(REGISTRY)}")
    return REGISTRY[benchmark]


def is_bench_file(path: str | Path) -> bool:
    """True for a family benchmark: a JSONL whose first line names one, or a DrivelHub+ metadata.csv."""
    if drivelhub.is_metadata_csv(path):
        return True
    try:
        with Path(path).open(encoding="utf-8-sig") as handle:
            for line in handle:
                if line.strip():
                    record = json.loads(line)
                    return isinstance(record, dict) and record.get("benchmark") in REGISTRY
    except (OSError, ValueError):
        return False
    return False


def _lines(path: Path, errors: list[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """The file's records with their line numbers (JSONL, or a DrivelHub+ metadata.csv read as released)."""
    if drivelhub.is_metadata_csv(path):
        records, rejected = drivelhub.convert(path, media_dir="")
        errors.extend(rejected)
        yield from enumerate(records, 2)
        return
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
        yield lineno, record


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
    if benchmark is not None:
        get_task(benchmark)
    errors: list[str] = []
    items: list[BenchItem] = []
    seen: dict[str, int] = {}
    for lineno, record in _lines(path, errors):
        where = f"line {lineno} (id={record.get('id', '?')})"
        name = record.get("benchmark")
        if name not in REGISTRY:
            errors.append(f"{where}: field 'benchmark': {name!r} is not one of {', '.join(REGISTRY)}")
            continue
        benchmark = benchmark or name
        if name != benchmark:
            errors.append(f"{where}: field 'benchmark': {name!r} in a {benchmark} file")
            continue
        try:
            item = REGISTRY[name].item_type.model_validate(record)
        except ValidationError as exc:
            errors.append(f"{where}: {field_errors(exc)}")
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


def convert(benchmark: str, source: str | Path, *, media_dir: str | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Convert a released file of ``benchmark``; records plus errors (each naming the row)."""
    task = get_task(benchmark)
    if task.convert is None:
        raise ConversionUnavailableError(
            f"no converter for {task.title}: {task.release}; write the documented JSONL shape "
            f"(docs/evaluation.md) and check it with `kar bench validate FILE`"
        )
    return task.convert(source, media_dir=media_dir)


def instruction(item: BenchItem) -> str | None:
    """The task instruction shown after the media and context (None: plain explanation)."""
    return item.instruction()


def to_task_items(bench: BenchSet, media_root: str | Path | None = None) -> list[TaskItem]:
    """Task items with their media files resolved (a missing file is a BenchFormatError naming it)."""
    from agents.tasks import TaskItem

    root = Path(media_root) if media_root is not None else None
    out: list[TaskItem] = []
    for item in bench.items:
        files = {}
        for key, value in item.media_paths.items():
            found = resolve_media(value, bench.path, root)
            if found is None:
                raise BenchFormatError(f"{bench.path}: id={item.id}: field '{key}': file not found: {value}")
            files[key] = found
        context = item.explain_context()
        allowed = REGISTRY[item.benchmark].conditions
        if "context_note" in allowed and not context.context_note:
            allowed = tuple(c for c in allowed if c != "context_note")
        out.append(TaskItem(
            id=item.id, benchmark=item.benchmark, task=item.task, kind=item.run_kind, instruction=item.instruction(),
            media_path=item.media_paths.get("image") or item.media_paths.get("video", ""),
            image_file=files.get("image"), video_file=files.get("video"), audio_file=files.get("audio"),
            language=item.language, context=context, conditions=allowed, audio_only=getattr(item, "audio_only", False),
        ))
    return out


@dataclass
class Loaded:
    """A benchmark read for running: its items and the runner they need.

    ``runner_kind`` is ``"ablation"`` (MemeBench items, :class:`agents.runner.AblationRunner`) or
    ``"task"`` (family items, :class:`agents.tasks.TaskRunner`); ``conditions`` the conditions
    that runner accepts.
    """

    benchmark: str
    runner_kind: str
    items: list[Any]
    conditions: tuple[str, ...]
    bench: BenchSet | None = None
    tasks: dict[str, int] = field(default_factory=dict)

    def check_conditions(self, conditions: list[str]) -> None:
        """A ValueError naming the conditions this benchmark's runner does not accept."""
        bad = [c for c in conditions if c not in self.conditions]
        if bad or not conditions:
            raise ValueError(f"unknown condition(s) {', '.join(bad) or '(none)'}; choose from {', '.join(self.conditions)}")
        misfit: dict[tuple[str, str], int] = {}
        for item in self.items if self.runner_kind == "task" else ():
            for condition in conditions:
                if condition not in item.conditions:
                    misfit[(item.benchmark, condition)] = misfit.get((item.benchmark, condition), 0) + 1
        if misfit:
            raise ValueError("; ".join(f"{c} does not apply to {b} ({n} items)" for (b, c), n in sorted(misfit.items())))

    def runner(self, pipeline: Any, out_dir: str | Path, conditions: list[str], *, settings: Any, concurrency: int = 4,
               manifest: dict[str, Any] | None = None, retry_failed: bool = False) -> Any:
        """The runner these items need, its conditions checked against every item (ValueError naming them)."""
        self.check_conditions(conditions)
        manifest = dict(manifest or {})
        if self.runner_kind == "ablation":
            from agents.runner import AblationRunner

            return AblationRunner(pipeline, Path(out_dir), conditions, concurrency=concurrency, manifest=manifest, retry_failed=retry_failed)
        from agents.tasks import TaskRunner

        runner = TaskRunner(pipeline, Path(out_dir), conditions, settings=settings, concurrency=concurrency, retry_failed=retry_failed,
                            manifest=manifest | {"benchmark": self.benchmark, "tasks": self.tasks})
        runner.check(self.items)
        return runner

    def pipeline_conditions(self, conditions: list[str]) -> list[str]:
        """The pipeline conditions a run needs (``text_only`` runs the vanilla pipeline without media)."""
        return list(dict.fromkeys("vanilla" if c == "text_only" else c for c in conditions))


def load(
    path: str | Path, *, media_root: str | Path | None = None, check_media: bool = True, limit: int | None = None
) -> Loaded:
    """Read any benchmark file for a run (``kar run``, the API's ablation jobs).

    A JSONL whose lines name a family benchmark loads through its registry entry; anything
    else is MemeBench.  :class:`~eval.records.DatasetError` names every bad item.
    """
    path = Path(path)
    if path.is_file() and is_bench_file(path):
        from agents.tasks import TASK_CONDITIONS

        bench = load_bench(path, media_root=media_root, check_media=check_media)
        items = to_task_items(bench, media_root)
        return Loaded(bench.benchmark, "task", items[:limit] if limit else items, tuple(TASK_CONDITIONS), bench, bench.tasks)
    from agents.pipeline import CONDITIONS

    items = memebench.load_run_items(path, image_root=media_root, check_images=check_media, limit=limit)
    return Loaded(memebench.NAME, "ablation", items, tuple(CONDITIONS))


__all__ = [
    "BENCHMARKS", "BENCH_CONDITIONS", "ITEM_TYPES", "REGISTRY", "BenchFormatError", "BenchItem", "BenchSet",
    "ConversionUnavailableError", "DatasetError", "Loaded", "Task", "convert", "get_task", "instruction",
    "is_bench_file", "load", "load_bench", "to_task_items",
]
