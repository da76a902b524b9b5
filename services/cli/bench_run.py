"""``kar run`` over benchmark-family files: the same command, a branch by file content.

A JSONL file whose lines name a family benchmark (``"benchmark": "avmeme"`` …) runs through
:class:`agents.tasks.TaskRunner` (video frames, audio, task prompts, ``text_only``); anything
else goes to the MemeBench runner unchanged.  Media settings: ``KAR_MEDIA_*``, ``KAR_ASR_*``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.markup import escape

from services.cli.console import run_async as _run
from services.cli.console import settings_with as _settings
from services.cli.console import fail


def run_bench(
    dataset: Path, out_dir: Path, conditions: str, concurrency: int, limit: int | None, ocr: bool | None,
    replay_only: bool | None, retry_failed: bool, json_out: bool,
) -> None:
    """Run conditions over a benchmark-family file (tasks, media, text_only)."""
    from agents.factory import build_pipeline
    from agents.tasks import TASK_CONDITIONS, TaskRunner
    from eval.benchmarks.loader import load_bench
    from eval.benchmarks.tasks import to_task_items
    from eval.datasets import DatasetError
    from services.cli.run import emit_run_summary, run_with_progress

    conds = [c.strip() for c in conditions.split(",") if c.strip()]
    bad = [c for c in conds if c not in TASK_CONDITIONS]
    if bad or not conds:
        raise fail(escape(f"unknown condition(s) {', '.join(bad) or '(none)'}; choose from {', '.join(TASK_CONDITIONS)}"), 2)
    try:
        bench = load_bench(dataset)
        items = to_task_items(bench)
    except DatasetError as exc:
        raise fail(escape(str(exc)), 2) from None
    items = items[:limit] if limit else items

    async def main() -> Any:
        settings = _settings(search_replay_only=replay_only)
        pipeline_conds = list(dict.fromkeys("vanilla" if c == "text_only" else c for c in conds))
        resources = build_pipeline(settings, pipeline_conds, ocr_enabled=ocr, require_vlm=True)
        try:
            runner = TaskRunner(
                resources.pipeline, out_dir, conds, settings=settings, concurrency=concurrency, retry_failed=retry_failed,
                manifest={"settings": settings.public_dict(), "notes": resources.notes, "benchmark": bench.benchmark,
                          "tasks": bench.tasks},
            )
            try:
                runner.check(items)
            except ValueError as exc:
                raise fail(escape(str(exc)), 2) from None
            return await run_with_progress(runner, items, f"running {bench.benchmark} {','.join(conds)}", len(conds), dataset, json_out)
        finally:
            await resources.aclose()

    emit_run_summary(_run(main()), json_out)
