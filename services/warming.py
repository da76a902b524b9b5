"""The API's warm-up: grounding, the search stage, OCR and the VLM client loaded before ``/readyz`` says ready.

A process's first explain loads what later ones reuse: the embedder's engine, tokenizers' and word
frequency tables, the corpus search's and the evidence selection's tables, the search cache's file, the
OCR models, the OpenAI client library.  ``create_app``'s lifespan starts
:class:`Warmup` once CultureBase is open and does not wait for it: uvicorn serves at once, ``/healthz``
answers 200 throughout, and ``/readyz`` answers 503 naming the parts still warming until every step
has run (a step that fails is logged and reported, and does not hold readiness back: the request
that needs the part loads it again and reports the error itself).  The steps (:func:`default_steps`) run
one after another in a worker thread, outside the store lock; none stores anything, keeps an answer or
calls the VLM.  ``KAR_API_WARMUP=false`` skips them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from services.params import PARAMS

log = logging.getLogger("services")

#: one warm-up step: its name (shown by /readyz) and a blocking call (its result: seconds per part)
Step = tuple[str, Callable[[], Any]]


class Warmup:
    """The warm-up steps of one API process and where each stands (pending, running, done, failed)."""

    def __init__(self, steps: Sequence[Step]) -> None:
        self.steps = list(steps)
        self.parts: dict[str, dict[str, Any]] = {name: {"status": "pending"} for name, _ in self.steps}
        self.task: asyncio.Task[None] | None = None
        self.seconds: float | None = None
        self._stopping = False

    def warming(self) -> list[str]:
        """The steps not finished yet (empty: warm)."""
        return [name for name, part in self.parts.items() if part["status"] in ("pending", "running")]

    def report(self) -> dict[str, Any]:
        """Each step's status, seconds and the seconds of its parts (or why it failed), and the total."""
        return {"status": "warming" if self.warming() else "done", "seconds": self.seconds, "parts": self.parts}

    def start(self) -> None:
        """Run the steps as a task on the running loop (returns at once)."""
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        started = time.perf_counter()
        for name, call in self.steps:
            if self._stopping:
                self.parts[name] = {"status": "skipped", "detail": "the server is stopping"}
                continue
            self.parts[name] = {"status": "running"}
            t0 = time.perf_counter()
            try:
                detail = await asyncio.to_thread(call)
            except Exception as exc:  # noqa: BLE001 - reported; the request that needs the part loads it again
                log.warning("warm-up of %s failed: %s: %s", name, type(exc).__name__, exc)
                self.parts[name] = {"status": "failed", "detail": f"{type(exc).__name__}: {exc}"}
                continue
            part: dict[str, Any] = {"status": "done", "seconds": round(time.perf_counter() - t0, 3)}
            if isinstance(detail, dict):
                part["parts"] = {k: round(float(v), 3) for k, v in detail.items()}
            self.parts[name] = part
        self.seconds = round(time.perf_counter() - started, 3)
        if self.steps:
            log.info("warm-up done in %.2f s (%s): ready", self.seconds, ", ".join(self.parts))

    async def aclose(self) -> None:
        """Skip the steps not started; wait up to ``PARAMS.stop_grace_s`` for the running one (it uses the store)."""
        self._stopping = True
        if self.task is not None and not self.task.done():
            done, _ = await asyncio.wait({self.task}, timeout=PARAMS.stop_grace_s)
            if not done:
                self.task.cancel()


def default_steps(services: Any) -> list[Step]:
    """The steps for this process's parts: grounding (when the pipeline grounds), the search stage (when the
    search backend is the local corpus and it holds pages), OCR (when it is on) and the VLM client's library
    (when the VLM is a server: importing it is most of a first call; nothing is sent)."""
    from retrieval.warmup import warm_grounder

    steps: list[Step] = []
    deps = getattr(services.pipeline, "deps", None)
    grounder = getattr(deps, "grounder", None)
    if grounder is not None:
        steps.append(("grounding", lambda: warm_grounder(grounder)))
    backend = getattr(services.search, "backend", services.search)
    kb = services.kb
    if backend is not None and hasattr(backend, "search_sync") and kb is not None and kb.store.has_corpus:
        steps.append(("corpus_search", lambda: warm_search_stage(deps, backend)))
    ocr = getattr(deps, "ocr", None)
    if ocr is not None and getattr(getattr(deps, "config", None), "ocr_enabled", True):
        steps.append(("ocr", lambda: warm_ocr(ocr)))
    if getattr(services.vlm, "base_urls", None):
        steps.append(("vlm_client", warm_vlm_client))
    return steps


def warm_search_stage(deps: Any, backend: Any) -> dict[str, float]:
    """What the pipeline's search stage loads on its first call: the corpus search (past the disk cache, which
    would keep the answers; the cache's file is opened by a lookup), a grounded entity's own pages and the
    evidence selection over the results."""
    from agents.pipeline.evidence import select_evidence
    from retrieval.warmup import WARMUP_TEXTS, warm_corpus_search

    seconds: dict[str, float] = {}
    cache = deps.search if deps.search is not backend else None
    if cache is not None and hasattr(cache, "get"):
        t0 = time.perf_counter()
        cache.get(WARMUP_TEXTS[0], 1)
        seconds["cache"] = time.perf_counter() - t0
    seconds.update(warm_corpus_search(backend))
    t0 = time.perf_counter()
    found = deps.grounder.search_text(WARMUP_TEXTS[0], top_k=1).candidates if deps.grounder is not None else []
    entities = [g.entity for g in found[:1]]
    own = deps.pages.for_entities(entities) if entities and deps.pages is not None else []
    triples = [(text, backend.name, backend.search_sync(text, 5)) for text in WARMUP_TEXTS]
    select_evidence(triples, entities, own)
    seconds["evidence"] = time.perf_counter() - t0
    return seconds


def warm_ocr(ocr: Any) -> dict[str, float]:
    """Read a small generated picture with a caption (the engine's models load on the first read)."""
    import io

    from PIL import Image, ImageDraw

    picture = Image.new("RGB", (320, 96), "white")
    ImageDraw.Draw(picture).text((12, 30), "warm up 12345", fill="black")
    buf = io.BytesIO()
    picture.save(buf, format="PNG")
    t0 = time.perf_counter()
    ocr.read(buf.getvalue())
    return {"read": time.perf_counter() - t0}


def warm_vlm_client() -> dict[str, float]:
    """Import the OpenAI client library the VLM backend builds its clients with on its first call, and what a
    client imports when it is built and first asked for chat completions (its HTTP transport, the chat
    resources): a throw-away client, pointed nowhere, that sends nothing."""
    t0 = time.perf_counter()
    import openai

    seconds = {"import": time.perf_counter() - t0}
    t0 = time.perf_counter()
    client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="warm-up", max_retries=0)
    client.chat.completions  # noqa: B018 - the attribute imports the chat resources
    seconds["client"] = time.perf_counter() - t0
    return seconds
