"""Dependencies injected with ``Annotated[..., Depends()]`` (tests override them with ``app.dependency_overrides``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request

from services.errors import ApiError
from services.security import Principal, authenticate
from services.state import KarServices


def get_services(request: Request) -> KarServices:
    services = getattr(request.app.state, "kar", None)
    if services is None:
        raise ApiError(503, "starting", "the service is starting or stopping")
    return services


Services = Annotated[KarServices, Depends(get_services)]


def require_write_key(request: Request, services: Services) -> Principal:
    """Writes (entities, imports, crawl jobs, ablations) always need a read-write API key."""
    return authenticate(request, services.keyring, write=True, required=True)


def explain_principal(request: Request, services: Services) -> Principal:
    """Explain: a key when KAR_API_REQUIRE_KEY_FOR_EXPLAIN is set; then the per-key (or per-client) rate limit."""
    principal = authenticate(request, services.keyring, write=False, required=services.settings.api_require_key_for_explain)
    services.limiter.check(principal.ident)
    return principal


WriteKey = Annotated[Principal, Depends(require_write_key)]
ExplainCaller = Annotated[Principal, Depends(explain_principal)]


def get_crawl_manager(services: Services) -> Any:
    """The crawl-job manager (reads: listing and inspecting jobs work with any store)."""
    return services.crawl_manager()


def get_crawl_starter(services: Services) -> Any:
    """The manager for starting jobs: only when crawl processes can write to the same CultureBase.

    The embedded store is a folder one process holds (flock) and this API process holds
    it; a crawl job runs in its own process, so it could not open it.  Starting jobs
    therefore needs a Qdrant server (``KAR_QDRANT_URL``), which many processes share.
    """
    if not services.settings.qdrant_url:
        raise ApiError(
            409,
            "crawl_needs_qdrant_server",
            f"crawl jobs cannot start here: the embedded CultureBase at {services.settings.kb_path} is held by this "
            "API process (single-process store) and a crawl job runs in its own process. Set KAR_QDRANT_URL "
            "(compose.yaml does), or stop the server and run `kar crawl`.",
        )
    return services.crawl_manager()


CrawlManager = Annotated[Any, Depends(get_crawl_manager)]
CrawlStarter = Annotated[Any, Depends(get_crawl_starter)]
