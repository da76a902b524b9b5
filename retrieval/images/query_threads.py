"""One image query's independent work run side by side (``KAR_IMAGE_QUERY_THREADS``).

A query's picture regions and its whole picture are described apart, and its descriptors look up
their neighbours row by row: OpenCV and faiss release the GIL, so these run on several cores at
once and the query answers sooner, with the same result.  The work is not made smaller: a service
whose requests already keep every core busy gains nothing (set 1 there).

:class:`QueryThreads` runs a list of jobs on the calling thread and up to ``threads - 1`` pool
threads shared by every query of the route.  The calling thread runs the first job, then takes back
every job no pool thread has started (newest first, so a pool thread busy with another request's
job never makes this one wait in its queue), then waits for the started ones.  A job's exception
reaches the caller as if the jobs had run one after another.  :meth:`QueryThreads.ahead` starts jobs
before they are needed (the mirrored pass's descriptions while the first pass verifies): the caller
takes their results later the same way, or drops them, and what has not started never runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

T = TypeVar("T")


class QueryThreads:
    """Runs a query's independent jobs on the calling thread and ``threads - 1`` pool threads (built at first use)."""

    def __init__(self, threads: int = 1) -> None:
        if threads < 1:
            raise ValueError(f"query threads must be at least 1, got {threads}")
        self.threads = int(threads)
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.threads - 1, thread_name_prefix="kar-image-query")
            return self._pool

    def run(self, jobs: Sequence[Callable[[], T]]) -> list[T]:
        """Each job's result, in the jobs' order."""
        if self.threads <= 1 or len(jobs) <= 1:
            return [job() for job in jobs]
        rest = self.ahead(jobs[1:])
        try:
            first = jobs[0]()
        except BaseException:
            rest.drop()
            raise
        return [first, *rest.results()]

    def ahead(self, jobs: Sequence[Callable[[], T]]) -> "Ahead[T]":
        """Start these jobs on the pool threads and return at once: the caller goes on with other work and
        later takes :meth:`Ahead.results` (what no pool thread has started by then runs on the caller's thread)
        or :meth:`Ahead.drop` (what has not started never runs).  With one thread nothing starts early."""
        if self.threads <= 1 or not jobs:
            return Ahead(list(jobs), [])
        pool = self._executor()
        return Ahead(list(jobs), [pool.submit(job) for job in jobs])

    def close(self) -> None:
        """Stop the pool threads (a later :meth:`run` starts them again)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


class Ahead(Generic[T]):
    """Jobs started ahead of need (:meth:`QueryThreads.ahead`)."""

    def __init__(self, jobs: list[Callable[[], T]], futures: list["Future[T]"]) -> None:
        self._jobs = jobs
        self._futures = futures

    def results(self) -> list[T]:
        """Each job's result, in the jobs' order: the ones no pool thread has started run here (newest first),
        then the started ones are waited for.  A job's exception reaches the caller."""
        if not self._futures:
            return [job() for job in self._jobs]
        results: list[T | None] = [None] * len(self._jobs)
        try:
            for i in range(len(self._futures) - 1, -1, -1):
                if self._futures[i].cancel():
                    results[i] = self._jobs[i]()
            for i, future in enumerate(self._futures):
                if not future.cancelled():
                    results[i] = future.result()
        finally:
            self.drop()  # after an exception: what has not started does not run
        return results  # type: ignore[return-value]

    def drop(self) -> None:
        """Not needed after all: the jobs no pool thread has started never run (started ones finish unseen)."""
        for future in self._futures:
            future.cancel()
