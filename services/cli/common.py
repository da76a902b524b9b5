"""Shared CLI plumbing: one-line errors with exit codes, JSON output, progress bars."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from culturebase.console import emit_json, err_console, fail, progress_bar

__all__ = ["console", "emit_json", "fail", "progress_bar", "user_errors"]

console = err_console


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
