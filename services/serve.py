"""``kar serve``: run the API with uvicorn (registered by services.cli as ``app.command("serve")(serve_command)``)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer


def check_workers(workers: int, qdrant_url: str | None) -> str | None:
    """Why ``workers`` cannot run (None: fine)."""
    if workers > 1 and not qdrant_url:
        return (
            f"--workers {workers} needs a Qdrant server: the embedded CultureBase is a folder only one process can "
            "open, and every uvicorn worker is a process. Set KAR_QDRANT_URL (e.g. http://localhost:6333) or use --workers 1."
        )
    return None


def serve_command(
    host: Annotated[Optional[str], typer.Option("--host", help="Bind address (default KAR_API_HOST, 127.0.0.1).")] = None,
    port: Annotated[Optional[int], typer.Option("--port", min=1, max=65535, help="Port (default KAR_API_PORT, 8000).")] = None,
    workers: Annotated[Optional[int], typer.Option("--workers", min=1, help="Worker processes (>1 needs KAR_QDRANT_URL).")] = None,
    reload: Annotated[bool, typer.Option("--reload", help="Restart on code changes (development).")] = False,
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn log level.")] = "info",
) -> None:
    """Serve the HTTP API and the web page (OpenAPI docs at /docs)."""
    from culturebase.settings import get_settings

    try:
        settings = get_settings()
    except Exception as exc:  # invalid KAR_* values: one line, not a traceback
        typer.echo(f"error: invalid settings: {exc}".splitlines()[0], err=True)
        raise typer.Exit(1) from None
    host = host or settings.api_host
    port = port or settings.api_port
    workers = workers or settings.api_workers
    problem = check_workers(workers, settings.qdrant_url)
    if problem:
        typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(2)
    if reload and workers > 1:
        typer.echo("error: --reload runs one process; drop --workers or --reload", err=True)
        raise typer.Exit(2)
    import uvicorn

    typer.echo(f"CultureKAR API on http://{host}:{port} (docs at /docs, {workers} worker(s))", err=True)
    uvicorn.run(
        "services.app:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        reload=reload,
        log_level=log_level,
        proxy_headers=True,
        server_header=False,
    )
