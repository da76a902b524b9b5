"""Commands of the benchmark family: ``kar bench validate|convert``, the task branch of
``kar report``, ``kar judge rubric`` (DrivelHub+), ``kar retrieve`` and ``kar report-retrieval``.

Bad input is one line (or one block listing the bad lines) on stderr and exit code 2.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from culturebase.console import emit_json
from eval.datasets import DatasetError, load_predictions

err = Console(stderr=True)
bench_app = typer.Typer(help="Benchmark-family datasets (MemeReaCon, AVMeme Exam, DrivelHub+, MemeCULT-1K).", no_args_is_help=True)


def fail(message: str, code: int = 2) -> typer.Exit:
    """A bad-input error (data in the message is escaped, never read as markup)."""
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


@bench_app.command("validate")
def validate_command(
    dataset: Annotated[Path, typer.Argument(help="Benchmark JSONL file.")],
    media_root: Annotated[Path | None, typer.Option("--media-root", help="Folder media paths are relative to.")] = None,
    no_media_check: Annotated[bool, typer.Option("--no-media-check", help="Do not check that media files exist.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Check a benchmark JSONL file: every bad line is listed with its field."""
    from eval.benchmarks.loader import load_bench

    try:
        bench = load_bench(dataset, media_root=media_root, check_media=not no_media_check)
    except DatasetError as exc:
        raise fail(str(exc)) from None
    summary = {"dataset": str(dataset), "benchmark": bench.benchmark, "items": len(bench.items), "tasks": bench.tasks}
    if json_out:
        emit_json(summary)
    else:
        tasks = ", ".join(f"{k}: {v}" for k, v in sorted(bench.tasks.items()))
        err.print(escape(f"{dataset}: {bench.benchmark}, {len(bench.items)} valid items ({tasks})"), highlight=False)


@bench_app.command("convert")
def convert_command(
    benchmark: Annotated[str, typer.Argument(help="avmeme or memecult (memereacon, drivelhub: no published release layout).")],
    source: Annotated[Path, typer.Argument(help="Released file (AVMeme: the mteb/AVMeme-Exam rows as JSON/JSONL/Parquet; MemeCULT: the CSV).")],
    out: Annotated[Path, typer.Option("--out", help="Output JSONL.")],
    media_dir: Annotated[str | None, typer.Option("--media-dir", help="Folder of the media files, as written into the items.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Convert a released benchmark file into the documented JSONL shape (bad rows listed, exit 3)."""
    from eval.benchmarks.converters import convert, write_jsonl

    try:
        records, errors = convert(benchmark, source, media_dir=media_dir)
    except DatasetError as exc:
        raise fail(str(exc)) from None
    written = write_jsonl(records, out)
    summary = {"benchmark": benchmark, "source": str(source), "out": str(out), "written": written, "rejected": len(errors), "errors": errors[:50]}
    if json_out:
        emit_json(summary)
    else:
        err.print(escape(f"wrote {written} items to {out}; {len(errors)} row(s) rejected"), highlight=False)
        for line in errors[:20]:
            err.print(escape(f"  {source}: {line}"), highlight=False)
    if errors:
        raise typer.Exit(3)


def task_report(
    bench_path: Path, pairs: list[tuple[str, Path]], out: Path, *, baseline: str, bootstrap: int, seed: int,
    json_out: bool, skip_invalid: bool = False,
) -> None:
    """The ``kar report`` branch for benchmark-family files (called by eval.cli.report_command)."""
    from eval.benchmarks.loader import load_bench
    from eval.benchmarks.report import build_task_report, task_markdown, write_task_report
    from eval.datasets import read_records

    try:
        bench = load_bench(bench_path, check_media=False, skip_invalid=skip_invalid)
        runs: dict[str, list[dict[str, Any]]] = {}
        for name, path in pairs:
            records = read_records(path)
            if not any("evaluation" in r for r in records):
                load_predictions(path)  # validates ids/responses with file/item/field errors
            runs[name] = records
    except DatasetError as exc:
        raise fail(str(exc)) from None
    report = build_task_report(bench, runs, baseline=baseline, n_boot=bootstrap, seed=seed)
    write_task_report(report, out)
    if json_out:
        from eval.benchmarks.report import _jsonable

        slim = {k: v for k, v in report.items() if k != "tasks"} | {
            "tasks": {t: {k: v for k, v in s.items() if k != "items"} for t, s in report["tasks"].items()}}
        emit_json(_jsonable(slim))
    else:
        err.print(escape(task_markdown(report)), highlight=False)
        err.print(escape(f"wrote metrics.json, report.md, items.csv to {out}"), highlight=False)


def rubric_command(
    bench: Annotated[Path, typer.Option("--bench", help="DrivelHub+ JSONL file.")],
    pred: Annotated[Path, typer.Option("--pred", help="Predictions {id, response}.")],
    out: Annotated[Path, typer.Option("--out", help="Judged output (JSON list).")],
    media_root: Annotated[Path | None, typer.Option("--media-root", help="Folder media paths are relative to.")] = None,
    frames: Annotated[int, typer.Option("--frames", min=0, help="Frames of each video shown to the judge.")] = 8,
    judge_model: Annotated[str | None, typer.Option("--judge-model", help="Judge model id (default KAR_JUDGE_MODEL).")] = None,
    judge_base_url: Annotated[list[str] | None, typer.Option("--judge-base-url", help="Judge base URL(s).")] = None,
    max_retries: Annotated[int, typer.Option("--max-retries", min=0, help="Re-asks on an invalid or out-of-range reply.")] = 2,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """DrivelHub+ rubric judge: a video LLM scores each explanation (Total out of 12)."""
    from agents.media import MediaError, prepare_video
    from agents.vlm import OpenAICompatibleVLM, VLMNotConfiguredError
    from culturebase.settings import get_settings
    from eval.benchmarks.loader import load_bench, resolve_media
    from eval.benchmarks.rubric import RubricJudge, judge_all, rubric_summary

    settings = get_settings()
    updates: dict[str, Any] = {}
    if judge_model:
        updates["judge_model"] = judge_model
    if judge_base_url:
        updates["judge_base_urls"] = list(judge_base_url)
    settings = settings.model_copy(update=updates)
    try:
        dataset = load_bench(bench, "drivelhub", media_root=media_root)
        responses = {p.id: p.response for p in load_predictions(pred) if p.id is not None}
        vlm = OpenAICompatibleVLM.from_settings(settings, role="judge")
    except (DatasetError, VLMNotConfiguredError) as exc:
        raise fail(str(exc)) from None
    jobs = []
    for item in dataset.items:
        job: dict[str, Any] = {"id": item.id, "narrative": item.narrative, "response": responses.get(item.id)}  # type: ignore[attr-defined]
        video = resolve_media(item.video, dataset.path, media_root)  # type: ignore[attr-defined]
        try:
            media = prepare_video(video, settings=settings, frames=frames, audio_mode="none") if video else None
        except MediaError as exc:
            job["response"] = None
            job["media_error"] = str(exc)
            media = None
        if media is not None:
            job["frames"] = [f.jpeg for f in media.frames]
            job["timestamps"] = [f.t for f in media.frames]
        jobs.append(job)
    records = asyncio.run(judge_all(RubricJudge(vlm, max_retries=max_retries), jobs, settings.judge_concurrency))
    for record, job in zip(records, jobs):
        if job.get("media_error"):
            record["evaluation"] = {"scores": None, "total": None, "error": job["media_error"]}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(records, ensure_ascii=False, indent=1), "utf-8")
    summary = rubric_summary(records) | {"out": str(out)}
    if json_out:
        emit_json(summary)
    else:
        err.print(escape(f"judged {summary['n']} items: {summary['n_scored']} scored, {summary['n_unscored']} unscored; "
                         f"mean Total {summary['total_mean']} of 12; wrote {out}"), highlight=False)
