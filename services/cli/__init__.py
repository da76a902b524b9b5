"""The `kar` command: one typer app, one sub-command group per component."""

from __future__ import annotations

from typing import Annotated

import typer

from services.cli.common import emit_json
from services.cli.kb import kb_app

app = typer.Typer(name="kar", pretty_exceptions_show_locals=False, help="CultureKAR: explain culture-dependent images and measure the explanations.", no_args_is_help=True)
app.add_typer(kb_app, name="kb")


@app.command("config")
def config_cmd(json_out: Annotated[bool, typer.Option("--json")] = True) -> None:
    """Print the effective settings (secrets masked)."""
    from culturebase.settings import get_settings

    emit_json(get_settings().public_dict())


__all__ = ["app"]
