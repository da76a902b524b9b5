"""``kar run``: every condition over a benchmark (traces, predictions, manifest; resumable).

The file is read by :func:`eval.tasks.load`, the registry every command and the API's
ablation jobs use: a MemeBench benchmark runs through :class:`agents.runner.AblationRunner`,
a family JSONL (MemeReaCon, AVMeme Exam, DrivelHub+, MemeCULT-1K, or the DrivelHub+
release's metadata.csv) through :class:`agents.tasks.TaskRunner` (video frames, audio, task
prompts, ``text_only``; media settings ``KAR_MEDIA_*``, ``KAR_ASR_*``).  A file with a bad
item stops here with every error listed, exit code 2, before anything is built or written.

A search condition (``search_cot``, ``kar``) whose backend has nothing to search (an empty local
corpus, ``KAR_SEARCH_BACKEND=none``) is refused with exit code 2 unless ``--allow-no-evidence`` is
given; the manifest records the evidence status either way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.text import Text

from services.cli.console import ExitCode, emit_json, err, examples, fail, progress_bar, run_async, settings_with
from services.cli.options import (
    ApiKeyOption,
    BaseUrlOption,
    BenchAlias,
    ImageRootOption,
    JsonOption,
    KbOption,
    ModelOption,
    dataset_option,
    kb_override,
    pick,
    vlm_overrides,
)

RunDataset = dataset_option(
    "MemeBench benchmark JSON/JSONL file or folder, a benchmark-family JSONL file, or the DrivelHub+ metadata.csv"
)

RUN_EXAMPLES = examples(
    "kar run --dataset examples/bench_sample.json --out runs/qwen7b --conditions vanilla,search_cot,kar "
    "--model Qwen/Qwen2.5-VL-7B-Instruct --base-url http://localhost:8001/v1",
    "kar run --dataset memebench/ --out runs/qwen7b --conditions vanilla,cot --limit 20",
    "kar run --dataset memebench/ --out runs/no-evidence --conditions vanilla,kar --allow-no-evidence  # KB grounding only",
)

def evidence_refusal(describe: dict[str, Any], conditions: list[str]) -> str | None:
    """Why the run must not start (a search condition whose backend has nothing to search), or None."""
    from agents.factory import missing_evidence

    refusal = missing_evidence(describe.get("evidence"), conditions)
    return refusal and refusal + "; or pass --allow-no-evidence to run them anyway (the manifest records it)"


def run_command(
    out_dir: Annotated[Path, typer.Option("--out", help="Output folder (traces, predictions, manifest); reruns resume.")],
    dataset: RunDataset = None,
    conditions: Annotated[str, typer.Option("--conditions", help="Comma-separated conditions.")] = "vanilla,cot,search_cot,kar",
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, max=1024, help="Items in flight.")] = 8,
    limit: Annotated[Optional[int], typer.Option("--limit", min=1, help="Only the first N items (default: all).", show_default=False)] = None,
    image_root: ImageRootOption = None,
    check_images: Annotated[
        bool, typer.Option("--check-images/--no-check-images", help="Fail up front when an item's image is missing.")
    ] = True,
    ocr: Annotated[Optional[bool], typer.Option("--ocr/--no-ocr", help="Run OCR (default: KAR_OCR_ENABLED).", show_default=False)] = None,
    replay_only: Annotated[
        Optional[bool], typer.Option("--replay-only/--no-replay-only", help="Fail searches that miss the cache (default: KAR_SEARCH_REPLAY_ONLY).", show_default=False)
    ] = None,
    retry_failed: Annotated[
        bool, typer.Option("--retry-failed", help="Run failed items (response null) once more; the new attempt is appended.")
    ] = False,
    allow_no_evidence: Annotated[
        bool, typer.Option("--allow-no-evidence", help="Run search_cot/kar even when the search backend has nothing to search.")
    ] = False,
    kb: KbOption = None,
    model: ModelOption = None,
    base_url: BaseUrlOption = None,
    api_key: ApiKeyOption = None,
    json_out: JsonOption = False,
    bench: BenchAlias = None,
) -> None:
    """Run conditions over a benchmark (MemeBench, or a MemeReaCon / AVMeme / DrivelHub+ / MemeCULT-1K JSONL): resumable traces and predictions."""
    from agents.factory import build_pipeline
    from eval.records import DatasetError
    from eval.tasks import is_bench_file, load

    dataset = pick("--dataset", dataset, required=True, bench=bench)
    assert dataset is not None
    family = dataset.is_file() and is_bench_file(dataset)
    conds = [c.strip() for c in conditions.split(",") if c.strip()]
    try:
        loaded = load(dataset, media_root=image_root, check_media=True if family else check_images, limit=limit)
        loaded.check_conditions(conds)
    except (DatasetError, ValueError) as exc:
        raise fail(str(exc), ExitCode.USAGE) from None
    command_line = {"model": model, "base_urls": list(base_url or []) or None, "api_key_given": bool(api_key),
                    "kb": str(kb) if kb is not None else None, "allow_no_evidence": allow_no_evidence}

    async def main() -> Any:
        settings = settings_with(search_replay_only=replay_only, **kb_override(kb), **vlm_overrides(model, base_url, api_key))
        resources = build_pipeline(settings, loaded.pipeline_conditions(conds), ocr_enabled=ocr, require_vlm=True)
        try:
            describe = dict(resources.pipeline.describe)
            uncalibrated = getattr(resources.pipeline.deps.grounder, "refusal", None)
            if uncalibrated is not None and "kar" in loaded.pipeline_conditions(conds):  # KAR_REQUIRE_CALIBRATION and no record: exit 2
                raise fail(str(uncalibrated), ExitCode.USAGE)
            refusal = evidence_refusal(describe, conds)
            if refusal and not allow_no_evidence:
                raise fail(refusal, ExitCode.USAGE)
            if refusal:
                err.print(Text.assemble(("warning:", "bold yellow"), " ", refusal.split("; or pass")[0]), highlight=False, soft_wrap=True)
            for note in resources.notes:  # said before the run, as kar explain says it
                if note.startswith("grounding is not calibrated"):
                    err.print(Text.assemble(("warning:", "bold yellow"), " ", note), highlight=False, soft_wrap=True)
            manifest = {"settings": settings.public_dict(), "notes": resources.notes, "command_line": command_line,
                        "evidence": describe.get("evidence")}
            try:
                runner = loaded.runner(resources.pipeline, out_dir, conds, settings=settings, concurrency=concurrency,
                                       manifest=manifest, retry_failed=retry_failed)
            except ValueError as exc:
                raise fail(str(exc), ExitCode.USAGE) from None
            label = f"running {loaded.benchmark + ' ' if family else ''}{','.join(conds)}"
            return await run_with_progress(runner, loaded.items, label, len(conds), dataset, json_out)
        finally:
            await resources.aclose()

    summary = run_async(main())
    emit_run_summary(summary, json_out)
    if summary.failed:
        raise fail(failed_items_line(Path(summary.out_dir), summary.failed), ExitCode.FAILED)


def failed_items_line(out_dir: Path, failed: int) -> str:
    """``N item run(s) failed; the first: failed at answer: ... (KAR_VLM_BASE_URLS, KAR_VLM_MODEL)``, read back from
    the run's traces (each failed item's trace keeps its error)."""
    import json

    from services.cli.errors import stage_error_line

    for path in sorted((out_dir / "traces").glob("*.jsonl")):
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                error = json.loads(line).get("error") if line.strip() else None
                if error:
                    return f"{failed} item run(s) failed (--retry-failed runs them again); the first: {stage_error_line(error)}"
    return f"{failed} item run(s) failed (their traces are in {out_dir / 'traces'})"


async def run_with_progress(runner: Any, items: list[Any], label: str, n_conditions: int, dataset: Path, json_out: bool) -> Any:
    """Run every item under every condition with the shared progress bar (hidden for --json off a terminal)."""
    with progress_bar(disable=json_out and not err.is_terminal) as bar:
        task = bar.add_task(label, total=len(items) * n_conditions)
        return await runner.run(items, progress=lambda done, total: bar.update(task, completed=done), dataset=str(dataset))


def emit_run_summary(summary: Any, json_out: bool) -> None:
    """A run's summary: JSON on stdout, or one plain line (paths shown as written, never as markup)."""
    if json_out:
        emit_json(summary.to_dict())
    else:
        err.print(
            Text(
                f"{summary.ran} ran, {summary.skipped} already done, {summary.failed} failed (response null); "
                f"predictions in {Path(summary.out_dir) / 'predictions'}"
            )
        )
