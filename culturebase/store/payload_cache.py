"""Payloads of recently returned search hits, kept in the process (embedded backend).

The engine turns a hit's stored payload into Python objects on every search, and that cost, not
the graph walk, was most of a search's time: 35 µs a hit with the payloads in RAM and about 60 µs
with them on disk (``payload_memory=Cold``, a KB of ``KAR_LARGE_KB_ENTITIES`` points or more),
where an unfiltered 20-hit search without payloads takes 0.04–1.5 ms (``bench/grounding_precision.py``,
docs/grounding.md).  So :class:`~culturebase.store.edge.EdgeCollection` searches without payloads
and reads each hit's payload here; the points it has not seen are read in one ``retrieve``.

Entries are the engine's payload dicts, shared by every caller that gets them: read-only by
contract (:meth:`culturebase.entity.Entity.from_payload` copies what it keeps).  A write through
the collection drops the points it writes or deletes; the embedded store is single-process (its
lock), so no other process writes behind it.  At most ``PARAMS.payload_cache_points`` points are kept,
the least recently returned dropped first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from culturebase.store.params import PARAMS


class PayloadCache:
    """A bounded map point id → payload, least recently used dropped first; thread-safe."""

    def __init__(self, size: int | None = None) -> None:
        self.size = PARAMS.payload_cache_points if size is None else size
        self._items: OrderedDict[Any, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def lookup(self, keys: Iterable[Any]) -> tuple[dict[Any, dict[str, Any]], list[Any]]:
        """The payloads held for ``keys`` (each marked as just used), and the keys not held, in order."""
        found: dict[Any, dict[str, Any]] = {}
        missing: list[Any] = []
        with self._lock:
            items = self._items
            for key in keys:
                payload = items.get(key)
                if payload is None:
                    missing.append(key)
                else:
                    items.move_to_end(key)
                    found[key] = payload
        return found, missing

    def store(self, entries: Iterable[tuple[Any, dict[str, Any]]]) -> None:
        """Keep these payloads (dropping the least recently used beyond :attr:`size`)."""
        if self.size <= 0:
            return
        with self._lock:
            items = self._items
            for key, payload in entries:
                items[key] = payload
                items.move_to_end(key)
            while len(items) > self.size:
                items.popitem(last=False)

    def drop(self, keys: Iterable[Any]) -> None:
        """Forget these points (they were written or deleted)."""
        with self._lock:
            for key in keys:
                self._items.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
