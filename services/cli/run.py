"""``kar run``: every condition over a benchmark (traces, predictions, manifest; resumable).

The file is read by :func:`eval.tasks.load`, the registry every command and the API's
ablation jobs use: a MemeBench benchmark runs through :class:`agents.runner.AblationRunner`,
a family JSONL (MemeReaCon, AVMeme Exam, DrivelHub+, MemeCULT-1K, or the DrivelHub+
release's metadata.csv) through :class:`agents.tasks.TaskRunner` (video frames, audio, task
prompts, ``text_only``; media settings ``KAR_MEDIA_*``, ``KAR_ASR_*``).  A file with a bad
item stops here with every error listed, exit code 2, before anything is built or written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape
from rich.text import Text

from services.cli.console import console
from services.cli.console import run_async as _run
from services.cli.console import settings_with as _settings
from services.cli.console import emit_json, fail, progress_bar


def run_command(
    dataset: Annotated[Path, typer.Option("--dataset", help="MemeBench benchmark JSON/JSONL file or folder, a benchmark-family JSONL file, or the DrivelHub+ metadata.csv.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Output folder (traces, predictions, manifest); reruns resume.")],
    conditions: Annotated[str, typer.Option("--conditions", help="Comma-separated conditions.")] = "vanilla,cot,search_cot,kar",
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, max=1024, help="Items in flight.")] = 8,
    limit: Annotated[Optional[int], typer.Option("--limit", min=1, help="Only the first N items.")] = None,
    image_root: Annotated[
        Optional[Path], typer.Option("--image-root", help="Folder media paths are relative to (then the benchmark's folder).")
    ] = None,
    check_images: Annotated[
        bool, typer.Option("--check-images/--no-check-images", help="Fail up front when an item's image is missing.")
    ] = True,
    ocr: Annotated[Optional[bool], typer.Option("--ocr/--no-ocr", help="Run OCR (default: KAR_OCR_ENABLED).")] = None,
    replay_only: Annotated[Optional[bool], typer.Option("--replay-only/--no-replay-only", help="Fail searches that miss the cache.")] = None,
    retry_failed: Annotated[
        bool, typer.Option("--retry-failed", help="Run failed items (response null) once more; the new attempt is appended.")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the run summary as JSON.")] = False,
) -> None:
    """Run conditions over a benchmark (MemeBench, or a MemeReaCon / AVMeme / DrivelHub+ / MemeCULT-1K JSONL): resumable traces and predictions."""
    from agents.factory import build_pipeline
    from eval.records import DatasetError
    from eval.tasks import is_bench_file, load

    family = dataset.is_file() and is_bench_file(dataset)
    conds = [c.strip() for c in conditions.split(",") if c.strip()]
    try:
        loaded = load(dataset, media_root=image_root, check_media=True if family else check_images, limit=limit)
    except DatasetError as exc:
        if family:
            raise fail(escape(str(exc)), 2) from None
        console.print(Text.assemble(("error:", "bold red"), " ", str(exc)), highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    try:
        loaded.check_conditions(conds)
    except ValueError as exc:
        raise fail(escape(str(exc)), 2) from None

    async def main() -> Any:
        settings = _settings(search_replay_only=replay_only)
        resources = build_pipeline(settings, loaded.pipeline_conditions(conds), ocr_enabled=ocr, require_vlm=True)
        try:
            try:
                runner = loaded.runner(resources.pipeline, out_dir, conds, settings=settings, concurrency=concurrency,
                                       manifest={"settings": settings.public_dict(), "notes": resources.notes}, retry_failed=retry_failed)
            except ValueError as exc:
                raise fail(escape(str(exc)), 2) from None
            label = f"running {loaded.benchmark + ' ' if family else ''}{','.join(conds)}"
            return await run_with_progress(runner, loaded.items, label, len(conds), dataset, json_out)
        finally:
            await resources.aclose()

    emit_run_summary(_run(main()), json_out)


async def run_with_progress(runner: Any, items: list[Any], label: str, n_conditions: int, dataset: Path, json_out: bool) -> Any:
    """Run every item under every condition with the shared progress bar (hidden for --json off a terminal)."""
    with progress_bar(disable=json_out and not console.is_terminal) as bar:
        task = bar.add_task(label, total=len(items) * n_conditions)
        return await runner.run(items, progress=lambda done, total: bar.update(task, completed=done), dataset=str(dataset))


def emit_run_summary(summary: Any, json_out: bool) -> None:
    """A run's summary: JSON on stdout, or one plain line (paths shown as written, never as markup)."""
    if json_out:
        emit_json(summary.to_dict())
    else:
        console.print(
            Text(
                f"{summary.ran} ran, {summary.skipped} already done, {summary.failed} failed (response null); "
                f"predictions in {Path(summary.out_dir) / 'predictions'}"
            )
        )
