"""``kar run``: every condition over a MemeBench benchmark (traces, predictions, manifest; resumable).

The benchmark is read by ``eval.datasets.load_benchmark``, the loader ``kar judge`` and
``kar report`` use: a file with a bad item stops here with every error listed, exit code 2,
before anything is built or written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.text import Text

from services.cli.console import console
from services.cli.console import run_async as _run
from services.cli.console import settings_with as _settings
from services.cli.console import emit_json, fail, progress_bar


def run_command(
    dataset: Annotated[Path, typer.Option("--dataset", help="MemeBench benchmark JSON/JSONL file or folder, or a benchmark-family JSONL file.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Output folder (traces, predictions, manifest); reruns resume.")],
    conditions: Annotated[str, typer.Option("--conditions", help="Comma-separated conditions.")] = "vanilla,cot,search_cot,kar",
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, max=1024, help="Items in flight.")] = 8,
    limit: Annotated[Optional[int], typer.Option("--limit", min=1, help="Only the first N items.")] = None,
    image_root: Annotated[
        Optional[Path], typer.Option("--image-root", help="Folder image paths are relative to (then the benchmark's folder).")
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
    from agents.pipeline import CONDITIONS
    from agents.runner import AblationRunner
    from eval.datasets import DatasetError
    from eval.benchmarks.loader import is_bench_file
    from services.benchmarks import load_run_items
    from services.cli.bench_run import run_bench

    if dataset.is_file() and is_bench_file(dataset):
        # a MemeReaCon / AVMeme / DrivelHub+ / MemeCULT-1K JSONL: task prompts, media, text_only
        return run_bench(dataset, out_dir, conditions, concurrency, limit, ocr, replay_only, retry_failed, json_out)
    conds = [c.strip() for c in conditions.split(",") if c.strip()]
    bad = [c for c in conds if c not in CONDITIONS]
    if bad or not conds:
        raise fail(f"unknown condition(s) {', '.join(bad) or '(none)'}; choose from {', '.join(CONDITIONS)}", 2)
    try:
        items = load_run_items(dataset, image_root=image_root, check_images=check_images, limit=limit)
    except DatasetError as exc:
        console.print(Text.assemble(("error:", "bold red"), " ", str(exc)), highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None

    async def main() -> Any:
        settings = _settings(search_replay_only=replay_only)
        resources = build_pipeline(settings, conds, ocr_enabled=ocr, require_vlm=True)
        try:
            runner = AblationRunner(
                resources.pipeline, out_dir, conds, concurrency=concurrency,
                manifest={"settings": settings.public_dict(), "notes": resources.notes}, retry_failed=retry_failed,
            )
            return await run_with_progress(runner, items, f"running {','.join(conds)}", len(conds), dataset, json_out)
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
