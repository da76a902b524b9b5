"""Benchmark: report generation over synthetic judge files; prints JSON.

1,253 items × 4 conditions × 26 models of synthetic itemized judge files (written to a
temporary folder as JSON, as `kar judge` writes them) → load + metrics + paired
bootstrap (10,000 resamples) + tables, timed without plot rendering (target < 30 s),
then plots timed separately; peak memory (tracemalloc for Python allocations and the
process's max RSS).  Judge calls and tokens per item are measured with a scripted VLM
over 50 items (including parse retries).

    python bench/eval.py [--items 1253] [--models 26] [--bootstrap 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from eval.tasks.memebench import load_benchmark  # noqa: E402
from eval.records import load_judged  # noqa: E402
from eval.report.vikr import build_report, write_report  # noqa: E402
from eval.verdicts import DIMENSIONS, evaluation_from_item_results  # noqa: E402

CONDITIONS = ("vanilla", "cot", "search_cot", "kar")


def synth_bench(folder: Path, n: int, rng: np.random.Generator) -> Path:
    items = []
    for i in range(n):
        items.append(
            {
                "id": f"meme{i:05d}",
                "image_path": f"images/meme{i:05d}.png",
                "visual": "v", "identity": "i", "knowledge": "k", "reasoning": "r",
                "eval_checklist": {d: [f"{d} {j}" for j in range(int(rng.integers(1, 4)))] for d in DIMENSIONS},
                "language": ["zh", "en", "ja"][i % 3],
                "domain": ["anime", "politics", "games", "film"][i % 4],
            }
        )
    path = folder / "bench.json"
    path.write_text(json.dumps(items))
    return path


def synth_judged(folder: Path, bench, model: int, condition: int, rng: np.random.Generator) -> Path:
    skill = 0.55 + 0.015 * model + 0.04 * condition
    records = []
    for item in bench:
        if rng.random() < 0.01:
            evaluation = {"parse_success": False, "parse_error": "synthetic", "raw_content": "?"}
        else:
            rows = {
                d: [{"index": j + 1, "pass": int(rng.random() < skill + 0.08 * (3 - k)), "reason": "synthetic"}
                    for j in range(len(item.checklist(d)))]
                for k, d in enumerate(DIMENSIONS)
            }
            evaluation = evaluation_from_item_results(rows, format="itemized_json")
        records.append({"id": item.id, "image_path": item.image_path, "response": "r", "evaluation": evaluation})
    path = folder / f"model{model:02d}_{CONDITIONS[condition]}.json"
    path.write_text(json.dumps(records))
    return path


def judge_accounting(bench_path: Path, n: int) -> dict[str, float]:
    """Judge calls/tokens per item with a scripted VLM (10% of first replies unparseable)."""
    from agents.vlm.base import ChatResult, TokenUsage
    from eval.records import Prediction
    from eval.judges.checklist import ChecklistJudge, run_judge

    class Scripted:
        model_id = "bench-judge"

        def __init__(self) -> None:
            self.count = 0

        async def chat(self, messages, sampling=None):
            self.count += 1
            user = messages[1].text
            prompt_tokens = len(user) // 4 + 1000  # text + one image
            if self.count % 10 == 0 and len(messages) == 2:
                return ChatResult("not json", self.model_id, TokenUsage(prompt_tokens, 5))
            section = user.split("## Checklist", 1)[1].split("## Candidate", 1)[0]
            results, current = {}, None
            for line in section.splitlines():
                if line.startswith("### "):
                    current = line[4:].strip()
                    results[current] = []
                elif line[:1].isdigit() and current:
                    results[current].append({"index": len(results[current]) + 1, "pass": 1, "reason": "ok"})
            text = json.dumps({"item_results": results})
            return ChatResult(text, self.model_id, TokenUsage(prompt_tokens, len(text) // 4))

    bench = load_benchmark(bench_path, check_images=False)[:n]
    (bench_path.parent / "images").mkdir(exist_ok=True)
    for item in bench:
        (bench_path.parent / item.image_path).write_bytes(b"\x89PNG")
    preds = [Prediction(item.id, item.image_path, "a synthetic explanation " * 40) for item in bench]
    summary = asyncio.run(
        run_judge(bench, preds, bench_path.parent / "judge_out.json", ChecklistJudge(Scripted()), bench_path=bench_path)
    )
    return {
        "items": summary.judged,
        "calls_per_item": summary.calls / summary.judged,
        "prompt_tokens_per_item": summary.prompt_tokens / summary.judged,
        "completion_tokens_per_item": summary.completion_tokens / summary.judged,
    }


def generate_report(folder: Path, bench_path: Path, files: dict[str, Path], n_boot: int, out_name: str):
    """Load, compute and write the report once; returns it with the load, metrics and total seconds."""
    start = time.perf_counter()
    items = load_benchmark(bench_path, check_images=False)
    judged = {name: load_judged(path) for name, path in files.items()}
    loaded = time.perf_counter()
    rep = build_report(items, judged, baseline="vanilla", n_boot=n_boot)
    computed = time.perf_counter()
    write_report(rep, folder / out_name, plots=False)
    return rep, loaded - start, computed - loaded, time.perf_counter() - start


def measure(folder: Path, items: int, models: int, n_boot: int) -> dict[str, Any]:
    """Synthesise the judged files, time the report (untraced, then traced for peak memory) and its plots."""
    rng = np.random.default_rng(0)
    bench_path = synth_bench(folder, items, rng)
    bench = load_benchmark(bench_path, check_images=False)
    t0 = time.perf_counter()
    files = {
        f"model{m:02d}/{c}": synth_judged(folder, bench, m, ci, rng)
        for m in range(models)
        for ci, c in enumerate(CONDITIONS)
    }
    synth_s = time.perf_counter() - t0
    size_mb = sum(p.stat().st_size for p in files.values()) / 1e6
    report, t_load, t_metrics, t_total = generate_report(folder, bench_path, files, n_boot, "report")  # timed without tracing
    tracemalloc.start()
    generate_report(folder, bench_path, files, n_boot, "report_traced")  # the same work again, for peak Python memory
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    t0 = time.perf_counter()
    write_report(report, folder / "report_plots", plots=True)
    t_plots = time.perf_counter() - t0
    return {"report": report, "files": len(files), "size_mb": size_mb, "synth_s": synth_s, "t_load": t_load,
            "t_metrics": t_metrics, "t_total": t_total, "t_plots": t_plots, "peak": peak,
            "accounting": judge_accounting(bench_path, 50)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=1253)
    parser.add_argument("--models", type=int, default=26)
    parser.add_argument("--bootstrap", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        m = measure(Path(tmp), args.items, args.models, args.bootstrap)
    t_total = m["t_total"]
    result = {
        "items": args.items,
        "conditions": len(CONDITIONS),
        "models": args.models,
        "judged_files": m["files"],
        "judged_files_mb": round(m["size_mb"], 1),
        "bootstrap_resamples": args.bootstrap,
        "paired_comparisons": len(m["report"]["paired"]),
        "synthesis_s": round(m["synth_s"], 2),
        "report_without_plots_s": round(t_total, 2),
        "load_s": round(m["t_load"], 2),
        "metrics_s": round(m["t_metrics"], 2),
        "tables_and_html_s": round(t_total - m["t_load"] - m["t_metrics"], 2),
        "target_s": 30,
        "meets_target": t_total < 30,
        "plots_and_html_s": round(m["t_plots"], 2),
        "peak_python_mem_mb": round(m["peak"] / 1e6, 1),
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "judge": {k: round(v, 2) if isinstance(v, float) else v for k, v in m["accounting"].items()},
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
