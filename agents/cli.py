"""Moved: the ``kar`` commands live in :mod:`services.cli` (``kar explain`` in ``services/cli/explain.py``).

A compatibility shim for modules that still import ``_run``, ``_settings`` and ``console`` from here
(``services/cli/run.py`` and ``bench_run.py`` before the evaluation commands move into
``services/cli``); the names resolve lazily, so ``agents`` imports nothing from ``services`` at
import time.  Delete this file once nothing imports it.
"""

from __future__ import annotations

from typing import Any

_MOVED = {
    "_run": ("services.cli.console", "run_async"),
    "_settings": ("services.cli.console", "settings_with"),
    "console": ("services.cli.console", "err"),
    "explain_command": ("services.cli.explain", "explain_command"),
    "NO_VLM_HELP": ("services.cli.explain", "NO_VLM_HELP"),
}


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    module, attr = _MOVED[name]
    return getattr(importlib.import_module(module), attr)
