"""``/healthz`` (liveness), ``/readyz`` (warm-up done, store open; VLM and search reachable or not configured), ``/metrics``.

``/healthz`` answers 200 as soon as the process serves, warm-up or not; ``/readyz`` answers 503 with
``"status": "warming"`` and the parts still warming (:mod:`services.warming`) until the warm-up is done.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from services.deps import Services

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process answers (no dependency is checked)."""
    return {"status": "ok"}


async def _probe_vlm(services: Any) -> dict[str, Any]:
    vlm = services.vlm
    if vlm is None:
        return {"status": "not_configured", "detail": "set KAR_VLM_BASE_URLS and KAR_VLM_MODEL"}
    urls = list(getattr(vlm, "base_urls", []) or [])
    if not urls:
        return {"status": "ok", "detail": f"in-process {type(vlm).__name__}"}
    key = services.settings.vlm_api_key
    headers = {"Authorization": f"Bearer {key.get_secret_value()}"} if key else {}
    results = {}
    async with httpx.AsyncClient(timeout=2.0, trust_env=False) as client:
        for url in urls:
            try:
                r = await client.get(url.rstrip("/") + "/models", headers=headers)
                results[url] = "ok" if r.status_code < 500 else f"HTTP {r.status_code}"
            except httpx.HTTPError as exc:
                results[url] = f"unreachable ({type(exc).__name__})"
    ok = any(v == "ok" for v in results.values())
    return {"status": "ok" if ok else "unreachable", "endpoints": results}


@router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    services = getattr(request.app.state, "kar", None)
    if services is None:
        return JSONResponse({"status": "starting", "checks": {}}, status_code=503)
    checks: dict[str, Any] = {}
    try:
        count = await asyncio.wait_for(services.kb_read(services.kb.store.count), 5)  # no store lock: an import holds it for minutes
        checks["store"] = {"status": "ok", "entities": count, "backend": "qdrant-server" if services.settings.qdrant_url else "embedded"}
    except Exception as exc:
        checks["store"] = {"status": "error", "detail": f"{type(exc).__name__}: {exc}"}
    checks["vlm"] = await _probe_vlm(services)
    search = services.search
    checks["search"] = (
        {"status": "not_configured", "detail": "search_backend=none"}
        if search is None
        else {"status": "ok", "backend": services.settings.search_backend}
    )
    warmup = services.warmup
    warming = warmup.warming() if warmup is not None else []
    if warmup is not None:
        checks["warmup"] = warmup.report()
    ready = checks["store"]["status"] == "ok" and checks["vlm"]["status"] in ("ok", "not_configured")
    status = "warming" if warming and ready else "ready" if ready else "not_ready"
    body = {"status": status, "checks": checks, **({"warming": warming} if warming else {})}
    return JSONResponse(body, status_code=200 if status == "ready" else 503)


@router.get("/metrics")
async def metrics(services: Services) -> Response:
    return Response(services.metrics.render(), media_type=CONTENT_TYPE_LATEST)
