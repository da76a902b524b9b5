"""First request against the rest, through ``kar serve``: the stage timings of the first and second explain
after start, with the warm-up (``KAR_API_WARMUP=true``, the default) and without it.

Run as ``python bench/service.py --first-request`` (or this file).  The KB is the sample entities plus the
test page corpus (``tests/fakes/pages``) so the local corpus search runs; OCR is on, the VLM is the fake
OpenAI-compatible server (``--vlm-delay``, default 0.05 s).  For each mode, ``--rounds`` servers are started
with ``kar serve``; each explains one image, then another (the order alternates round by round).  The fake
VLM's extraction names each image's own entity and queries (told apart by the OCR text in its prompt), so the
second explain's searches are no cache hits of the first's; every server
gets its own search cache file; the data directory (jieba's and wordfreq's tables) is shared and used once,
untimed, before any measured server starts, as a deployed server's is.  Printed per mode: seconds from the
start of the process to ``/healthz`` 200 and to ``/readyz`` 200, ``/readyz`` and ``/healthz`` statuses seen
meanwhile, and each round's first and second explain: wall time and the trace's per-stage timings.  The
machine's load average is printed too: every figure grows with it.

    python bench/service.py --first-request
    python bench/first_request.py --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

IMAGES = ["zhuge_liang_wang_lang.png", "doge_such_culture.png"]
#: the fake VLM's extraction for each image (told apart by the OCR text in the prompt)
ZHUGE = json.dumps({"ocr_text": "我从未见过有如此厚颜无耻之人", "visual_handle": "手持羽扇的文人",
                    "entities": [{"name": "诸葛亮", "source": "三国演义", "confidence": "high"}], "suggested_queries": ["诸葛亮 骂死王朗"]},
                   ensure_ascii=False)
DOGE = json.dumps({"ocr_text": "such culture very meme wow", "visual_handle": "a shiba inu dog with comic sans text",
                   "entities": [{"name": "Doge", "source": "internet meme", "confidence": "high"}], "suggested_queries": ["doge shiba inu meme origin"]})
STAGES = ("ocr", "extract", "ground", "search", "reason", "total")


def build_kb(path: Path, pages: Path) -> None:
    """The sample entities and the test page corpus."""
    from crawlers.page_dump import import_pages
    from culturebase.settings import Settings
    from retrieval.knowledge_base import KnowledgeBase
    from tests.fakes.pages import write_pages

    with KnowledgeBase.open(Settings(kb_path=path)) as kb:
        kb.import_file(REPO / "examples" / "culturebase_sample.jsonl")
        import_pages(kb, write_pages(pages))


def start(env: dict[str, str], port: int) -> tuple[subprocess.Popen, dict[str, Any]]:
    """``kar serve`` on ``port``; waits for /readyz 200, polling /healthz and /readyz every 0.05 s."""
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "services.cli", "serve", "--port", str(port), "--log-level", "warning"],
                            env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    seen: dict[str, Any] = {"healthz_s": None, "readyz_s": None, "healthz_statuses": {}, "readyz_statuses": {}, "warming_parts_seen": []}
    with httpx.Client(base_url=base, timeout=5) as client:
        while seen["readyz_s"] is None:
            if proc.poll() is not None or time.monotonic() - t0 > 300:
                raise SystemExit(f"kar serve did not become ready: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
            try:
                h = client.get("/healthz")
                seen["healthz_statuses"][str(h.status_code)] = seen["healthz_statuses"].get(str(h.status_code), 0) + 1
                if h.status_code == 200 and seen["healthz_s"] is None:
                    seen["healthz_s"] = round(time.monotonic() - t0, 2)
                r = client.get("/readyz")
                seen["readyz_statuses"][str(r.status_code)] = seen["readyz_statuses"].get(str(r.status_code), 0) + 1
                for part in r.json().get("warming", []):
                    if part not in seen["warming_parts_seen"]:
                        seen["warming_parts_seen"].append(part)
                if r.status_code == 200:
                    seen["readyz_s"] = round(time.monotonic() - t0, 2)
                    seen["warmup"] = r.json()["checks"].get("warmup")
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
    return proc, seen


def explain(base: str, image: str) -> dict[str, Any]:
    data = (REPO / "examples" / "images" / image).read_bytes()
    t0 = time.monotonic()
    r = httpx.post(base + "/v1/explain", files={"image": (image, data, "image/png")}, data={"condition": "kar"}, timeout=300)
    wall = time.monotonic() - t0
    if r.status_code != 200:
        raise SystemExit(f"explain {image}: HTTP {r.status_code} {r.text[:300]}")
    trace = r.json()["trace"]
    timings = trace["timings"]
    queries = [q.get("text") for q in trace.get("queries") or []]
    return {"image": image, "wall_s": round(wall, 3), **{f"{s}_s": timings.get(s) for s in STAGES}, "queries": queries}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the rounds of the first and the second explain's stages."""
    out: dict[str, Any] = {}
    for which in ("first", "second"):
        out[which] = {f"{s}_s": round(statistics.median(r[which][f"{s}_s"] for r in runs if r[which][f"{s}_s"] is not None), 3)
                      for s in STAGES + ("wall",) if any(r[which].get(f"{s}_s") is not None for r in runs)}
    out["readyz_s"] = round(statistics.median(r["server"]["readyz_s"] for r in runs), 2)
    out["healthz_s"] = round(statistics.median(r["server"]["healthz_s"] for r in runs), 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="servers started per mode (the image order alternates)")
    parser.add_argument("--vlm-delay", type=float, default=0.05)
    args = parser.parse_args([a for a in sys.argv[1:] if a != "--first-request"])
    from service import free_port, stop_api  # bench/service.py

    from tests.fakes.openai_server import FakeOpenAIServer, FakeReply

    def responder(request):  # type: ignore[no-untyped-def]
        prompt = request.user_text()
        text = "An explanation of the meme."
        if "You are the extraction step" in prompt:  # each image its own entity and queries: no search cache hit between them
            text = DOGE if ("such" in prompt.lower() or "wow" in prompt.lower()) else ZHUGE
        return FakeReply(text=text, delay_s=args.vlm_delay, prompt_tokens=900, completion_tokens=120)

    tmp = Path(tempfile.mkdtemp(prefix="kar-first-"))
    vlm = FakeOpenAIServer(responder=responder).start()
    results: dict[str, Any] = {"bench": "first_request", "cpus": os.cpu_count(), "load_avg_1_5_15_before": [round(x, 2) for x in os.getloadavg()]}
    try:
        build_kb(tmp / "kb", tmp / "pages.jsonl")
        env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "KAR_KB_PATH": str(tmp / "kb"), "KAR_DATA_DIR": str(tmp / "data"),
               "KAR_VLM_BASE_URLS": vlm.base_url, "KAR_VLM_MODEL": "fake-vlm", "KAR_VLM_API_KEY": "bench", "KAR_VLM_MAX_RETRIES": "0",
               "KAR_SEARCH_BACKEND": "local", "KAR_OCR_ENABLED": "true", "KAR_API_RATE_LIMIT_PER_MIN": "100000"}
        proc, _ = start({**env, "KAR_SEARCH_CACHE_PATH": str(tmp / "prime.sqlite")}, port := free_port())  # untimed: the data dir's tables
        explain(f"http://127.0.0.1:{port}", IMAGES[0])
        stop_api(proc, 30)
        for mode in ("off", "on"):
            runs = []
            for n in range(args.rounds):
                order = IMAGES if n % 2 == 0 else IMAGES[::-1]
                menv = {**env, "KAR_API_WARMUP": "true" if mode == "on" else "false", "KAR_SEARCH_CACHE_PATH": str(tmp / f"cache-{mode}-{n}.sqlite")}
                proc, seen = start(menv, port := free_port())
                try:
                    first, second = (explain(f"http://127.0.0.1:{port}", image) for image in order)
                finally:
                    stop_api(proc, 30)
                runs.append({"server": seen, "first": first, "second": second})
            results[f"warmup_{mode}"] = {"median": summary(runs), "runs": runs}
    finally:
        vlm.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    results["load_avg_1_5_15_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(results, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
