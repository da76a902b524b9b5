"""The ``kar`` command line: one package, one file per command group.

- ``main.py``: the typer ``app`` (root help grouped by journey, ``--version``, the exit-code table)
- ``console.py``: the one stderr console, ``fail``, exit codes, JSON output, progress bars
- ``options.py``: options that mean the same everywhere (``--kb``, ``--model``, ``--base-url``, ``--api-key``, ``--json``)
- ``explain.py``, ``kb.py``, ``crawl.py``, ``serve.py``, ``config.py``, ``run.py``: the commands

``app`` is imported lazily so that a command module (or ``eval``'s CLI modules, which import
``services.cli.console``) can be imported without building the whole app.
"""

from __future__ import annotations

from typing import Any

__all__ = ["app"]


def __getattr__(name: str) -> Any:
    if name == "app":
        from services.cli.main import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
