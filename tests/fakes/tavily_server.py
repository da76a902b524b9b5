"""A local fake Tavily HTTP API (``POST /search``) on 127.0.0.1 for offline tests.

Drive it through the real ``tavily`` client with ``api_base_url=server.base_url``::

    with FakeTavilyServer() as server:
        server.enqueue(FakeTavilyReply(status=429))           # scripted errors first
        client = AsyncTavilyClient(api_key="k", api_base_url=server.base_url)

Without a scripted reply the server answers deterministically from the query: results
``{title: "Result i for <q>", url: "https://example.org/<slug>/i", content: ...}``, or from
``server.results[query]`` when set.  Every request is recorded.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

from tests.fakes.json_handler import JsonHandler


@dataclass
class FakeTavilyReply:
    status: int = 200
    body: Any = None
    delay_s: float = 0.0


@dataclass
class TavilyRequest:
    path: str
    headers: dict[str, str]
    json: dict[str, Any]

    @property
    def query(self) -> str:
        return str(self.json.get("query", ""))


def default_results(query: str, n: int) -> list[dict[str, Any]]:
    slug = re.sub(r"\W+", "-", query).strip("-").lower() or "q"
    return [
        {
            "title": f"Result {i} for {query}",
            "url": f"https://example.org/{slug}/{i}",
            "content": f"Snippet {i} about {query}.",
            "score": round(1.0 - i / 10, 2),
            "raw_content": None,
        }
        for i in range(1, n + 1)
    ]


@dataclass
class FakeTavilyServer:
    results: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    delay_s: float = 0.0
    requests: list[TavilyRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._queue: deque[FakeTavilyReply] = deque()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def enqueue(self, *replies: FakeTavilyReply) -> None:
        with self._lock:
            self._queue.extend(replies)

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def search_requests(self) -> list[TavilyRequest]:
        return [r for r in self.requests if r.path.rstrip("/").endswith("/search")]

    def start(self) -> "FakeTavilyServer":
        fake = self

        class Handler(JsonHandler):
            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    payload = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    payload = {}
                req = TavilyRequest(self.path, {k.lower(): v for k, v in self.headers.items()}, payload)
                with fake._lock:
                    fake.requests.append(req)
                    scripted = fake._queue.popleft() if fake._queue else None
                delay = scripted.delay_s if scripted else fake.delay_s
                if delay:
                    time.sleep(delay)
                if not self.headers.get("Authorization", "").startswith("Bearer "):
                    return self.send_json(401, {"detail": {"error": "Unauthorized: missing or invalid API key."}})
                if scripted is not None and (scripted.status != 200 or scripted.body is not None):
                    body = scripted.body if scripted.body is not None else {"detail": {"error": f"scripted {scripted.status}"}}
                    return self.send_json(scripted.status, body)
                if not self.path.rstrip("/").endswith("/search"):
                    return self.send_json(404, {"detail": {"error": "not found"}})
                query = str(payload.get("query", ""))
                n = int(payload.get("max_results") or 5)
                results = fake.results.get(query, default_results(query, n))[:n]
                self.send_json(200, {"query": query, "answer": None, "images": [], "results": results, "response_time": 0.01})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "FakeTavilyServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
