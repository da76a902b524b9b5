"""Bounded-load bench for clips: N concurrent 20-second 720p videos posted to ``POST /v1/explain``.

A real ``kar serve`` app (uvicorn, one worker, in its own process; the sample CultureBase; the fake
OpenAI-compatible VLM of tests/fakes answering after ``--vlm-delay`` s) receives ``--clients``
uploads at once, each a distinct 20-second 1280×720 H.264 + AAC video made here with PyAV
(``--distinct`` encoded clips, each upload a remux of one with its own title, so no two uploads
have the same bytes).  Each client posts its video once; a 503 is honoured (it waits
``Retry-After`` and posts again, up to ``--retries`` times).

Printed (JSON): every answer's status (the bar: only 200, 503 and 4xx), the peak resident memory
of the server's process tree (the server and any process it started; sampled every 0.1 s, and the
kernel's VmHWM of the server), whether ``/healthz`` and ``/readyz`` answer 200 after the load, the
latency of the answered uploads, and the machine's load average.

    .venv/bin/python bench/clip_load.py                          # 24 clients, 20-s 720p clips
    .venv/bin/python bench/clip_load.py --clients 4 --seconds 5  # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.service import EXTRACTION, build_kb, free_port, peak_rss_mb  # noqa: E402

#: the bar of the issue: peak RSS of the server's process tree under the load
RSS_BAR_MB = 1024.0


def make_video(seconds: float, size: tuple[int, int], fps: int, seed: int) -> bytes:
    """An H.264 + AAC MP4: a picture (gradient and shapes) scrolling, a new scene every 4 s, a caption, a melody."""
    import av
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    w, h = size
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        video = out.add_stream("libx264", rate=fps)
        video.width, video.height, video.pix_fmt = w, h, "yuv420p"
        video.options = {"preset": "ultrafast"}
        audio = out.add_stream("aac", rate=16_000)
        audio.layout = "mono"
        scenes = []
        yy, xx = np.mgrid[0:h, 0 : w + 320]
        for k in range(max(1, int(np.ceil(seconds / 4)))):
            # a smooth two-colour gradient with soft shapes (a picture, not noise) and a caption band
            c1, c2 = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
            mix = (np.sin(xx / rng.uniform(80, 200) + rng.uniform(0, 6)) * np.cos(yy / rng.uniform(60, 160)) + 1) / 2
            pic = (c1 * mix[..., None] + c2 * (1 - mix[..., None])).astype(np.uint8)
            img = Image.fromarray(pic)
            draw = ImageDraw.Draw(img)
            for _ in range(6):
                x0, y0 = int(rng.integers(0, w + 200)), int(rng.integers(0, h - 200))
                draw.ellipse((x0, y0, x0 + int(rng.integers(40, 200)), y0 + int(rng.integers(40, 200))), fill=tuple(int(v) for v in rng.integers(0, 256, 3)))
            draw.rectangle((40, h - 140, w - 40, h - 60), fill=(255, 255, 255))
            draw.text((60, h - 120), f"CLIP {seed} SCENE {k}", fill=(0, 0, 0))
            scenes.append(np.asarray(img))
        for i in range(int(seconds * fps)):
            scene = scenes[min(len(scenes) - 1, int(i / fps / 4))]
            dx = (i * 4) % 320
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(scene[:, dx : dx + w]), format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, fps)
            for p in video.encode(frame):
                out.mux(p)
        for p in video.encode(None):
            out.mux(p)
        rate, total = 16_000, int(seconds * 16_000)
        notes = 220 * 2 ** (rng.integers(0, 24, size=int(seconds * 4) + 1) / 12)
        t = np.arange(total) / rate
        samples = (0.3 * np.sin(2 * np.pi * notes[(t * 4).astype(int)] * t)).astype(np.float32)
        for start in range(0, total, 1024):
            frame = av.AudioFrame.from_ndarray(samples[start : start + 1024].reshape(1, -1), format="fltp", layout="mono")
            frame.sample_rate, frame.pts, frame.time_base = rate, start, Fraction(1, rate)
            for p in audio.encode(frame):
                out.mux(p)
        for p in audio.encode(None):
            out.mux(p)
    return buf.getvalue()


def retitled(data: bytes, title: str) -> bytes:
    """The same streams remuxed with another title: other bytes, the same decoding work."""
    import av

    buf = io.BytesIO()
    with av.open(io.BytesIO(data)) as src, av.open(buf, "w", format="mp4") as out:
        out.metadata["title"] = title
        streams = {s.index: out.add_stream_from_template(s) for s in src.streams}
        for packet in src.demux():
            if packet.dts is None:
                continue
            packet.stream = streams[packet.stream.index]
            out.mux(packet)
    return buf.getvalue()


def tree_rss_mb(root: int) -> float:
    """Resident memory (MB) of a process and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return round(total / 1024, 1)


async def sample_tree(pid: int, out: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        out.append(tree_rss_mb(pid))
        try:
            await asyncio.wait_for(stop.wait(), 0.1)
        except TimeoutError:
            pass


async def post_all(base: str, uploads: list[tuple[str, bytes]], retries: int) -> list[dict]:
    """Every upload posted at once; a 503 waits Retry-After and posts again."""
    limits = httpx.Limits(max_connections=len(uploads), max_keepalive_connections=len(uploads))
    async with httpx.AsyncClient(base_url=base, timeout=600, limits=limits) as client:

        async def one(name: str, data: bytes) -> dict:
            statuses: list[int | str] = []
            started = time.monotonic()
            for _ in range(retries + 1):
                try:
                    r = await client.post("/v1/explain", files={"media": (name, data, "application/octet-stream")}, data={"condition": "kar"})
                except httpx.HTTPError as exc:
                    statuses.append(type(exc).__name__)
                    break
                statuses.append(r.status_code)
                if r.status_code == 503 and r.headers.get("retry-after"):
                    await asyncio.sleep(float(r.headers["retry-after"]))
                    continue
                body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
                return {"statuses": statuses, "s": time.monotonic() - started, "frames": (body.get("media") or {}).get("frames") or 0,
                        "error": (body.get("error") or {}).get("code")}
            return {"statuses": statuses, "s": time.monotonic() - started, "frames": 0, "error": None}

        return await asyncio.gather(*(one(n, d) for n, d in uploads))


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=24)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=720)
    ap.add_argument("--fps", type=int, default=25)
    ap.add_argument("--distinct", type=int, default=4, help="clips encoded (each upload is a retitled remux of one)")
    ap.add_argument("--retries", type=int, default=3, help="posts after a 503 (each after its Retry-After)")
    ap.add_argument("--vlm-delay", type=float, default=0.8)
    ap.add_argument("--cpu-workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--env", action="append", default=[], help="KAR_X=value for the server (repeatable)")
    return ap.parse_args()


def start_server(args: argparse.Namespace, tmp: Path, vlm_url: str) -> tuple[subprocess.Popen, str]:
    """``kar serve``'s app under uvicorn in its own process, over the sample KB in ``tmp``; returns it and its URL
    once ``/readyz`` answers 200."""
    port = free_port()
    env = {
        **os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "KAR_KB_PATH": str(tmp / "kb"), "KAR_DATA_DIR": str(tmp / "data"),
        "KAR_VLM_BASE_URLS": vlm_url, "KAR_VLM_MODEL": "fake-vlm", "KAR_VLM_API_KEY": "bench", "KAR_VLM_MAX_RETRIES": "0",
        "KAR_CPU_WORKERS": str(args.cpu_workers), "KAR_SEARCH_BACKEND": "none", "KAR_API_RATE_LIMIT_PER_MIN": "1000000",
        "TMPDIR": str(tmp),
        **dict(kv.split("=", 1) for kv in args.env),
    }
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "services.app:create_app", "--factory", "--host", "127.0.0.1", "--port", str(port),
                             "--log-level", "warning"], env=env, cwd=REPO)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        try:
            if httpx.get(base + "/readyz", timeout=2).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.terminate()
            raise SystemExit("the API did not become ready")
        time.sleep(0.3)


def load(proc: subprocess.Popen, base: str, uploads: list[tuple[str, bytes]], retries: int) -> dict:
    """Every upload posted at once while the server's process tree is sampled; the answers and the server after."""
    series: list[float] = []
    rss_ready = tree_rss_mb(proc.pid)
    load_before = os.getloadavg()

    async def measured() -> tuple[list[dict], float]:
        stop = asyncio.Event()
        sampler = asyncio.create_task(sample_tree(proc.pid, series, stop))
        started = time.monotonic()
        try:
            return await post_all(base, uploads, retries), time.monotonic() - started
        finally:
            stop.set()
            await sampler

    answers, wall = asyncio.run(measured())
    health = {p: httpx.get(base + p, timeout=30).status_code for p in ("/healthz", "/readyz")}
    return {"answers": answers, "wall": wall, "series": series, "rss_ready": rss_ready, "load_before": load_before,
            "health": health, "alive": proc.poll() is None, "hwm": peak_rss_mb(proc.pid), "load_after": os.getloadavg()}


def summary(args: argparse.Namespace, clips: list[bytes], uploads: list[tuple[str, bytes]], make_s: float, m: dict) -> dict:
    answers, series, hwm = m["answers"], m["series"], m["hwm"]
    statuses = [s for a in answers for s in a["statuses"]]
    counts: dict[str, int] = {}
    for s in statuses:
        counts[str(s)] = counts.get(str(s), 0) + 1
    allowed = all(isinstance(s, int) and (s in (200, 503) or 400 <= s < 500) for s in statuses)
    done = [a["s"] for a in answers if a["statuses"][-1] == 200]
    peak = max(series) if series else None
    return {
        "bench": "clip_load",
        "clients": args.clients,
        "clip": {"seconds": args.seconds, "size": f"{args.width}x{args.height}", "fps": args.fps, "mb": [round(len(d) / 1e6, 2) for d in clips],
                 "distinct_encoded": len(clips), "uploads_distinct_bytes": len({d for _, d in uploads})},
        "make_s": round(make_s, 1),
        "statuses": counts,
        "only_200_503_4xx": allowed,
        "answered_200": len(done),
        "errors_in_200": sorted({a["error"] for a in answers if a["error"]}),
        "frames_per_answer": sorted({a["frames"] for a in answers if a["statuses"][-1] == 200}),
        "latency_s": {"p50": round(statistics.median(done), 2), "max": round(max(done), 2)} if done else None,
        "wall_s": round(m["wall"], 1),
        "server_tree_rss_mb": {"ready": m["rss_ready"], "peak": peak, "p50": round(statistics.median(series), 1) if series else None,
                               "samples": len(series), "server_vmhwm": hwm},
        "rss_bar_mb": RSS_BAR_MB,
        "within_rss_bar": peak is not None and peak <= RSS_BAR_MB and (hwm or 0) <= RSS_BAR_MB,
        "healthy_after": {**m["health"], "alive": m["alive"]},
        "cpus": os.cpu_count(),
        "cpu_workers": args.cpu_workers,
        "load_avg_1_5_15_before": [round(x, 2) for x in m["load_before"]],
        "load_avg_1_5_15_after": [round(x, 2) for x in m["load_after"]],
    }


def main() -> None:
    args = parse_args()
    from tests.fakes.openai_server import FakeOpenAIServer, FakeReply

    t0 = time.monotonic()
    clips = [make_video(args.seconds, (args.width, args.height), args.fps, seed) for seed in range(args.distinct)]
    uploads = [(f"clip{i}.mp4", retitled(clips[i % len(clips)], f"upload {i}")) for i in range(args.clients)]
    make_s = time.monotonic() - t0

    def responder(request):  # type: ignore[no-untyped-def]
        text = EXTRACTION if "You are the extraction step" in request.user_text() else "An explanation of the clip."
        return FakeReply(text=text, delay_s=args.vlm_delay, prompt_tokens=900, completion_tokens=120)

    tmp = Path(tempfile.mkdtemp(prefix="kar-clip-load-"))
    build_kb(tmp / "kb")
    server = FakeOpenAIServer(responder=responder).start()
    proc = None
    try:
        proc, base = start_server(args, tmp, server.base_url)
        measured = load(proc, base, uploads, args.retries)
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(summary(args, clips, uploads, make_s, measured), indent=2))


if __name__ == "__main__":
    main()
