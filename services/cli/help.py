"""How ``kar … --help`` is laid out: rich panels on a wide terminal, plain wrapped text on a narrow one.

Typer's rich help cuts a word that does not fit its column with ``…`` (an option name at 40 columns,
``KAR_JUDGE_MAX_PARSE_RETRIES`` at 100), so below :data:`RICH_HELP_MIN_COLUMNS` every command's help
is click's plain layout, which wraps and never cuts; the root help keeps its journeys there as plain
sections (:func:`format_commands_by_panel`).  Usage errors follow the same choice (a rich error box at
40 columns wraps its one line into several).
"""

from __future__ import annotations

import shutil
from typing import Any

import typer

__all__ = ["KarTyper", "RICH_HELP_MIN_COLUMNS", "format_commands_by_panel", "help_columns"]

#: the narrowest help width at which no `kar … --help` loses a character to rich's ``…``: measured over every
#: command's help (at 100 columns `kar judge --help` still cut two setting names, at 120 none)
RICH_HELP_MIN_COLUMNS = 120
#: a command's summary in the plain command list: its first sentence up to this many characters (then wrapped)
SUMMARY_CHARS = 150


def help_columns() -> int:
    """The width help is laid out at: ``COLUMNS``, else the terminal's, else 80 (as rich and click find it)."""
    return shutil.get_terminal_size().columns


class KarTyper(typer.Typer):
    """A Typer whose help (and usage errors) is rich only on a terminal wide enough for it."""

    @property  # type: ignore[override]
    def rich_markup_mode(self) -> Any:
        return self._rich_markup_mode if help_columns() >= RICH_HELP_MIN_COLUMNS else None

    @rich_markup_mode.setter
    def rich_markup_mode(self, value: Any) -> None:
        self._rich_markup_mode = value


def format_commands_by_panel(group: Any, ctx: Any, formatter: Any) -> None:
    """The plain command list as one section per ``rich_help_panel`` (in the order commands were registered)."""
    panels: dict[str, list[tuple[str, str]]] = {}
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            continue
        panel = getattr(cmd, "rich_help_panel", None) or "Commands"
        panels.setdefault(panel, []).append((name, cmd.get_short_help_str(SUMMARY_CHARS)))
    for panel, rows in panels.items():
        with formatter.section(panel):
            formatter.write_dl(rows)
