"""Service benchmark: N concurrent explain requests for D seconds against `kar serve`'s app on loopback.

The VLM is the fake OpenAI-compatible server (tests/fakes) answering every call after
``--vlm-delay`` seconds (default 0.8 s), reached over HTTP by the real OpenAICompatibleVLM
with its concurrency limit (KAR_VLM_CONCURRENCY, default 8).  The API runs in its own
process (uvicorn, one worker, embedded CultureBase holding the sample entities).

Ideal throughput = vlm_concurrency / (VLM calls per request × delay); the share reported is
achieved / ideal.  Prints one JSON document.

``--images large``: each client uploads 12-16 MP JPEG/WebP photos with a caption drawn on
them (``bench/ocr_side.py``'s generator), OCR on (``KAR_OCR_MAX_SIDE``), the CPU pool at
``--cpu-workers``, the explain queue at its settings; a 503 is honoured (the client waits
``Retry-After``, counted apart).  Ideal throughput is then also bounded by the pool:
``cpu_workers / t_cpu`` where ``t_cpu`` is the CPU time of one request (decode + bounded
copy + OCR) measured alone in this process, side by side, just before the load.  Also
printed: peak server RSS, 2xx / 503 / other counts, and OCR agreement of each answer with
the full-size reading of the same image.  Also prints the machine's load average, since
the figures depend on what else runs.

    python bench/service.py                       # 50 clients, 60 s, condition kar
    python bench/service.py --clients 10 --duration 10 --condition vanilla
    python bench/service.py --images large        # 50 clients, 60 s, 12-16 MP photos
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

EXTRACTION = json.dumps(
    {
        "ocr_text": "我从未见过有如此厚颜无耻之人",
        "visual_handle": "手持羽扇的文人",
        "entities": [{"name": "诸葛亮", "source": "三国演义", "confidence": "high"}],
        "suggested_queries": ["诸葛亮 骂死王朗"],
    },
    ensure_ascii=False,
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_kb(path: Path) -> None:
    from culturebase.settings import Settings
    from retrieval.knowledge_base import KnowledgeBase

    with KnowledgeBase.open(Settings(kb_path=path)) as kb:
        kb.import_file(REPO / "examples" / "culturebase_sample.jsonl")


def peak_rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


async def load(
    base: str, images: list[tuple[str, bytes]], clients: int, duration: float, condition: str, ocr_out: list[tuple[int, str]] | None = None
) -> tuple[list[float], dict[str, int], float, int]:
    """Clients post in a loop until ``duration``; 503s wait Retry-After and are counted apart."""
    latencies: list[float] = []
    errors: dict[str, int] = {}
    busy = 0
    deadline = time.monotonic() + duration
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, timeout=300, limits=limits) as client:

        async def worker(n: int) -> None:
            nonlocal busy
            i = n
            while time.monotonic() < deadline:
                name, image = images[i % len(images)]
                started = time.monotonic()
                try:
                    r = await client.post("/v1/explain", files={"image": (name, image, "application/octet-stream")}, data={"condition": condition})
                    if r.status_code == 503 and r.headers.get("retry-after"):
                        busy += 1
                        await asyncio.sleep(min(float(r.headers["retry-after"]), max(0.0, deadline - time.monotonic())))
                        continue
                    body = r.json()
                    ok = r.status_code == 200 and body.get("response")
                    key = None if ok else f"HTTP {r.status_code}: {r.text[:120]}"
                except httpx.HTTPError as exc:
                    key = f"{type(exc).__name__}"
                if key is None:
                    latencies.append(time.monotonic() - started)
                    if ocr_out is not None:
                        ocr_out.append((i % len(images), ((body.get("trace") or {}).get("ocr") or {}).get("text") or ""))
                else:
                    errors[key] = errors.get(key, 0) + 1
                i += 1

        t0 = time.monotonic()
        await asyncio.gather(*(worker(n) for n in range(clients)))
        wall = time.monotonic() - t0
    return latencies, errors, wall, busy


def large_images(count: int) -> tuple[list[tuple[str, bytes]], list[str]]:
    """``count`` captioned 12-16 MP photos (JPEG and WebP) and their full-size OCR readings (cached)."""
    import random

    from bench.ocr_side import caption_set, full_size_reading, make_photo

    images, readings = [], []
    for i, text in enumerate(caption_set(count)):
        fmt = "WEBP" if i % 3 == 0 else "JPEG"
        data = make_photo(text, seed=i, megapixels=random.Random(i).uniform(12, 16), fmt=fmt)
        images.append((f"photo{i}.{fmt.lower()}", data))
        readings.append(full_size_reading(data))
    return images, readings


def cpu_seconds_alone(images: list[tuple[str, bytes]], ocr_side: int, vlm_side: int, workers: int) -> float:
    """Mean CPU-stage time of one request measured alone: check + bounded copy + OCR (engine sized as the server's)."""
    from retrieval.ocr import OCR
    from services.images import validate_image

    cpus = os.cpu_count() or 1
    ocr = OCR(max_side=ocr_side, threads=max(1, cpus // workers))
    ocr.read(images[0][1])  # build the engine outside the timing
    total = 0.0
    for _, data in images:
        t0 = time.perf_counter()
        checked = validate_image(data, 64 * 1024 * 1024, 40_000_000, max(ocr_side, vlm_side))
        ocr.read(checked.data)
        total += time.perf_counter() - t0
    return total / len(images)


def large_figures(args, images, readings, ocr_out, done, busy, errors, t_cpu, ideal_vlm, ideal_pool, ocr_side) -> dict:  # type: ignore[no-untyped-def]
    from bench.ocr_side import loose, norm

    identical = sum(norm(text) == readings[i] for i, text in ocr_out)
    same = sum(loose(text) == loose(readings[i]) for i, text in ocr_out)
    n = len(ocr_out) or 1
    return {
        "images": "large",
        "distinct_photos": len(images),
        "photo_mb": [round(len(d) / 1e6, 2) for _, d in images],
        "ocr_max_side": ocr_side,
        "cpu_workers": args.cpu_workers,
        "t_cpu_alone_s": round(t_cpu, 3),
        "ideal_rps_vlm": round(ideal_vlm, 3),
        "ideal_rps_pool": round(ideal_pool, 3) if ideal_pool else None,
        "responses_2xx": done,
        "responses_503": busy,
        "responses_other": sum(errors.values()),
        "ocr_answers_compared": len(ocr_out),
        "ocr_identical_to_full_size": round(identical / n, 3),
        "ocr_same_reading_as_full_size": round(same / n, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--vlm-delay", type=float, default=0.8)
    parser.add_argument("--vlm-concurrency", type=int, default=8)
    parser.add_argument("--condition", default="kar", choices=["vanilla", "cot", "search_cot", "kar"])
    parser.add_argument("--kb", type=Path, help="an existing CultureBase folder (default: build one from the sample)")
    parser.add_argument("--images", choices=["small", "large"], default="small", help="small: the 640x480 sample meme, OCR off; large: 12-16 MP photos, OCR on")
    parser.add_argument("--distinct", type=int, default=8, help="large mode: distinct photos the clients cycle through")
    parser.add_argument("--cpu-workers", type=int, default=os.cpu_count() or 1, help="large mode: KAR_CPU_WORKERS of the server")
    parser.add_argument("--ocr-max-side", type=int, default=None, help="large mode: KAR_OCR_MAX_SIDE (default: the setting's default)")
    args = parser.parse_args()
    large = args.images == "large"

    from tests.fakes.openai_server import FakeOpenAIServer, FakeReply

    def responder(request):  # type: ignore[no-untyped-def]
        text = EXTRACTION if "You are the extraction step" in request.user_text() else "An explanation of the meme."
        return FakeReply(text=text, delay_s=args.vlm_delay, prompt_tokens=900, completion_tokens=120)

    tmp = Path(tempfile.mkdtemp(prefix="kar-bench-"))
    kb_path = args.kb
    t_build = time.monotonic()
    if kb_path is None:
        kb_path = tmp / "kb"
        build_kb(kb_path)
    build_s = time.monotonic() - t_build
    from culturebase.settings import Settings

    defaults = Settings()
    ocr_side = args.ocr_max_side or defaults.ocr_max_side
    readings: list[str] = []
    t_cpu = None
    if large:
        images, readings = large_images(args.distinct)
        t_cpu = cpu_seconds_alone(images, ocr_side, defaults.vlm_max_image_side, args.cpu_workers)
    else:
        images = [("meme.png", (REPO / "examples" / "images" / "zhuge_liang_wang_lang.png").read_bytes())]
    vlm_calls_per_request = 1 if args.condition in ("vanilla", "cot") else 2
    server = FakeOpenAIServer(responder=responder).start()
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
        "KAR_KB_PATH": str(kb_path),
        "KAR_DATA_DIR": str(tmp / "data"),
        "KAR_VLM_BASE_URLS": server.base_url,
        "KAR_VLM_MODEL": "fake-vlm",
        "KAR_VLM_API_KEY": "bench",
        "KAR_VLM_CONCURRENCY": str(args.vlm_concurrency),
        "KAR_VLM_MAX_RETRIES": "0",
        "KAR_OCR_ENABLED": "true" if large else "false",
        "KAR_OCR_MAX_SIDE": str(ocr_side),
        "KAR_CPU_WORKERS": str(args.cpu_workers),
        "KAR_MAX_UPLOAD_MB": "20",
        "KAR_SEARCH_BACKEND": "none",
        "KAR_API_RATE_LIMIT_PER_MIN": "1000000",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "services.app:create_app", "--factory", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
        env=env,
        cwd=REPO,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(base + "/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the API did not become ready")
            time.sleep(0.3)
        rss_idle = peak_rss_mb(proc.pid)
        load_before = os.getloadavg()
        ocr_out: list[tuple[int, str]] = []
        latencies, errors, wall, busy = asyncio.run(load(base, images, args.clients, args.duration, args.condition, ocr_out if large else None))
        rss_peak = peak_rss_mb(proc.pid)
        load_after = os.getloadavg()
        pool_busy = None
        for line in httpx.get(base + "/metrics", timeout=30).text.splitlines():
            if line.startswith("kar_cpu_pool_busy_seconds_total "):
                pool_busy = float(line.split()[1])
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    done = len(latencies)
    throughput = done / wall if wall else 0.0
    ideal_vlm = args.vlm_concurrency / (vlm_calls_per_request * args.vlm_delay)
    ideal_pool = args.cpu_workers / t_cpu if t_cpu else None
    ideal = min(ideal_vlm, ideal_pool) if ideal_pool else ideal_vlm
    q = statistics.quantiles(latencies, n=100) if len(latencies) >= 2 else [float("nan")] * 99
    print(
        json.dumps(
            {
                "bench": "service",
                "condition": args.condition,
                "clients": args.clients,
                "duration_s": round(wall, 2),
                "vlm_delay_s": args.vlm_delay,
                "vlm_concurrency": args.vlm_concurrency,
                "vlm_calls_per_request": vlm_calls_per_request,
                "requests_ok": done,
                "errors": sum(errors.values()),
                "busy_503_retried": busy,
                "error_kinds": errors,
                "latency_p50_s": round(q[49], 3),
                "latency_p95_s": round(q[94], 3),
                "latency_max_s": round(max(latencies), 3) if latencies else None,
                "throughput_rps": round(throughput, 3),
                "ideal_rps": round(ideal, 3),
                "throughput_share_of_ideal": round(throughput / ideal, 3),
                "server_peak_rss_mb": rss_peak,
                "server_rss_before_load_mb": rss_idle,
                "kb_build_s": round(build_s, 1),
                "cpus": os.cpu_count(),
                "load_avg_1_5_15_before": [round(x, 2) for x in load_before],
                "load_avg_1_5_15_after": [round(x, 2) for x in load_after],
                "cpu_pool_utilisation": round(pool_busy / (args.cpu_workers * wall), 3) if pool_busy is not None and wall else None,
                **(large_figures(args, images, readings, ocr_out, done, busy, errors, t_cpu, ideal_vlm, ideal_pool, ocr_side) if large else {}),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
