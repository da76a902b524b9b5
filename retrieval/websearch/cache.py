"""``CachedSearch``: a SQLite cache in front of any backend, shared by every condition of a run.

Entries are keyed by ``sha256(backend name, query, backend parameters)`` (the query with
whitespace collapsed; the grounded entity's ``names`` too when given, but only for a backend that
ranks with them, the local corpus: web backends ignore them, so their keys do not change), so a
query asked by Search-CoT and again by KAR reaches the backend once.  Concurrent identical
requests are coalesced (single flight).  In *replay-only* mode a miss raises
:class:`~retrieval.websearch.base.CacheMissError` instead of calling the backend, so a frozen
ablation reruns exactly.  Failed searches are never cached.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from retrieval.websearch.base import CacheMissError, SearchResult, WebSearch, uses_names

SCHEMA = """
CREATE TABLE IF NOT EXISTS search_cache (
    key TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    query TEXT NOT NULL,
    params TEXT NOT NULL,
    results TEXT NOT NULL,
    created_at REAL NOT NULL
)
"""


def normalize_query(query: str) -> str:
    """The query as cached: surrounding space stripped, inner whitespace collapsed."""
    return re.sub(r"\s+", " ", query).strip()


def cache_key(backend: str, query: str, params: dict[str, Any]) -> str:
    raw = json.dumps([backend, normalize_query(query), params], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


class CachedSearch:
    """A :class:`~retrieval.websearch.base.WebSearch` that answers from SQLite when it can."""

    def __init__(self, backend: WebSearch, path: Path | str, replay_only: bool = False) -> None:
        self.backend = backend
        self.name = backend.name
        self.path = Path(path)
        self.replay_only = replay_only
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._inflight: dict[str, asyncio.Future[list[SearchResult]]] = {}

    @property
    def uses_names(self) -> bool:
        """Whether its backend ranks with the ``names`` passed on to it (then they are part of the key)."""
        return uses_names(self.backend)

    def params(self, max_results: int) -> dict[str, Any]:
        return self.backend.params(max_results)

    def key_params(self, max_results: int, names: Sequence[str] | None = None) -> dict[str, Any]:
        """The parameters a cache entry is keyed on: the backend's, plus ``names`` (sorted, without repeats)
        when given and the backend ranks with them."""
        params = self.params(max_results)
        if names and uses_names(self.backend):
            params = {**params, "names": sorted({n for n in names if n})}
        return params

    @property
    def backend_calls(self) -> int:
        """Searches that reached the backend (cache misses) since this object was built."""
        return self.misses

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(SCHEMA)
            conn.commit()
            self._conn = conn
        return self._conn

    def get(self, query: str, max_results: int, names: Sequence[str] | None = None) -> list[SearchResult] | None:
        """The cached results, or None."""
        key = cache_key(self.name, query, self.key_params(max_results, names))
        with self._lock:
            row = self._db().execute("SELECT results FROM search_cache WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        return [SearchResult.from_dict(r) for r in json.loads(row[0])]

    def put(self, query: str, max_results: int, results: list[SearchResult], names: Sequence[str] | None = None) -> None:
        params = self.key_params(max_results, names)
        key = cache_key(self.name, query, params)
        blob = json.dumps([r.to_dict() for r in results], ensure_ascii=False)
        with self._lock:
            db = self._db()
            db.execute(
                "INSERT OR REPLACE INTO search_cache(key, backend, query, params, results, created_at) VALUES (?,?,?,?,?,?)",
                (key, self.name, normalize_query(query), json.dumps(params, sort_keys=True), blob, time.time()),
            )
            db.commit()

    def __len__(self) -> int:
        with self._lock:
            return int(self._db().execute("SELECT COUNT(*) FROM search_cache").fetchone()[0])

    async def search(self, query: str, max_results: int = 5, names: Sequence[str] | None = None) -> list[SearchResult]:
        cached = self.get(query, max_results, names)
        if cached is not None:
            self.hits += 1
            return cached
        if self.replay_only:
            raise CacheMissError(
                f"replay-only search cache {self.path}: no entry for {self.name} query {normalize_query(query)!r}"
            )
        key = cache_key(self.name, query, self.key_params(max_results, names))
        pending = self._inflight.get(key)
        if pending is not None:
            self.hits += 1
            return list(await asyncio.shield(pending))
        future: asyncio.Future[list[SearchResult]] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            self.misses += 1
            results = await self.backend.search(query, max_results, names=names)
            self.put(query, max_results, results, names)
            future.set_result(results)
            return results
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved so a lone failure logs nothing
            raise
        finally:
            self._inflight.pop(key, None)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    async def aclose(self) -> None:
        closer = getattr(self.backend, "aclose", None)
        if closer is not None:
            await closer()
        self.close()
