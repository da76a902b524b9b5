"""Cold start of ``kar explain`` on the demo KB: grounding in a fresh process against the same call warm.

Per image, each figure the median over ``--runs`` fresh processes:

* ``cold_cli``: ``kar explain IMG --kb KB --json`` as a user runs it, in its own process (the
  grounding warm-up of :mod:`retrieval.warmup` starts when the pipeline is built and runs while OCR
  reads the image): the trace's ``ground`` and ``total``, and the whole process's wall time
  (``wall_s``) and CPU time (``cpu_s``, user + system, what a loaded machine inflates least);
* ``cold_no_warmup``: the same pipeline called in a fresh process without the warm-up: its first
  grounding call's wall (``ground_ms``) and CPU time (``ground_cpu_ms``), i.e. what loading
  everything grounding needs costs when nothing overlaps it;
* ``warm``: the second explain of the same image in that process (everything loaded).

``kar kb search`` and ``kar --help`` are timed as whole processes too (``other_commands``).  With
``--baseline REV`` the same cold processes run at that revision (a temporary git worktree, the
same interpreter and data directory), interleaved run by run with this revision's so both see the
same load, and ``*_over_baseline`` ratios are printed.

The data directory's caches (jieba's tables, wordfreq's table, the cross-lingual references) are
written by the first process that needs them, so one untimed process per command, image and
revision runs first:
"cold" is a fresh process on a data directory that has been used before.  The machine's load
average is printed too: on a shared machine every wall-clock figure grows with it.

    python bench/cold_start.py                        # builds data/demo/culturebase first if missing
    python bench/cold_start.py --runs 5 --kb data/demo/culturebase --data-dir data/demo
    python bench/cold_start.py --baseline main        # the same cold processes at another revision too
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IMAGES = ["examples/images/doge_such_culture.png", "examples/images/zhuge_liang_wang_lang.png"]
SEARCHES = ["诸葛亮", "never gonna give you up"]

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
            grounding = result.trace["grounding"]  # what grounding found, to check that nothing changed
            found = [[h["name"], h["score"], h["route"]] for h in grounding["hits"] + grounding["candidates"]]
            out.append({**result.trace["timings"], "ground_cpu": cpu[-1], "grounded": found,
                        "hits": [h["name"] for h in grounding["hits"]]})
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


def _timed(args: list[str], env: dict[str, str], src: Path) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run one child process; its stdout, wall seconds and CPU seconds (user + system, from the OS)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(args, cwd=src, env={**env, "PYTHONPATH": str(src)}, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args[:6])} failed ({proc.returncode}) in {src}:\n{proc.stderr[-3000:]}")
    return proc, wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cli_explain(image: str, env: dict[str, str], src: Path = REPO) -> dict[str, float]:
    """``kar explain IMG --json`` as its own process."""
    proc, wall, cpu = _timed([sys.executable, "-m", "services.cli", "explain", str(REPO / image), "--json"], env, src)
    timings = json.loads(proc.stdout)["trace"]["timings"]
    return {"ground_ms": timings["ground"] * 1000, "total_ms": timings["total"] * 1000, "wall_s": wall, "cpu_s": cpu}


def cli_command(args: list[str], env: dict[str, str], src: Path = REPO) -> dict[str, float]:
    """Any ``kar`` command as its own process: wall and CPU seconds."""
    _, wall, cpu = _timed([sys.executable, "-m", "services.cli", *args], env, src)
    return {"wall_s": wall, "cpu_s": cpu}


def child_run(image: str, env: dict[str, str], src: Path = REPO) -> tuple[dict[str, float], dict[str, float], dict[str, list]]:
    """The pipeline without the warm-up in a fresh process: its first (cold) and second (warm) explain, and the
    hits and candidates (name, score, route) of the first."""
    proc, _, _ = _timed([sys.executable, "-c", CHILD, str(REPO / image)], env, src)
    first, second = json.loads(proc.stdout.strip().splitlines()[-1])
    figures = tuple(
        {"ground_ms": t["ground"] * 1000, "ground_cpu_ms": t["ground_cpu"] * 1000, "total_ms": t["total"] * 1000}
        for t in (first, second)
    )
    return figures[0], figures[1], {"hits": first["hits"], "found": first["grounded"]}


def _median(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(statistics.median(r[k] for r in rows), 1 if k.endswith("_ms") else 2) for k in rows[0]}


def _ratio(a: float, b: float) -> float:
    return round(a / b, 2) if b else float("nan")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kb", type=Path, default=REPO / "data/demo/culturebase")
    parser.add_argument("--data-dir", type=Path, default=REPO / "data/demo")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--baseline", help="a git revision to run the same cold processes at, side by side (e.g. main)")
    return parser.parse_args()


def checkout_sources(baseline: str | None) -> dict[str, Path]:
    """This checkout, and with ``baseline`` that revision in a temporary git worktree."""
    sources = {"current": REPO}
    if baseline:
        sources["baseline"] = Path(tempfile.mkdtemp(prefix="kar-cold-baseline-")) / "src"
        subprocess.run(["git", "worktree", "add", "--detach", str(sources["baseline"]), baseline], cwd=REPO, check=True,
                       capture_output=True)
    return sources


def warm_caches(sources: dict[str, Path], env: dict[str, str]) -> None:
    """Each revision writes the data directory's caches it uses (a first run ever), untimed."""
    for src in sources.values():
        for image in IMAGES:
            cli_explain(image, env, src)
        for q in SEARCHES:  # a text search also embeds the cross-lingual references once per data directory
            cli_command(["kb", "search", q, "--top-k", "3"], env, src)


def image_entry(image: str, sources: dict[str, Path], env: dict[str, str], runs: int) -> dict[str, object]:
    """One image's cold and warm figures per revision (and against the baseline's)."""
    rows: dict[str, dict[str, list]] = {name: {"cli": [], "cold": [], "warm": [], "grounded": []} for name in sources}
    for _ in range(runs):  # interleaved: both revisions see the same load
        for name, src in sources.items():
            rows[name]["cli"].append(cli_explain(image, env, src))
            cold, warm, grounded = child_run(image, env, src)
            rows[name]["cold"].append(cold)
            rows[name]["warm"].append(warm)
            rows[name]["grounded"].append(grounded)
    entry: dict[str, object] = {}
    for name in sources:
        prefix = "" if name == "current" else "baseline_"
        cold_cli, warm = _median(rows[name]["cli"]), _median(rows[name]["warm"])
        entry[prefix + "cold_cli"] = cold_cli
        entry[prefix + "cold_no_warmup"] = _median(rows[name]["cold"])
        entry[prefix + "warm"] = warm
        entry[prefix + "ground_cold_over_warm"] = _ratio(cold_cli["ground_ms"], max(warm["ground_ms"], 0.1))
        entry[prefix + "hits"] = rows[name]["grounded"][0]["hits"]
    if "baseline" in sources:  # every run's hits and candidates (name, score, route), both revisions
        every = rows["current"]["grounded"] + rows["baseline"]["grounded"]
        entry["grounding_same_as_baseline"] = all(g["found"] == every[0]["found"] for g in every)
        for key in ("cold_cli", "cold_no_warmup"):
            cur, base = entry[key], entry["baseline_" + key]
            entry[key + "_over_baseline"] = {k: _ratio(cur[k], base[k]) for k in cur}  # type: ignore[index]
    return entry


def other_commands(sources: dict[str, Path], env: dict[str, str], runs: int) -> dict[str, object]:
    """Cold ``kar kb search`` and ``kar --help`` per revision."""
    commands = {"kb search": lambda q: ["kb", "search", q, "--top-k", "3"], "--help": lambda _: ["--help"]}
    others: dict[str, object] = {}
    for label, build in commands.items():
        queries = SEARCHES if label == "kb search" else [""]
        for q in queries:
            key = f"kar {label} {q}".strip()
            rows2: dict[str, list] = {name: [] for name in sources}
            for _ in range(runs):
                for name, src in sources.items():
                    rows2[name].append(cli_command(build(q), env, src))
            others[key] = {("" if n == "current" else "baseline_") + "cold": _median(r) for n, r in rows2.items()}
            if "baseline" in sources:
                cur, base = others[key]["cold"], others[key]["baseline_cold"]  # type: ignore[index]
                others[key]["over_baseline"] = {k: _ratio(cur[k], base[k]) for k in cur}  # type: ignore[index]
    return others


def main() -> None:
    args = parse_args()
    env = _env(args.kb.resolve(), args.data_dir.resolve())
    if not args.kb.exists():
        cli_command(["kb", "import", str(REPO / "examples/culturebase_sample.jsonl")], env)
    sources = checkout_sources(args.baseline)
    try:
        warm_caches(sources, env)
        report: dict[str, object] = {"kb": str(args.kb), "runs": args.runs, "baseline": args.baseline,
                                     "load_avg_before": [round(x, 2) for x in os.getloadavg()]}
        for image in IMAGES:
            report[image] = image_entry(image, sources, env, args.runs)
        report["other_commands"] = other_commands(sources, env, args.runs)
        report["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
        print(json.dumps(report, indent=2, ensure_ascii=False))
    finally:
        if "baseline" in sources:
            subprocess.run(["git", "worktree", "remove", "--force", str(sources["baseline"])], cwd=REPO, check=False,
                           capture_output=True)


if __name__ == "__main__":
    main()
