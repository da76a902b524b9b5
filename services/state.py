"""What one API process owns for its lifetime: CultureBase, the pipeline, job managers, limits."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any, TypedDict

from culturebase.settings import Settings
from services.ablations import AblationManager
from services.images import UrlFetcher
from services.import_jobs import ImportJobManager
from services.metrics import Metrics
from services.params import PARAMS
from services.security import KeyRing, RateLimiter

NO_VLM_HELP = (
    "no VLM is configured: set KAR_VLM_BASE_URLS (an OpenAI-compatible base URL, e.g. a vLLM server) "
    "and KAR_VLM_MODEL to generate explanations"
)


@dataclass
class KarServices:
    settings: Settings
    kb: Any  # retrieval.knowledge_base.KnowledgeBase
    pipeline: Any  # agents.pipeline.KARPipeline
    lock: threading.Lock
    vlm: Any
    search: Any
    metrics: Metrics
    keyring: KeyRing
    limiter: RateLimiter
    fetcher: UrlFetcher
    ablations: AblationManager
    notes: list[str] = field(default_factory=list)
    owns_kb: bool = True
    _crawl: Any = None
    admission: Any = None  # services.admission.Admission (bound to the app's metrics in the lifespan)
    imports: Any = None  # services.import_jobs.ImportJobManager
    warmup: Any = None  # services.warming.Warmup (started by the app's lifespan)

    def bind_admission(self) -> None:
        """The bounded queue and pipeline slots, reporting to this app's metrics; the CPU pool sized from settings."""
        from culturebase.cpu import configure_cpu_pool
        from services.admission import Admission

        s = self.settings
        pool = configure_cpu_pool(s.cpu_workers)
        self.admission = Admission(s.api_max_in_flight, s.api_queue_size, s.request_timeout_s, self.metrics,
                                   media_in_flight=s.media_max_in_flight or pool.workers)
        self.metrics.bind_cpu_pool(pool)

    async def kb_call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a (synchronous) store/embedder call in the threadpool under the store lock."""

        def run() -> Any:
            with self.lock:
                return fn(*args, **kwargs)

        return await asyncio.to_thread(run)

    async def kb_read(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a read-only store call (grounding search) in the threadpool without the store lock:
        the store serves concurrent searches and the KB's embedder serialises its own calls."""
        return await asyncio.to_thread(fn, *args, **kwargs)

    def crawl_manager(self) -> Any:
        if self._crawl is None:
            from crawlers.jobs import CrawlJobManager

            self._crawl = CrawlJobManager(self.settings)
        return self._crawl

    async def aclose(self) -> None:
        if self.warmup is not None:
            await self.warmup.aclose()
        if self.imports is not None:
            await self.imports.aclose()
        await self.ablations.aclose()
        for part in (self.vlm, self.search):
            closer = getattr(part, "aclose", None)
            if closer is not None:
                try:
                    await closer()
                except Exception:  # pragma: no cover - best effort
                    pass
        if self._crawl is not None:
            self._crawl.close()
        if self.owns_kb and self.kb is not None:
            # an import stopping at its next record still holds the store lock: close the KB once it lets go
            held = await asyncio.to_thread(self.lock.acquire, True, PARAMS.close_wait_s)
            try:
                self.kb.close()
            finally:
                if held:
                    self.lock.release()


class ServiceParts(TypedDict, total=False):
    """Parts a caller may pass in instead of having them built from settings (an open KnowledgeBase, test
    doubles); the defaults and meanings are :func:`build_services`'s."""

    kb: Any
    embedder: Any
    vlm: Any
    search: Any
    ocr: Any
    fetcher: UrlFetcher | None


def build_services(
    settings: Settings,
    *,
    kb: Any = None,
    embedder: Any = None,
    vlm: Any = "settings",
    search: Any = "settings",
    ocr: Any = "settings",
    fetcher: UrlFetcher | None = None,
) -> KarServices:
    """Open CultureBase and build the pipeline from settings (any part may be passed in, e.g. test doubles)."""
    from agents.factory import build_pipeline
    from retrieval.knowledge_base import KnowledgeBase

    notes: list[str] = []
    owns_kb = kb is None
    if kb is None:
        kb = KnowledgeBase.open(settings, embedder=embedder, create=True)
    try:
        from agents.pipeline import CONDITIONS

        resources = build_pipeline(settings, CONDITIONS, kb=kb, vlm=vlm, search=search, ocr=ocr)
        notes.extend(resources.notes)
        pipeline = resources.pipeline
        lock, vlm, search = pipeline.deps.lock, pipeline.deps.vlm, pipeline.deps.search
        metrics = Metrics()
        metrics.bind_search(search)
        max_bytes = int(settings.max_upload_mb * 1024 * 1024)
        services = KarServices(
            settings=settings,
            kb=kb,
            pipeline=pipeline,
            lock=lock,
            vlm=vlm,
            search=search,
            metrics=metrics,
            keyring=KeyRing(settings.api_keys),
            limiter=RateLimiter(settings.api_rate_limit_per_min),
            fetcher=fetcher or UrlFetcher(max_bytes=max_bytes),
            ablations=AblationManager(settings.data_dir, pipeline, vlm_configured=vlm is not None),
            notes=notes,
            owns_kb=owns_kb,
            imports=ImportJobManager(settings.data_dir, settings.api_max_import_mb),
        )
        services.bind_admission()
        return services
    except BaseException:
        if owns_kb:
            kb.close()
        raise
