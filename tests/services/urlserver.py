"""A tiny threaded HTTP server for image_url tests: an image, redirects, a slow and a huge reply."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


class ImageServer:
    def __init__(self, image: bytes) -> None:
        self.image = image
        self.hits: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                parts = urlsplit(self.path)
                outer.hits.append(parts.path)
                query = parse_qs(parts.query)
                try:
                    if parts.path == "/ok.png":
                        self._send(200, outer.image, "image/png")
                    elif parts.path == "/redirect":
                        self.send_response(302)
                        self.send_header("Location", query["to"][0])
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                    elif parts.path == "/slow.png":
                        time.sleep(float(query.get("s", ["3"])[0]))
                        self._send(200, outer.image, "image/png")
                    elif parts.path == "/big.png":
                        size = int(query.get("n", ["3000000"])[0])
                        self.send_response(200)
                        self.send_header("Content-Type", "image/png")
                        self.end_headers()  # no Content-Length: the cap must hold while streaming
                        chunk = b"\x89PNG\r\n\x1a\n" + b"\0" * 65528
                        sent = 0
                        while sent < size:
                            self.wfile.write(chunk)
                            sent += len(chunk)
                    else:
                        self._send(404, b"not found", "text/plain")
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _send(self, status: int, body: bytes, ctype: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> "ImageServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
