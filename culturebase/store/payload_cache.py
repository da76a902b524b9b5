"""A small least-recently-used cache of payloads by point id, for a collection only this process writes.

A search that asks for a few payload keys (``payload_keys``) reads the whole payload of only the hits it
keeps (:meth:`~culturebase.store.base.Collection.retrieve`); the same pages come back query after query
(an entity's pages, a popular page), so the last :data:`PAYLOADS` of them are kept.  Every write to the
collection empties it: a cached payload is never older than the stored one.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

#: payloads kept (a few searches' worth of returned pages' chunks)
PAYLOADS = 512


class PayloadCache:
    """Payloads by point id, the least recently used dropped beyond ``size``; thread-safe."""

    def __init__(self, size: int = PAYLOADS) -> None:
        self.size = size
        self._items: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get_many(self, ids: Sequence[str]) -> tuple[dict[str, dict[str, Any]], list[str]]:
        """The cached payloads among ``ids`` (copies: a caller may change its own), and the ids not cached."""
        found: dict[str, dict[str, Any]] = {}
        missing: list[str] = []
        with self._lock:
            for i in ids:
                p = self._items.get(i)
                if p is None:
                    missing.append(i)
                else:
                    self._items.move_to_end(i)
                    found[i] = dict(p)
            self.hits += len(found)
            self.misses += len(missing)
        return found, missing

    def put_many(self, payloads: dict[str, dict[str, Any]]) -> None:
        with self._lock:
            for i, p in payloads.items():
                self._items[i] = dict(p)
                self._items.move_to_end(i)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
