"""``kar report`` and ``kar report-refs``: coverage, Success and repair/damage with CIs (MemeBench),
each benchmark family's metrics, the DrivelHub+ release's table, and reference-based metrics.

The reports are built by :mod:`eval.report`; these commands read the flags and print.  Bad input is
one line on stderr and exit code 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from collections.abc import Callable
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape

from services.cli.console import CliConsole, ExitCode, emit_json, err, examples, fail, progress_bar, run_async, user_errors
from services.cli.judge import JudgeBaseUrlOption, JudgeModelOption, judge_settings
from services.cli.options import BenchAlias, ImageDirAlias, ImageRootOption, JsonOption, KbOption, dataset_option, kb_override, pick

ReportDataset = dataset_option(
    "MemeBench benchmark file, a benchmark-family JSONL file, or the DrivelHub+ release's metadata.csv"
)
RefsDataset = dataset_option("MemeCULT CSV or MemeCap JSON with reference explanations")

REPORT_EXAMPLES = examples(
    "kar report --dataset examples/bench_sample.json --judged vanilla=runs/qwen7b/judged/vanilla.json "
    "--judged kar=runs/qwen7b/judged/kar.json --out runs/qwen7b/report",
    "kar report --dataset drivelhub/metadata.csv --judged drivelhub/judgments/",
    "kar report --dataset examples/bench_sample.json --judged vanilla=runs/q/judged/vanilla.json "
    "--judged kar=runs/q/judged/kar.json --run runs/q --out runs/q/report --items kar:damage.extra_entity",
)
REFS_EXAMPLES = examples(
    "kar report-refs --dataset memecult.csv --pred vanilla=runs/m/predictions/vanilla.json "
    "--pred kar=runs/m/predictions/kar.json --out runs/m/refs",
)


def pairs(values: list[str], flag: str) -> list[tuple[str, Path]]:
    """``NAME=FILE`` values of a repeatable flag (anything else is a usage error)."""
    found = []
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise fail(f"{flag} expects NAME=FILE, got {value!r}", ExitCode.USAGE)
        found.append((name, Path(path)))
    return found


def release_table(report: dict[str, Any]) -> Any:
    """The DrivelHub+ release's table (Family, Prediction, N, Aligned %, rubric means, Score Total)."""
    from rich.table import Table

    from eval.report.release import BASE_MODE, COLUMNS, label

    table = Table(show_header=True, header_style="bold", show_lines=True)
    for heading in ("Family", "Prediction", "N", *(label(c) for c in COLUMNS)):
        table.add_column(heading, justify="left" if heading in ("Family", "Prediction") else "right", no_wrap=heading != "Prediction")
    for run in report["runs"].values():
        cells = ["-" if run[c] is None else (f"{run[c]:.1f}%" if c == "aligned_pct" else f"{run[c]:.3f}") for c in COLUMNS]
        prediction = run["model"] if run["input_mode"] == BASE_MODE else f"{run['model']} ({run['input_mode']})"
        table.add_row(escape(run["family"]), escape(prediction), str(run["n"]), *cells)
    return table


def release_report(dataset: Path, judged: list[str], out: Path | None, *, bootstrap: int, seed: int, json_out: bool) -> None:
    """The DrivelHub+ release's table from judgments.jsonl files, plus CIs and repair/damage."""
    from eval.report.common import jsonable
    from eval.report.release import build_release_report
    from eval.tasks.drivelhub import judgment_pairs

    with user_errors():
        report = build_release_report(dataset, judgment_pairs(judged), n_boot=bootstrap, seed=seed)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.json").write_text(json.dumps(jsonable(report), ensure_ascii=False, indent=1), "utf-8")
    if json_out:
        emit_json(jsonable(report))
        return
    CliConsole(width=240).print(release_table(report))
    recomputed = sum(r["n_recomputed_totals"] for r in report["runs"].values())
    if recomputed:
        err.print(f"{recomputed} judge total(s) disagreed with their parts and were recomputed (metrics.json lists them)",
                  highlight=False, markup=False)


def task_report(dataset: Path, named: list[tuple[str, Path]], out: Path, *, baseline: str, bootstrap: int, seed: int,
                json_out: bool, similarity: bool = False, diagnostics_asked: bool = False) -> None:
    """The report of a benchmark-family file: each task's metrics (accuracy, macro-F1, ROUGE-L, rubric).

    Retrieval diagnostics need gold entities, which these benchmarks do not annotate: asked for
    (--run/--traces/--items), they are skipped with the reason, in metrics.json and on the terminal."""
    from eval.report.common import jsonable
    from eval.report.tasks import build_task_report, load_task_runs, slim_report, task_markdown, write_task_report

    with user_errors():
        bench, runs = load_task_runs(dataset, named)
        encoder = None
        if similarity:
            from culturebase.settings import get_settings
            from eval.metrics.reference import CachingEncoder
            from retrieval.embedders import build_embedder

            encoder = CachingEncoder(build_embedder(get_settings()))
        report = build_task_report(bench, runs, baseline=baseline, n_boot=bootstrap, seed=seed, encoder=encoder)
        if diagnostics_asked:
            report["diagnostics"] = {"skipped": f"{bench.benchmark} items name no gold identity entities, so there is "
                                                "nothing to diagnose retrieval against"}
        write_task_report(report, out)
    if json_out:
        emit_json(jsonable(slim_report(report)))
    else:
        err.print(escape(task_markdown(report)), highlight=False)
        if diagnostics_asked:
            err.print(escape(f"diagnostics skipped: {report['diagnostics']['skipped']}"), highlight=False)
        err.print(escape(f"wrote metrics.json, report.md, items.csv to {out}"), highlight=False)


def report_command(
    judged: Annotated[list[str], typer.Option("--judged", help="NAME=FILE (NAME: condition or model/condition); repeat per run.")],
    dataset: ReportDataset = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="Output folder (optional for a DrivelHub+ metadata.csv).", show_default=False)] = None,
    baseline: Annotated[str, typer.Option("--baseline", help="Baseline condition for repair/damage.")] = "vanilla",
    json_out: JsonOption = False,
    no_plots: Annotated[bool, typer.Option("--no-plots", help="Skip PNG plots.")] = False,
    bootstrap: Annotated[int, typer.Option("--bootstrap", min=0, help="Bootstrap resamples (0 = none).")] = 10_000,
    seed: Annotated[int, typer.Option("--seed", help="Bootstrap seed.")] = 0,
    human: Annotated[Optional[list[str]], typer.Option("--human", help="COND=FILE human labels (judge-file format).", show_default=False)] = None,
    judge_file: Annotated[
        Optional[list[str]], typer.Option("--judge-file", help="JUDGE:COND=FILE single-judge files for reliability.", show_default=False)
    ] = None,
    similarity: Annotated[
        bool, typer.Option("--similarity", help="Benchmark-family generation tasks: add the embedding similarity to the references.")
    ] = False,
    bench: BenchAlias = None,
    run: Annotated[
        Optional[list[str]],
        typer.Option("--run", metavar="[MODEL=]DIR", help="Run folder of `kar run` (its traces/{condition}.jsonl): adds the "
                     "retrieval diagnostics. MODEL= for model/condition names; repeat per model.", show_default=False),
    ] = None,
    traces: Annotated[
        Optional[list[str]], typer.Option("--traces", metavar="NAME=FILE", help="Trace file of one --judged NAME (overrides --run).", show_default=False)
    ] = None,
    kb: KbOption = None,
    knowledge_judge: Annotated[
        bool, typer.Option("--knowledge-judge", help="Diagnostics: the judge (KAR_JUDGE_*, --judge-model) decides knowledge_in_prompt "
                           "per unit instead of the lexical proxy.")
    ] = False,
    judge_model: JudgeModelOption = None,
    judge_base_url: JudgeBaseUrlOption = None,
    items: Annotated[
        Optional[str], typer.Option("--items", metavar="NAME:[LAYER:]CELL", help="List the items of one diagnostics cell "
                                    "(e.g. kar:damage.extra_entity, kar:K:repair.grounded.no_knowledge).", show_default=False)
    ] = None,
) -> None:
    """Coverage, Success, repair/damage with CIs, tables, plots and an HTML report.

    A benchmark-family JSONL file (MemeReaCon, AVMeme Exam, DrivelHub+, MemeCULT-1K) as --dataset
    switches to its tasks' metrics (accuracy/macro-F1/ROUGE-L/rubric); --judged then names
    prediction files (or DrivelHub+ rubric-judged files).  The DrivelHub+ release's metadata.csv as
    --dataset reads release judgments.jsonl files (--judged MODEL=FILE, FILE or a judgments/ folder)
    and prints the release's table.

    With --run (or --traces) the report adds retrieval diagnostics per condition (gold entity in
    CultureBase, grounded, extra entities, knowledge in the prompt, off-entity evidence) and splits
    each condition's repairs and damages by cause; --items lists one cell's items."""
    from eval.tasks import is_bench_file
    from eval.tasks.drivelhub import is_metadata_csv

    dataset = pick("--dataset", dataset, required=True, bench=bench)
    if is_metadata_csv(dataset):
        return release_report(dataset, judged, out, bootstrap=bootstrap, seed=seed, json_out=json_out)
    if out is None:
        raise fail("--out is required (the folder the report is written to)", ExitCode.USAGE)
    wants_diagnostics = bool(run or traces or items)
    if is_bench_file(dataset):
        return task_report(dataset, pairs(judged, "--judged"), out, baseline=baseline, bootstrap=bootstrap, seed=seed,
                           json_out=json_out, similarity=similarity, diagnostics_asked=wants_diagnostics)
    cell = parse_items(items)
    judged_pairs, human_pairs, judge_triples = pairs(judged, "--judged"), pairs(human or [], "--human"), judge_file_triples(judge_file or [])
    with user_errors():
        bench_items, judged_records, reliability = load_vikr_inputs(dataset, judged_pairs, human_pairs, judge_triples)
        waiter = None
        if wants_diagnostics:
            finish = worker_finish(bench_items, judged_records, baseline, None if no_plots else out)
            waiter = report_diagnostics(bench_items, [name for name, _ in judged_pairs], run or [], traces or [], kb,
                                        knowledge_judge or bool(judge_model or judge_base_url), judge_model, judge_base_url,
                                        then=finish)
    report, files = write_vikr_report(bench_items, judged_records, out, baseline=baseline, bootstrap=bootstrap, seed=seed,
                                      reliability=reliability, waiter=waiter, no_plots=no_plots)
    if cell is not None:
        return print_cell_items(report, cell, json_out)
    print_vikr_report(report, files, out, json_out)


def parse_items(items: str | None) -> tuple[Any, ...] | None:
    """The diagnostics cell ``--items`` names (NAME:[LAYER:]CELL), or None."""
    if items is None:
        return None
    from eval.report.diagnostics import parse_cell

    try:
        return parse_cell(items)
    except ValueError as exc:
        raise fail(str(exc), ExitCode.USAGE) from None


def judge_file_triples(values: list[str]) -> list[tuple[str, str, Path]]:
    """``--judge-file JUDGE:COND=FILE`` values as (judge, condition, file)."""
    triples = []
    for key, path in pairs(values, "--judge-file"):
        judge_name, sep, condition = key.partition(":")
        if not sep:
            raise fail(f"--judge-file expects JUDGE:COND=FILE, got {key!r}", ExitCode.USAGE)
        triples.append((judge_name, condition, path))
    return triples


def load_vikr_inputs(dataset: Path, judged_pairs: list[tuple[str, Path]], human_pairs: list[tuple[str, Path]],
                     judge_triples: list[tuple[str, str, Path]]) -> tuple[list[Any], dict[str, Any], Any]:
    """The benchmark items, each run's judged records and (with human labels or single-judge files) the judges' reliability."""
    from eval.metrics.reliability import judge_reliability
    from eval.records import load_judged
    from eval.tasks.memebench import load_benchmark

    bench_items = load_benchmark(dataset, check_images=False)
    judged_records = {name: load_judged(path) for name, path in judged_pairs}
    reliability = None
    if human_pairs or judge_triples:
        per_judge: dict[str, dict[str, Any]] = {}
        for judge_name, condition, path in judge_triples:
            per_judge.setdefault(judge_name, {})[condition] = load_judged(path)
        reliability = judge_reliability(bench_items, {name: load_judged(path) for name, path in human_pairs}, per_judge)
    return bench_items, judged_records, reliability


def write_vikr_report(bench_items: list[Any], judged_records: dict[str, Any], out: Path, *, baseline: str, bootstrap: int,
                      seed: int, reliability: Any, waiter: Callable[[], Any] | None, no_plots: bool) -> tuple[dict[str, Any], list[Any]]:
    """Build the MemeBench report (with the diagnostics when ``waiter`` brings them), draw its plots and write its files."""
    from eval.report.vikr import build_report, write_report

    with progress_bar(transient=False) as progress:
        task = progress.add_task("report", total=2 if no_plots else 3)
        matrices: dict[str, Any] = {}
        report = build_report(bench_items, judged_records, baseline=baseline, n_boot=bootstrap, seed=seed, reliability=reliability,
                              matrices_out=matrices)
        plot_paths, plot_cache, causes_path = None, None, None
        if waiter is not None:
            plot_paths, plot_cache, causes_path = add_report_diagnostics(report, bench_items, judged_records, matrices, out,
                                                                         waiter, no_plots)
        progress.update(task, advance=1)
        files = write_report(report, out, plots=not no_plots, plot_paths=plot_paths, plot_cache=plot_cache, causes_path=causes_path)
        progress.update(task, completed=progress.tasks[0].total)
    return report, files


def add_report_diagnostics(report: dict[str, Any], bench_items: list[Any], judged_records: dict[str, Any], matrices: dict[str, Any],
                           out: Path, waiter: Callable[[], Any], no_plots: bool) -> tuple[Any, Any, Path | None]:
    """Draw the plots while the diagnostics are computed, then add them to ``report``; returns the plots drawn, the
    plot cache and the causes plot (when the worker drew it)."""
    from eval.report.vikr import add_diagnostics, make_plots

    plot_paths, causes_path = None, None
    if not no_plots:  # drawn while the diagnostics are computed (in a worker process, when forked)
        out.mkdir(parents=True, exist_ok=True)
        plot_paths = make_plots(report, out)
    with user_errors():
        diagnostics, notes, joined = waiter()
    for note in notes:
        err.print(f"diagnostics: {note}", highlight=False, markup=False, soft_wrap=True)
    add_diagnostics(report, bench_items, judged_records, diagnostics, matrices, joined=joined)
    from eval.report.diagnostics import CAUSES_PLOT

    if joined and not no_plots and (out / CAUSES_PLOT).is_file():  # drawn by the worker (removed before it started)
        causes_path = out / CAUSES_PLOT
    from culturebase.settings import get_settings
    from eval.diagnostics.cache import plots_folder

    return plot_paths, plots_folder(get_settings()), causes_path


def print_cell_items(report: dict[str, Any], cell: tuple[Any, ...], json_out: bool) -> None:
    """The items of one diagnostics cell (``--items``), as JSON or a markdown list."""
    from eval.report.common import jsonable
    from eval.report.diagnostics import cell_items, items_markdown

    try:
        rows = cell_items(report.get("diagnostics") or {}, *cell)
    except ValueError as exc:
        raise fail(str(exc), ExitCode.USAGE) from None
    if json_out:
        emit_json(jsonable({"cell": dict(zip(("name", "layer", "cell"), cell)), "items": rows}))
    else:
        err.print(items_markdown(rows, *cell), highlight=False, markup=False, soft_wrap=True)


def print_vikr_report(report: dict[str, Any], files: list[Any], out: Path, json_out: bool) -> None:
    """The report as JSON, or its leaderboard (and diagnostics tables) and where it was written."""
    from eval.report.common import jsonable
    from eval.report.vikr import leaderboard_markdown

    if json_out:
        emit_json(jsonable(report))
        return
    err.print(leaderboard_markdown(report), highlight=False, markup=False)
    if report.get("diagnostics") is not None:
        from eval.report.diagnostics import causes_markdown, diagnostics_markdown

        err.print(diagnostics_markdown(report["diagnostics"]), highlight=False, markup=False, soft_wrap=True)
        err.print(causes_markdown(report["diagnostics"]), highlight=False, markup=False, soft_wrap=True)
    err.print(f"wrote {len(files)} files to {out}", highlight=False, markup=False)


def worker_finish(bench_items: list[Any], judged: dict[str, Any], baseline: str | None, out: Path | None) -> Callable[[dict[str, Any]], None]:
    """What the diagnostics worker does after the rows: join them with the judgments (the report's pairs) and, with
    ``out`` (plots wanted), draw the causes plot there (from the plot cache when drawn before).  matplotlib is
    imported here, before the worker is forked: the report draws its own plots with it anyway, and the worker
    then finds it loaded.  A causes plot left in ``out`` by an earlier report is removed now, so the one found
    there afterwards is this worker's."""
    from eval.report.diagnostics import CAUSES_PLOT
    from eval.report.vikr import join_diagnostics, pairing

    pairs = pairing(judged, baseline)
    if out is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401  (loaded before the fork)

        (out / CAUSES_PLOT).unlink(missing_ok=True)

    def finish(diagnostics: dict[str, Any]) -> None:
        join_diagnostics(diagnostics, bench_items, judged, pairs)
        if out is not None:
            from culturebase.settings import get_settings
            from eval.diagnostics.cache import plots_folder
            from eval.report.diagnostics import causes_plot

            out.mkdir(parents=True, exist_ok=True)
            causes_plot(diagnostics, out, cache=plots_folder(get_settings()))

    return finish


def report_diagnostics(bench_items: list[Any], names: list[str], run: list[str], traces: list[str], kb: Path | None,
                       use_judge: bool, judge_model: str | None, judge_base_url: list[str] | None,
                       then: Callable[[dict[str, Any]], None] | None = None) -> Callable[[], tuple[dict[str, Any], list[str], bool]]:
    """Start the diagnostics of the judged runs whose traces are found; returns the call that waits for them
    (``(diagnostics, notes, joined)``; ``{"skipped": why}`` when no trace is found; ``joined``: ``then``, the
    worker's finish (:func:`worker_finish`), was run on them).

    Bad flags fail here, before anything runs.  Without a judge the diagnostics are read back from the cache
    of an earlier report, or computed in a forked process while this one builds the report (bootstrap, plots),
    so on a machine with a spare core they cost little wall time (the worker also joins them and draws their
    plot); with a judge (or where fork is not available) they are computed here."""
    from eval.diagnostics.run_folder import cached_diagnostics, diagnose_files
    from eval.diagnostics.traces import locate_traces

    runs: dict[str, Path] = {}
    for value in run:
        model, sep, folder = value.rpartition("=")
        runs[model if sep else ""] = Path(folder)
    for folder in runs.values():
        if not folder.is_dir():
            raise fail(f"--run {folder}: no such folder", ExitCode.USAGE)
    files = locate_traces(names, runs, dict(pairs(traces, "--traces")))
    if not files:
        skipped = {"skipped": "no trace file found for any --judged name (--run RUN_DIR or --traces NAME=FILE)"}
        return lambda: (skipped, [], False)
    settings = judge_settings(judge_model, judge_base_url).model_copy(update=kb_override(kb))
    judge = None
    if use_judge:
        from agents.vlm import OpenAICompatibleVLM
        from eval.diagnostics import KnowledgeJudge
        from eval.judges.checklist import JudgeCache

        judge = KnowledgeJudge(OpenAICompatibleVLM.from_settings(settings, role="judge"), max_retries=settings.judge_max_parse_retries,
                               cache=JudgeCache(settings.data_dir / "knowledge_judge_cache.sqlite"))
    if judge is None:
        read_back = cached_diagnostics(bench_items, files, settings)
        if read_back is not None:  # read back here (when waited for): a worker would only move the rows across processes
            return lambda: (*read_back(), False)
    import multiprocessing

    if judge is not None or "fork" not in multiprocessing.get_all_start_methods():
        done = diagnose_files(bench_items, files, settings, judge=judge, run=run_async)
        return lambda: (*done, False)
    from eval.diagnostics.run_folder import start_diagnose_files

    wait = start_diagnose_files(bench_items, files, settings, then=then)
    return lambda: (*wait(), then is not None)


def reference_command(
    pred: Annotated[list[str], typer.Option("--pred", help="NAME=FILE predictions {id, image_path, response}; repeat per run.")],
    out: Annotated[Path, typer.Option("--out", help="Output folder.")],
    dataset: RefsDataset = None,
    baseline: Annotated[
        Optional[str], typer.Option("--baseline", help="Baseline prediction NAME for paired Δ (default: the first --pred).", show_default=False)
    ] = None,
    dataset_format: Annotated[str, typer.Option("--format", help="auto (by extension: .csv = MemeCULT), memecult or memecap.")] = "auto",
    image_root: ImageRootOption = None,
    rubric: Annotated[bool, typer.Option("--rubric", help="Also score 1–5 fluency / cultural / humor with the judge.")] = False,
    judge_model: JudgeModelOption = None,
    judge_base_url: JudgeBaseUrlOption = None,
    concurrency: Annotated[Optional[int], typer.Option("--concurrency", min=1, help="Concurrent judge calls (default: KAR_JUDGE_CONCURRENCY).")] = None,
    bootstrap: Annotated[int, typer.Option("--bootstrap", min=1, help="Bootstrap resamples.")] = 10_000,
    seed: Annotated[int, typer.Option("--seed", help="Bootstrap seed.")] = 0,
    json_out: JsonOption = False,
    image_dir: ImageDirAlias = None,
) -> None:
    """Reference-based metrics: embedding cosine (and a 1–5 LLM rubric), paired vs a baseline per language."""
    from eval.metrics.reference import CachingEncoder, reference_metrics
    from eval.report import references
    from retrieval.embedders import build_embedder

    image_root = pick("--image-root", image_root, image_dir=image_dir)
    if dataset_format not in references.FORMATS:
        raise fail(f"--format must be auto, memecult or memecap, got {dataset_format!r}", ExitCode.USAGE)
    named = pairs(pred, "--pred")
    dataset = pick("--dataset", dataset, required=True)
    names = [name for name, _ in named]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise fail(f"--pred: name {duplicates[0]!r} given twice", ExitCode.USAGE)
    baseline = baseline or names[0]
    if baseline not in names:
        raise fail(f"--baseline {baseline!r} is not one of the --pred names ({', '.join(names)})", ExitCode.USAGE)
    settings = judge_settings(judge_model, judge_base_url, concurrency)
    vlm = None
    with user_errors():
        fmt, items = references.load_reference_dataset(dataset, dataset_format, image_root)
        responses, unmatched = references.match_predictions(dataset, items, named)
        images: dict[str, bytes | None] = {}
        if rubric:
            from agents.vlm import OpenAICompatibleVLM

            images = references.item_images(dataset, items)
            vlm = OpenAICompatibleVLM.from_settings(settings, role="judge")
        encoder = CachingEncoder(build_embedder(settings))
        rubric_scores = None
        with progress_bar(transient=False) as progress:
            bars: dict[str, Any] = {}

            def on_progress(label: str, done: int, total: int) -> None:
                if label not in bars:
                    bars[label] = progress.add_task(label, total=total)
                progress.update(bars[label], completed=done)

            references.embed_all(encoder, items, responses, on_progress)
            if vlm is not None:
                rubric_scores = references.judge_rubric(
                    vlm, items, responses, images, concurrency=settings.judge_concurrency,
                    max_parse_retries=settings.judge_max_parse_retries, on_progress=on_progress)
    metrics = reference_metrics(items, responses, encoder, baseline=baseline, rubric=rubric_scores, n_boot=bootstrap, seed=seed)
    metrics = {
        "dataset": str(dataset), "format": fmt, "predictions": {name: str(path) for name, path in named},
        "unmatched_predictions": unmatched, "rubric_judge": vlm.model_id if vlm is not None else None, **metrics,
    }
    data, markdown = references.write_reference_report(metrics, out)
    for name, count in unmatched.items():
        if count:
            err.print(f"warning: {count} predictions of {name} match no dataset item", highlight=False, markup=False)
    if json_out:
        emit_json(data)
    else:
        err.print(markdown, highlight=False, soft_wrap=True, markup=False)
        err.print(f"wrote reference_metrics.json, reference_metrics.md, reference_items.csv to {out}", highlight=False, markup=False)
