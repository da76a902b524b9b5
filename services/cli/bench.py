"""``kar bench validate|convert``, ``kar retrieve`` and ``kar report-retrieval``: the benchmark
family's files (MemeReaCon, AVMeme Exam, DrivelHub+, MemeCULT-1K) and DrivelHub+ reasoning-as-retrieval.

Loading, converting and scoring live in :mod:`eval.tasks` and :mod:`eval.metrics.retrieval`.  Bad
input is one line (or one block listing the bad lines) on stderr and exit code 2; a conversion that
rejected rows exits 3.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from services.cli.console import CliConsole, ExitCode, emit_json, err, examples, user_errors
from services.cli.options import BenchAlias, ImageRootOption, JsonOption, MediaRootAlias, dataset_option, pick

bench_app = typer.Typer(help="Benchmark-family datasets (MemeReaCon, AVMeme Exam, DrivelHub+, MemeCULT-1K): validate, convert.",
                        no_args_is_help=True)

RetrieveDataset = dataset_option("DrivelHub+ JSONL file")

BENCH_EXAMPLES = examples("kar bench validate drivelhub.jsonl", "kar bench convert avmeme avmeme_rows.json --out avmeme.jsonl")
RETRIEVE_EXAMPLES = examples("kar retrieve --dataset drivelhub.jsonl --pred runs/d/predictions/kar.json --out runs/d/retrieval")
REPORT_RETRIEVAL_EXAMPLES = examples(
    "kar report-retrieval --run runs/d/retrieval/run.trec --qrels runs/d/retrieval/qrels.trec --out runs/d/retrieval",
    "kar report-retrieval --run runs/d/retrieval/run.trec --qrels drivelhub/qrels.json --json",
)


@bench_app.command("validate", epilog=examples("kar bench validate drivelhub.jsonl --image-root media/"))
def validate_command(
    dataset: Annotated[Path, typer.Argument(help="Benchmark JSONL file (or the DrivelHub+ release's metadata.csv).")],
    image_root: ImageRootOption = None,
    no_media_check: Annotated[bool, typer.Option("--no-media-check", help="Do not check that media files exist.")] = False,
    json_out: JsonOption = False,
    media_root: MediaRootAlias = None,
) -> None:
    """Check a benchmark file: every bad line is listed with its field."""
    from eval.tasks import load_bench

    image_root = pick("--image-root", image_root, media_root=media_root)
    with user_errors():
        bench = load_bench(dataset, media_root=image_root, check_media=not no_media_check)
    summary = {"dataset": str(dataset), "benchmark": bench.benchmark, "items": len(bench.items), "tasks": bench.tasks}
    if json_out:
        emit_json(summary)
    else:
        tasks = ", ".join(f"{k}: {v}" for k, v in sorted(bench.tasks.items()))
        err.print(escape(f"{dataset}: {bench.benchmark}, {len(bench.items)} valid items ({tasks})"), highlight=False)


@bench_app.command("convert", epilog=examples("kar bench convert drivelhub drivelhub/metadata.csv --out drivelhub.jsonl --media-dir drivelhub/videos"))
def convert_command(
    benchmark: Annotated[str, typer.Argument(help="avmeme or drivelhub (memereacon, memecult: nothing released, so no converter).")],
    source: Annotated[Path, typer.Argument(help="Released file (AVMeme: official or mteb/AVMeme-Exam rows as JSON/JSONL/Parquet; DrivelHub+: metadata.csv, with qrels.json beside it).")],
    out: Annotated[Path, typer.Option("--out", help="Output JSONL.")],
    media_dir: Annotated[Optional[str], typer.Option("--media-dir", help="Folder of the media files, as written into the items.", show_default=False)] = None,
    json_out: JsonOption = False,
) -> None:
    """Convert a released benchmark file into the documented JSONL shape (bad rows listed, exit 3)."""
    from eval.tasks import convert
    from eval.tasks.base import write_jsonl

    with user_errors():
        records, errors = convert(benchmark, source, media_dir=media_dir)
    written = write_jsonl(records, out)
    summary = {"benchmark": benchmark, "source": str(source), "out": str(out), "written": written, "rejected": len(errors), "errors": errors[:50]}
    if json_out:
        emit_json(summary)
    else:
        err.print(escape(f"wrote {written} items to {out}; {len(errors)} row(s) rejected"), highlight=False)
        for line in errors[:20]:
            err.print(escape(f"  {source}: {line}"), highlight=False)
    if errors:
        raise typer.Exit(int(ExitCode.PARTIAL))


def report_retrieval_command(
    run: Annotated[Path, typer.Option("--run", help="TREC run file (qid Q0 docid rank score tag).")],
    qrels: Annotated[Path, typer.Option("--qrels", help="TREC qrels (qid 0 docid relevance), or the release's qrels.json {query_file: {doc_file: relevance}}.")],
    out: Annotated[Optional[Path], typer.Option("--out", help="Folder for retrieval_metrics.json and ranks.csv.", show_default=False)] = None,
    json_out: JsonOption = False,
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
    with user_errors():
        rows = read_run(run)
        if qrels.suffix.lower() == ".json":
            judgments, dropped = qrels_from_release(read_qrels_json(qrels), rows)
        else:
            judgments = read_qrels(qrels)
        result = evaluate_run(rows, judgments)
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
    for d in result["directions"].values():
        table.add_row(escape(d["name"]), str(d["n_queries"]),
                      *("–" if d["metrics"][m] is None else f"{d['metrics'][m]:.3f}" for m in MEASURE_NAMES),
                      str(d["missing_in_run"]), str(d["not_in_qrels"] + d["no_relevant"]))
    CliConsole(width=200).print(table)
    if dropped:
        err.print(escape(f"{len(dropped)} qrels pair(s) name a file the run does not hold (left out, as the release does): "
                         f"{', '.join(dropped[:5])}"), highlight=False)
    if result["missing_in_run"]:
        err.print(escape(f"{len(result['missing_in_run'])} judged quer(ies) absent from the run scored 0: "
                         f"{', '.join(result['missing_in_run'][:10])}"), highlight=False)
    if out is not None:
        err.print(escape(f"wrote retrieval_metrics.json and ranks.csv to {out}"), highlight=False)


def retrieve_command(
    pred: Annotated[Path, typer.Option("--pred", help="Predictions {id, response}: the explanations to retrieve with.")],
    out: Annotated[Path, typer.Option("--out", help="Folder for run.trec, qrels.trec and qrels.json.")],
    dataset: RetrieveDataset = None,
    top_k: Annotated[int, typer.Option("--top-k", min=1, help="Documents per query.")] = 10,
    embed_base_url: Annotated[Optional[str], typer.Option("--embed-base-url", help="OpenAI-compatible embeddings endpoint (default: the configured embedder).", show_default=False)] = None,
    embed_model: Annotated[Optional[str], typer.Option("--embed-model", help="Model id at --embed-base-url.", show_default=False)] = None,
    embed_api_key: Annotated[Optional[str], typer.Option("--embed-api-key", envvar="KAR_EMBED_API_KEY", help="API key for --embed-base-url.", show_default=False)] = None,
    tag: Annotated[str, typer.Option("--tag", help="Run tag (TREC column 6).")] = "kar",
    json_out: JsonOption = False,
    bench: BenchAlias = None,
) -> None:
    """Reasoning-as-retrieval: TREC runs both ways (explanations ↔ narratives) plus the qrels."""
    from culturebase.settings import get_settings
    from eval.metrics.retrieval import build_encoder, build_runs, qrels_lines, release_qrels
    from eval.records import load_predictions
    from eval.tasks import load_bench

    dataset = pick("--dataset", dataset, required=True, bench=bench)
    with user_errors():
        bench_set = load_bench(dataset, "drivelhub", check_media=False)
        responses = {p.id: p.response for p in load_predictions(pred) if p.id is not None}
        encode, name = build_encoder(get_settings(), embed_base_url, embed_model, embed_api_key)
        lines, skipped = build_runs(bench_set.items, responses, encode, k=top_k, tag=tag)
    out.mkdir(parents=True, exist_ok=True)
    (out / "run.trec").write_text("\n".join(lines) + "\n", "utf-8")
    (out / "qrels.trec").write_text("\n".join(qrels_lines(bench_set.items)) + "\n", "utf-8")
    (out / "qrels.json").write_text(json.dumps(release_qrels(bench_set.items), ensure_ascii=False, indent=1), "utf-8")
    summary = {"run": str(out / "run.trec"), "qrels": str(out / "qrels.trec"), "qrels_json": str(out / "qrels.json"), "embedder": name,
               "items": len(bench_set.items), "run_lines": len(lines), "skipped": skipped}
    if json_out:
        emit_json(summary)
    else:
        err.print(escape(f"wrote {len(lines)} run lines ({name}) and the qrels to {out}; "
                         f"{skipped['no_explanation']} item(s) without an explanation could not be queries"), highlight=False)
