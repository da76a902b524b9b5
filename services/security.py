"""API keys and the per-key rate limit.

Keys come from ``KAR_API_KEYS`` (comma-separated).  A key written ``ro:SECRET`` is
read-only: it may call explain (when explain needs a key) but no write.  A request
presents its key as ``Authorization: Bearer KEY`` or ``X-API-Key: KEY``.

* no key, or a key that matches none: **401** with ``WWW-Authenticate: Bearer``;
* a valid read-only key on a write, or any write while no keys are configured (writes are
  then disabled for everyone): **403**.

Keys are compared with :func:`hmac.compare_digest` against every configured key (no early
exit), and never logged: the rate limiter and logs see a short SHA-256 fingerprint.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import threading
import time
from collections import deque
from dataclasses import dataclass

from fastapi import Request

from services.errors import ApiError


@dataclass(frozen=True)
class Principal:
    """Who is calling: a key fingerprint (or the client address) and whether it may write."""

    ident: str
    can_write: bool
    authenticated: bool


def fingerprint(key: str) -> str:
    return "key:" + hashlib.sha256(key.encode()).hexdigest()[:12]


class KeyRing:
    """The configured keys, split into read-write and read-only."""

    def __init__(self, keys: list[str]) -> None:
        self.entries: list[tuple[bytes, bool]] = []
        for raw in keys:
            raw = raw.strip()
            if not raw:
                continue
            if raw.startswith("ro:"):
                self.entries.append((raw[3:].encode(), False))
            else:
                self.entries.append((raw.encode(), True))

    @property
    def configured(self) -> bool:
        return bool(self.entries)

    def match(self, presented: str) -> bool | None:
        """Constant-time lookup: None when no key matches, else whether it can write."""
        given = presented.encode()
        found: bool | None = None
        for secret, can_write in self.entries:
            if hmac.compare_digest(given, secret):  # every entry compared, no early exit
                found = can_write if found is None else (found or can_write)
        return found


def presented_key(request: Request) -> str | None:
    auth = request.headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    key = request.headers.get("x-api-key")
    return key.strip() if key and key.strip() else None


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, {"WWW-Authenticate": 'Bearer realm="culturekar"'})


def authenticate(request: Request, ring: KeyRing, *, write: bool, required: bool) -> Principal:
    """Check the request's key for an endpoint (``write``: changes state; ``required``: needs a key)."""
    key = presented_key(request)
    client = request.client.host if request.client else "unknown"
    if write and not ring.configured:
        raise ApiError(403, "writes_disabled", "writes are disabled: no API keys are configured on the server (set KAR_API_KEYS)")
    if key is None:
        if required or write:
            raise _unauthorized("an API key is required: send 'Authorization: Bearer KEY' or 'X-API-Key: KEY'")
        return Principal(ident=f"ip:{client}", can_write=False, authenticated=False)
    can_write = ring.match(key)
    if can_write is None:
        raise _unauthorized("the API key is not valid")
    if write and not can_write:
        raise ApiError(403, "forbidden", "this API key is read-only; writes need a read-write key")
    return Principal(ident=fingerprint(key), can_write=can_write, authenticated=True)


class RateLimiter:
    """A sliding one-minute window per principal (in process memory)."""

    def __init__(self, per_minute: int, window_s: float = 60.0) -> None:
        self.per_minute = per_minute
        self.window_s = window_s
        self._hits: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def check(self, ident: str) -> None:
        now = time.monotonic()
        with self._lock:
            hits = self._hits.setdefault(ident, deque())
            while hits and now - hits[0] >= self.window_s:
                hits.popleft()
            if len(hits) >= self.per_minute:
                retry = max(1, math.ceil(self.window_s - (now - hits[0])))
                raise ApiError(
                    429,
                    "rate_limited",
                    f"rate limit of {self.per_minute} explain requests per minute reached; retry in {retry} s",
                    {"Retry-After": str(retry)},
                )
            hits.append(now)
            if len(self._hits) > 10_000:  # forget idle principals
                for k in [k for k, v in self._hits.items() if not v or now - v[-1] >= self.window_s]:
                    del self._hits[k]
