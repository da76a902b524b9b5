"""The ``kar`` typer app: every command registered once, grouped by journey in the root help.

Commands live one group per file in this package (``kb.py``, ``crawl.py``, ``explain.py``,
``serve.py``, ``config.py``; the evaluation commands in ``run.py``, ``judge.py`` (judge, judge run,
merge, rubric), ``report.py`` (report, report-refs) and ``bench.py`` (bench, retrieve,
report-retrieval)).
"""

from __future__ import annotations

import warnings
from typing import Annotated

import typer

from services.cli.bench import BENCH_EXAMPLES, REPORT_RETRIEVAL_EXAMPLES, RETRIEVE_EXAMPLES, bench_app
from services.cli.bench import report_retrieval_command, retrieve_command
from services.cli.calibrate import EXAMPLES as CALIBRATE_EXAMPLES
from services.cli.calibrate import calibrate_command
from services.cli.config import EXAMPLES as CONFIG_EXAMPLES
from services.cli.config import config_command
from services.cli.corpus import corpus_app
from services.cli.console import DEBUG, ExitCode, exit_codes_text, fail, user_errors
from services.cli.crawl import CRAWL_EXAMPLES, crawl_command, crawl_jobs_app
from services.cli.explain import EXAMPLES as EXPLAIN_EXAMPLES
from services.cli.explain import explain_command
from services.cli.guard import GuardedGroup
from services.cli.help import KarTyper
from services.cli.judge import JUDGE_EXAMPLES, judge_app
from services.cli.kb import kb_app
from services.cli.report import REFS_EXAMPLES, REPORT_EXAMPLES, reference_command, report_command
from services.cli.run import RUN_EXAMPLES, run_command
from services.cli.serve import EXAMPLES as SERVE_EXAMPLES
from services.cli.serve import serve_command

#: the journeys of the root help, in the order a new user meets them
EXPLAIN, KB, BENCH, SERVICE = "1 · Explain an image", "2 · Grow the knowledge base", "3 · Run and score ablations", "Service and settings"

ROOT_EPILOG = (
    "Start: make demo, then source .venv/bin/activate and "
    "kar explain examples/images/doge_such_culture.png --kb data/demo/culturebase\n\n"
    "\b\nExit codes:\n" + exit_codes_text() + "\n\nAn error is one line; `kar --debug COMMAND ...` also prints its traceback."
)

app = KarTyper(
    name="kar",
    help="CultureKAR: explain culture-dependent images (memes) with a knowledge base, grow it by crawling, and "
    "measure what grounding repairs and breaks. Every setting is a KAR_* variable (env or ./.env); `kar config` lists them.",
    epilog=ROOT_EPILOG,
    no_args_is_help=True,
    cls=GuardedGroup,
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
    debug: Annotated[
        bool, typer.Option("--debug", help="On an error, print its traceback too (before the one-line error).")
    ] = False,
) -> None:
    """CultureKAR: explain culture-dependent images (memes) with a knowledge base, grow it by crawling, and measure
    what grounding repairs and breaks. Every setting is a KAR_* variable (env or ./.env); `kar config` lists them."""
    from pathlib import Path

    from culturebase.settings import ENV_FILE, get_settings
    from services.cli.errors import dotenv_problem

    DEBUG["on"] = debug
    # qdrant-client warns when it cannot ask an unreachable server its version; the error that follows says it in one line
    warnings.filterwarnings("ignore", message="Failed to obtain server version")
    problem = dotenv_problem(Path(ENV_FILE))
    if problem:
        raise fail(problem, ExitCode.USAGE)
    with user_errors():  # an invalid KAR_* value stops every command, not only those that read it
        get_settings()


app.command("explain", rich_help_panel=EXPLAIN, epilog=EXPLAIN_EXAMPLES)(explain_command)

app.add_typer(kb_app, name="kb", rich_help_panel=KB)
app.add_typer(corpus_app, name="corpus", rich_help_panel=KB)
app.command("crawl", rich_help_panel=KB, epilog=CRAWL_EXAMPLES)(crawl_command)
app.add_typer(crawl_jobs_app, name="crawl-jobs", rich_help_panel=KB)
app.command("calibrate", rich_help_panel=KB, epilog=CALIBRATE_EXAMPLES)(calibrate_command)

app.command("run", rich_help_panel=BENCH, epilog=RUN_EXAMPLES)(run_command)
app.add_typer(judge_app, name="judge", rich_help_panel=BENCH, epilog=JUDGE_EXAMPLES)
app.command("report", rich_help_panel=BENCH, epilog=REPORT_EXAMPLES)(report_command)
app.command("report-refs", rich_help_panel=BENCH, epilog=REFS_EXAMPLES)(reference_command)
app.add_typer(bench_app, name="bench", rich_help_panel=BENCH, epilog=BENCH_EXAMPLES)
app.command("retrieve", rich_help_panel=BENCH, epilog=RETRIEVE_EXAMPLES)(retrieve_command)
app.command("report-retrieval", rich_help_panel=BENCH, epilog=REPORT_RETRIEVAL_EXAMPLES)(report_retrieval_command)

app.command("serve", rich_help_panel=SERVICE, epilog=SERVE_EXAMPLES)(serve_command)
app.command("config", rich_help_panel=SERVICE, epilog=CONFIG_EXAMPLES)(config_command)

__all__ = ["app"]
