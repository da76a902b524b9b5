"""Service benchmark: N concurrent explain requests for D seconds against `kar serve`'s app on loopback.

The VLM is the fake OpenAI-compatible server (tests/fakes) answering every call after
``--vlm-delay`` seconds (default 0.8 s), reached over HTTP by the real OpenAICompatibleVLM
with its concurrency limit (KAR_VLM_CONCURRENCY, default 8).  The API runs in its own
process (uvicorn, one worker, embedded CultureBase holding the sample entities).

Ideal throughput = vlm_concurrency / (VLM calls per request × delay); the share reported is
achieved / ideal.  Prints one JSON document.

``--images large``: each client uploads 12-16 MP JPEG/WebP photos with a caption drawn on
them (``bench/ocr_side.py``'s generator; ``--variants`` versions of each of ``--distinct``
photos, differing by a small mark away from the caption, and no upload is sent twice, so
nothing the server caches by content helps), OCR on (``KAR_OCR_MAX_SIDE``), the CPU pool at
``--cpu-workers``, the explain queue at its settings; a 503 is honoured (the client waits
``Retry-After``, counted apart).  Ideal throughput is then also bounded by the pool:
``cpu_workers / t_pool`` where ``t_pool`` is the pool time of one request (decode + bounded
copy + OCR + grounding + the VLM's copy), read from the server's own
``kar_cpu_pool_busy_seconds_total`` while it serves the distinct photos one at a time, side
by side, just before the load (the in-process ``t_cpu_alone_s`` of decode + OCR is printed
too).  Also
printed: peak server RSS, 2xx / 503 / other counts, and OCR agreement of each answer with
the full-size reading of the same image.  Also prints the machine's load average, since
the figures depend on what else runs.

    python bench/service.py                       # 50 clients, 60 s, condition kar
    python bench/service.py --clients 10 --duration 10 --condition vanilla
    python bench/service.py --images large        # 50 clients, 60 s, 12-16 MP photos
    python bench/service.py --first-request       # the first explain after start against the second (bench/first_request.py)
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
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


def status_mb(pid: int, field: str) -> float | None:
    """A memory field of /proc/PID/status in MB (VmRSS: now; VmHWM: the peak so far)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def rss_now_mb(pid: int) -> float | None:
    return status_mb(pid, "VmRSS")


async def sample_rss(pid: int, out: list[float], stop: asyncio.Event) -> None:
    """The server's resident memory every 0.25 s until ``stop``."""
    while not stop.is_set():
        value = rss_now_mb(pid)
        if value is not None:
            out.append(value)
        try:
            await asyncio.wait_for(stop.wait(), 0.25)
        except TimeoutError:
            pass


def own_cpu_s() -> float:
    """CPU seconds of this process (the load generator and the fake VLM server, all threads)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def peak_rss_mb(pid: int) -> float | None:
    return status_mb(pid, "VmHWM")


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

        order = itertools.count()  # every request takes the next upload: none is sent twice while any is unsent

        async def worker(n: int) -> None:
            nonlocal busy
            while time.monotonic() < deadline:
                i = next(order)
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

        t0 = time.monotonic()
        await asyncio.gather(*(worker(n) for n in range(clients)))
        wall = time.monotonic() - t0
    return latencies, errors, wall, busy


def large_images(count: int, variants: int = 1) -> tuple[list[tuple[str, bytes]], list[dict[str, str]], list[int]]:
    """``count`` captioned 12-16 MP photos (JPEG and WebP), each in ``variants`` versions whose
    pixels differ by a small mark in a corner away from the caption (so no two uploads are the
    same image: nothing the server caches by content is reused, as with real traffic), their
    reference readings (full size, full-size detection too, the drawn caption; cached), and
    for each upload the index of its base photo."""
    import random

    from PIL import ImageDraw

    from bench.ocr_side import caption_set, encode_photo, full_size_reading, norm, render_photo

    images, refs, base_of = [], [], []
    for i, text in enumerate(caption_set(count)):
        fmt = "WEBP" if i % 3 == 0 else "JPEG"
        img = render_photo(text, seed=i, megapixels=random.Random(i).uniform(12, 16))
        data = encode_photo(img, fmt)
        refs.append({"full": full_size_reading(data), "detect_full": full_size_reading(data, detect_full=True), "caption": norm(text)})
        for v in range(variants):
            if v:
                marked = img.copy()
                w, h = marked.size
                x, y = 8 + (v * 37) % (w // 5), h // 2 + (v * 53) % (h // 8)  # left edge, mid-height: never on the caption
                ImageDraw.Draw(marked).rectangle((x, y, x + 5, y + 5), fill=(v * 47 % 256, v * 91 % 256, v * 13 % 256))
                data = encode_photo(marked, fmt)
                del marked
            images.append((f"photo{i}-{v}.{fmt.lower()}", data))
            base_of.append(i)
        del img
    return images, refs, base_of


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


def pool_busy_s(base: str) -> float:
    """The server's ``kar_cpu_pool_busy_seconds_total``."""
    for line in httpx.get(base + "/metrics", timeout=30).text.splitlines():
        if line.startswith("kar_cpu_pool_busy_seconds_total "):
            return float(line.split()[1])
    raise SystemExit("the server's /metrics has no kar_cpu_pool_busy_seconds_total")


def server_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) the server process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def alone_costs(base: str, pid: int, warm: list[tuple[str, bytes]], alone: list[tuple[str, bytes]], condition: str, workers: int) -> tuple[float, float]:
    """Pool thread-seconds and server CPU seconds one request costs, each ``alone`` photo sent by
    itself, after the ``warm`` photos (``workers`` at a time, so every OCR engine is built and
    every image shape has been seen once, as it has under load)."""

    async def post(client: httpx.AsyncClient, name: str, data: bytes) -> None:
        r = await client.post("/v1/explain", files={"image": (name, data, "application/octet-stream")}, data={"condition": condition})
        if r.status_code != 200:
            raise SystemExit(f"warm-up request failed: HTTP {r.status_code}: {r.text[:300]}")

    async def run() -> tuple[float, float]:
        async with httpx.AsyncClient(base_url=base, timeout=300) as client:
            for start in range(0, len(warm), workers):
                await asyncio.gather(*(post(client, *w) for w in warm[start : start + workers]))
            busy, cpu = pool_busy_s(base), server_cpu_s(pid)
            for name, data in alone:
                await post(client, name, data)
            return (pool_busy_s(base) - busy) / len(alone), (server_cpu_s(pid) - cpu) / len(alone)

    return asyncio.run(run())


def large_figures(args, images, refs, base_of, ocr_out, done, busy, errors, t_cpu, ideal_vlm, ideal_pool, ocr_side, t_pool, cpu_alone) -> dict:  # type: ignore[no-untyped-def]
    from bench.ocr_side import loose, norm

    n = len(ocr_out) or 1

    def share(pred) -> float:  # type: ignore[no-untyped-def]
        return round(sum(pred(norm(text), refs[base_of[i]]) for i, text in ocr_out) / n, 3)

    return {
        "images": "large",
        "distinct_photos": len(refs),
        "uploads_distinct": len(images),
        "photo_mb": [round(len(d) / 1e6, 2) for _, d in images[:: max(1, len(images) // len(refs))]],
        "ocr_max_side": ocr_side,
        "cpu_workers": args.cpu_workers,
        "t_cpu_alone_s": round(t_cpu, 3),
        "t_pool_per_request_s": round(t_pool, 3),
        "server_cpu_s_per_request_alone": round(cpu_alone, 3),
        "ideal_rps_vlm": round(ideal_vlm, 3),
        "ideal_rps_pool": round(ideal_pool, 3) if ideal_pool else None,
        "responses_2xx": done,
        "responses_503": busy,
        "responses_other": sum(errors.values()),
        "ocr_answers_compared": len(ocr_out),
        "ocr_identical_to_full_size": share(lambda got, ref: got == ref["full"]),
        "ocr_same_reading_as_full_size": share(lambda got, ref: loose(got) == loose(ref["full"])),
        "ocr_identical_to_drawn_caption": share(lambda got, ref: got == ref["caption"]),
        "ocr_identical_to_full_size_detection": share(lambda got, ref: got == ref["detect_full"]),
        "full_size_identical_to_drawn_caption": round(sum(r["full"] == r["caption"] for r in refs) / len(refs), 3),
        "full_size_detection_identical_to_drawn_caption": round(sum(r["detect_full"] == r["caption"] for r in refs) / len(refs), 3),
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--vlm-delay", type=float, default=0.8)
    parser.add_argument("--vlm-concurrency", type=int, default=8)
    parser.add_argument("--condition", default="kar", choices=["vanilla", "cot", "search_cot", "kar"])
    parser.add_argument("--kb", type=Path, help="an existing CultureBase folder (default: build one from the sample)")
    parser.add_argument("--images", choices=["small", "large"], default="small", help="small: the 640x480 sample meme, OCR off; large: 12-16 MP photos, OCR on")
    parser.add_argument("--distinct", type=int, default=8, help="large mode: distinct captioned photos")
    parser.add_argument("--variants", type=int, default=24, help="large mode: uploads per photo (pixels differ by a mark; none is sent twice)")
    parser.add_argument("--cpu-workers", type=int, default=os.cpu_count() or 1, help="large mode: KAR_CPU_WORKERS of the server")
    parser.add_argument("--ocr-max-side", type=int, default=None, help="large mode: KAR_OCR_MAX_SIDE (default: the setting's default)")
    return parser.parse_args()


@dataclass
class Uploads:
    """What the clients upload (``images``), and in large mode the photos' references, the warm-up and
    alone uploads and the in-process CPU time of decode + OCR."""

    images: list[tuple[str, bytes]]
    refs: list[dict[str, str]] = field(default_factory=list)
    base_of: list[int] = field(default_factory=list)
    warm: list[tuple[str, bytes]] = field(default_factory=list)
    alone: list[tuple[str, bytes]] = field(default_factory=list)
    t_cpu: float | None = None


def prepare_uploads(args: argparse.Namespace, ocr_side: int, vlm_side: int) -> Uploads:
    if args.images != "large":
        return Uploads([("meme.png", (REPO / "examples" / "images" / "zhuge_liang_wang_lang.png").read_bytes())])
    uploads, refs, bases = large_images(args.distinct, args.variants + 2)
    # variant 0 of each photo warms the server up (engines built, each image shape seen once, as
    # under load), variant 1 measures the costs alone; the others are the load's uploads
    variant = [int(name.rsplit("-", 1)[1].split(".")[0]) for name, _ in uploads]
    alone = [u for u, v in zip(uploads, variant) if v == 1]
    return Uploads(
        images=[u for u, v in zip(uploads, variant) if v >= 2],
        refs=refs,
        base_of=[b for b, v in zip(bases, variant) if v >= 2],
        warm=[u for u, v in zip(uploads, variant) if v == 0],
        alone=alone,
        t_cpu=cpu_seconds_alone(alone, ocr_side, vlm_side, args.cpu_workers),
    )


def server_env(args: argparse.Namespace, kb_path: Path, data_dir: Path, vlm_url: str, ocr_side: int) -> dict[str, str]:
    large = args.images == "large"
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
        "KAR_KB_PATH": str(kb_path),
        "KAR_DATA_DIR": str(data_dir),
        "KAR_VLM_BASE_URLS": vlm_url,
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


def start_api(env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """``kar serve``'s app under uvicorn on a free loopback port, once /readyz answers; and its base URL."""
    port = free_port()
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
    except BaseException:
        stop_api(proc)
        raise
    return proc, base


def stop_api(proc: subprocess.Popen, wait_s: float = 20) -> None:
    """Terminate the server; kill it when it has not stopped after ``wait_s``."""
    proc.terminate()
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()


def measure(args: argparse.Namespace, proc: subprocess.Popen, base: str, up: Uploads) -> dict:
    """The load against the running server, with its memory, the pool's busy time and the machine's load."""
    large = args.images == "large"
    t_pool, cpu_alone = alone_costs(base, proc.pid, up.warm, up.alone, args.condition, args.cpu_workers) if large else (None, None)
    rss_idle = peak_rss_mb(proc.pid)
    busy_before = pool_busy_s(base)
    load_before = os.getloadavg()
    client_cpu_before = own_cpu_s()
    ocr_out: list[tuple[int, str]] = []
    rss_series: list[float] = []
    rss_after_warm = rss_now_mb(proc.pid)

    async def measured() -> tuple[list[float], dict[str, int], float, int]:
        stop = asyncio.Event()
        sampler = asyncio.create_task(sample_rss(proc.pid, rss_series, stop))
        try:
            return await load(base, up.images, args.clients, args.duration, args.condition, ocr_out if large else None)
        finally:
            stop.set()
            await sampler

    latencies, errors, wall, busy = asyncio.run(measured())
    return {
        "t_pool": t_pool, "cpu_alone": cpu_alone, "rss_idle": rss_idle, "rss_after_warm": rss_after_warm,
        "rss_series": rss_series, "ocr_out": ocr_out, "latencies": latencies, "errors": errors, "wall": wall,
        "busy": busy, "rss_peak": peak_rss_mb(proc.pid), "load_before": load_before, "load_after": os.getloadavg(),
        "client_cpu": own_cpu_s() - client_cpu_before, "pool_busy": pool_busy_s(base) - busy_before,
    }


def figures(args: argparse.Namespace, m: dict, up: Uploads, build_s: float, ocr_side: int) -> dict:
    """The printed JSON document."""
    latencies, errors, wall, busy, rss_series, pool_busy = m["latencies"], m["errors"], m["wall"], m["busy"], m["rss_series"], m["pool_busy"]
    vlm_calls_per_request = 1 if args.condition in ("vanilla", "cot") else 2
    done = len(latencies)
    throughput = done / wall if wall else 0.0
    ideal_vlm = args.vlm_concurrency / (vlm_calls_per_request * args.vlm_delay)
    ideal_pool = args.cpu_workers / m["t_pool"] if m["t_pool"] else None
    ideal = min(ideal_vlm, ideal_pool) if ideal_pool else ideal_vlm
    q = statistics.quantiles(latencies, n=100) if len(latencies) >= 2 else [float("nan")] * 99
    large = args.images == "large"
    return {
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
        # the load generator and the VLM double run in this process, on the same cores as the server
        "bench_process_cores_used": round(m["client_cpu"] / wall, 3) if wall else None,
        "server_peak_rss_mb": m["rss_peak"],  # VmHWM: the peak over the server's life, warm-up included
        "server_rss_before_load_mb": m["rss_idle"],
        "server_rss_now_before_load_mb": m["rss_after_warm"],
        "server_rss_during_load_mb": {
            "p50": round(statistics.median(rss_series), 1) if rss_series else None,
            "p95": round(statistics.quantiles(rss_series, n=20)[18], 1) if len(rss_series) >= 20 else None,
            "max": max(rss_series) if rss_series else None,
            "samples": len(rss_series),
        },
        "kb_build_s": round(build_s, 1),
        "cpus": os.cpu_count(),
        "load_avg_1_5_15_before": [round(x, 2) for x in m["load_before"]],
        "load_avg_1_5_15_after": [round(x, 2) for x in m["load_after"]],
        "cpu_pool_utilisation": round(pool_busy / (args.cpu_workers * wall), 3) if pool_busy is not None and wall else None,
        **(
            large_figures(args, up.images, up.refs, up.base_of, m["ocr_out"], done, busy, errors, up.t_cpu, ideal_vlm, ideal_pool, ocr_side, m["t_pool"], m["cpu_alone"])
            if large
            else {}
        ),
    }


def main() -> None:
    if "--first-request" in sys.argv:  # the first explain after `kar serve` starts against the second: bench/first_request.py
        from first_request import main as first_request

        first_request()
        return
    args = parse_args()
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
    up = prepare_uploads(args, ocr_side, defaults.vlm_max_image_side)
    server = FakeOpenAIServer(responder=responder).start()
    try:
        proc, base = start_api(server_env(args, kb_path, tmp / "data", server.base_url, ocr_side))
        try:
            m = measure(args, proc, base, up)
        finally:
            stop_api(proc)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(figures(args, m, up, build_s, ocr_side), indent=2))


if __name__ == "__main__":
    main()
