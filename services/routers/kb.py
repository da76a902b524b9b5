"""``GET /v1/kb/stats``: entity counts by language and site, corpus size, backend, embedder."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from services.deps import Services

router = APIRouter(tags=["knowledge base"])


@router.get("/v1/kb/stats")
async def kb_stats(services: Services) -> dict[str, Any]:
    return await services.kb_call(services.kb.store.stats)
