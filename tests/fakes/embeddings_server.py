"""A local fake OpenAI-compatible ``/v1/embeddings`` server: real HTTP on 127.0.0.1, random port.

Vectors are deterministic functions of the text (a hashed bag of character bigrams, so that texts
sharing words are near), of size ``dim``.  ``delay_s`` makes every request take a fixed time (the
scaling bench); ``fail_next(n, status)`` makes the next n requests fail; every request is recorded::

    with FakeEmbeddingsServer(dim=16) as server:
        embedder = RemoteEmbedder([server.base_url], server.model)
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import ThreadingHTTPServer
from typing import Any

import numpy as np

from tests.fakes.json_handler import JsonHandler


def fake_vector(text: str, dim: int) -> list[float]:
    """A deterministic unit vector of ``text``: hashed character bigrams (and single characters)."""
    vec = np.zeros(dim, dtype=np.float64)
    grams = [text[i : i + 2] for i in range(max(1, len(text) - 1))] + list(text)
    for g in grams:
        h = hashlib.blake2b(g.encode("utf-8"), digest_size=8).digest()
        vec[int.from_bytes(h[:4], "little") % dim] += 1.0 if h[4] & 1 else -1.0
    norm = float(np.linalg.norm(vec)) or 1.0
    return (vec / norm).tolist()


class FakeEmbeddingsServer:
    """Threaded fake embeddings server (use as a context manager)."""

    def __init__(self, dim: int = 32, model: str = "fake/embedder", delay_s: float = 0.0, served_model: str | None = None) -> None:
        self.dim = dim
        self.model = model
        self.served_model = served_model or model
        self.delay_s = delay_s
        self.requests: list[dict[str, Any]] = []
        self._fail: list[int] = []
        self._lock = threading.Lock()
        self.max_in_flight = 0
        self._in_flight = 0
        server = self

        class Handler(JsonHandler):
            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    server.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
                    fail = server._fail.pop(0) if server._fail else None
                    server._in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server._in_flight)
                try:
                    if server.delay_s:
                        time.sleep(server.delay_s)
                    if self.path.rstrip("/") != "/v1/embeddings":
                        self.send_json(404, {"error": {"message": f"no route {self.path}"}})
                        return
                    if fail is not None:
                        self.send_json(fail, {"error": {"message": "scripted failure"}})
                        return
                    texts = body.get("input")
                    if isinstance(texts, str):
                        texts = [texts]
                    data = [{"object": "embedding", "index": i, "embedding": fake_vector(t, server.dim)} for i, t in enumerate(texts)]
                    tokens = sum(len(t) for t in texts)
                    self.send_json(200, {"object": "list", "model": server.served_model, "data": data[::-1],
                                     "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})
                finally:
                    with server._lock:
                        server._in_flight -= 1

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def fail_next(self, n: int, status: int = 503) -> None:
        """Make the next ``n`` requests answer ``status``."""
        with self._lock:
            self._fail.extend([status] * n)

    def __enter__(self) -> "FakeEmbeddingsServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def main() -> None:
    """Serve in a process of its own (benches: the server's JSON work does not share the client's GIL);
    prints the base URL on one line, serves until stdin closes."""
    import argparse
    import sys

    ap = argparse.ArgumentParser()
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--delay-s", type=float, default=0.0)
    ap.add_argument("--model", default="fake/embedder")
    args = ap.parse_args()
    with FakeEmbeddingsServer(dim=args.dim, model=args.model, delay_s=args.delay_s) as server:
        print(server.base_url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
