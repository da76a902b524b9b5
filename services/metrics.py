"""Prometheus metrics of one app (its own registry, so several apps can live in one process)."""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128)


class Metrics:
    """Request and per-stage latency histograms, VLM and search calls, cache hits, errors."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("kar_http_requests_total", "HTTP requests", ["method", "route", "status"], registry=r)
        self.latency = Histogram("kar_http_request_duration_seconds", "HTTP request latency", ["method", "route"], buckets=LATENCY_BUCKETS, registry=r)
        self.stage = Histogram("kar_pipeline_stage_duration_seconds", "Pipeline stage latency", ["stage"], buckets=LATENCY_BUCKETS, registry=r)
        self.explains = Counter("kar_explain_total", "Explain requests by condition and outcome", ["condition", "outcome"], registry=r)
        self.vlm_calls = Counter("kar_vlm_calls_total", "VLM calls", ["stage"], registry=r)
        self.vlm_tokens = Counter("kar_vlm_tokens_total", "VLM tokens", ["kind"], registry=r)
        self.search_calls = Counter("kar_search_calls_total", "Web search calls", ["outcome"], registry=r)
        self.search_cache_hits = Gauge("kar_search_cache_hits", "Search cache hits since start", registry=r)
        self.errors = Counter("kar_errors_total", "Error responses by code", ["code"], registry=r)
        self.in_flight = Gauge("kar_explain_in_flight", "Explain requests in flight", registry=r)
        # back-pressure (services.admission) and the CPU pool (culturebase.cpu)
        self.queue_depth = Gauge("kar_explain_queue_depth", "Explain requests admitted and waiting for a pipeline slot", registry=r)
        self.queue_capacity = Gauge("kar_explain_queue_capacity", "Explain requests allowed to wait (KAR_API_QUEUE_SIZE)", registry=r)
        self.queue_wait = Histogram("kar_explain_queue_wait_seconds", "Time from arrival to a pipeline slot", buckets=LATENCY_BUCKETS, registry=r)
        self.rejections = Counter("kar_explain_rejected_total", "Explain requests refused with 503 before any work", ["reason"], registry=r)
        self.timeouts = Counter("kar_explain_timeouts_total", "Explain requests past KAR_REQUEST_TIMEOUT_S, by where they were", ["stage"], registry=r)
        self.cpu_workers = Gauge("kar_cpu_pool_workers", "Threads of the process-wide CPU pool", registry=r)
        self.cpu_queued = Gauge("kar_cpu_pool_queued", "CPU jobs waiting for a pool thread", registry=r)
        self.cpu_running = Gauge("kar_cpu_pool_running", "CPU jobs running in the pool", registry=r)
        self.cpu_wait = Gauge("kar_cpu_pool_wait_seconds_total", "Total time CPU jobs waited for a pool thread", registry=r)
        self.cpu_busy = Gauge("kar_cpu_pool_busy_seconds_total", "Thread-seconds the pool spent running CPU jobs", registry=r)

    def bind_cpu_pool(self, pool: Any) -> None:
        """Read the pool's counters at scrape time."""
        self.cpu_workers.set_function(lambda: float(pool.stats().workers))
        self.cpu_queued.set_function(lambda: float(pool.stats().queued))
        self.cpu_running.set_function(lambda: float(pool.stats().running))
        self.cpu_wait.set_function(lambda: float(pool.stats().wait_s_total))
        self.cpu_busy.set_function(lambda: float(pool.stats().busy_s_total))

    def bind_search(self, search: Any) -> None:
        if search is not None and hasattr(search, "hits"):
            self.search_cache_hits.set_function(lambda: float(getattr(search, "hits", 0)))

    def observe_result(self, condition: str, trace: dict[str, Any], ok: bool) -> None:
        self.explains.labels(condition, "ok" if ok else "failed").inc()
        for stage, seconds in (trace.get("timings") or {}).items():
            if stage != "total" and isinstance(seconds, (int, float)):
                self.stage.labels(stage).observe(seconds)
        for call in trace.get("vlm_calls") or []:
            self.vlm_calls.labels(call.get("stage", "?")).inc()
            self.vlm_tokens.labels("prompt").inc(call.get("prompt_tokens") or 0)
            self.vlm_tokens.labels("completion").inc(call.get("completion_tokens") or 0)
        for s in trace.get("searches") or []:
            self.search_calls.labels("error" if s.get("error") else "ok").inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsMiddleware:
    """Pure ASGI: counts and times every HTTP request by route template (never by raw path)."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            label = getattr(route, "path", None) or ("/static" if scope["path"].startswith("/static/") else "unmatched")
            self.metrics.requests.labels(scope["method"], label, str(status["code"])).inc()
            self.metrics.latency.labels(scope["method"], label).observe(time.perf_counter() - started)
            code = (scope.get("state") or {}).get("error_code")
            if status["code"] >= 400:
                self.metrics.errors.labels(code or str(status["code"])).inc()
