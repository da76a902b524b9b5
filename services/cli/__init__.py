"""The `kar` command: one typer app, one sub-command group per component."""

from __future__ import annotations

from typing import Annotated

import typer

from agents.cli import explain_command
from crawlers.cli import crawl_command, crawl_jobs_app
from eval.benchmarks.cli import bench_app, report_retrieval_command, retrieve_command, rubric_command
from eval.cli import judge_app, reference_command, report_command
from services.cli.common import emit_json
from services.cli.kb import kb_app
from services.cli.run import run_command
from services.serve import serve_command

app = typer.Typer(name="kar", pretty_exceptions_show_locals=False, help="CultureKAR: explain culture-dependent images and measure the explanations.", no_args_is_help=True)
app.add_typer(kb_app, name="kb")
app.command("crawl")(crawl_command)
app.add_typer(crawl_jobs_app, name="crawl-jobs")
app.command("explain")(explain_command)
app.command("run")(run_command)
app.add_typer(judge_app, name="judge")
app.command("report")(report_command)
app.command("report-refs")(reference_command)
app.command("serve")(serve_command)
app.add_typer(bench_app, name="bench")
judge_app.command("rubric")(rubric_command)
app.command("retrieve")(retrieve_command)
app.command("report-retrieval")(report_retrieval_command)


@app.command("config")
def config_cmd(
    json_out: Annotated[bool, typer.Option("--json", help="Effective settings as JSON (the default).")] = True,
    markdown: Annotated[bool, typer.Option("--markdown", help="The README's table of every setting instead.")] = False,
) -> None:
    """Print the effective settings (secrets masked), or the table of all settings."""
    from culturebase.settings import get_settings, settings_table

    if markdown:
        typer.echo(settings_table())
        return
    emit_json(get_settings().public_dict())


__all__ = ["app"]
