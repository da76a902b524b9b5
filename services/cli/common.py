"""Shared CLI plumbing: one-line errors with exit codes, JSON output, progress bars."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

console = Console(stderr=True)


def emit_json(data: Any) -> None:
    """Write one JSON document to stdout."""
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n")
    sys.stdout.flush()


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``error: message`` on one line to stderr and return the Exit to raise."""
    console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn the project's user-facing exceptions into a one-line error and exit code 1."""
    from pydantic import ValidationError

    from culturebase.store import StoreError
    from retrieval.embedders import EmbedderUnavailableError
    from retrieval.knowledge_base import ImportFileError, format_validation_error

    try:
        yield
    except (StoreError, EmbedderUnavailableError, ImportFileError) as exc:
        raise fail(str(exc)) from None
    except ValidationError as exc:
        raise fail(f"invalid settings: {format_validation_error(exc)}") from None
    except OSError as exc:
        raise fail(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": ")) from None


def progress_bar(transient: bool = True) -> Progress:
    """A rich progress bar with count, elapsed time and ETA (on stderr)."""
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=transient,
    )
