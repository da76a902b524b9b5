"""The ``kar`` typer app: every command registered once, grouped by journey in the root help.

Commands live one group per file in this package (``kb.py``, ``crawl.py``, ``explain.py``,
``serve.py``, ``config.py``; ``run.py`` for ablations).  The evaluation commands (``judge``,
``report``, ``report-refs``, ``bench``, ``retrieve``) are registered from ``eval`` until they
move here.
"""

from __future__ import annotations

from typing import Annotated

import typer

from eval.benchmarks.cli import bench_app, report_retrieval_command, retrieve_command, rubric_command
from eval.cli import judge_app, reference_command, report_command
from services.cli.config import EXAMPLES as CONFIG_EXAMPLES
from services.cli.config import config_command
from services.cli.console import exit_codes_text
from services.cli.crawl import CRAWL_EXAMPLES, crawl_command, crawl_jobs_app
from services.cli.explain import EXAMPLES as EXPLAIN_EXAMPLES
from services.cli.explain import explain_command
from services.cli.kb import kb_app
from services.cli.run import run_command
from services.cli.serve import EXAMPLES as SERVE_EXAMPLES
from services.cli.serve import serve_command

#: the journeys of the root help, in the order a new user meets them
EXPLAIN, KB, BENCH, SERVICE = "1 · Explain an image", "2 · Grow the knowledge base", "3 · Run and score ablations", "Service and settings"

ROOT_EPILOG = (
    "Start: make demo, then source .venv/bin/activate and "
    "kar explain examples/images/doge_such_culture.png --kb data/demo/culturebase\n\n"
    "\b\nExit codes:\n" + exit_codes_text()
)

app = typer.Typer(
    name="kar",
    help="CultureKAR: explain culture-dependent images (memes) with a knowledge base, grow it by crawling, and "
    "measure what grounding repairs and breaks. Every setting is a KAR_* variable (env or ./.env); `kar config` lists them.",
    epilog=ROOT_EPILOG,
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"kar (culturekar) {version('culturekar')}")
        except PackageNotFoundError:  # a checkout run without `pip install -e .`
            typer.echo("kar (culturekar) unknown version (not installed)")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """CultureKAR: explain culture-dependent images (memes) with a knowledge base, grow it by crawling, and measure
    what grounding repairs and breaks. Every setting is a KAR_* variable (env or ./.env); `kar config` lists them."""


def examples(*commands: str) -> str:
    """An ``Examples:`` epilog (one paragraph per command; a ``# comment`` after a command is not part of it)."""
    return "Examples:\n\n" + "\n\n".join(f"  {c}" for c in commands)


# the evaluation commands keep their code in eval/ and services/cli/run.py for now; their examples live here
RUN_EXAMPLES = examples(
    "kar run --dataset examples/bench_sample.json --out runs/qwen7b --conditions vanilla,search_cot,kar",
    "kar run --dataset memebench/ --out runs/qwen7b --limit 20 --replay-only",
)
JUDGE_EXAMPLES = examples(
    "kar judge --bench examples/bench_sample.json --pred runs/qwen7b/predictions/kar.json --out runs/qwen7b/judged/kar.json",
    "kar judge merge runs/a/judged/kar.json runs/b/judged/kar.json --out runs/merged/kar.json --names gemini,gpt",
)
REPORT_EXAMPLES = examples(
    "kar report --bench examples/bench_sample.json --judged vanilla=runs/qwen7b/judged/vanilla.json "
    "--judged kar=runs/qwen7b/judged/kar.json --out runs/qwen7b/report",
)
SUB_EXAMPLES = {
    (judge_app, "merge"): examples("kar judge merge judged_gemini.json judged_gpt.json --out merged.json --bench examples/bench_sample.json"),
    (bench_app, "validate"): examples("kar bench validate drivelhub.jsonl --media-root media/"),
    (bench_app, "convert"): examples("kar bench convert memecult memecult.csv --out memecult.jsonl"),
}

app.command("explain", rich_help_panel=EXPLAIN, epilog=EXPLAIN_EXAMPLES)(explain_command)

app.add_typer(kb_app, name="kb", rich_help_panel=KB)
app.command("crawl", rich_help_panel=KB, epilog=CRAWL_EXAMPLES)(crawl_command)
app.add_typer(crawl_jobs_app, name="crawl-jobs", rich_help_panel=KB)

app.command("run", rich_help_panel=BENCH, epilog=RUN_EXAMPLES)(run_command)
app.add_typer(judge_app, name="judge", rich_help_panel=BENCH, epilog=JUDGE_EXAMPLES)
judge_app.command("rubric", epilog=examples("kar judge rubric --bench drivelhub.jsonl --pred runs/d/predictions/kar.json --out runs/d/rubric.json"))(rubric_command)
app.command("report", rich_help_panel=BENCH, epilog=REPORT_EXAMPLES)(report_command)
app.command(
    "report-refs", rich_help_panel=BENCH,
    epilog=examples("kar report-refs --dataset memecult.csv --pred vanilla=runs/m/predictions/vanilla.json --pred kar=runs/m/predictions/kar.json --out runs/m/refs"),
)(reference_command)
app.add_typer(bench_app, name="bench", rich_help_panel=BENCH, epilog=examples("kar bench validate drivelhub.jsonl", "kar bench convert avmeme avmeme_rows.json --out avmeme.jsonl"))
app.command(
    "retrieve", rich_help_panel=BENCH,
    epilog=examples("kar retrieve --bench drivelhub.jsonl --pred runs/d/predictions/kar.json --out runs/d/retrieval"),
)(retrieve_command)
app.command(
    "report-retrieval", rich_help_panel=BENCH,
    epilog=examples("kar report-retrieval --run runs/d/retrieval/run.trec --qrels runs/d/retrieval/qrels.trec --out runs/d/retrieval"),
)(report_retrieval_command)
for (group, name), text in SUB_EXAMPLES.items():
    for info in group.registered_commands:
        if info.name == name and not info.epilog:
            info.epilog = text

app.command("serve", rich_help_panel=SERVICE, epilog=SERVE_EXAMPLES)(serve_command)
app.command("config", rich_help_panel=SERVICE, epilog=CONFIG_EXAMPLES)(config_command)

__all__ = ["app"]
