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
from eval.records import DatasetError, load_predictions

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
    from eval.tasks import load_bench

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
    benchmark: Annotated[str, typer.Argument(help="avmeme or drivelhub (memereacon, memecult: nothing released, so no converter).")],
    source: Annotated[Path, typer.Argument(help="Released file (AVMeme: official or mteb/AVMeme-Exam rows as JSON/JSONL/Parquet; DrivelHub+: metadata.csv, with qrels.json beside it).")],
    out: Annotated[Path, typer.Option("--out", help="Output JSONL.")],
    media_dir: Annotated[str | None, typer.Option("--media-dir", help="Folder of the media files, as written into the items.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Convert a released benchmark file into the documented JSONL shape (bad rows listed, exit 3)."""
    from eval.tasks import convert
    from eval.tasks.base import write_jsonl

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
    from eval.tasks import load_bench
    from eval.report.tasks import build_task_report, task_markdown, write_task_report
    from eval.records import read_records

    try:
        bench = load_bench(bench_path, check_media=False, skip_invalid=skip_invalid)
        runs: dict[str, list[dict[str, Any]]] = {}
        for name, path in pairs:
            records = read_records(path)
            if not any("judge_aligned" in r for r in records):
                load_predictions(path)  # validates ids/responses with file/item/field errors
            runs[name] = records
    except DatasetError as exc:
        raise fail(str(exc)) from None
    encoder = None
    if similarity:
        from culturebase.settings import get_settings
        from eval.metrics.reference import CachingEncoder
        from retrieval.embedders import build_embedder

        encoder = CachingEncoder(build_embedder(get_settings()))
    report = build_task_report(bench, runs, baseline=baseline, n_boot=bootstrap, seed=seed, encoder=encoder)
    write_task_report(report, out)
    if json_out:
        from eval.report.common import jsonable

        slim = {k: v for k, v in report.items() if k != "tasks"} | {
            "tasks": {t: {k: v for k, v in s.items() if k != "items"} for t, s in report["tasks"].items()}}
        emit_json(jsonable(slim))
    else:
        err.print(escape(task_markdown(report)), highlight=False)
        err.print(escape(f"wrote metrics.json, report.md, items.csv to {out}"), highlight=False)


def _prediction_rows(path: Path) -> dict[str, dict[str, Any]]:
    """Predictions by item: ours ``{id, response}`` or the release's rows ``{file, implicit_meaning, input_mode, error}``."""
    from eval.records import read_records

    records = read_records(path)
    if records and all("file" in r and "implicit_meaning" in r for r in records):
        return {str(r["file"]): {"response": r.get("implicit_meaning"), "error": r.get("error"), "row": r} for r in records}
    return {p.id: {"response": p.response} for p in load_predictions(path) if p.id is not None}


def rubric_command(
    bench: Annotated[Path, typer.Option("--bench", help="DrivelHub+ JSONL file or the release's metadata.csv.")],
    pred: Annotated[Path, typer.Option("--pred", help="Predictions {id, response}, or the release's prediction rows {file, implicit_meaning, input_mode}.")],
    out: Annotated[Path, typer.Option("--out", help="Judged rows (JSONL in the release's judgments.jsonl shape).")],
    media_root: Annotated[Path | None, typer.Option("--media-root", help="Folder media paths are relative to.")] = None,
    input_mode: Annotated[str, typer.Option("--input-mode", help="Input mode written into rows of our predictions (full, without-audio, without-vision, text-cascade).")] = "full",
    frames: Annotated[int, typer.Option("--frames", min=1, help="Frames of each video shown to the judge.")] = 8,
    judge_model: Annotated[str | None, typer.Option("--judge-model", help="Judge model id (default KAR_JUDGE_MODEL).")] = None,
    judge_base_url: Annotated[list[str] | None, typer.Option("--judge-base-url", help="Judge base URL(s).")] = None,
    max_retries: Annotated[int, typer.Option("--max-retries", min=0, help="Re-asks on an invalid or out-of-range reply.")] = 2,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """DrivelHub+ rubric judge: a video LLM scores each explanation (Total −8…12, no floor), rows as the release writes them."""
    from agents.media import MediaError, prepare_video
    from agents.vlm import OpenAICompatibleVLM, VLMNotConfiguredError
    from culturebase.settings import get_settings
    from eval.judges.rubric import RubricJudge, judge_all, rubric_summary
    from eval.tasks import load_bench, resolve_media
    from eval.tasks.drivelhub import INPUT_MODES

    if input_mode not in INPUT_MODES:
        raise fail(f"--input-mode {input_mode!r} is not one of {', '.join(INPUT_MODES)}")
    settings = get_settings()
    updates: dict[str, Any] = {}
    if judge_model:
        updates["judge_model"] = judge_model
    if judge_base_url:
        updates["judge_base_urls"] = list(judge_base_url)
    settings = settings.model_copy(update=updates)
    try:
        dataset = load_bench(bench, "drivelhub", media_root=media_root)
        predictions = _prediction_rows(pred)
        vlm = OpenAICompatibleVLM.from_settings(settings, role="judge")
    except (DatasetError, VLMNotConfiguredError) as exc:
        raise fail(str(exc)) from None
    jobs = []
    for item in dataset.items:
        base = item.release_row()  # type: ignore[attr-defined]
        found = predictions.get(item.id) or predictions.get(base["file"]) or {}
        mode = str((found.get("row") or {}).get("input_mode") or input_mode)
        row = base | {k: v for k, v in (found.get("row") or {}).items() if not k.startswith("judge_")} | {
            "input_mode": mode, "remove_audio": mode == "without-audio", "remove_vision": mode == "without-vision"}
        job: dict[str, Any] = {"row": row, "narrative": item.narrative, "response": found.get("response"),  # type: ignore[attr-defined]
                               "error": found.get("error") or (None if found else "no prediction for this clip")}
        video = resolve_media(item.video, dataset.path, media_root)  # type: ignore[attr-defined]
        if not job["error"] and (job["response"] or "").strip():
            try:
                media = prepare_video(video, settings=settings, frames=frames, audio_mode="none") if video else None
            except MediaError as exc:
                job["error"] = f"media: {exc}"
                media = None
            if media is not None:
                job["frames"] = [f.jpeg for f in media.frames]
                job["timestamps"] = [f.t for f in media.frames]
        jobs.append(job)
    rows = asyncio.run(judge_all(RubricJudge(vlm, max_retries=max_retries), jobs, settings.judge_concurrency))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    summary = rubric_summary(rows) | {"out": str(out)}
    if json_out:
        emit_json(summary)
    else:
        err.print(escape(f"judged {summary['n']} clips: {summary['n_judged']} judged, {summary['n_failed']} failed; "
                         f"Aligned {summary['aligned_pct']} %, mean Total {summary['score_total']} (−8…12); wrote {out}"), highlight=False)


def report_retrieval_command(
    run: Annotated[Path, typer.Option("--run", help="TREC run file (qid Q0 docid rank score tag).")],
    qrels: Annotated[Path, typer.Option("--qrels", help="TREC qrels (qid 0 docid relevance), or the release's qrels.json {query_file: {doc_file: relevance}}.")],
    out: Annotated[Path | None, typer.Option("--out", help="Folder for retrieval_metrics.json and ranks.csv.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the metrics as JSON.")] = False,
) -> None:
    """R@1/5/10, Success@1/5/10, MRR, nDCG@5/10 per direction (ir-measures), per-query ranks CSV."""
    from eval.metrics.retrieval import (
        MEASURE_NAMES,
        evaluate_run,
        qrels_from_release,
        read_qrels,
        read_run,
        release_shape,
        write_ranks_csv,
    )
    from eval.tasks.drivelhub import read_qrels_json

    dropped: list[str] = []
    try:
        rows = read_run(run)
        if qrels.suffix.lower() == ".json":
            judgments, dropped = qrels_from_release(read_qrels_json(qrels), rows)
        else:
            judgments = read_qrels(qrels)
        result = evaluate_run(rows, judgments)
    except DatasetError as exc:
        raise fail(str(exc)) from None
    summary = {
        "run": str(run), "qrels": str(qrels), **release_shape(result), "directions": result["directions"],
        "n_qrels_not_in_run": len(dropped), "qrels_not_in_run": dropped[:50],
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
    if dropped:
        err.print(escape(f"{len(dropped)} qrels pair(s) name a file the run does not hold (left out, as the release does): "
                         f"{', '.join(dropped[:5])}"), highlight=False)
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
    from eval.tasks import load_bench
    from eval.metrics.retrieval import build_runs, qrels_lines, release_qrels

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
    (out / "qrels.json").write_text(json.dumps(release_qrels(dataset.items), ensure_ascii=False, indent=1), "utf-8")
    summary = {"run": str(out / "run.trec"), "qrels": str(out / "qrels.trec"), "qrels_json": str(out / "qrels.json"), "embedder": name, "items": len(dataset.items),
               "run_lines": len(lines), "skipped": skipped}
    if json_out:
        emit_json(summary)
    else:
        err.print(escape(f"wrote {len(lines)} run lines ({name}) and the qrels to {out}; "
                         f"{skipped['no_explanation']} item(s) without an explanation could not be queries"), highlight=False)
