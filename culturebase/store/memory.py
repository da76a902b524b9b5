"""Memory of the embedded engine as the operating system sees it, and handing its freed heap back.

The embedded engine (Qdrant Edge, Rust) allocates through the C library.  An index build frees
most of what it allocated, but glibc keeps freed blocks in its per-thread arenas, so the
process's anonymous memory stays at the build's peak; :func:`release_free_heap` returns it
(``malloc_trim``).  :func:`memory_now` splits resident memory into anonymous (heap: what an
import really holds) and file-backed (memory-mapped store files: page cache the kernel reclaims
under pressure).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from functools import lru_cache
from typing import Any

log = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def _libc() -> Any:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def release_free_heap() -> bool:
    """Hand the C heap's freed memory back to the OS (glibc ``malloc_trim``); False where there is none."""
    libc = _libc()
    if libc is None:
        return False
    return bool(libc.malloc_trim(0))


def memory_now(pid: int | str = "self") -> dict[str, int]:
    """Resident memory of a process in bytes: ``rss``, ``anon`` (heap, stacks) and ``file`` (mapped files),
    from ``/proc/<pid>/status``; empty where there is no such file (not Linux, process gone)."""
    keys = {"VmRSS": "rss", "RssAnon": "anon", "RssFile": "file", "RssShmem": "shmem"}
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in keys:
                    out[keys[key]] = int(value.split()[0]) * 1024
    except OSError:
        return {}
    return out
