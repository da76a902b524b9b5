"""Terminal output shared by every package's commands: JSON to stdout, one-line errors and
progress bars on stderr (so ``--json`` output stays machine-readable)."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from rich.text import Text

err_console = Console(stderr=True)


class RateColumn(ProgressColumn):
    """Items per second (entities/s during an import)."""

    def render(self, task: Any) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.0f}/s" if speed else "-/s", style="progress.data.speed")


def emit_json(data: Any) -> None:
    """Write one JSON document to stdout."""
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n")
    sys.stdout.flush()


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``error: message`` on one line to stderr and return the Exit to raise."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def progress_bar(transient: bool = True, disable: bool = False) -> Progress:
    """A rich progress bar with count, rate (items/s), elapsed time and ETA (on stderr)."""
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=transient,
        disable=disable,
    )
