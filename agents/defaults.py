"""Defaults that are settings: a function's or a parameters object's default read from the one place it is defined."""

from __future__ import annotations

from typing import Any

from culturebase.settings import Settings


def setting_default(name: str) -> Any:
    """The default of one setting (a field of :class:`culturebase.settings.Settings`)."""
    return Settings.model_fields[name].default
