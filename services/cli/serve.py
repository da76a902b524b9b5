"""``kar serve``: the HTTP API and the web page under uvicorn.

The app warms grounding, the search stage, OCR and the VLM client as it starts (:mod:`services.warming`;
``KAR_API_WARMUP``): ``/healthz`` answers at once, ``/readyz`` once the warm-up is done, and the server logs
``warm-up done in N s ...: ready`` then.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Optional

import typer

from services.cli.console import ExitCode, err, fail, user_errors
from services.cli.options import KbOption

EXAMPLES = """\
Examples:

  kar serve --kb data/demo/culturebase

  kar serve --host 0.0.0.0 --port 8080 --workers 4  # more than one worker needs KAR_QDRANT_URL
"""


def check_workers(workers: int, qdrant_url: str | None) -> str | None:
    """Why ``workers`` cannot run (None: fine)."""
    if workers > 1 and not qdrant_url:
        return (
            f"--workers {workers} needs a Qdrant server: the embedded CultureBase is a folder only one process can "
            "open, and every uvicorn worker is a process. Set KAR_QDRANT_URL (e.g. http://localhost:6333) or use --workers 1."
        )
    return None


def serve_command(
    host: Annotated[
        Optional[str], typer.Option("--host", help="Bind address (default: KAR_API_HOST, 127.0.0.1).", show_default=False)
    ] = None,
    port: Annotated[
        Optional[int], typer.Option("--port", min=1, max=65535, help="Port (default: KAR_API_PORT, 8000).", show_default=False)
    ] = None,
    workers: Annotated[
        Optional[int],
        typer.Option("--workers", min=1, help="Worker processes (default: KAR_API_WORKERS, 1; more needs KAR_QDRANT_URL).", show_default=False),
    ] = None,
    kb: KbOption = None,
    reload: Annotated[bool, typer.Option("--reload", help="Restart on code changes (development).")] = False,
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn log level.")] = "info",
) -> None:
    """Serve the HTTP API and the web page (OpenAPI docs at /docs): POST /v1/explain, /v1/entities, crawl and ablation jobs."""
    from culturebase.settings import get_settings

    if kb is not None:  # uvicorn builds the app (and its workers) from the environment
        os.environ["KAR_KB_PATH"] = str(kb)
        get_settings.cache_clear()
    with user_errors():
        settings = get_settings()
    host = host or settings.api_host
    port = port or settings.api_port
    workers = workers or settings.api_workers
    problem = check_workers(workers, settings.qdrant_url)
    if problem:
        raise fail(problem, ExitCode.USAGE)
    if reload and workers > 1:
        raise fail("--reload runs one process; drop --workers or --reload", ExitCode.USAGE)
    import logging

    import uvicorn

    if log_level in ("info", "debug", "trace"):  # the warm-up's "ready" line and the app's notes
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
        logging.getLogger("services").addHandler(handler)
        logging.getLogger("services").setLevel(logging.INFO)
    where = settings.qdrant_url or str(settings.kb_path)
    err.print(f"CultureKAR API on http://{host}:{port} (docs at /docs, {workers} worker(s), CultureBase {where})", markup=False, highlight=False, soft_wrap=True)
    from services.cli.serve_guard import startup_failure

    try:
        _run(uvicorn, host, port, workers, reload, log_level)
    except SystemExit as exc:
        if exc.code == STARTUP_FAILURE:  # uvicorn's code for an app that did not start: the table's code instead
            raise fail(*startup_failure()) from None
        raise


#: uvicorn's exit code for an app whose startup failed (uvicorn.config.STARTUP_FAILURE)
STARTUP_FAILURE = 3


def _run(uvicorn: Any, host: str, port: int, workers: int, reload: bool, log_level: str) -> None:
    from services.cli.serve_guard import APP

    uvicorn.run(
        APP,
        factory=True,
        host=host,
        port=port,
        workers=workers,
        reload=reload,
        log_level=log_level,
        proxy_headers=True,
        server_header=False,
    )
