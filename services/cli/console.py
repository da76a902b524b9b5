"""The terminal side of every ``kar`` command: one stderr console, one ``fail``, JSON on stdout,
progress bars, and ``user_errors`` (the project's errors as one line and an exit code, from
:mod:`services.cli.errors`).

Human output goes to stderr (``err``) or, for tables a user reads, to stdout (``out``); ``--json``
output is one document on stdout.  Data shown through rich is escaped (rich reads ``[text]`` as
markup).

A terminal gets rich's layout at its width; a pipe or a file (``kar ... | tee log``, CI, tests) gets
every sentence, path and table row on one line whatever ``COLUMNS`` says (:class:`CliConsole`), so
what ``grep`` finds does not depend on the width of a terminal or the length of a path.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console, ConsoleDimensions
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from services.cli.errors import EXIT_CODES, ExitCode, exit_codes_text, user_error

__all__ = [
    "EXIT_CODES",
    "CliConsole",
    "DEBUG",
    "ExitCode",
    "console",
    "emit_json",
    "err",
    "examples",
    "exit_codes_text",
    "fail",
    "out",
    "print_traceback",
    "progress_bar",
    "run_async",
    "settings_with",
    "user_error",
    "user_errors",
]


def examples(*commands: str) -> str:
    """An ``Examples:`` help epilog (one paragraph per command; a ``# comment`` after a command is not part of it)."""
    return "Examples:\n\n" + "\n\n".join(f"  {c}" for c in commands)


#: the width a pipe or a file is laid out at: no sentence, path or table row of ours comes near it
UNWRAPPED_WIDTH = 1_000_000


class CliConsole(Console):
    """A rich console that lays out for a terminal and never hard-wraps anything else.

    Whether its stream is a terminal is asked at each print (tests and ``typer.testing`` swap
    ``sys.stdout``); off a terminal the width is unlimited, so a line ends only where the text has a
    newline.  Tables keep their natural width (none of ours expands)."""

    @property  # type: ignore[override]
    def size(self) -> ConsoleDimensions:
        size = Console.size.fget(self)  # type: ignore[attr-defined]
        return size if self.is_terminal else ConsoleDimensions(UNWRAPPED_WIDTH, size.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]

    def print(self, *objects: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """Print as rich does; on a terminal too narrow for a table's columns, the table as one block per row
        (:func:`services.cli.render.stacked`) instead of cells cut with ``…``."""
        if self.is_terminal and any(isinstance(o, Table) for o in objects):
            from services.cli.render import fits, stacked

            objects = tuple(stacked(o) if isinstance(o, Table) and not fits(self, o) else o for o in objects)
        super().print(*objects, **kwargs)

    def rule(self, title: Any = "", *, characters: str = "─", style: Any = "rule.line", align: Any = "center") -> None:
        """A horizontal rule: the terminal's width on a terminal; off it, just wider than its title."""
        if self.is_terminal:
            return super().rule(title, characters=characters, style=style, align=align)
        from rich.cells import cell_len
        from rich.rule import Rule

        plain = Text.from_markup(title).plain if isinstance(title, str) else str(title)
        self.print(Rule(title, characters=characters, style=style, align=align), width=max(80, cell_len(plain) + 8))


err = CliConsole(stderr=True)
console = err  # the name older modules import
out = CliConsole(soft_wrap=True)


class RateColumn(ProgressColumn):
    """Items per second (entities/s during an import)."""

    def render(self, task: Any) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.0f}/s" if speed else "-/s", style="progress.data.speed")


def emit_json(data: Any) -> None:
    """Write one JSON document to stdout."""
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n")
    sys.stdout.flush()


def fail(message: str, code: int = ExitCode.FAILED) -> typer.Exit:
    """Print ``error: message`` on one line to stderr (data shown as is) and return the Exit to raise."""
    err.print(Text.assemble(("error:", "bold red"), " ", message), highlight=False, soft_wrap=True)
    return typer.Exit(int(code))


def progress_bar(transient: bool = True, disable: bool = False) -> Progress:
    """A rich progress bar with count, rate (items/s), elapsed time and ETA (on stderr)."""
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=transient,
        disable=disable,
    )


#: ``kar --debug``: a command's error also prints its traceback (set by the root callback)
DEBUG = {"on": False}


def print_traceback(exc: BaseException) -> None:
    """The traceback of ``exc`` on stderr, as Python prints it (``kar --debug``)."""
    import traceback

    traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn the project's user-facing exceptions into a one-line error and its exit code (with
    ``kar --debug``, after the traceback); Ctrl-C exits 130; any other exception goes on to the CLI-wide
    guard (:mod:`services.cli.guard`)."""
    try:
        yield
    except (typer.Exit, typer.Abort):
        raise
    except KeyboardInterrupt:
        raise fail("cancelled", ExitCode.CANCELLED) from None
    except Exception as exc:
        known = user_error(exc)
        if known is None:
            raise
        if DEBUG["on"]:
            print_traceback(exc)
        raise fail(*known) from None


def run_async(coro: Any) -> Any:
    """Run a command's coroutine; user-facing errors become one line and their exit code."""
    with user_errors():
        return asyncio.run(coro)


def settings_with(**overrides: Any) -> Any:
    """The process settings with the command line's values applied (``None`` values are ignored).

    Keys are Settings field names (``kb_path``, ``vlm_model`` ...); the copy is validated again, so a
    bad value on the command line is the same error as a bad ``KAR_*`` value."""
    from culturebase.settings import Settings, get_settings

    settings = get_settings()
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if not overrides:
        return settings
    return Settings.model_validate({**settings.model_dump(), **overrides})
