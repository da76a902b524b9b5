"""One bounded thread pool per process for CPU stages: decode, OCR, embedding, hashing.

Every request of the API, every item of ``kar run`` and every crawl job in a process sends
its CPU work here, so concurrent work queues instead of all decoding at once: at most
``workers`` large images are decoded (or read by OCR) at the same time, whatever the number
of requests.  The size comes from ``KAR_CPU_WORKERS`` (default: the CPU count).

::

    from culturebase.cpu import cpu_pool
    text = await cpu_pool().run(ocr.read, image)      # from async code
    digest = cpu_pool().call(phash, image)             # from a synchronous thread

A call made from inside a pool thread runs inline (no deadlock when a pooled function
calls another pooled function).  Work still waiting when its caller is cancelled (e.g. a
request past its deadline) is dropped before it starts.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

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


class CpuPool:
    """A fixed number of worker threads; callers beyond it wait in FIFO order."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = max(1, int(workers or os.cpu_count() or 1))
        self._executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="kar-cpu")
        self._lock = threading.Lock()
        self._queued = 0
        self._running = 0
        self._completed = 0
        self._wait_s = 0.0
        self._busy_s = 0.0

    def _wrap(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], T]:
        submitted = time.perf_counter()
        with self._lock:
            self._queued += 1

        def job() -> T:
            started = time.perf_counter()
            with self._lock:
                self._queued -= 1
                self._running += 1
                self._wait_s += started - submitted
            _local.in_pool = True
            try:
                return fn(*args, **kwargs)
            finally:
                _local.in_pool = False
                if time.perf_counter() - started >= TRIM_AFTER_S:
                    trim_heap()  # a long job (decode, OCR) freed big buffers: hand the heap's free top back
                with self._lock:
                    self._running -= 1
                    self._completed += 1
                    self._busy_s += time.perf_counter() - started

        return job

    @staticmethod
    def in_pool() -> bool:
        """True in a pool thread (calls from there run inline)."""
        return bool(getattr(_local, "in_pool", False))

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` in the pool and await it (queued while all workers are busy)."""
        if self.in_pool():
            return fn(*args, **kwargs)
        job = self._wrap(fn, args, kwargs)
        future = self._executor.submit(job)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            if future.cancel():  # never started: undo the queue count
                with self._lock:
                    self._queued -= 1
            raise

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn`` in the pool from synchronous code and wait for its result."""
        if self.in_pool():
            return fn(*args, **kwargs)
        return self._executor.submit(self._wrap(fn, args, kwargs)).result()

    def stats(self) -> PoolStats:
        with self._lock:
            return PoolStats(self.workers, self._queued, self._running, self._completed, self._wait_s, self._busy_s)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


_pool: CpuPool | None = None
_pool_lock = threading.Lock()
_heap_tuned = False

#: glibc mallopt parameters
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8


#: a pool job running at least this long (a decode, an OCR read) is followed by :func:`trim_heap`
TRIM_AFTER_S = 0.05
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
    ok = bool(libc.mallopt(M_MMAP_THRESHOLD, 4 * 1024 * 1024)) and bool(libc.mallopt(M_ARENA_MAX, 2))
    _heap_tuned = ok
    return ok


class PixelBudget:
    """How many megapixels may be decoded at once in a process (``KAR_DECODE_BUDGET_MP``).

    A decode's memory is its pixels (a 16 MP WebP is decoded whole: ~200 MB at its peak;
    a JPEG is decoded at reduced scale), and the pool bounds how many decodes run, not how
    big they are.  Each decode holds its megapixels here for its duration; one larger than
    the whole budget runs alone.  Decodes of small images never wait on each other.
    """

    def __init__(self, megapixels: float) -> None:
        self.capacity = max(1.0, float(megapixels))
        self.used = 0.0
        self.waits = 0
        self._cond = threading.Condition()

    @contextmanager
    def hold(self, megapixels: float) -> Iterator[None]:
        """Hold ``megapixels`` of the budget for the block (waiting until they are free)."""
        need = min(max(0.0, megapixels), self.capacity)
        with self._cond:
            if self.used + need > self.capacity:
                self.waits += 1
            while self.used + need > self.capacity:
                self._cond.wait()
            self.used += need
        try:
            yield
        finally:
            with self._cond:
                self.used -= need
                self._cond.notify_all()


_budget: PixelBudget | None = None


def decode_budget() -> PixelBudget:
    """The process-wide :class:`PixelBudget`, sized from ``KAR_DECODE_BUDGET_MP`` on first use."""
    global _budget
    if _budget is None:
        with _pool_lock:
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
                old._executor.shutdown(wait=False)
        return _pool
