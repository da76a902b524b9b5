"""``kar judge`` (= ``kar judge run``), ``kar judge merge`` and ``kar judge rubric``: judge responses
against VIKR checklists, intersect two judges, score DrivelHub+ explanations with the release's rubric.

The judging itself lives in :mod:`eval.judges`; these commands read the flags, show progress and
print the summary.  Bad input is one line on stderr and exit code 2; a failure while running, 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from services.cli.console import ExitCode, emit_json, err, examples, fail, progress_bar, run_async, user_errors
from services.cli.options import BenchAlias, ImageRootOption, JsonOption, MediaRootAlias, dataset_option, given, pick

judge_app = typer.Typer(help="Judge responses against VIKR checklists (and merge two judges, or score DrivelHub+ with its rubric).",
                        no_args_is_help=False)

MemeBenchDataset = dataset_option("MemeBench benchmark file (JSON/JSONL)")
MergeDataset = dataset_option("Benchmark defining the items and their order (default: the union of both files)")
DrivelDataset = dataset_option("DrivelHub+ JSONL file or the release's metadata.csv")

JudgeModelOption = Annotated[Optional[str], typer.Option("--judge-model", metavar="ID", help="Judge model id (default: KAR_JUDGE_MODEL).", show_default=False)]
JudgeBaseUrlOption = Annotated[
    Optional[list[str]],
    typer.Option("--judge-base-url", metavar="URL", help="Judge base URL; repeat for replicas (default: KAR_JUDGE_BASE_URLS).", show_default=False),
]


def judge_settings(model: str | None, base_urls: list[str] | None, concurrency: int | None = None) -> Any:
    """The process settings with the judge options given on the command line applied."""
    from culturebase.settings import get_settings

    return get_settings().model_copy(update=given(judge_model=model, judge_base_urls=base_urls, judge_concurrency=concurrency))


def judge_command(
    ctx: typer.Context,
    dataset: MemeBenchDataset = None,
    pred: Annotated[Optional[Path], typer.Option("--pred", help="Predictions {id, image_path, response} (required).")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="Judge output (JSON list; .jsonl for JSONL) (required).")] = None,
    judge_model: JudgeModelOption = None,
    judge_base_url: JudgeBaseUrlOption = None,
    concurrency: Annotated[Optional[int], typer.Option("--concurrency", min=1, help="Concurrent judge calls (default: KAR_JUDGE_CONCURRENCY).")] = None,
    max_parse_retries: Annotated[Optional[int], typer.Option("--max-parse-retries", min=0, help="Re-asks on an unparsable reply (default: KAR_JUDGE_MAX_PARSE_RETRIES).")] = None,
    image_root: ImageRootOption = None,
    check_images: Annotated[bool, typer.Option("--check-images/--no-check-images", help="Fail up front when an item's image is missing.")] = True,
    cache: Annotated[Optional[Path], typer.Option("--cache", help="Judge cache (default: KAR_DATA_DIR/judge_cache.sqlite).", show_default=False)] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not read or write the judge cache.")] = False,
    no_resume: Annotated[bool, typer.Option("--no-resume", help="Re-judge items already in --out.")] = False,
    price_input: Annotated[Optional[float], typer.Option("--price-input", help="USD per 1M prompt tokens (for the cost line).")] = None,
    price_output: Annotated[Optional[float], typer.Option("--price-output", help="USD per 1M completion tokens.")] = None,
    json_out: JsonOption = False,
    bench: BenchAlias = None,
) -> None:
    """Judge every benchmark item's response against its VIKR checklist (resumable, cached)."""
    if ctx.invoked_subcommand is not None:
        return
    dataset = pick("--dataset", dataset, bench=bench)
    missing = [flag for flag, value in (("--dataset", dataset), ("--pred", pred), ("--out", out)) if value is None]
    if missing:
        raise fail(f"kar judge needs {', '.join(missing)} (or a subcommand: run, merge, rubric)", ExitCode.USAGE)
    assert dataset is not None and pred is not None and out is not None
    from agents.vlm import OpenAICompatibleVLM
    from eval.judges.checklist import ChecklistJudge, JudgeCache, run_judge
    from eval.records import load_predictions
    from eval.tasks.memebench import load_benchmark

    settings = judge_settings(judge_model, judge_base_url, concurrency)
    with user_errors():
        items = load_benchmark(dataset, image_root=image_root, check_images=check_images)
        predictions = load_predictions(pred)
        vlm = OpenAICompatibleVLM.from_settings(settings, role="judge")
    judge = ChecklistJudge(vlm, max_parse_retries=settings.judge_max_parse_retries if max_parse_retries is None else max_parse_retries)
    judge_cache = None if no_cache else JudgeCache(cache or settings.data_dir / "judge_cache.sqlite")

    async def main() -> Any:
        with progress_bar(transient=False) as progress:
            task = progress.add_task(f"judging with {vlm.model_id}", total=len(items))
            return await run_judge(
                items, predictions, out, judge, bench_path=dataset, image_root=image_root,
                concurrency=settings.judge_concurrency, cache=judge_cache, resume=not no_resume,
                price_input_per_1m=price_input, price_output_per_1m=price_output,
                on_progress=lambda done, total: progress.update(task, completed=done),
            )

    try:
        summary = run_async(main())
    finally:
        if judge_cache is not None:
            judge_cache.close()
    if json_out:
        emit_json(summary.as_dict())
    else:
        unscored = ", ".join(f"{k}: {v}" for k, v in sorted(summary.unscored.items())) or "none"
        cost = f", cost ${summary.cost_usd:.4f}" if summary.cost_usd is not None else ""
        err.print(
            f"{summary.items} items: {summary.scored} scored, unscored {unscored}; judged {summary.judged}, "
            f"resumed {summary.resumed}, cache hits {summary.cache_hits}; {summary.calls} calls, "
            f"{summary.prompt_tokens}+{summary.completion_tokens} tokens{cost} → {out}",
            highlight=False, markup=False,
        )
    if summary.unscored.get("judge_error"):
        raise fail(_judge_error_line(out, summary.unscored["judge_error"]), ExitCode.FAILED)


def _judge_error_line(out: Path, failed: int) -> str:
    """``N judge call(s) failed; the first: ... (KAR_JUDGE_BASE_URLS, KAR_JUDGE_MODEL)``, read back from ``out``."""
    from eval.records import read_records
    from services.cli.errors import JUDGE_SETTINGS, naming, one_line

    first = next((r["evaluation"].get("parse_error") for r in read_records(out)
                  if (r.get("evaluation") or {}).get("unscored_reason") == "judge_error"), None)
    return naming(f"{failed} judge call(s) failed (a rerun judges them again); the first: {one_line(str(first))}", *JUDGE_SETTINGS)


def merge_command(
    judge_a: Annotated[Path, typer.Argument(help="First judge file.")],
    judge_b: Annotated[Path, typer.Argument(help="Second judge file.")],
    out: Annotated[Path, typer.Option("--out", help="Merged judge file.")],
    dataset: MergeDataset = None,
    names: Annotated[Optional[str], typer.Option("--names", help="Judge names, e.g. gemini,gpt (default: the file names).", show_default=False)] = None,
    json_out: JsonOption = False,
    bench: BenchAlias = None,
) -> None:
    """Item-level intersection of two judges: an item passes only if both pass it."""
    from eval.judges.checklist import write_records
    from eval.judges.merge import merge_files, merged_summary
    from eval.records import load_judged
    from eval.tasks.memebench import load_benchmark

    dataset = pick("--dataset", dataset, bench=bench)
    label = (names.split(",", 1) + ["b"])[:2] if names else [judge_a.stem, judge_b.stem]
    with user_errors():
        a, b = load_judged(judge_a), load_judged(judge_b)
        items = load_benchmark(dataset, check_images=False) if dataset else None
        merged = merge_files(a, b, items, names=(label[0], label[1]))
        write_records(out, merged)
    summary = merged_summary(merged, items) | {"out": str(out)}
    if json_out:
        emit_json(summary)
        return
    cov = " ".join(f"{k}={100 * v:.1f}%" for k, v in summary["coverage"].items())
    err.print(f"merged {summary['n']} items → {out}: Success {100 * summary['success']:.1f}% {cov}; "
              f"unscored {summary['n_unscored']}", highlight=False, markup=False)


def rubric_command(
    pred: Annotated[Path, typer.Option("--pred", help="Predictions {id, response}, or the release's prediction rows {file, implicit_meaning, input_mode}.")],
    out: Annotated[Path, typer.Option("--out", help="Judged rows (JSONL in the release's judgments.jsonl shape).")],
    dataset: DrivelDataset = None,
    image_root: ImageRootOption = None,
    input_mode: Annotated[str, typer.Option("--input-mode", help="Input mode written into rows of our predictions (full, without-audio, without-vision, text-cascade).")] = "full",
    frames: Annotated[int, typer.Option("--frames", min=1, help="Frames of each video shown to the judge.")] = 8,
    judge_model: JudgeModelOption = None,
    judge_base_url: JudgeBaseUrlOption = None,
    max_retries: Annotated[int, typer.Option("--max-retries", min=0, help="Re-asks on an invalid or out-of-range reply.")] = 2,
    json_out: JsonOption = False,
    bench: BenchAlias = None,
    media_root: MediaRootAlias = None,
) -> None:
    """DrivelHub+ rubric judge: a video LLM scores each explanation (Total −8…12, no floor), rows as the release writes them."""
    import asyncio

    from agents.vlm import OpenAICompatibleVLM
    from eval.judges.rubric import RubricJudge, judge_all, prediction_rows, rubric_jobs, rubric_summary, write_rows
    from eval.tasks import load_bench
    from eval.tasks.drivelhub import INPUT_MODES

    dataset = pick("--dataset", dataset, required=True, bench=bench)
    image_root = pick("--image-root", image_root, media_root=media_root)
    if input_mode not in INPUT_MODES:
        raise fail(f"--input-mode {input_mode!r} is not one of {', '.join(INPUT_MODES)}", ExitCode.USAGE)
    settings = judge_settings(judge_model, judge_base_url)
    with user_errors():
        bench_set = load_bench(dataset, "drivelhub", media_root=image_root)
        predictions = prediction_rows(pred)
        vlm = OpenAICompatibleVLM.from_settings(settings, role="judge")
        jobs = rubric_jobs(bench_set, predictions, settings=settings, media_root=image_root, frames=frames, input_mode=input_mode)
        rows = asyncio.run(judge_all(RubricJudge(vlm, max_retries=max_retries), jobs, settings.judge_concurrency))
        write_rows(rows, out)
    summary = rubric_summary(rows) | {"out": str(out)}
    if json_out:
        emit_json(summary)
    else:
        err.print(f"judged {summary['n']} clips: {summary['n_judged']} judged, {summary['n_failed']} failed; "
                  f"Aligned {summary['aligned_pct']} %, mean Total {summary['score_total']} (−8…12); wrote {out}",
                  highlight=False, markup=False)
    if summary["n_failed"]:
        from services.cli.errors import JUDGE_SETTINGS, naming, one_line

        first = str(next((r.get("judge_error") for r in rows if r.get("judge_error")), None))
        line = f"{summary['n_failed']} clip(s) not judged; the first: {one_line(first)}"
        data_side = first.startswith("media:") or first.startswith("no prediction")  # the dataset's, not the judge's
        raise fail(line if data_side else naming(line, *JUDGE_SETTINGS), ExitCode.FAILED)


JUDGE_EXAMPLES = examples(
    "kar judge --dataset examples/bench_sample.json --pred runs/qwen7b/predictions/kar.json --out runs/qwen7b/judged/kar.json",
    "kar judge merge runs/a/judged/kar.json runs/b/judged/kar.json --out runs/merged/kar.json --names gemini,gpt",
)

judge_app.callback(invoke_without_command=True, epilog=JUDGE_EXAMPLES)(judge_command)
judge_app.command("run", epilog=examples(
    "kar judge run --dataset examples/bench_sample.json --pred runs/qwen7b/predictions/kar.json --out runs/qwen7b/judged/kar.json",
    "kar judge run --dataset memebench/ --pred runs/q/predictions/vanilla.json --out runs/q/judged/vanilla.json --judge-model gpt-4o",
))(judge_command)
judge_app.command("merge", epilog=examples(
    "kar judge merge judged_gemini.json judged_gpt.json --out merged.json --dataset examples/bench_sample.json",
))(merge_command)
judge_app.command("rubric", epilog=examples(
    "kar judge rubric --dataset drivelhub.jsonl --pred runs/d/predictions/kar.json --out runs/d/rubric.json",
))(rubric_command)
