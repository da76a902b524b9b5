"""First-come, first-served turns at the embedded engine's search call.

Qdrant Edge (``qdrant_edge`` 0.9) holds the Python interpreter lock (GIL) for the whole of a
search: a search thread halves a pure-Python thread's progress, and two search threads do no
more than one.  One process runs one engine search at a time whatever its callers do (hence
also ``KAR_SEARCH_THREADS`` = 1: the engine's own search pool only added hand-offs).

Left to CPython, eight threads searching one shard take the GIL in turns of up to 5 ms (the
switch interval): a thread whose search has returned can wait several of those turns before
it runs again, while another thread runs search after search.  Measured on 100k entities,
2 cores, 8 threads: p50 0.4 ms but p95 anywhere from 0.6 to 28 ms run to run, p99 30–60 ms.  These turns keep the
engine's one-at-a-time order but hand it over first come, first served: a caller waits on its
own event (GIL released) and the finishing caller wakes exactly the next one.  Same
measurement: p50 4.5–4.8 ms, p95 5–7 ms, p99 6–10 ms.

One :class:`FifoTurns` per shard (the entity and corpus collections do not wait for each
other); writes and the store-write lock are not involved.  Not re-entrant.
"""

from __future__ import annotations

import threading
from collections import deque


class FifoTurns:
    """One caller at a time, in arrival order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy = False
        self._waiters: deque[threading.Event] = deque()

    @property
    def waiting(self) -> int:
        """Callers queued for a turn (not counting the one holding it)."""
        with self._lock:
            return len(self._waiters)

    def _hand_over(self) -> None:
        """Give the turn to the longest-waiting caller, or free it (called under ``_lock``)."""
        if self._waiters:
            self._waiters.popleft().set()
        else:
            self._busy = False

    def turn(self) -> FifoTurns:
        """Hold the turn for a ``with`` block: at once when free, else after every earlier caller."""
        return self

    def __enter__(self) -> None:
        with self._lock:
            if not self._busy:
                self._busy = True
                return
            event = threading.Event()
            self._waiters.append(event)
        try:
            event.wait()
        except BaseException:  # interrupted while queued: leave the queue, or pass on a turn just given
            with self._lock:
                if event in self._waiters:
                    self._waiters.remove(event)
                else:
                    self._hand_over()
            raise

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._hand_over()
