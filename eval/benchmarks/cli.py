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

from services.cli.console import emit_json
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
    json_out: bool, skip_invalid: bool = False, similarity: bool = False,
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
    encoder = None
    if similarity:
        from culturebase.settings import get_settings
        from eval.reference import CachingEncoder
        from retrieval.embedders import build_embedder

        encoder = CachingEncoder(build_embedder(get_settings()))
    report = build_task_report(bench, runs, baseline=baseline, n_boot=bootstrap, seed=seed, encoder=encoder)
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
    frames: Annotated[int, typer.Option("--frames", min=1, help="Frames of each video shown to the judge.")] = 8,
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


def report_retrieval_command(
    run: Annotated[Path, typer.Option("--run", help="TREC run file (qid Q0 docid rank score tag).")],
    qrels: Annotated[Path, typer.Option("--qrels", help="TREC qrels file (qid 0 docid relevance).")],
    out: Annotated[Path | None, typer.Option("--out", help="Folder for retrieval_metrics.json and ranks.csv.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the metrics as JSON.")] = False,
) -> None:
    """R@1/5/10, Success@1/5/10, MRR, nDCG@5/10 per direction (ir-measures), per-query ranks CSV."""
    from eval.benchmarks.retrieval import MEASURE_NAMES, evaluate_run, read_qrels, read_run, write_ranks_csv

    try:
        result = evaluate_run(read_run(run), read_qrels(qrels))
    except DatasetError as exc:
        raise fail(str(exc)) from None
    summary = {
        "run": str(run), "qrels": str(qrels), "directions": result["directions"],
        "missing_in_run": result["missing_in_run"][:50], "not_in_qrels": result["not_in_qrels"][:50],
        "no_relevant": result["no_relevant"][:50],
    }
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "retrieval_metrics.json").write_text(json.dumps(summary, ensure_ascii=False, indent=1), "utf-8")
        write_ranks_csv(result, out / "ranks.csv")
    if json_out:
        emit_json(summary)
        return
    from rich.table import Table

    table = Table("direction", "queries", *MEASURE_NAMES, "missing in run", "unjudged", title=escape(str(run)))
    for key, d in result["directions"].items():
        table.add_row(escape(d["name"]), str(d["n_queries"]),
                      *("–" if d["metrics"][m] is None else f"{d['metrics'][m]:.3f}" for m in MEASURE_NAMES),
                      str(d["missing_in_run"]), str(d["not_in_qrels"] + d["no_relevant"]))
    Console(width=200).print(table)
    if result["missing_in_run"]:
        err.print(escape(f"{len(result['missing_in_run'])} judged quer(ies) absent from the run scored 0: "
                         f"{', '.join(result['missing_in_run'][:10])}"), highlight=False)
    if out is not None:
        err.print(escape(f"wrote retrieval_metrics.json and ranks.csv to {out}"), highlight=False)


def _encoder(embed_base_url: str | None, embed_model: str | None, api_key: str | None) -> tuple[Any, str]:
    """``encode(texts) -> array`` from an OpenAI-compatible /v1/embeddings endpoint, else the configured embedder."""
    import numpy as np

    if embed_base_url:
        if not embed_model:
            raise DatasetError("--embed-base-url needs --embed-model (the embedding model id served there)")
        from openai import OpenAI

        client = OpenAI(base_url=embed_base_url, api_key=api_key or "EMPTY", max_retries=2)

        def remote(texts: list[str]) -> Any:
            rows: list[list[float]] = []
            for start in range(0, len(texts), 64):
                reply = client.embeddings.create(model=embed_model, input=texts[start:start + 64])
                rows += [d.embedding for d in sorted(reply.data, key=lambda d: d.index)]
            return np.asarray(rows, dtype=np.float32)

        return remote, f"openai-compatible:{embed_model}"
    from culturebase.settings import get_settings
    from retrieval.embedders import build_embedder

    embedder = build_embedder(get_settings())
    return (lambda texts: np.asarray(embedder.encode_documents(texts).dense, dtype=np.float32)), getattr(embedder, "name", "embedder")


def retrieve_command(
    bench: Annotated[Path, typer.Option("--bench", help="DrivelHub+ JSONL file.")],
    pred: Annotated[Path, typer.Option("--pred", help="Predictions {id, response}: the explanations to retrieve with.")],
    out: Annotated[Path, typer.Option("--out", help="Folder for run.trec and qrels.trec.")],
    top_k: Annotated[int, typer.Option("--top-k", min=1, help="Documents per query.")] = 10,
    embed_base_url: Annotated[str | None, typer.Option("--embed-base-url", help="OpenAI-compatible embeddings endpoint (default: the configured embedder).")] = None,
    embed_model: Annotated[str | None, typer.Option("--embed-model", help="Model id at --embed-base-url.")] = None,
    embed_api_key: Annotated[str | None, typer.Option("--embed-api-key", envvar="KAR_EMBED_API_KEY", help="API key for --embed-base-url.")] = None,
    tag: Annotated[str, typer.Option("--tag", help="Run tag (TREC column 6).")] = "kar",
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Reasoning-as-retrieval: TREC runs both ways (explanations ↔ narratives) plus the qrels."""
    from eval.benchmarks.loader import load_bench
    from eval.benchmarks.retrieval import build_runs, qrels_lines

    try:
        dataset = load_bench(bench, "drivelhub", check_media=False)
        responses = {p.id: p.response for p in load_predictions(pred) if p.id is not None}
        encode, name = _encoder(embed_base_url, embed_model, embed_api_key)
        lines, skipped = build_runs(dataset.items, responses, encode, k=top_k, tag=tag)
    except DatasetError as exc:
        raise fail(str(exc)) from None
    out.mkdir(parents=True, exist_ok=True)
    (out / "run.trec").write_text("\n".join(lines) + "\n", "utf-8")
    (out / "qrels.trec").write_text("\n".join(qrels_lines(dataset.items)) + "\n", "utf-8")
    summary = {"run": str(out / "run.trec"), "qrels": str(out / "qrels.trec"), "embedder": name, "items": len(dataset.items),
               "run_lines": len(lines), "skipped": skipped}
    if json_out:
        emit_json(summary)
    else:
        err.print(escape(f"wrote {len(lines)} run lines ({name}) and the qrels to {out}; "
                         f"{skipped['no_explanation']} item(s) without an explanation could not be queries"), highlight=False)
