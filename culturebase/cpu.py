"""One bounded thread pool per process for CPU stages: decode, OCR, embedding, hashing.

Every request of the API, every item of ``kar run`` and every crawl job in a process sends
its CPU work here, so concurrent work queues instead of all decoding at once: at most
``workers`` large images are decoded (or read by OCR) at the same time, whatever the number
of requests.  The size comes from ``KAR_CPU_WORKERS`` (default: the CPU count).

::

    from culturebase.cpu import cpu_pool
    text = await cpu_pool().run(ocr.read, image)      # from async code
    digest = cpu_pool().call(phash, image)             # from a synchronous thread
    copy = await cpu_pool().run_decode(mp, open_bounded, data, 1600)   # holds mp of the decode budget

A call made from inside a pool thread runs inline (no deadlock when a pooled function
calls another pooled function).  Work still waiting when its caller is cancelled (e.g. a
request past its deadline) is dropped before it starts.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class CpuParams:
    """Tuned values of the CPU pool and the process's heap.  No bench script chose them: each was set by
    hand on the measurement named beside it."""

    #: a pool job running at least this long (a decode, an OCR read) is followed by :func:`trim_heap`
    #: (set by hand: long jobs are the ones that free MB-sized buffers; trimming after 16 MP OCR reads took
    #: the steady RSS from 730 to 255 MB)
    trim_after_s: float = 0.05
    #: decodes of at most this many megapixels (a bounded working copy: 1600 x 1600 is 2.56 MP) are not
    #: counted against the decode budget: the pool's size bounds them (set by hand above the working copy)
    small_decode_mp: float = 3.0
    #: glibc's fixed mmap threshold: freed buffers at least this large go back to the OS at once (set by
    #: hand: two concurrent 16 MP OCRs peaked at 0.76 GB instead of 1.18 GB)
    mmap_threshold_bytes: int = 4 * 1024 * 1024
    #: glibc malloc arenas kept at most (set by hand with ``mmap_threshold_bytes``, the same measurement)
    arena_max: int = 2


PARAMS = CpuParams()

_local = threading.local()


@dataclass
class PoolStats:
    """Counters of one pool (read by /metrics and the benchmarks)."""

    workers: int
    queued: int
    running: int
    completed: int
    wait_s_total: float
    busy_s_total: float = 0.0  # thread-seconds spent running jobs (utilisation = busy / (workers × wall))


@dataclass
class _Job:
    run: Callable[[], Any]
    future: Future
    megapixels: float  # held from the decode budget while the job runs
    submitted: float
    deferred: bool = False  # waited in the queue for the budget


class CpuPool:
    """A fixed number of worker threads; callers beyond it wait in FIFO order.

    A job may declare the megapixels it will decode (:meth:`run_decode`).  It then starts
    only when the process's :class:`PixelBudget` has them free, and until then waits in the
    queue, not in a worker: the workers meanwhile take the jobs behind it that need no
    budget (an OCR read of an image already decoded, an embedding).  Jobs that declare
    megapixels keep their order among themselves, so a big decode is never overtaken for
    ever by smaller ones.
    """

    def __init__(self, workers: int | None = None, budget: PixelBudget | None = None) -> None:
        self.workers = max(1, int(workers or os.cpu_count() or 1))
        self.budget = budget or decode_budget()
        self._cond = self.budget._cond  # one condition: a freed budget wakes the workers
        self._jobs: deque[_Job] = deque()
        self._closed = False
        self._running = 0
        self._completed = 0
        self._wait_s = 0.0
        self._busy_s = 0.0
        self._threads = [
            threading.Thread(target=self._work, name=f"kar-cpu_{i}", daemon=True) for i in range(self.workers)
        ]
        for t in self._threads:
            t.start()

    # -- scheduling ---------------------------------------------------------------------
    def _submit(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any], megapixels: float = 0.0) -> Future:
        future: Future = Future()
        need = self.budget.needed(megapixels)
        with self._cond:
            if self._closed:
                raise RuntimeError("the CPU pool is shut down")
            self._jobs.append(_Job(lambda: fn(*args, **kwargs), future, need, time.perf_counter()))
            self._cond.notify_all()
        return future

    def _take(self) -> _Job | None:
        """The first queued job that can start now (called under the condition)."""
        budget_blocked = False
        for job in self._jobs:
            if job.future.cancelled():
                continue
            if job.megapixels > 0:
                if budget_blocked or not self.budget.fits(job.megapixels):
                    budget_blocked = True  # later budget jobs keep their place behind it
                    if not job.deferred:
                        job.deferred = True
                        self.budget.waits += 1
                    continue
                self.budget.used += job.megapixels
            self._jobs.remove(job)
            return job
        return None

    def _drop_cancelled(self) -> None:
        if any(j.future.cancelled() for j in self._jobs):
            self._jobs = deque(j for j in self._jobs if not j.future.cancelled())

    def _work(self) -> None:
        while True:
            with self._cond:
                self._drop_cancelled()
                job = self._take()
                while job is None:
                    if self._closed:
                        return
                    self._cond.wait()
                    self._drop_cancelled()
                    job = self._take()
                started = time.perf_counter()
                self._running += 1
                self._wait_s += started - job.submitted
            ran = job.future.set_running_or_notify_cancel()  # False: cancelled since it was taken
            result: Any = None
            error: BaseException | None = None
            if ran:
                _local.in_pool = True
                _local.reserved_mp = job.megapixels
                try:
                    result = job.run()
                except BaseException as exc:  # noqa: BLE001 - handed to the caller
                    error = exc
                finally:
                    _local.in_pool = False
                    _local.reserved_mp = 0.0
                    if time.perf_counter() - started >= PARAMS.trim_after_s:
                        trim_heap()  # a long job (decode, OCR) freed big buffers: hand the heap's free top back
            with self._cond:  # the budget is free again before the caller hears of the result
                self.budget.used -= job.megapixels
                self._running -= 1
                self._completed += int(ran)
                self._busy_s += time.perf_counter() - started
                self._cond.notify_all()
            if ran:
                if error is not None:
                    job.future.set_exception(error)
                else:
                    job.future.set_result(result)
            job = result = error = None  # type: ignore[assignment]  # no references kept while waiting

    # -- calling ------------------------------------------------------------------------
    @staticmethod
    def in_pool() -> bool:
        """True in a pool thread (calls from there run inline)."""
        return bool(getattr(_local, "in_pool", False))

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` in the pool and await it (queued while all workers are busy)."""
        return await self.run_decode(0.0, fn, *args, **kwargs)

    async def run_decode(self, megapixels: float, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """:meth:`run` for a job that decodes ``megapixels``: it starts when the budget has them.

        Its own :meth:`PixelBudget.hold` calls then pass at once (the job holds the budget).
        """
        if self.in_pool():
            with self.budget.hold(megapixels):
                return fn(*args, **kwargs)
        future = self._submit(fn, args, kwargs, megapixels)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()  # never started: dropped from the queue
            raise

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn`` in the pool from synchronous code and wait for its result."""
        if self.in_pool():
            return fn(*args, **kwargs)
        return self._submit(fn, args, kwargs).result()

    def stats(self) -> PoolStats:
        with self._cond:
            queued = sum(1 for j in self._jobs if not j.future.cancelled())
            return PoolStats(self.workers, queued, self._running, self._completed, self._wait_s, self._busy_s)

    def shutdown(self, cancel_queued: bool = True) -> None:
        """Stop the workers after their current jobs; queued jobs are cancelled, or with
        ``cancel_queued=False`` still run first."""
        with self._cond:
            self._closed = True
            if cancel_queued:
                for job in self._jobs:
                    job.future.cancel()
                self._jobs.clear()
            self._cond.notify_all()


_pool: CpuPool | None = None
_pool_lock = threading.Lock()
_heap_tuned = False

#: glibc mallopt parameters
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

_libc: Any = None


def _glibc() -> Any:
    """The C library when it is glibc (has ``mallopt`` and ``malloc_trim``), else False; loaded once."""
    global _libc
    if _libc is None:
        try:
            import ctypes
            import ctypes.util

            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            libc.mallopt, libc.malloc_trim  # noqa: B018 - glibc only
            _libc = libc
        except (OSError, AttributeError):
            _libc = False
    return _libc


def trim_heap() -> None:
    """``malloc_trim(0)`` (glibc): return the free memory at the top of the heaps to the OS.

    Buffers under the 4 MB mmap threshold (OCR line crops, PNG rows, tensors of the small
    models) are freed into the heap; without a trim the heap keeps its high-water mark and
    the next request's peak stacks on it.  Measured on 16 MP OCR reads: steady RSS 730 →
    255 MB.  A no-op where glibc is absent.
    """
    libc = _glibc()
    if libc:
        libc.malloc_trim(0)


def return_large_buffers_to_the_os() -> bool:
    """Make glibc give large freed buffers back at once (Linux/glibc only; elsewhere a no-op).

    A decoded photo, an OCR feature map and an ONNX activation are each several MB.  By
    default glibc raises its mmap threshold after such a buffer is freed, so the next ones
    come from per-thread heaps that keep their peak; with a fixed 4 MB threshold they are
    mmapped and unmapped when freed, and two heaps at most are kept.  Measured on two
    concurrent 16 MP OCRs: peak RSS 1.18 GB → 0.76 GB.  Returns True when applied.
    """
    global _heap_tuned
    if _heap_tuned:
        return True
    libc = _glibc()
    if not libc:
        return False
    ok = bool(libc.mallopt(M_MMAP_THRESHOLD, PARAMS.mmap_threshold_bytes)) and bool(libc.mallopt(M_ARENA_MAX, PARAMS.arena_max))
    _heap_tuned = ok
    return ok



class PixelBudget:
    """How many megapixels may be decoded at once in a process (``KAR_DECODE_BUDGET_MP``).

    A decode's memory is its pixels (a 16 MP WebP is decoded whole: ~200 MB at its peak;
    a JPEG is decoded at reduced scale), and the pool bounds how many decodes run, not how
    big they are.  A pool job that declares its megapixels (:meth:`CpuPool.run_decode`)
    holds them while it runs and waits for them in the queue; other code holds them with
    :meth:`hold` for the length of a decode.  One larger than the whole budget runs alone;
    decodes of at most ``PARAMS.small_decode_mp`` are not counted.
    """

    def __init__(self, megapixels: float) -> None:
        self.capacity = max(1.0, float(megapixels))
        self.used = 0.0
        self.waits = 0
        self._cond = threading.Condition()

    def needed(self, megapixels: float) -> float:
        """What a decode of ``megapixels`` holds: 0 when small, at most the whole budget."""
        if megapixels <= PARAMS.small_decode_mp:
            return 0.0
        return min(float(megapixels), self.capacity)

    def fits(self, need: float) -> bool:
        """True when ``need`` is free now (call under the condition)."""
        return self.used + need <= self.capacity

    @contextmanager
    def hold(self, megapixels: float) -> Iterator[None]:
        """Hold ``megapixels`` of the budget for the block (waiting until they are free).

        Passes at once for a small decode, and in a pool job that already holds the budget
        (:meth:`CpuPool.run_decode`: its estimate comes from the same header).
        """
        need = self.needed(megapixels)
        if need == 0.0 or getattr(_local, "reserved_mp", 0.0) > 0.0:
            yield
            return
        with self._cond:
            if not self.fits(need):
                self.waits += 1
            while not self.fits(need):
                self._cond.wait()
            self.used += need
        try:
            yield
        finally:
            with self._cond:
                self.used -= need
                self._cond.notify_all()


_budget: PixelBudget | None = None
_budget_lock = threading.Lock()


def decode_budget() -> PixelBudget:
    """The process-wide :class:`PixelBudget`, sized from ``KAR_DECODE_BUDGET_MP`` on first use."""
    global _budget
    if _budget is None:
        with _budget_lock:  # not _pool_lock: a pool being made under it asks for the budget
            if _budget is None:
                from culturebase.settings import get_settings

                _budget = PixelBudget(get_settings().decode_budget_mp)
    return _budget


def cpu_pool() -> CpuPool:
    """The process-wide pool, sized from ``KAR_CPU_WORKERS`` on first use."""
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                from culturebase.settings import get_settings

                return_large_buffers_to_the_os()
                _pool = CpuPool(get_settings().cpu_workers)
    return _pool


def configure_cpu_pool(workers: int | None) -> CpuPool:
    """Size the process-wide pool (the API and ``kar run`` call this with their settings).

    An existing pool of the same size is kept; another size replaces it (work already
    submitted finishes on the old one).
    """
    global _pool
    wanted = max(1, int(workers or os.cpu_count() or 1))
    return_large_buffers_to_the_os()
    with _pool_lock:
        if _pool is None or _pool.workers != wanted:
            old, _pool = _pool, CpuPool(wanted)
            if old is not None:
                old.shutdown(cancel_queued=False)
        return _pool
