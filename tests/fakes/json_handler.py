"""The request handler the fake HTTP servers share: HTTP/1.1, quiet, answering JSON."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


class JsonHandler(BaseHTTPRequestHandler):
    """A quiet HTTP/1.1 handler with :meth:`send_json`."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        """Answer ``status`` with ``body`` as JSON (bytes are sent as they are) and any extra headers."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
