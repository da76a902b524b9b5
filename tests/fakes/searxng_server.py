"""A local fake SearXNG instance (``GET /search?q=…&format=json``) on 127.0.0.1 for offline tests.

Answers in the shape SearXNG's JSON format has (searx/webapp.py writes it from the result
container): ``query``, ``number_of_results``, ``results`` (each with ``url``, ``title``,
``content``, ``engine``, ``engines``, ``parsed_url``, ``template``, ``positions``, ``score``,
``category``, ``publishedDate``, ``thumbnail``, ``priority``), ``answers``, ``corrections``,
``infoboxes``, ``suggestions`` and ``unresponsive_engines`` (``[[engine, reason], …]``).  Without
``format=json`` it answers HTML, and with ``json_enabled = False`` it answers 403, as a fresh
instance does.  Scripted replies (``enqueue``) come first; every request is recorded.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.json_handler import JsonHandler


@dataclass
class FakeSearxngReply:
    status: int = 200
    body: Any = None


def result(url: str, title: str, content: str, engine: str = "duckduckgo", position: int = 1) -> dict[str, Any]:
    """One result as SearXNG's JSON lists it."""
    parts = urlsplit(url)
    return {
        "url": url,
        "title": title,
        "content": content,
        "engine": engine,
        "template": "default.html",
        "parsed_url": [parts.scheme, parts.netloc, parts.path, "", parts.query, parts.fragment],
        "img_src": "",
        "thumbnail": "",
        "priority": "",
        "engines": [engine, "brave"],
        "positions": [position, position + 1],
        "score": round(2.0 / position, 4),
        "category": "general",
        "publishedDate": None,
    }


def envelope(query: str, results: list[dict[str, Any]], unresponsive: list[list[str]] | None = None) -> dict[str, Any]:
    return {
        "query": query,
        "number_of_results": 0,
        "results": results,
        "answers": [],
        "corrections": [],
        "infoboxes": [],
        "suggestions": [f"{query} wiki"],
        "unresponsive_engines": unresponsive or [],
    }


class FakeSearxngServer:
    """Serves ``/search``; ``pages[query]`` sets the results of a query (default: three generated ones)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.pages: dict[str, list[dict[str, Any]]] = {}
        self.json_enabled = True
        self._replies: deque[FakeSearxngReply] = deque()
        self._lock = threading.Lock()
        server = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:  # noqa: N802
                parts = urlsplit(self.path)
                params = {k: v[0] for k, v in parse_qs(parts.query).items()}
                with server._lock:
                    server.requests.append({"path": parts.path, "params": params})
                    reply = server._replies.popleft() if server._replies else None
                if parts.path != "/search":
                    self.send_json(404, {"error": "not found"})
                    return
                if reply is not None:
                    self.send_json(reply.status, reply.body if reply.body is not None else {"error": reply.status})
                    return
                if params.get("format") != "json":
                    data = b"<!DOCTYPE html><html><body>results</body></html>"
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html; charset=utf-8")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                if not server.json_enabled:
                    self.send_json(403, b"Forbidden")
                    return
                q = params.get("q", "")
                results = server.pages.get(q)
                if results is None:
                    slug = "-".join(q.lower().split()) or "q"
                    results = [result(f"https://example.org/{slug}/{i}", f"{q} — result {i}", f"About {q}, part {i}.", position=i) for i in range(1, 4)]
                self.send_json(200, envelope(q, results))

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def enqueue(self, *replies: FakeSearxngReply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def search_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"] == "/search"]

    def __enter__(self) -> "FakeSearxngServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
