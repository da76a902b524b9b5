"""The ``kar`` command line: one package, one file per command group.

- ``main.py``: the typer ``app`` (root help grouped by journey, ``--version``, the exit-code table)
- ``console.py``: the one stderr console, ``fail``, exit codes, JSON output, progress bars
- ``options.py``: options that mean the same everywhere (``--kb``, ``--model``, ``--base-url``, ``--api-key``,
  ``--json``, ``--dataset``, ``--image-root``; old names as hidden aliases)
- ``explain.py``, ``kb.py``, ``crawl.py``, ``serve.py``, ``config.py``: the commands
- ``run.py``, ``judge.py`` (judge, judge run, merge, rubric), ``report.py`` (report, report-refs),
  ``bench.py`` (bench validate/convert, retrieve, report-retrieval): the evaluation commands, thin
  over :mod:`eval`

``app`` is imported lazily so that a command module can be imported without building the whole app.
"""

from __future__ import annotations

from typing import Any

__all__ = ["app"]


def __getattr__(name: str) -> Any:
    if name == "app":
        from services.cli.main import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
