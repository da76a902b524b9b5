"""Service benchmark: N concurrent explain requests for D seconds against `kar serve`'s app on loopback.

The VLM is the fake OpenAI-compatible server (tests/fakes) answering every call after
``--vlm-delay`` seconds (default 0.8 s), reached over HTTP by the real OpenAICompatibleVLM
with its concurrency limit (KAR_VLM_CONCURRENCY, default 8).  The API runs in its own
process (uvicorn, one worker, embedded CultureBase holding the sample entities).

Ideal throughput = vlm_concurrency / (VLM calls per request × delay); the share reported is
achieved / ideal.  Prints one JSON document.

    python bench/service.py                       # 50 clients, 60 s, condition kar
    python bench/service.py --clients 10 --duration 10 --condition vanilla
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


async def load(base: str, image: bytes, clients: int, duration: float, condition: str) -> tuple[list[float], dict[str, int], int]:
    latencies: list[float] = []
    errors: dict[str, int] = {}
    deadline = time.monotonic() + duration
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as client:

        async def worker() -> None:
            while time.monotonic() < deadline:
                started = time.monotonic()
                try:
                    r = await client.post("/v1/explain", files={"image": ("meme.png", image, "image/png")}, data={"condition": condition})
                    ok = r.status_code == 200 and r.json().get("response")
                    key = None if ok else f"HTTP {r.status_code}: {r.text[:120]}"
                except httpx.HTTPError as exc:
                    key = f"{type(exc).__name__}"
                if key is None:
                    latencies.append(time.monotonic() - started)
                else:
                    errors[key] = errors.get(key, 0) + 1

        t0 = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(clients)))
        wall = time.monotonic() - t0
    return latencies, errors, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--vlm-delay", type=float, default=0.8)
    parser.add_argument("--vlm-concurrency", type=int, default=8)
    parser.add_argument("--condition", default="kar", choices=["vanilla", "cot", "search_cot", "kar"])
    parser.add_argument("--kb", type=Path, help="an existing CultureBase folder (default: build one from the sample)")
    args = parser.parse_args()

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
    image = (REPO / "examples" / "images" / "zhuge_liang_wang_lang.png").read_bytes()
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
        "KAR_OCR_ENABLED": "false",
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
        latencies, errors, wall = asyncio.run(load(base, image, args.clients, args.duration, args.condition))
        rss_peak = peak_rss_mb(proc.pid)
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
    ideal = args.vlm_concurrency / (vlm_calls_per_request * args.vlm_delay)
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
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
