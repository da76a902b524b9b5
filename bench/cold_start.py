"""Cold start of ``kar explain`` on the demo KB: grounding in a fresh process against the same call warm.

Three figures per image, each the median over ``--runs`` fresh processes:

* ``cold_cli``: ``kar explain IMG --kb KB --json`` as a user runs it (its own process; the
  grounding warm-up of :mod:`retrieval.warmup` starts when the pipeline is built and runs while OCR
  reads the image): the trace's ``ground`` and ``total`` and the process's wall time;
* ``cold_no_warmup``: the same pipeline called in a fresh process without the warm-up (what every
  cold start paid before): its first ``ground`` and ``total``;
* ``warm``: the second explain of the same image in that process (everything loaded).

jieba's caches live in the data directory (``KAR_DATA_DIR/cache/jieba``); the first process ever
writes them, so one untimed process runs first.  The machine's load average is printed too: on a
shared machine every figure grows with it, the ratios much less.

    python bench/cold_start.py                        # builds data/demo/culturebase first if missing
    python bench/cold_start.py --runs 5 --kb data/demo/culturebase --data-dir data/demo
    python bench/cold_start.py --baseline main     # the same cold and warm calls at another revision too

``ground_cpu_ms`` is the grounding call's CPU time (``time.process_time``), which a loaded machine
inflates far less than the wall-clock ``ground_ms``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IMAGES = ["examples/images/doge_such_culture.png", "examples/images/zhuge_liang_wang_lang.png"]

CHILD = r"""
import asyncio, json, sys, time
from agents.factory import build_pipeline
from agents.runner import _bounded
from culturebase.settings import get_settings

async def main():
    resources = build_pipeline(get_settings(), ("kar",))
    try:
        grounder = resources.pipeline.deps.grounder
        ground, cpu = grounder.ground, []
        def timed(*args, **kwargs):  # the grounding call's CPU time: what a loaded machine does not inflate
            started = time.process_time()
            try:
                return ground(*args, **kwargs)
            finally:
                cpu.append(time.process_time() - started)
        grounder.ground = timed
        data = open(sys.argv[1], "rb").read()
        out = []
        for _ in range(2):
            result = await resources.pipeline.explain(await _bounded(data), "kar")
            out.append({**result.trace["timings"], "ground_cpu": cpu[-1]})
        print(json.dumps(out))
    finally:
        await resources.aclose()

asyncio.run(main())
"""


def _env(kb: Path, data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAR_")}
    env.update(KAR_KB_PATH=str(kb), KAR_DATA_DIR=str(data_dir), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONPATH=str(REPO), KAR_SEARCH_BACKEND="none")
    return env


def cli_run(image: str, env: dict[str, str]) -> dict[str, float]:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "services.cli", "explain", image, "--json"], cwd=REPO, env=env,
                          capture_output=True, text=True, check=True)
    wall = time.perf_counter() - started
    timings = json.loads(proc.stdout)["trace"]["timings"]
    return {"ground_ms": timings["ground"] * 1000, "total_ms": timings["total"] * 1000, "wall_s": wall}


def child_run(image: str, env: dict[str, str], src: Path = REPO) -> tuple[dict[str, float], dict[str, float]]:
    env = {**env, "PYTHONPATH": str(src)}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(REPO / image)], cwd=src, env=env, capture_output=True, text=True, check=True)
    first, second = json.loads(proc.stdout.strip().splitlines()[-1])
    return tuple(  # type: ignore[return-value]
        {"ground_ms": t["ground"] * 1000, "ground_cpu_ms": t["ground_cpu"] * 1000, "total_ms": t["total"] * 1000}
        for t in (first, second)
    )


def _median(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(statistics.median(r[k] for r in rows), 1 if k.endswith("_ms") else 2) for k in rows[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kb", type=Path, default=REPO / "data/demo/culturebase")
    parser.add_argument("--data-dir", type=Path, default=REPO / "data/demo")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--baseline", help="a git revision to run cold_no_warmup on too, side by side (e.g. main)")
    args = parser.parse_args()
    env = _env(args.kb, args.data_dir)
    if not args.kb.exists():
        subprocess.run([sys.executable, "-m", "services.cli", "kb", "import", "examples/culturebase_sample.jsonl"],
                       cwd=REPO, env=env, check=True, capture_output=True)
    cli_run(IMAGES[0], env)  # writes the data directory's jieba caches (a first run ever), untimed
    baseline = None
    if args.baseline:
        baseline = Path(tempfile.mkdtemp(prefix="kar-cold-baseline-")) / "src"
        subprocess.run(["git", "worktree", "add", "--detach", str(baseline), args.baseline], cwd=REPO, check=True, capture_output=True)
    report: dict[str, object] = {"kb": str(args.kb), "runs": args.runs, "load_avg_before": os.getloadavg()}
    for image in IMAGES:
        cold_cli = [cli_run(image, env) for _ in range(args.runs)]
        pairs = [child_run(image, env) for _ in range(args.runs)]
        cold, warm = _median(cold_cli), _median([p[1] for p in pairs])
        report[image] = {
            "cold_cli": cold,
            "cold_no_warmup": _median([p[0] for p in pairs]),
            "warm": warm,
            "ground_cold_over_warm": round(cold["ground_ms"] / max(warm["ground_ms"], 0.1), 1),
        }
        if baseline is not None:
            base = [child_run(image, env, baseline) for _ in range(args.runs)]
            report[image]["baseline_cold_no_warmup"] = _median([p[0] for p in base])
            report[image]["baseline_warm"] = _median([p[1] for p in base])
    if baseline is not None:
        subprocess.run(["git", "worktree", "remove", "--force", str(baseline)], cwd=REPO, check=False, capture_output=True)
    report["load_avg_after"] = os.getloadavg()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
