"""Media benchmark; prints JSON.

(a) preparation throughput over N generated 10-second clips (320×240, 15 fps, a tone, scene
    changes, drawn text): frames (8 uniform + up to 4 scene changes) and the transcript
    through an OpenAI-compatible /v1/audio/transcriptions endpoint (a zero-latency loopback
    fake, so the figure is our own cost), sequential and on a thread pool; side by side with
    the decoder's floor (a bare decode of every frame of the same clips) as a ratio;
(b) the share of a `kar run`-style TaskRunner run's wall time spent outside the model calls
    (wall time during which no chat call is in flight): the real OpenAI client against a
    loopback chat server answering after 800 ms, the real pipeline (vanilla condition, frames
    as images, transcript in the prompt), at concurrency 1 and 16; plus throughput as a share
    of the ideal (items × 800 ms / concurrency).  Target: ≤ 5 % outside the model calls.

    .venv/bin/python bench/media.py [--clips 100] [--seconds 10] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agents.media import prepare_video  # noqa: E402
from culturebase.settings import Settings  # noqa: E402
from tests.fakes.media_openai import FakeMediaOpenAIServer, FakeReply  # noqa: E402
from tests.support.clips import make_clip  # noqa: E402

LATENCY_S = 0.8


def decode_floor(path: Path) -> None:
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        for _ in container.decode(stream):
            pass
        if container.streams.audio:
            container.seek(0)
            for _ in container.decode(container.streams.audio[0]):
                pass


def prep_figures(clips: list[Path], settings: Settings, workers: int) -> dict:
    started = time.perf_counter()
    for clip in clips:
        decode_floor(clip)
    floor_s = time.perf_counter() - started
    per_clip = []
    started = time.perf_counter()
    for clip in clips:
        t = time.perf_counter()
        bundle = prepare_video(clip, settings=settings)
        assert bundle.audio_mode == "transcribed" and bundle.frames
        per_clip.append(time.perf_counter() - t)
    sequential_s = time.perf_counter() - started
    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda c: prepare_video(c, settings=settings), clips))
    pooled_s = time.perf_counter() - started
    return {
        "clips": len(clips),
        "sequential_clips_per_s": round(len(clips) / sequential_s, 2),
        "per_clip_ms_p50": round(statistics.median(per_clip) * 1000, 1),
        "per_clip_ms_p95": round(sorted(per_clip)[int(0.95 * (len(per_clip) - 1))] * 1000, 1),
        f"pool{workers}_clips_per_s": round(len(clips) / pooled_s, 2),
        "decode_floor_clips_per_s": round(len(clips) / floor_s, 2),
        "prepare_vs_decode_floor_time_ratio": round(sequential_s / floor_s, 2),
    }


async def run_share(clips: list[Path], settings: Settings, concurrency: int, out: Path) -> dict:
    from agents.factory import build_pipeline
    from agents.pipeline.state import ExplainContext
    from agents.tasks import TaskItem, TaskRunner

    items = [TaskItem(id=f"c{i}", benchmark="avmeme", task="MCQ", kind="mcq",
                      instruction="Question: what is it?\nOptions:\nA. x\nB. y\n\nEnd with 'Answer: X'.",
                      media_path=clip.name, video_file=clip, context=ExplainContext()) for i, clip in enumerate(clips)]
    resources = build_pipeline(settings, ["vanilla"], search=None, ocr=None, require_vlm=True)
    try:
        runner = TaskRunner(resources.pipeline, out, ["vanilla"], settings=settings, concurrency=concurrency)
        vlm = resources.pipeline.deps.vlm
        chat = vlm.chat
        intervals: list[tuple[float, float]] = []

        async def timed_chat(*args, **kwargs):  # noqa: ANN002, ANN003
            begin = time.perf_counter()
            try:
                return await chat(*args, **kwargs)
            finally:
                intervals.append((begin, time.perf_counter()))

        vlm.chat = timed_chat
        started = time.perf_counter()
        summary = await runner.run(items)
        wall = time.perf_counter() - started
    finally:
        await resources.aclose()
    traces = [json.loads(line) for line in (out / "traces" / "vanilla.jsonl").read_text().splitlines()]
    calls = sum(c["latency_s"] for t in traces for c in t["trace"].get("vlm_calls", []))
    assert summary.failed == 0, summary
    ideal = len(items) * LATENCY_S / concurrency
    busy, end = 0.0, started  # union of the intervals with a model call in flight
    for begin, finish in sorted(intervals):
        if finish > end:
            busy += finish - max(begin, end)
            end = finish
    return {
        "items": len(items),
        "concurrency": concurrency,
        "wall_s": round(wall, 2),
        "model_call_s_sum": round(calls, 2),
        "ideal_s": round(ideal, 2),
        "share_outside_model_calls": round(1 - busy / wall, 4),  # wall time with no model call in flight
        "throughput_share_of_ideal": round(ideal / wall, 4),
        "mean_media_prepare_ms": round(1000 * statistics.mean(t["trace"]["media"]["prepare_s"] for t in traces), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clips", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--sequential-items", type=int, default=20, help="items of the concurrency-1 run")
    args = parser.parse_args()
    workers = os.cpu_count() or 2
    with tempfile.TemporaryDirectory() as tmp, FakeMediaOpenAIServer(
        responder=lambda r: FakeReply(text="The clip is a joke. Answer: B",
                                      delay_s=LATENCY_S if r.path.endswith("/chat/completions") else 0.0),
        transcript="hello there",
    ) as server:
        root = Path(tmp)
        started = time.perf_counter()
        clips = [make_clip(root / f"clip{i:03d}.mp4", args.seconds, text=f"CLIP {i}", fps=15, size=(320, 240), scenes=3,
                           tone_hz=220.0 + i) for i in range(args.clips)]
        made_s = time.perf_counter() - started
        settings = Settings(
            data_dir=root / "data", kb_path=root / "kb", search_backend="none", ocr_enabled=False,
            vlm_base_urls=[server.base_url], vlm_model="bench-omni", vlm_concurrency=max(16, args.concurrency),
            asr_base_url=server.base_url, asr_model="whisper", media_frames=8, media_scene_frames=4,
        )
        result = {
            "load": {"cpus": workers, "loadavg_1m": round(os.getloadavg()[0], 2)},
            "clip": {"seconds": args.seconds, "size": "320x240", "fps": 15, "audio": "AAC tone", "generated_in_s": round(made_s, 1)},
            "prepare": prep_figures(clips, settings, workers),
            "run_sequential": asyncio.run(run_share(clips[: args.sequential_items], settings, 1, root / "run1")),
            "run_concurrent": asyncio.run(run_share(clips, settings, args.concurrency, root / f"run{args.concurrency}")),
            "target_share_outside_model_calls": 0.05,
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
