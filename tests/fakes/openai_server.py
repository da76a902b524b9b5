"""A local fake OpenAI-compatible HTTP server for offline tests.

Real HTTP on 127.0.0.1 with a random port (stdlib ``ThreadingHTTPServer`` in a
background thread), so the real ``openai`` SDK can be pointed at it::

    with FakeOpenAIServer() as server:
        server.enqueue(FakeReply(status=429, headers={"Retry-After": "0"}))
        server.enqueue(FakeReply(text="hello", prompt_tokens=7, completion_tokens=2))
        client = AsyncOpenAI(base_url=server.base_url, api_key="x")
        ...
        assert server.requests[-1].json["model"] == "m"

Replies are taken from a FIFO queue; when the queue is empty the ``responder``
callable (``RecordedRequest -> FakeReply``) is asked, which by default echoes the
last user text.  Every request is recorded (path, headers, parsed JSON body).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

from tests.fakes.json_handler import JsonHandler


@dataclass
class FakeReply:
    """One scripted reply: a chat completion (``text``) or an error (``status`` ≥ 400)."""

    text: str = ""
    status: int = 200
    prompt_tokens: int = 10
    completion_tokens: int = 5
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    body: Any = None  # overrides the generated JSON body when given
    drop_connection: bool = False  # close the socket without answering


@dataclass
class RecordedRequest:
    """A request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    json: Any
    port: int
    received_at: float

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list((self.json or {}).get("messages", []))

    def user_text(self) -> str:
        """All text parts of all user messages, joined by newlines."""
        parts: list[str] = []
        for message in self.messages:
            if message.get("role") != "user":
                continue
            content = message.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts.extend(p.get("text", "") for p in content if p.get("type") == "text")
        return "\n".join(parts)

    def image_urls(self) -> list[str]:
        """Every ``image_url`` URL of every message, in order."""
        urls: list[str] = []
        for message in self.messages:
            content = message.get("content")
            if isinstance(content, list):
                urls.extend(p["image_url"]["url"] for p in content if p.get("type") == "image_url")
        return urls


def echo_responder(request: RecordedRequest) -> FakeReply:
    """Default responder: reply with the last user text."""
    return FakeReply(text=request.user_text().splitlines()[-1] if request.user_text() else "")


class FakeOpenAIServer:
    """A scriptable OpenAI-compatible ``/v1/chat/completions`` server on 127.0.0.1."""

    def __init__(self, responder: Callable[[RecordedRequest], FakeReply] | None = None, model: str = "fake-model"):
        self.responder = responder or echo_responder
        self.model = model
        self.requests: list[RecordedRequest] = []
        self._queue: deque[FakeReply] = deque()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.in_flight = 0
        self.max_in_flight = 0

    # -- scripting ---------------------------------------------------------------------
    def enqueue(self, *replies: FakeReply) -> None:
        """Queue replies served in order before the responder is consulted."""
        with self._lock:
            self._queue.extend(replies)

    def _next_reply(self, request: RecordedRequest) -> FakeReply:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        return self.responder(request)

    # -- lifecycle ---------------------------------------------------------------------
    @property
    def port(self) -> int:
        assert self._server is not None, "server not started"
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeOpenAIServer:
        fake = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:  # noqa: N802
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": fake.model, "object": "model"}]}, {})
                else:
                    self._send(404, {"error": {"message": "not found"}}, {})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    payload = json.loads(raw) if raw else None
                except (json.JSONDecodeError, UnicodeDecodeError):  # e.g. a multipart upload
                    payload = None
                request = RecordedRequest(
                    method="POST",
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    json=payload,
                    port=fake.port,
                    received_at=time.monotonic(),
                )
                with fake._lock:
                    fake.requests.append(request)
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                try:
                    reply = fake._next_reply(request)
                    if reply.delay_s:
                        time.sleep(reply.delay_s)
                    if reply.drop_connection:
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return
                    if reply.body is not None:
                        body = reply.body
                    elif reply.status >= 400:
                        body = {"error": {"message": reply.text or f"scripted error {reply.status}", "type": "fake"}}
                    else:
                        body = fake._completion(request, reply)
                    self._send(reply.status, body, reply.headers)
                finally:
                    with fake._lock:
                        fake.in_flight -= 1

            def _send(self, status: int, body: Any, headers: dict[str, str]) -> None:
                try:
                    self.send_json(status, body, headers)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (e.g. a timeout test)
                    self.close_connection = True

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-openai", daemon=True
        )
        self._thread.start()
        return self

    def _completion(self, request: RecordedRequest, reply: FakeReply) -> dict[str, Any]:
        model = (request.json or {}).get("model", self.model)
        return {
            "id": f"chatcmpl-fake-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": reply.text}, "finish_reason": "stop"}
            ],
            "usage": {
                "prompt_tokens": reply.prompt_tokens,
                "completion_tokens": reply.completion_tokens,
                "total_tokens": reply.prompt_tokens + reply.completion_tokens,
            },
        }

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
