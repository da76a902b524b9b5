"""``kar judge``, ``kar judge merge``, ``kar report`` and ``kar report-refs`` (registered into the ``kar`` app).

Bad input is one line on stderr naming the file/item/field, and exit code 2.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import (
    Progress,
)

from services.cli.console import progress_bar
from eval.records import DatasetError, load_judged, load_predictions
from eval.tasks.memebench import load_benchmark

err = Console(stderr=True)
judge_app = typer.Typer(help="Judge responses against VIKR checklists (and merge two judges).", no_args_is_help=False)


def fail(message: str, code: int = 2) -> typer.Exit:
    """Bad input to an eval command: the error (data shown as is, never as markup) and exit code 2."""
    from rich.text import Text

    err.print(Text.assemble(("error:", "bold red"), " ", message), highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _judge_settings(settings: Any, model: str | None, base_urls: Any, concurrency: int | None) -> Any:
    """Settings with the judge options given on the command line applied."""
    updates: dict[str, Any] = {}
    if model:
        updates["judge_model"] = model
    if base_urls:
        updates["judge_base_urls"] = list(base_urls)
    if concurrency:
        updates["judge_concurrency"] = concurrency
    return settings.model_copy(update=updates)


def _progress() -> Progress:
    return progress_bar(transient=False)


@judge_app.callback(invoke_without_command=True)
def judge_command(
    ctx: typer.Context,
    bench: Annotated[Path | None, typer.Option("--bench", help="MemeBench benchmark file (JSON/JSONL).")] = None,
    pred: Annotated[Path | None, typer.Option("--pred", help="Predictions {id, image_path, response}.")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Judge output (JSON list; .jsonl for JSONL).")] = None,
    judge_model: Annotated[str | None, typer.Option("--judge-model", help="Judge model id (default KAR_JUDGE_MODEL).")] = None,
    judge_base_url: Annotated[
        list[str] | None, typer.Option("--judge-base-url", help="Judge base URL(s) (default KAR_JUDGE_BASE_URLS).")
    ] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", min=1, help="Concurrent judge calls.")] = None,
    max_parse_retries: Annotated[int | None, typer.Option("--max-parse-retries", min=0)] = None,
    image_root: Annotated[Path | None, typer.Option("--image-root", help="Folder image paths are relative to.")] = None,
    check_images: Annotated[
        bool, typer.Option("--check-images/--no-check-images", help="Fail up front when an item's image is missing.")
    ] = True,
    cache: Annotated[Path | None, typer.Option("--cache", help="Judge cache (default DATA_DIR/judge_cache.sqlite).")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not read or write the judge cache.")] = False,
    no_resume: Annotated[bool, typer.Option("--no-resume", help="Re-judge items already in --out.")] = False,
    price_input: Annotated[float | None, typer.Option("--price-input", help="USD per 1M prompt tokens.")] = None,
    price_output: Annotated[float | None, typer.Option("--price-output", help="USD per 1M completion tokens.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the run summary as JSON.")] = False,
) -> None:
    """Judge every benchmark item's response: kar judge --bench B --pred P --out O."""
    if ctx.invoked_subcommand is not None:
        return
    missing = [flag for flag, value in (("--bench", bench), ("--pred", pred), ("--out", out)) if value is None]
    if missing:
        raise fail(f"kar judge needs {', '.join(missing)} (or a subcommand: merge)")
    from agents.vlm import OpenAICompatibleVLM, VLMNotConfiguredError
    from culturebase.settings import get_settings
    from eval.judges.checklist import ChecklistJudge, JudgeCache, run_judge

    settings = _judge_settings(get_settings(), judge_model, judge_base_url, concurrency)
    try:
        items = load_benchmark(bench, image_root=image_root, check_images=check_images)  # type: ignore[arg-type]
        predictions = load_predictions(pred)  # type: ignore[arg-type]
        vlm = OpenAICompatibleVLM.from_settings(settings, role="judge")
    except (DatasetError, VLMNotConfiguredError) as exc:
        raise fail(str(exc)) from None
    judge = ChecklistJudge(
        vlm, max_parse_retries=settings.judge_max_parse_retries if max_parse_retries is None else max_parse_retries
    )
    judge_cache = None if no_cache else JudgeCache(cache or settings.data_dir / "judge_cache.sqlite")

    async def main() -> Any:
        with _progress() as progress:
            task = progress.add_task(f"judging with {vlm.model_id}", total=len(items))
            return await run_judge(
                items,
                predictions,
                out,  # type: ignore[arg-type]
                judge,
                bench_path=bench,
                image_root=image_root,
                concurrency=settings.judge_concurrency,
                cache=judge_cache,
                resume=not no_resume,
                price_input_per_1m=price_input,
                price_output_per_1m=price_output,
                on_progress=lambda done, total: progress.update(task, completed=done),
            )

    try:
        summary = asyncio.run(main())
    except DatasetError as exc:
        raise fail(str(exc)) from None
    finally:
        if judge_cache is not None:
            judge_cache.close()
    data = summary.as_dict()
    if json_out:
        typer.echo(json.dumps(data, ensure_ascii=False, indent=1))
    else:
        unscored = ", ".join(f"{k}: {v}" for k, v in sorted(summary.unscored.items())) or "none"
        cost = f", cost ${summary.cost_usd:.4f}" if summary.cost_usd is not None else ""
        err.print(
            f"{summary.items} items: {summary.scored} scored, unscored {unscored}; judged {summary.judged}, "
            f"resumed {summary.resumed}, cache hits {summary.cache_hits}; {summary.calls} calls, "
            f"{summary.prompt_tokens}+{summary.completion_tokens} tokens{cost} → {out}",
            highlight=False,
            markup=False,
        )


@judge_app.command("merge")
def merge_command(
    judge_a: Annotated[Path, typer.Argument(help="First judge file.")],
    judge_b: Annotated[Path, typer.Argument(help="Second judge file.")],
    out: Annotated[Path, typer.Option("--out", help="Merged judge file.")],
    bench: Annotated[Path | None, typer.Option("--bench", help="Benchmark defining the items and their order.")] = None,
    names: Annotated[str | None, typer.Option("--names", help="Judge names, e.g. gemini,gpt.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print per-dimension rates as JSON.")] = False,
) -> None:
    """Item-level intersection of two judges: an item passes only if both pass it."""
    from eval.judges.checklist import write_records
    from eval.judges.merge import merge_files
    from eval.metrics.vikr import condition_metrics, vikr_matrix

    label = (names.split(",", 1) + ["b"])[:2] if names else [judge_a.stem, judge_b.stem]
    try:
        a, b = load_judged(judge_a), load_judged(judge_b)
        items = load_benchmark(bench, check_images=False) if bench else None
    except DatasetError as exc:
        raise fail(str(exc)) from None
    merged = merge_files(a, b, items, names=(label[0], label[1]))
    write_records(out, merged)
    if items is None:  # no benchmark: the union of both files is the denominator
        from types import SimpleNamespace

        items = [
            SimpleNamespace(id=r["id"], image_path=r["image_path"], language=None, domain=None) for r in merged
        ]
    metrics = condition_metrics(vikr_matrix(items, merged))
    summary = {
        "n": metrics["n"],
        "n_unscored": metrics["n_unscored"],
        "success": metrics["success"],
        "coverage": metrics["coverage"],
        "out": str(out),
    }
    if json_out:
        typer.echo(json.dumps(summary, indent=1))
    else:
        cov = " ".join(f"{k}={100 * v:.1f}%" for k, v in metrics["coverage"].items())
        err.print(f"merged {metrics['n']} items → {out}: Success {100 * metrics['success']:.1f}% {cov}; "
                  f"unscored {metrics['n_unscored']}", highlight=False, markup=False)


def _pairs(values: list[str], flag: str) -> list[tuple[str, Path]]:
    pairs = []
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise fail(f"{flag} expects NAME=FILE, got {value!r}")
        pairs.append((name, Path(path)))
    return pairs


def _judgment_pairs(values: list[str]) -> list[tuple[str, Path]]:
    """``--judged`` for release judgments: NAME=FILE, a judgments.jsonl, or a judgments/ folder (names family/model)."""
    from eval.tasks.drivelhub import judgment_files

    pairs: list[tuple[str, Path]] = []
    for value in values:
        name, sep, path = value.partition("=")
        if sep and name and path and not Path(value).exists():
            pairs.append((name, Path(path)))
        else:
            pairs.extend(judgment_files(value))
    return pairs


def release_report(bench: Path, judged: list[str], out: Path | None, *, bootstrap: int, seed: int, json_out: bool) -> None:
    """The ``kar report`` branch for the DrivelHub+ release: its table from judgments.jsonl files, plus CIs and repair/damage."""
    from rich.console import Console as RichConsole

    from eval.report.common import jsonable
    from eval.report.release import build_release_report, release_table

    try:
        report = build_release_report(bench, _judgment_pairs(judged), n_boot=bootstrap, seed=seed)
    except DatasetError as exc:
        raise fail(str(exc)) from None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.json").write_text(json.dumps(jsonable(report), ensure_ascii=False, indent=1), "utf-8")
    if json_out:
        typer.echo(json.dumps(jsonable(report), ensure_ascii=False, indent=1))
        return
    RichConsole(width=240).print(release_table(report))
    recomputed = sum(r["n_recomputed_totals"] for r in report["runs"].values())
    if recomputed:
        err.print(f"{recomputed} judge total(s) disagreed with their parts and were recomputed (metrics.json lists them)",
                  highlight=False, markup=False)


def report_command(
    bench: Annotated[Path, typer.Option("--bench", help="MemeBench benchmark file.")],
    judged: Annotated[list[str], typer.Option("--judged", help="NAME=FILE (NAME: condition or model/condition).")],
    out: Annotated[Path | None, typer.Option("--out", help="Output folder (optional for a DrivelHub+ metadata.csv).")] = None,
    baseline: Annotated[str, typer.Option("--baseline", help="Baseline condition for repair/damage.")] = "vanilla",
    json_out: Annotated[bool, typer.Option("--json", help="Print metrics.json to stdout.")] = False,
    no_plots: Annotated[bool, typer.Option("--no-plots", help="Skip PNG plots.")] = False,
    bootstrap: Annotated[int, typer.Option("--bootstrap", min=0, help="Bootstrap resamples (0 = none).")] = 10_000,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    human: Annotated[list[str] | None, typer.Option("--human", help="COND=FILE human labels (judge-file format).")] = None,
    judge_file: Annotated[
        list[str] | None, typer.Option("--judge-file", help="JUDGE:COND=FILE single-judge files for reliability.")
    ] = None,
    similarity: Annotated[
        bool, typer.Option("--similarity", help="Benchmark-family generation tasks: add the embedding similarity to the references.")
    ] = False,
) -> None:
    """Coverage, Success, repair/damage with CIs, tables, plots and an HTML report.

    A benchmark-family JSONL file (MemeReaCon, AVMeme Exam, DrivelHub+, MemeCULT-1K) as --bench
    switches to its tasks' metrics (accuracy/macro-F1/ROUGE-L/rubric); --judged then names
    prediction files (or DrivelHub+ rubric-judged files).  The DrivelHub+ release's metadata.csv as
    --bench reads release judgments.jsonl files (--judged MODEL=FILE, FILE or a judgments/ folder)
    and prints the release's table."""
    from eval.tasks import is_bench_file
    from eval.tasks.drivelhub import is_metadata_csv

    if is_metadata_csv(bench):
        return release_report(bench, judged, out, bootstrap=bootstrap, seed=seed, json_out=json_out)
    if out is None:
        raise fail("--out is required (the folder the report is written to)")
    if is_bench_file(bench):
        from eval.benchmarks.cli import task_report

        task_report(bench, _pairs(judged, "--judged"), out, baseline=baseline, bootstrap=bootstrap, seed=seed, json_out=json_out,
                    similarity=similarity)
        return
    from eval.metrics.reliability import judge_reliability
    from eval.report.vikr import build_report, jsonable, write_report

    try:
        items = load_benchmark(bench, check_images=False)
        judged_records = {name: load_judged(path) for name, path in _pairs(judged, "--judged")}
        reliability = None
        if human or judge_file:
            human_records = {name: load_judged(path) for name, path in _pairs(human or [], "--human")}
            per_judge: dict[str, dict[str, Any]] = {}
            for key, path in _pairs(judge_file or [], "--judge-file"):
                judge_name, sep, condition = key.partition(":")
                if not sep:
                    raise fail(f"--judge-file expects JUDGE:COND=FILE, got {key!r}")
                per_judge.setdefault(judge_name, {})[condition] = load_judged(path)
            reliability = judge_reliability(items, human_records, per_judge)
    except DatasetError as exc:
        raise fail(str(exc)) from None
    with _progress() as progress:
        task = progress.add_task("report", total=2 if no_plots else 3)
        report = build_report(items, judged_records, baseline=baseline, n_boot=bootstrap, seed=seed,
                              reliability=reliability)
        progress.update(task, advance=1)
        files = write_report(report, out, plots=not no_plots)
        progress.update(task, completed=progress.tasks[0].total)
    if json_out:
        typer.echo(json.dumps(jsonable(report), ensure_ascii=False, indent=1))
    else:
        from eval.report.vikr import leaderboard_markdown

        err.print(leaderboard_markdown(report), highlight=False, markup=False)
        err.print(f"wrote {len(files)} files to {out}", highlight=False, markup=False)


def _load_reference_dataset(path: Path, fmt: str, image_dir: Path | None) -> tuple[str, list[Any]]:
    from eval.tasks.memecap import load_memecap
    from eval.tasks.memecult import load_memecult

    if fmt == "auto":
        fmt = "memecult" if path.suffix.lower() in {".csv", ".tsv"} else "memecap"
    loader = load_memecult if fmt == "memecult" else load_memecap
    items = loader(path, image_dir=image_dir)
    if not items:
        raise DatasetError(f"{path}: no items")
    seen: set[str] = set()
    for index, item in enumerate(items):
        if item.id in seen:
            field = "Filename" if fmt == "memecult" else "post_id"
            where = f"row {index + 2}" if fmt == "memecult" else f"item {index}"
            raise DatasetError(f"{path}: {where}: field '{field}' duplicates an earlier item ({item.id})")
        seen.add(item.id)
    return fmt, items


def reference_command(
    dataset: Annotated[Path, typer.Option("--dataset", help="MemeCULT CSV or MemeCap JSON with reference explanations.")],
    pred: Annotated[list[str], typer.Option("--pred", help="NAME=FILE predictions {id, image_path, response}.")],
    out: Annotated[Path, typer.Option("--out", help="Output folder.")],
    baseline: Annotated[
        str | None, typer.Option("--baseline", help="Baseline prediction NAME for paired Δ (default: the first --pred).")
    ] = None,
    dataset_format: Annotated[
        str, typer.Option("--format", help="auto (by extension: .csv = MemeCULT), memecult or memecap.")
    ] = "auto",
    image_dir: Annotated[Path | None, typer.Option("--image-dir", help="Image folder (default: the dataset's).")] = None,
    rubric: Annotated[bool, typer.Option("--rubric", help="Also score 1–5 fluency / cultural / humor with the judge.")] = False,
    judge_model: Annotated[str | None, typer.Option("--judge-model", help="Judge model id (default KAR_JUDGE_MODEL).")] = None,
    judge_base_url: Annotated[
        list[str] | None, typer.Option("--judge-base-url", help="Judge base URL(s) (default KAR_JUDGE_BASE_URLS).")
    ] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", min=1, help="Concurrent judge calls.")] = None,
    bootstrap: Annotated[int, typer.Option("--bootstrap", min=1, help="Bootstrap resamples.")] = 10_000,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    json_out: Annotated[bool, typer.Option("--json", help="Print reference_metrics.json to stdout.")] = False,
) -> None:
    """Reference-based metrics: embedding cosine (and a 1–5 LLM rubric), paired vs a baseline per language."""
    import csv

    from culturebase.settings import get_settings
    from eval.metrics.reference import CachingEncoder, match_responses, reference_metrics
    from eval.report.refs import reference_markdown
    from eval.judges.reference_rubric import run_rubric
    from eval.report.vikr import jsonable

    if dataset_format not in {"auto", "memecult", "memecap"}:
        raise fail(f"--format must be auto, memecult or memecap, got {dataset_format!r}")
    pairs = _pairs(pred, "--pred")
    names = [name for name, _ in pairs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise fail(f"--pred: name {duplicates[0]!r} given twice")
    baseline = baseline or names[0]
    if baseline not in names:
        raise fail(f"--baseline {baseline!r} is not one of the --pred names ({', '.join(names)})")
    try:
        fmt, items = _load_reference_dataset(dataset, dataset_format, image_dir)
        responses: dict[str, dict[str, str | None]] = {}
        unmatched: dict[str, int] = {}
        for name, path in pairs:
            predictions = load_predictions(path)
            responses[name], unmatched[name] = match_responses(items, predictions)
            if not responses[name]:
                raise DatasetError(
                    f"{path}: no prediction matches an item of {dataset} (by id, image_path or image file name)"
                )
    except DatasetError as exc:
        raise fail(str(exc)) from None

    settings = get_settings()
    images: dict[str, bytes | None] = {}
    vlm = None
    if rubric:
        from agents.vlm import OpenAICompatibleVLM, VLMNotConfiguredError

        settings = _judge_settings(settings, judge_model, judge_base_url, concurrency)
        for item in items:
            image = Path(item.image_path)
            if not image.is_file():
                raise fail(f"{dataset}: item {item.id}: field 'image_path': image file not found: {image} "
                           "(--image-dir sets the folder; the rubric judge needs the image)")
            images[item.id] = image.read_bytes()
        try:
            vlm = OpenAICompatibleVLM.from_settings(settings, role="judge")
        except VLMNotConfiguredError as exc:
            raise fail(str(exc)) from None

    from retrieval.embedders import build_embedder
    from retrieval.embedders.base import EmbedderUnavailableError

    encoder = CachingEncoder(build_embedder(settings))
    texts = list(dict.fromkeys(
        [ref for item in items for ref in item.references]
        + [r for per_item in responses.values() for r in per_item.values() if (r or "").strip()]
    ))
    rubric_scores: dict[str, list[Any]] | None = None
    with _progress() as progress:
        task = progress.add_task(f"embedding with {encoder.name}", total=len(texts))
        try:
            for start in range(0, len(texts), 256):
                encoder.encode_documents(texts[start : start + 256])
                progress.update(task, completed=min(len(texts), start + 256))
        except EmbedderUnavailableError as exc:
            raise fail(str(exc)) from None
        if vlm is not None:
            rubric_scores = {}

            async def judge_all() -> None:
                try:
                    for name in names:
                        rtask = progress.add_task(f"rubric {name} ({vlm.model_id})", total=len(items))
                        rubric_scores[name] = await run_rubric(  # type: ignore[index]
                            vlm, items, responses[name], images,
                            concurrency=settings.judge_concurrency,
                            max_parse_retries=settings.judge_max_parse_retries,
                            on_progress=lambda done, total, t=rtask: progress.update(t, completed=done),
                        )
                finally:
                    await vlm.aclose()

            asyncio.run(judge_all())
    metrics = reference_metrics(items, responses, encoder, baseline=baseline, rubric=rubric_scores,
                                n_boot=bootstrap, seed=seed)
    metrics = {
        "dataset": str(dataset),
        "format": fmt,
        "predictions": {name: str(path) for name, path in pairs},
        "unmatched_predictions": unmatched,
        "rubric_judge": vlm.model_id if vlm is not None else None,
        **metrics,
    }
    out.mkdir(parents=True, exist_ok=True)
    data = jsonable(metrics)
    (out / "reference_metrics.json").write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
    markdown = reference_markdown(metrics)
    (out / "reference_metrics.md").write_text(markdown, encoding="utf-8")
    item_rows = metrics["item_scores"]
    columns = ["id", *next(iter(item_rows.values())).keys()] if item_rows else ["id"]
    with (out / "reference_items.csv").open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        for item_id, row in item_rows.items():
            writer.writerow({"id": item_id, **row})
    for name, count in unmatched.items():
        if count:
            err.print(f"warning: {count} predictions of {name} match no dataset item", highlight=False, markup=False)
    if json_out:
        typer.echo(json.dumps(data, ensure_ascii=False, indent=1))
    else:
        err.print(markdown, highlight=False, soft_wrap=True, markup=False)
        err.print(f"wrote reference_metrics.json, reference_metrics.md, reference_items.csv to {out}", highlight=False, markup=False)
