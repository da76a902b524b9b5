"""``kar serve``'s part of the CLI-wide guard: an app that cannot start (an unreachable Qdrant server, a KB
folder that is a file, a missing model folder) ends ``kar serve`` with one ``error:`` line and the exit code
of the table, not Starlette's traceback and uvicorn's exit 3 (which the table gives to a partial import).

uvicorn builds the app from :func:`create_app` (an import string, so that ``--workers`` and ``--reload``
work); :class:`StartupGuard` wraps it and takes the exception out of the lifespan's ``startup.failed``
message (Starlette sends it while handling the exception, so it is the one being handled).  With
``kar --debug`` the message keeps the traceback.
"""

from __future__ import annotations

import sys
from typing import Any

from services.cli.console import DEBUG
from services.cli.errors import ExitCode, error_line

__all__ = ["APP", "STARTUP", "StartupGuard", "create_app"]

#: what uvicorn is given to build the app
APP = "services.cli.serve_guard:create_app"
#: the one line and exit code of a failed start (this process's app; a worker process logs its own)
STARTUP: dict[str, Any] = {"line": None, "code": None}


class StartupGuard:
    """An ASGI app around another whose failed startup is reported as one line (kept in :data:`STARTUP`)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def __getattr__(self, name: str) -> Any:  # the app's attributes (state, routes ...) as they are
        return getattr(self.app, name)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            return await self.app(scope, receive, send)

        async def guarded_send(message: Any) -> None:
            if message.get("type") == "lifespan.startup.failed":
                exc = sys.exc_info()[1]
                if exc is not None:
                    STARTUP["line"], STARTUP["code"] = error_line(exc)
                    if not DEBUG["on"]:
                        message = {**message, "message": ""}  # said once, by kar serve, as `error: ...`
            await send(message)

        await self.app(scope, receive, guarded_send)


def create_app() -> Any:
    """The API (services.app) behind the startup guard."""
    from services.app import create_app as build

    return StartupGuard(build())


def startup_failure() -> tuple[str, int]:
    """The line and exit code of the start that failed (exit 1 when the reason is not known)."""
    return STARTUP["line"] or "the API did not start (its log above says why)", STARTUP["code"] or ExitCode.FAILED
