"""Options that mean the same on every ``kar`` command, defined once.

A command takes them as ``Annotated`` parameters and turns them into settings overrides::

    def explain(..., kb: KbOption = None, model: ModelOption = None, base_url: BaseUrlOption = None,
                api_key: ApiKeyOption = None) -> None:
        settings = settings_with(**kb_override(kb), **vlm_overrides(model, base_url, api_key))

Each one defaults to its ``KAR_*`` setting, so env (or ``.env``) stays the default and the command
line wins.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

__all__ = [
    "ApiKeyOption",
    "BaseUrlOption",
    "JsonOption",
    "KbOption",
    "ModelOption",
    "dataset_option",
    "BenchAlias",
    "ImageRootOption",
    "MediaRootAlias",
    "ImageDirAlias",
    "kb_override",
    "pick",
    "vlm_overrides",
]

KbOption = Annotated[
    Optional[Path],
    typer.Option(
        "--kb",
        metavar="DIR",
        help="CultureBase folder (default: KAR_KB_PATH, data/culturebase). Ignored with KAR_QDRANT_URL.",
        show_default=False,
    ),
]

ModelOption = Annotated[
    Optional[str],
    typer.Option(
        "--model",
        metavar="ID",
        help="VLM model id served at the base URL(s) (default: KAR_VLM_MODEL).",
        show_default=False,
        rich_help_panel="Model",
    ),
]

BaseUrlOption = Annotated[
    Optional[list[str]],
    typer.Option(
        "--base-url",
        metavar="URL",
        help="OpenAI-compatible base URL of the VLM, e.g. http://localhost:8001/v1; repeat for replicas "
        "(default: KAR_VLM_BASE_URLS).",
        show_default=False,
        rich_help_panel="Model",
    ),
]

ApiKeyOption = Annotated[
    Optional[str],
    typer.Option(
        "--api-key",
        metavar="KEY",
        help="API key of the VLM server (default: KAR_VLM_API_KEY; prefer the env var, a flag shows in `ps`).",
        show_default=False,
        rich_help_panel="Model",
    ),
]

JsonOption = Annotated[
    bool,
    typer.Option("--json", help="Print machine-readable JSON on stdout instead of text (errors and progress stay on stderr)."),
]


def kb_override(kb: Path | None) -> dict[str, Any]:
    """Settings overrides for ``--kb``."""
    return {"kb_path": kb} if kb is not None else {}


def given(**values: Any) -> dict[str, Any]:
    """Settings overrides for the options given on the command line: unset (None, 0, empty) ones are left
    out, repeatable ones become lists."""
    return {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in values.items() if v}


def vlm_overrides(model: str | None, base_urls: list[str] | None, api_key: str | None) -> dict[str, Any]:
    """Settings overrides for ``--model``, ``--base-url`` and ``--api-key`` (unset ones are left out)."""
    return given(vlm_model=model, vlm_base_urls=base_urls, vlm_api_key=api_key)


def dataset_option(help: str) -> Any:
    """The ``--dataset FILE`` option of every evaluation command (``--bench``, its old name, is a hidden alias: ``BenchAlias``)."""
    return Annotated[Optional[Path], typer.Option("--dataset", metavar="FILE", help=help + " (required)", show_default=False)]


#: the old name of ``--dataset`` (judge, report, retrieve, judge rubric): still accepted, not shown in help
BenchAlias = Annotated[Optional[Path], typer.Option("--bench", hidden=True)]

ImageRootOption = Annotated[
    Optional[Path],
    typer.Option(
        "--image-root",
        metavar="DIR",
        help="Folder the dataset's media paths (images, videos, audio) are relative to (default: the dataset's folder).",
        show_default=False,
    ),
]

#: old names of ``--image-root`` (bench validate and judge rubric: --media-root; report-refs: --image-dir), hidden
MediaRootAlias = Annotated[Optional[Path], typer.Option("--media-root", hidden=True)]
ImageDirAlias = Annotated[Optional[Path], typer.Option("--image-dir", hidden=True)]


def pick(flag: str, value: Any, required: bool = False, **aliases: Any) -> Any:
    """The value of ``flag`` or of one of its hidden old names (``bench=...`` is ``--bench``); two different
    values, or none for a required option, are a usage error (exit 2)."""
    from services.cli.console import ExitCode, fail

    given = {flag: value} if value is not None else {}
    given |= {f"--{name.replace('_', '-')}": v for name, v in aliases.items() if v is not None}
    if len({str(v) for v in given.values()}) > 1:
        raise fail(f"{' and '.join(given)} name the same option ({flag}); give it once", ExitCode.USAGE)
    if not given:
        if required:
            raise fail(f"missing option {flag}", ExitCode.USAGE)
        return None
    return next(iter(given.values()))
