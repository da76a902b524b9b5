"""The CLI-wide guard: no traceback reaches a user of ``kar``.

The root command is a :class:`GuardedGroup`: an exception that escapes any subcommand becomes one
``error:`` line on stderr and the exit code of the table (:mod:`services.cli.errors`); ``kar --debug``
prints the traceback first.  Exits, usage errors (exit 2) and Ctrl-C (exit 130) keep typer's handling;
a closed pipe (``kar kb export | head``) ends quietly as typer ends it.
"""

from __future__ import annotations

import errno
from typing import Any

import typer
from typer.core import TyperGroup
from typer.exceptions import TyperException

from services.cli.console import DEBUG, fail, print_traceback
from services.cli.errors import error_line
from services.cli.help import format_commands_by_panel

__all__ = ["GuardedGroup"]


def _passes(exc: BaseException) -> bool:
    """Exceptions typer itself turns into an exit: exits, aborts, usage errors, a closed pipe."""
    if isinstance(exc, (typer.Exit, typer.Abort, TyperException, KeyboardInterrupt, EOFError)):
        return True
    return isinstance(exc, OSError) and exc.errno == errno.EPIPE


class GuardedGroup(TyperGroup):
    """The ``kar`` root group: what escapes a command is one line and its exit code; its plain help lists the
    commands by journey."""

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        format_commands_by_panel(self, ctx, formatter)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except BaseException as exc:
            if _passes(exc) or not isinstance(exc, Exception):
                raise
            if DEBUG["on"] or ctx.params.get("debug"):
                print_traceback(exc)
            raise fail(*error_line(exc)) from None
