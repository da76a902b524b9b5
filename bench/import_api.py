"""A large WARC imported through the API: ``POST /v1/corpus/import`` against ``kar serve``, with the server's memory.

Writes a WARC of ``--mb`` MB (default 50; warcio, as a crawler writes one: a ``warcinfo`` record, then for
each page a ``request``, an HTML ``response`` of ~40 KB of markup around ~0.5 KB of article text (one corpus
chunk: embedding is most of an import's time) and an image response of ~20 KB, and one 404: what the import
skips, named), starts ``kar serve`` on
127.0.0.1 over an empty CultureBase, uploads the file streaming (``--chunked``: without a Content-Length),
polls the job until it ends, and prints one JSON document: the WARC's bytes and records, the pages
imported and chunks stored, the records skipped (counted, with the first one named), seconds (upload,
import, total) and the server's memory: ``VmRSS`` / ``VmHWM`` (the kernel's peak) before the upload and
after the job, and the largest ``VmRSS`` sampled every 0.25 s meanwhile.  Several sizes
(``--mb 10,50``) start one fresh server each, so the peaks can be set side by side: a memory bound by the
import's batches stays put as the file grows.

    python bench/import_api.py
    python bench/import_api.py --mb 10,50 --chunked
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

KEY = "bench-import-key-0123456789"
WORDS = ("meme image caption template origin spread forum remix parody reaction format viral joke culture internet "
         "character quote scene anime game video comic artist photo trend community reference classic variant").split()
BOILERPLATE = "<div class='nav'>" + "".join(f"<a href='/section/{i}'>Section {i}</a>" for i in range(60)) + "</div>"
SCRIPT = "<script>" + "var tracking = {};" * 900 + "</script><style>" + ".c{margin:0;padding:0}" * 700 + "</style>"


def page_html(n: int, rng: random.Random) -> bytes:
    """A page of ~40 KB: navigation, scripts and styles around an article of ~0.5 KB of distinct text."""
    paragraphs = []
    for _ in range(rng.randint(2, 3)):
        words = [rng.choice(WORDS) for _ in range(rng.randint(20, 30))]
        paragraphs.append(f"<p>Entry {n} {' '.join(words)}.</p>")
    return (f"<html><head><title>Entry {n}: {rng.choice(WORDS)} {rng.choice(WORDS)}</title>{SCRIPT}</head><body>"
            f"{BOILERPLATE}<main><h1>Entry {n}</h1>{''.join(paragraphs)}</main><footer>{BOILERPLATE}</footer></body></html>").encode()


def write_warc(path: Path, target_mb: float) -> dict[str, int]:
    """A crawl-like WARC of about ``target_mb`` MB; returns its bytes and record counts."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    rng = random.Random(52)
    counts = {"pages": 0, "images": 0, "not_found": 0, "records": 0}
    with path.open("wb") as fh:
        writer = WARCWriter(fh, gzip=False)

        def record(url: str, kind: str, body: bytes, ctype: str | None = None, status: str = "200 OK") -> None:
            http = StatusAndHeaders(status, [("Content-Type", ctype)], protocol="HTTP/1.1") if ctype else None
            writer.write_record(writer.create_warc_record(url, kind, payload=io.BytesIO(body), http_headers=http))
            counts["records"] += 1

        writer.write_record(writer.create_warcinfo_record("bench.warc", {"software": "bench/import_api.py"}))
        counts["records"] += 1
        n = 0
        while fh.tell() < target_mb * 1e6:
            url = f"https://wiki.example.org/entry/{n}"
            record(url, "request", f"GET /entry/{n} HTTP/1.1\r\nHost: wiki.example.org\r\n\r\n".encode())
            record(url, "response", page_html(n, rng), "text/html; charset=utf-8")
            counts["pages"] += 1
            record(f"https://wiki.example.org/img/{n}.jpg", "response", rng.randbytes(rng.randint(15_000, 25_000)), "image/jpeg")
            counts["images"] += 1
            n += 1
        record("https://wiki.example.org/missing", "response", b"<html>gone</html>", "text/html", "404 Not Found")
        counts["not_found"] += 1
    counts["bytes"] = path.stat().st_size
    return counts


def mem(pid: int) -> dict[str, float | None]:
    """VmRSS and VmHWM (the peak so far) of ``pid`` in MB."""
    from service import status_mb  # bench/service.py

    return {"rss_mb": status_mb(pid, "VmRSS"), "hwm_mb": status_mb(pid, "VmHWM")}


def serve(env: dict[str, str], port: int, log: Path) -> subprocess.Popen:
    with log.open("wb") as fh:  # the server's own output, shown when it fails
        proc = subprocess.Popen([sys.executable, "-m", "services.cli", "serve", "--port", str(port), "--log-level", "info"],
                                env=env, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"kar serve did not become ready: {log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.3)


def chunks(path: Path, size: int = 2**20) -> Iterator[bytes]:
    with path.open("rb") as fh:
        while block := fh.read(size):
            yield block


def upload_and_wait(port: int, warc: Path, chunked: bool, log: Path) -> tuple[dict[str, Any], float, float]:
    """POST the WARC to the import route and poll its job to the end: the job, the upload's and the total seconds."""
    t0 = time.monotonic()
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/warc"}
    with warc.open("rb") as fh:
        body: Any = chunks(warc) if chunked else fh
        r = httpx.post(f"http://127.0.0.1:{port}/v1/corpus/import", content=body, headers=headers, timeout=600)
    upload_s = time.monotonic() - t0
    if r.status_code != 202:
        raise SystemExit(f"import: HTTP {r.status_code} {r.text[:300]}")
    url = f"http://127.0.0.1:{port}{r.json()['url']}"
    while True:
        try:
            job = httpx.get(url, headers=headers, timeout=30).json()
        except httpx.HTTPError as exc:
            raise SystemExit(f"polling the job: {exc}; the server said: {log.read_text(errors='replace')[-3000:]}") from None
        if job["status"] not in ("queued", "running"):
            break
        time.sleep(0.5)
    return job, upload_s, time.monotonic() - t0


def size_figures(counts: dict[str, int], job: dict[str, Any], chunked: bool, upload_s: float, total_s: float,
                 before: dict[str, float | None], after: dict[str, float | None], samples: list[float]) -> dict[str, Any]:
    report = job.get("report") or {}
    return {
        "warc_bytes": counts["bytes"],
        "warc_mb": round(counts["bytes"] / 1e6, 1),
        "warc_records": counts["records"],
        "html_pages_written": counts["pages"],
        "status": job["status"],
        "error": job.get("error"),
        "pages_imported": report.get("pages"),
        "chunks_stored": report.get("chunks"),
        "records_skipped": report.get("skipped_total"),
        "first_skipped": (report.get("skipped") or [None])[0],
        "upload_chunked": chunked,
        "upload_s": round(upload_s, 2),
        "import_s": report.get("seconds"),
        "total_s": round(total_s, 2),
        "pages_per_s": round(report["pages"] / total_s, 1) if report.get("pages") else None,
        "server_rss_before_mb": before["rss_mb"],
        "server_peak_rss_before_mb": before["hwm_mb"],
        "server_rss_after_mb": after["rss_mb"],
        "server_peak_rss_after_mb": after["hwm_mb"],
        "server_rss_sampled_max_mb": max(samples) if samples else None,
        "server_peak_growth_mb": round(after["hwm_mb"] - before["hwm_mb"], 1) if after["hwm_mb"] and before["hwm_mb"] else None,
    }


def one_size(tmp: Path, target_mb: float, chunked: bool) -> dict[str, Any]:
    """Write the WARC, start a server over an empty KB, import it through the API; the figures."""
    from service import free_port, stop_api  # bench/service.py

    warc = tmp / f"crawl-{target_mb:g}.warc"
    counts = write_warc(warc, target_mb)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "KAR_KB_PATH": str(tmp / f"kb-{target_mb:g}"),
           "KAR_DATA_DIR": str(tmp / "data"), "KAR_API_KEYS": KEY, "KAR_SEARCH_BACKEND": "local"}
    log = tmp / f"serve-{target_mb:g}.log"
    proc = serve(env, port, log)
    samples: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.25):
            value = mem(proc.pid)["rss_mb"]
            if value is not None:
                samples.append(value)

    sampler = threading.Thread(target=sample, daemon=True)
    try:
        before = mem(proc.pid)
        sampler.start()
        job, upload_s, total_s = upload_and_wait(port, warc, chunked, log)
        stop.set()
        sampler.join()
        after = mem(proc.pid)
    finally:
        stop.set()
        stop_api(proc, 30)
    return size_figures(counts, job, chunked, upload_s, total_s, before, after, samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", default="50", help="WARC sizes in MB, comma-separated (one fresh server each)")
    parser.add_argument("--chunked", action="store_true", help="upload without a Content-Length (Transfer-Encoding: chunked)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kar-import-api-"))
    out: dict[str, Any] = {"bench": "import_api", "cpus": os.cpu_count(), "load_avg_1_5_15_before": [round(x, 2) for x in os.getloadavg()]}
    try:
        out["runs"] = [one_size(tmp, float(mb), args.chunked) for mb in args.mb.split(",")]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["load_avg_1_5_15_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
