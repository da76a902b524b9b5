"""The API's warm-up: grounding and the corpus search loaded before ``/readyz`` says ready.

A process's first grounding call and first corpus search load what later calls reuse (the embedder's
engine, tokenizers' tables, the corpus search's references).  ``create_app``'s lifespan starts
:class:`Warmup` once CultureBase is open and does not wait for it: uvicorn serves at once, ``/healthz``
answers 200 throughout, and ``/readyz`` answers 503 naming the parts still warming until every step
has run (a step that fails is logged and reported, and does not hold readiness back: the request
that needs the part loads it again and reports the error itself).  The steps are
:func:`retrieval.warmup.warm_grounder` and :func:`retrieval.warmup.warm_corpus_search`; they run one
after another in a worker thread, outside the store lock.  ``KAR_API_WARMUP=false`` skips them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger("services")

#: one warm-up step: its name (shown by /readyz) and a blocking call (its result: seconds per part)
Step = tuple[str, Callable[[], Any]]
#: seconds shutdown waits for a running step before leaving it
STOP_GRACE_S = 30.0


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
        """Skip the steps not started; wait up to :data:`STOP_GRACE_S` for the running one (it uses the store)."""
        self._stopping = True
        if self.task is not None and not self.task.done():
            done, _ = await asyncio.wait({self.task}, timeout=STOP_GRACE_S)
            if not done:
                self.task.cancel()


def default_steps(services: Any) -> list[Step]:
    """Grounding (when the pipeline grounds) and the corpus search (when the search backend is the local corpus
    and it holds pages), each bound to this process's parts."""
    from retrieval.warmup import warm_corpus_search, warm_grounder

    steps: list[Step] = []
    deps = getattr(services.pipeline, "deps", None)
    grounder = getattr(deps, "grounder", None)
    if grounder is not None:
        steps.append(("grounding", lambda: warm_grounder(grounder)))
    search = getattr(services.search, "backend", services.search)  # past the disk cache: it would keep the answers
    kb = services.kb
    if search is not None and hasattr(search, "search_sync") and kb is not None and kb.store.has_corpus:
        steps.append(("corpus_search", lambda: warm_corpus_search(search)))
    return steps
