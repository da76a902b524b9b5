"""What a ``kar`` command says when something goes wrong: the exit codes, and for each error one line
that names the ``KAR_*`` setting at fault where there is one.

:func:`user_error` knows the project's errors (and the Qdrant client's); :func:`error_line` also turns
any other exception into one line (exit 1), so that no traceback reaches a user (``kar --debug`` shows
it).  :func:`dotenv_problem` finds a ``.env`` line that would otherwise be ignored without a word.
"""

from __future__ import annotations

from enum import IntEnum
from pathlib import Path
from typing import Any

__all__ = [
    "EXIT_CODES", "ExitCode", "JUDGE_SETTINGS", "VLM_SETTINGS", "dotenv_problem", "error_line", "exit_codes_text",
    "naming", "one_line", "stage_error_line", "user_error", "with_settings_in",
]


class ExitCode(IntEnum):
    """The exit codes of every ``kar`` command."""

    OK = 0
    FAILED = 1  # something failed while running: a server, the store, a job or item, or an unexpected error
    USAGE = 2  # bad input or usage: an unknown name, a missing/invalid file, invalid or missing settings
    INCOMPLETE = 3  # partly done (an import rejected some lines, listed) or not doable now (a needed service is down)
    PARTIAL = 3  # an import stored some records and rejected others (listed with line numbers)
    UNREACHABLE = 3  # a service the command needs, the remote embedder, does not answer at all
    CANCELLED = 130  # stopped with Ctrl-C (a crawl job is cancelled; what it stored is kept)


EXIT_CODES: dict[int, str] = {
    ExitCode.OK: "success",
    ExitCode.FAILED: "runtime failure (a server other than the embedder unreachable, a server in error, store busy, locked or built with another "
    "embedder, failed job or item, unexpected error)",
    ExitCode.USAGE: "bad input or usage (unknown name, missing or invalid file, missing or invalid KAR_* setting "
    "or .env line)",
    ExitCode.INCOMPLETE: "incomplete: a partial import (some lines rejected; each is listed), or a service the command "
    "needs is unreachable (the remote embedder at KAR_EMBEDDER_URLS answers no request: start it and run again)",
    ExitCode.CANCELLED: "cancelled with Ctrl-C",
}

#: the longest message kept from an exception we did not write (a server's error page can be long)
MAX_MESSAGE = 400


def exit_codes_text() -> str:
    """The exit-code table as plain lines (the root help and the README show it)."""
    return "\n".join(f"{int(code):>3}  {text}" for code, text in EXIT_CODES.items())


def one_line(text: str, limit: int | None = MAX_MESSAGE) -> str:
    """``text`` on one line (runs of whitespace, newlines included, become one space), cut at ``limit`` characters
    (None: kept whole, for a message we wrote, such as every invalid item of a benchmark named)."""
    flat = " ".join(str(text).split())
    return flat if limit is None or len(flat) <= limit else flat[: limit - 1] + "…"


def naming(message: str, *settings: str) -> str:
    """``message`` followed by the settings at fault, unless it names one of them already."""
    if any(s in message for s in settings):
        return message
    return f"{message} ({', '.join(settings)})"


def _settings() -> Any:
    """The process settings, or None when they cannot be read (the error being described may be that)."""
    from culturebase.settings import get_settings

    try:
        return get_settings()
    except Exception:  # noqa: BLE001 - describing another error: a settings error is reported by its own path
        return None


def _dotenv_line(key: str, env_file: Path) -> int | None:
    """The line of ``env_file`` that sets ``key`` (the last one, as python-dotenv reads it)."""
    from dotenv.parser import parse_stream

    line = None
    with env_file.open(encoding="utf-8") as fh:
        for binding in parse_stream(fh):
            if binding.key and binding.key.upper() == key:
                line = binding.original.line
    return line


def settings_error_text(exc: Any) -> str:
    """``invalid settings: KAR_HNSW_EF='0' (.env line 2): Input should be greater than or equal to 1`` for each
    failing field of the Settings class."""
    from culturebase.settings import ENV_FILE, env_name, setting_sources

    sources = setting_sources()
    parts = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        name = env_name(field) if field else "KAR_*"
        where = sources.get(field, "")
        if where == ".env":
            line = _dotenv_line(name, Path(ENV_FILE))
            where = f".env line {line}" if line else ".env"
        value = error.get("input")
        shown = f"={one_line(repr(value), 80)}" if field and not isinstance(value, dict) else ""
        parts.append(f"{name}{shown}{f' ({where})' if where else ''}: {error['msg']}")
    return "invalid settings: " + "; ".join(parts)


def _qdrant_error(exc: BaseException) -> str:
    settings = _settings()
    url = getattr(settings, "qdrant_url", None) or "the Qdrant server"
    reason = one_line(str(exc) or type(exc).__name__)
    return f"Qdrant server {url} (KAR_QDRANT_URL) failed: {reason}"


def user_error(exc: BaseException) -> tuple[str, int] | None:
    """The one-line message and exit code of an error the project raises for a user (None: not one of them)."""
    from pydantic import ValidationError

    from agents.vlm import VLMNotConfiguredError
    from culturebase.store import StoreError
    from retrieval.embedders import EmbedderUnavailableError
    from retrieval.embedders.remote import RemoteEmbeddingError, RemoteUnreachableError
    from retrieval.knowledge_base import ImportFileError, format_validation_error
    from retrieval.websearch import SearchNotConfiguredError

    from eval.records import DatasetError

    if isinstance(exc, RemoteUnreachableError):  # no server answered: a service it needs is down
        return naming(one_line(str(exc)), "KAR_EMBEDDER_URLS"), ExitCode.UNREACHABLE
    if isinstance(exc, RemoteEmbeddingError):  # the server failed or answered wrongly: a runtime failure
        return naming(one_line(str(exc)), "KAR_EMBEDDER_URLS"), ExitCode.FAILED
    if isinstance(exc, (DatasetError, VLMNotConfiguredError, SearchNotConfiguredError, EmbedderUnavailableError,
                        ImportFileError)):
        return one_line(str(exc), limit=None), ExitCode.USAGE
    if isinstance(exc, ValueError) and "KAR_" in str(exc):  # a value error that names the setting at fault
        return one_line(str(exc), limit=None), ExitCode.USAGE
    if isinstance(exc, ValidationError):
        if exc.title == "Settings":
            return settings_error_text(exc), ExitCode.USAGE
        return f"invalid input: {format_validation_error(exc)}", ExitCode.USAGE
    if isinstance(exc, StoreError):
        if isinstance(exc.__cause__, OSError):  # the folder itself: not a folder, not readable or writable
            return naming(one_line(str(exc), limit=None), "KAR_KB_PATH", "--kb"), ExitCode.USAGE
        return one_line(str(exc), limit=None), ExitCode.FAILED  # the store's own message: the path and the setting to change
    if type(exc).__module__.startswith("qdrant_client"):
        return _qdrant_error(exc), ExitCode.FAILED
    if isinstance(exc, (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)):
        return f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "), ExitCode.USAGE
    if isinstance(exc, OSError):
        return f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "), ExitCode.FAILED
    return None


#: the settings of the VLM and of the judge (each also a command-line flag), named when their server fails
VLM_SETTINGS = ("KAR_VLM_BASE_URLS", "KAR_VLM_MODEL")
JUDGE_SETTINGS = ("KAR_JUDGE_BASE_URLS", "KAR_JUDGE_MODEL")
#: the settings behind a pipeline stage, named when the stage fails (trace ``error: {stage, type, message}``)
STAGE_SETTINGS: dict[str, tuple[str, ...]] = {
    "extract": VLM_SETTINGS, "answer": VLM_SETTINGS, "reason": VLM_SETTINGS, "search": ("KAR_SEARCH_BACKEND",),
    "ground": ("KAR_EMBEDDER", "KAR_KB_PATH"), "ocr": ("KAR_OCR_ENABLED",),
}
#: error types whose setting is known whatever the stage
TYPE_SETTINGS: dict[str, tuple[str, ...]] = {
    "RemoteEmbeddingError": ("KAR_EMBEDDER_URLS",), "RemoteUnreachableError": ("KAR_EMBEDDER_URLS",),
    "ResponseHandlingException": ("KAR_QDRANT_URL",),
    "UnexpectedResponse": ("KAR_QDRANT_URL",),
}


#: settings whose value, found in an error message we did not write, says which setting the error is about
VALUE_SETTINGS = ("qdrant_url", "embedder_urls", "vlm_base_urls", "judge_base_urls", "embedder_model", "kb_path")


def with_settings_in(message: str) -> str:
    """``message`` followed by the ``KAR_*`` settings whose values it holds (a URL, a folder), unless it names one."""
    from culturebase.settings import env_name

    settings = _settings()
    if settings is None or "KAR_" in message:
        return message
    found = []
    for field in VALUE_SETTINGS:
        value = getattr(settings, field, None)
        values = value if isinstance(value, list) else [value]
        if any(v and str(v).rstrip("/") in message for v in values):
            found.append(env_name(field))
    return naming(message, *found) if found else message


def stage_error_line(error: dict[str, Any]) -> str:
    """``failed at extract: m at http://...: APIConnectionError: Connection error. (KAR_VLM_BASE_URLS, KAR_VLM_MODEL)``
    for a pipeline trace's error."""
    stage = str(error.get("stage") or "?")
    settings = TYPE_SETTINGS.get(str(error.get("type")), STAGE_SETTINGS.get(stage, ()))
    text = f"failed at {stage}: {one_line(str(error.get('message') or error.get('type') or ''))}"
    return naming(text, *settings) if settings else text


def error_line(exc: BaseException) -> tuple[str, int]:
    """The one line and exit code for any exception: a known one's (:func:`user_error`), else its type and
    message, exit 1, with the way to see its traceback."""
    known = user_error(exc)
    if known is not None:
        return known
    text = with_settings_in(one_line(str(exc)))
    return f"{type(exc).__name__}{': ' + text if text else ''} (unexpected; `kar --debug ...` shows the traceback)", ExitCode.FAILED


def dotenv_problem(env_file: Path) -> str | None:
    """The first line of ``env_file`` that python-dotenv would skip without a word (it cannot be read as
    ``NAME=VALUE``, or has no ``=``), and how many more there are; None when every line is read."""
    from dotenv.parser import parse_stream

    if not env_file.is_file():
        return None
    problems = []
    with env_file.open(encoding="utf-8", errors="replace") as fh:
        for binding in parse_stream(fh):
            text = one_line(binding.original.string, 80)
            if binding.error:
                problems.append(f"{env_file} line {binding.original.line}: not a NAME=VALUE line: {text!r}")
            elif binding.key and binding.value is None:
                problems.append(f"{env_file} line {binding.original.line}: {binding.key} has no value (write {binding.key}=VALUE)")
    if not problems:
        return None
    more = f" (and {len(problems) - 1} more bad line(s))" if len(problems) > 1 else ""
    return problems[0] + more
