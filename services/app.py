"""The FastAPI application: ``create_app()`` wires the routers, errors, limits, CORS and metrics.

The app owns one CultureBase for its lifetime (opened in the lifespan, closed at
shutdown); synchronous store writes run in the threadpool under one lock, grounding searches run
concurrently without it (the embedder is serialised, by `retrieval.embedders.serial`; the embedded
engine runs one search at a time on its own, taken in FIFO turns: `culturebase.store.fifo_turns`).
The lifespan starts the warm-up (`services.warming`) and serves at once; `/readyz` waits for it.
Request bodies are bounded by :class:`BodyLimitMiddleware`; the two streamed imports
(`services.import_jobs`) by KAR_API_MAX_IMPORT_MB.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.staticfiles import StaticFiles

from culturebase.settings import Settings, get_settings
from services.errors import ApiError, error_response, install_error_handlers
from services.metrics import Metrics, MetricsMiddleware
from services.params import PARAMS

if TYPE_CHECKING:
    from services.state import ServiceParts

log = logging.getLogger("services")
STATIC = Path(__file__).resolve().parent / "static"
#: the routes that stream their body to disk, under KAR_API_MAX_IMPORT_MB (services.import_jobs)
STREAMED_IMPORTS = ("/v1/corpus/import", "/v1/kb/import")


class BodyLimitMiddleware:
    """Refuse request bodies over the limit: by Content-Length up front, else while reading."""

    def __init__(self, app: Any, settings: Settings) -> None:
        self.app = app
        # an explain upload is an image (KAR_MAX_UPLOAD_MB) or a clip or sound (KAR_MEDIA_MAX_MB); the router
        # applies the limit of what the bytes turn out to be
        image = int(max(settings.max_upload_mb, settings.media_max_mb) * 1024 * 1024)
        # multipart adds part headers and form fields; base64 in JSON grows by 4/3
        self.upload_limit = image + PARAMS.body_slack_bytes
        self.json_limit = image * 4 // 3 + PARAMS.body_slack_bytes
        self.default_limit = PARAMS.default_body_bytes
        self.import_limit = int(settings.api_max_import_mb * 1024 * 1024)
        self.import_mb = settings.api_max_import_mb

    def limit_for(self, path: str, ctype: bytes) -> int:
        if path in STREAMED_IMPORTS:
            return self.import_limit
        if path.startswith("/v1/explain"):
            return self.upload_limit if ctype.lower().startswith(b"multipart/") else self.json_limit
        if path.startswith("/v1/entities/import"):
            return PARAMS.entities_import_max_bytes
        return self.default_limit

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        limit = self.limit_for(scope["path"], headers.get(b"content-type", b""))
        named = f" ({self.import_setting()})" if scope["path"] in STREAMED_IMPORTS else ""
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            response = error_response(413, "upload_too_large", f"request body is {int(length)} bytes; the limit here is {limit} bytes{named}")
            await response(scope, receive, send)
            return
        seen = 0

        async def limited_receive() -> dict[str, Any]:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise ApiError(413, "upload_too_large", f"request body exceeds the limit of {limit} bytes{named}")
            return message

        await self.app(scope, limited_receive, send)

    def import_setting(self) -> str:
        from services.import_jobs import LIMIT_SETTING

        return f"{LIMIT_SETTING}={self.import_mb:g}"


def create_app(settings: Settings | None = None, *, warmup: Any = "settings", **parts: Unpack[ServiceParts]) -> FastAPI:
    """Build the API (``parts`` may be passed in: an open KnowledgeBase, a VLM double, a search double; ``warmup``:
    the warm-up steps, ``[(name, blocking call), ...]``, or "settings": grounding and the corpus search when
    KAR_API_WARMUP is on, see :mod:`services.warming`)."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from services.state import build_services

        services = await asyncio.to_thread(build_services, settings, **parts)
        services.metrics = metrics
        metrics.bind_search(services.search)
        services.bind_admission()
        app.state.kar = services
        for note in services.notes:
            log.warning("%s", note)
        from services.warming import Warmup, default_steps

        steps = (default_steps(services) if settings.api_warmup else []) if warmup == "settings" else list(warmup or [])
        services.warmup = Warmup(steps)
        services.warmup.start()  # /healthz serves meanwhile; /readyz says what is still warming
        try:
            yield
        finally:
            app.state.kar = None
            await services.aclose()

    app = FastAPI(
        title="CultureKAR",
        version="0.1.0",
        description="Explain culture-dependent images with grounded cultural knowledge; manage CultureBase, crawl and ablation jobs.",
        lifespan=lifespan,
    )
    app.state.kar = None
    metrics = Metrics()
    install_error_handlers(app)

    from services.routers import ablations, calibration, corpus, crawl_jobs, entities, explain, health, images, kb as kb_router, web

    for module in (health, explain, entities, images, kb_router, corpus, crawl_jobs, ablations, calibration, web):
        app.include_router(module.router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    app.add_middleware(BodyLimitMiddleware, settings=settings)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "PUT", "DELETE", "OPTIONS"],
            allow_headers=["Authorization", "X-API-Key", "Content-Type"],
            max_age=600,
        )
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return app
