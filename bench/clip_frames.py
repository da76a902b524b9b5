"""Frames against images: does a video whose frames show a template ground it as the image itself does?

The template bench's index and plain-style queries (bench/templates.py: the memegen templates of
``../shared/data``, the same seeded split, the still templates indexed as entities, the same plain
memes drawn with the same seeds; ``--entities`` fills the index with its synthetic distractors).
Each plain meme is asked about twice on the same index:

* as the image (the image route: ``prepare`` then ``match``, as the template bench does);
* as a video: a ``--seconds`` H.264 clip whose frames show the meme (zooming in slowly from 100 % to
  110 %, so no two frames are the same picture), sampled as ``kar explain`` samples a clip
  (agents.media.frames.sample_frames with the default KAR_MEDIA_FRAMES / scene frames / frame side)
  and matched by the frames route (retrieval/routes/frames.py: every frame in one call, each
  template counted once by its best frame).

Top-1 is the best accepted match being the template's entity (indexed templates); a false claim is
any accepted match for a template that is not indexed.  Printed (JSON): both figures for both
inputs, their ratio, and ms per query of each.

    .venv/bin/python bench/clip_frames.py [--seed 23] [--entities 1000] [--queries-per-template 1] [--limit 60]
"""

from __future__ import annotations

import argparse
import io
import json
import random
import statistics
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "crawlers"))

import templates as tb  # noqa: E402  (bench/templates.py: its split, its plain memes, its distractors)


def meme_video(jpeg: bytes, seconds: float, fps: int = 10) -> bytes:
    """An MP4 (H.264) whose frames show the picture, zooming in slowly (100 % to 110 %)."""
    import av
    import numpy as np
    from PIL import Image

    img = Image.open(io.BytesIO(jpeg)).convert("RGB")
    w, h = img.width // 2 * 2, img.height // 2 * 2
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        n = max(1, int(seconds * fps))
        for i in range(n):
            z = 1.0 + 0.1 * i / max(1, n - 1)
            cw, ch = w / z, h / z
            box = ((w - cw) / 2, (h - ch) / 2, (w + cw) / 2, (h + ch) / 2)
            frame = av.VideoFrame.from_ndarray(np.asarray(img.resize((w, h), Image.BILINEAR, box=box)), format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, fps)
            for p in stream.encode(frame):
                out.mux(p)
        for p in stream.encode(None):
            out.mux(p)
    return buf.getvalue()


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"), help="folder holding memegen/ and memegen_templates.json")
    ap.add_argument("--entities", type=int, default=1000, help="entity images in the index (the template bench's distractors fill up to this)")
    ap.add_argument("--queries-per-template", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--limit", type=int, default=0, help="ask about about N templates, evenly spaced in the shuffled order (0: all)")
    ap.add_argument("--cache", default=str(ROOT / "data" / "bench_cache" / "templates"))
    return ap.parse_args()


def build_index(args: argparse.Namespace, split: "tb.TemplateSplit", cache: Path, tmp: Path):
    """The template bench's index: its indexed templates as entities, its distractors up to ``--entities``;
    returns the knowledge base, the image route and each template's entity id."""
    from culturebase.entity import Entity
    from culturebase.images import ImageStore
    from culturebase.settings import Settings
    from culturebase.store import CultureBaseStore
    from culturebase.store.edge import EdgeBackend
    from culturebase.store.images import ImageFeatureStore
    from hash_embedder import HashEmbedder

    from retrieval.embedders import embedder_info
    from retrieval.images.descriptor_index import DescriptorIndex
    from retrieval.images.route import ImageRoute
    from retrieval.knowledge_base import KnowledgeBase

    kb_settings = Settings(data_dir=tmp / "data", kb_path=tmp / "kb")
    emb = HashEmbedder()
    store = CultureBaseStore(EdgeBackend(tmp / "kb"), embedder_info(emb))
    kb = KnowledgeBase(store, emb, settings=kb_settings)
    images = ImageStore(cache / "images")
    route = ImageRoute(store, images, tau=kb_settings.image_tau, crops=True, features=ImageFeatureStore(cache / "image_features"),
                       descriptors=DescriptorIndex(tmp / "descriptor_index"), threads=kb_settings.image_query_threads)
    kb._image_route = route
    real = [Entity(name=f"tpl {tid}", aliases=[tid], description=f"memegen template {tid}", images=[images.put(split.entity_image(tid))])
            for tid in sorted(split.indexed)]
    kb.add(real)
    distractors = []
    for i in range(max(0, args.entities - len(real))):
        path = cache / "distractors" / f"{i}.jpg"
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(tb.distractor(i))
        distractors.append(Entity(name=f"distractor {i}", description="synthetic", images=[images.put(path.read_bytes())]))
    for start in range(0, len(distractors), 256):
        route.index_entities(distractors[start : start + 256])
    route.index.collection.optimize()
    print(f"indexed {len(real)} templates and {len(distractors)} distractors", file=sys.stderr, flush=True)
    return kb, route, {e.aliases[0]: e.id for e in real}


def top(route, matches) -> tuple[bool, str | None]:
    """Whether anything was accepted, and the best accepted entity."""
    accepted = sorted((m for m in matches if m.signal(route.tau)), key=lambda m: -m.evidence(route.tau))
    return bool(accepted), accepted[0].entity_id if accepted else None


def ask_both(args: argparse.Namespace, route, data: bytes) -> dict:
    """One plain meme asked as the image and as a clip whose frames show it: claims, best entities, times."""
    from agents.media.frames import sample_frames
    from culturebase.settings import Settings
    from retrieval.grounding.routes.frames import best_of_frames

    settings = Settings()
    t0 = time.perf_counter()
    claimed_i, best_i = top(route, route.match(route.prepare(data)))
    t1 = time.perf_counter()
    with tempfile.NamedTemporaryFile(suffix=".mp4") as f:
        f.write(meme_video(data, args.seconds))
        f.flush()
        t2 = time.perf_counter()
        sample = sample_frames(f.name, settings.media_frames, scene_frames=settings.media_scene_frames,
                               scene_threshold=settings.media_scene_threshold, frame_side=settings.media_frame_side)
        matches, why = best_of_frames(route, [fr.jpeg for fr in sample.frames])
        claimed_v, best_v = top(route, matches)
        t3 = time.perf_counter()
    return {"claimed_i": claimed_i, "best_i": best_i, "claimed_v": claimed_v, "best_v": best_v, "frames": len(sample.frames),
            "image_ms": (t1 - t0) * 1000, "video_ms": (t3 - t2) * 1000, "why": why}


def ask(args: argparse.Namespace, split: "tb.TemplateSplit", route, entity_of: dict[str, str]) -> list[dict]:
    """The plain memes of the still templates (and of every out-of-KB one), each asked both ways."""
    rows = []
    asked = split.order[:: max(1, len(split.order) // args.limit)] if args.limit else split.order  # spread over the split's parts
    for done, tid in enumerate(asked):
        if done % 10 == 0:
            print(f"{done} templates asked about", file=sys.stderr, flush=True)
        positive = tid in split.indexed
        if positive and split.kind_of[tid] != "still":
            continue  # plain-style queries are asked of still templates (as in the template bench)
        for q in range(args.queries_per_template):
            r = random.Random(f"{args.seed}:query:{tid}:{q}")
            a = ask_both(args, route, tb.plain_meme(split.picture(tid), r, band=q % 3 == 2))
            rows.append({"tid": tid, "positive": positive, "image_top1": a["best_i"] == entity_of.get(tid) and a["claimed_i"],
                         "image_claimed": a["claimed_i"], "video_top1": a["best_v"] == entity_of.get(tid) and a["claimed_v"],
                         "video_claimed": a["claimed_v"], "frames": a["frames"], "image_ms": a["image_ms"], "video_ms": a["video_ms"],
                         "why": a["why"]})
    return rows


def summary(args: argparse.Namespace, split: "tb.TemplateSplit", rows: list[dict]) -> dict:
    pos = [r for r in rows if r["positive"]]
    neg = [r for r in rows if not r["positive"]]

    def share(sel: list[dict], key: str) -> float:
        return round(sum(r[key] for r in sel) / max(1, len(sel)), 3)

    image_top1, video_top1 = share(pos, "image_top1"), share(pos, "video_top1")
    return {
        "bench": "clip_frames",
        "seed": args.seed,
        "index": {"templates": len(split.indexed), "images": args.entities},
        "plain_queries": {"in_kb": len(pos), "out_of_kb": len(neg)},
        "image": {"top1": image_top1, "false_claims": share(neg, "image_claimed"),
                  "ms_p50": round(statistics.median([r["image_ms"] for r in rows]), 1)},
        "video_frames": {"top1": video_top1, "false_claims": share(neg, "video_claimed"), "frames_per_clip": sorted({r["frames"] for r in rows}),
                         "ms_p50_sample_and_match": round(statistics.median([r["video_ms"] for r in rows]), 1), "clip_seconds": args.seconds},
        "video_over_image_top1": round(video_top1 / image_top1, 3) if image_top1 else None,
        "disagreements": [{"tid": r["tid"], "image": r["image_top1"], "video": r["video_top1"]} for r in pos if r["image_top1"] != r["video_top1"]][:20],
    }


def main() -> None:
    args = parse_args()
    split = tb.split_templates(Path(args.data), args.seed)  # the template bench's split: the same seeded shuffle
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        kb, route, entity_of = build_index(args, split, cache, Path(tmp))
        rows = ask(args, split, route, entity_of)
        kb.close()
    print(json.dumps(summary(args, split, rows), indent=2))


if __name__ == "__main__":
    main()
