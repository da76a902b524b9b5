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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"), help="folder holding memegen/ and memegen_templates.json")
    ap.add_argument("--entities", type=int, default=1000, help="entity images in the index (the template bench's distractors fill up to this)")
    ap.add_argument("--queries-per-template", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--limit", type=int, default=0, help="ask about about N templates, evenly spaced in the shuffled order (0: all)")
    ap.add_argument("--cache", default=str(ROOT / "data" / "bench_cache" / "templates"))
    args = ap.parse_args()

    from culturebase.entity import Entity
    from culturebase.images import ImageStore
    from culturebase.settings import Settings
    from culturebase.store import CultureBaseStore
    from culturebase.store.edge import EdgeBackend
    from culturebase.store.images import ImageFeatureStore
    from hash_embedder import HashEmbedder
    from PIL import Image

    from agents.media.frames import sample_frames
    from retrieval.images.descriptor_index import DescriptorIndex
    from retrieval.embedders import embedder_info
    from retrieval.images.route import ImageRoute
    from retrieval.knowledge_base import KnowledgeBase
    from retrieval.grounding.routes.frames import best_of_frames

    data_dir = Path(args.data)
    templates = json.loads((data_dir / "memegen_templates.json").read_text("utf-8"))
    # the template bench's split (bench/templates.py main): the same seeded shuffle, kinds and indexed two thirds
    with_image = [t["id"] for t in templates if (data_dir / "memegen" / f"{t['id']}.jpg").is_file()]
    rng = random.Random(args.seed)
    order = sorted(with_image)
    rng.shuffle(order)
    lookalikes = [t for t in tb.LOOKALIKES if t in order]
    rest = [t for t in order if t not in lookalikes]
    n = len(rest)
    kind_of = {tid: ("still" if i < n // 2 else "blank" if i < 3 * n // 4 else "animated") for i, tid in enumerate(rest)}
    kind_of.update({t: "still" for t in lookalikes})
    indexed: set[str] = set(lookalikes)
    for kind in ("still", "blank", "animated"):
        ids = [t for t in rest if kind_of[t] == kind]
        indexed.update(ids[: len(ids) * 2 // 3])

    def picture(tid: str):
        return Image.open(data_dir / "memegen" / f"{tid}.jpg").convert("RGB")

    def entity_image(tid: str) -> bytes:
        r = random.Random(f"{args.seed}:entity:{tid}")
        if kind_of[tid] == "still":
            return (data_dir / "memegen" / f"{tid}.jpg").read_bytes()
        if kind_of[tid] == "blank":
            buf = io.BytesIO()
            tb.blank_background(picture(tid), r).save(buf, "PNG")
            return buf.getvalue()
        return tb.animation(picture(tid), r)

    settings = Settings()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        kb_settings = Settings(data_dir=Path(tmp) / "data", kb_path=Path(tmp) / "kb")
        emb = HashEmbedder()
        store = CultureBaseStore(EdgeBackend(Path(tmp) / "kb"), embedder_info(emb))
        kb = KnowledgeBase(store, emb, settings=kb_settings)
        images = ImageStore(cache / "images")
        route = ImageRoute(store, images, tau=kb_settings.image_tau, crops=True, features=ImageFeatureStore(cache / "image_features"),
                           descriptors=DescriptorIndex(Path(tmp) / "descriptor_index"), threads=kb_settings.image_query_threads)
        kb._image_route = route
        real = [Entity(name=f"tpl {tid}", aliases=[tid], description=f"memegen template {tid}", images=[images.put(entity_image(tid))])
                for tid in sorted(indexed)]
        kb.add(real)
        entity_of = {e.aliases[0]: e.id for e in real}
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

        def top(matches) -> tuple[bool, str | None]:  # type: ignore[no-untyped-def]
            accepted = sorted((m for m in matches if m.signal(route.tau)), key=lambda m: -m.evidence(route.tau))
            return bool(accepted), accepted[0].entity_id if accepted else None

        asked = order[:: max(1, len(order) // args.limit)] if args.limit else order  # spread over the split's parts
        for done, tid in enumerate(asked):
            if done % 10 == 0:
                print(f"{done} templates asked about", file=sys.stderr, flush=True)
            positive = tid in indexed
            if positive and kind_of[tid] != "still":
                continue  # plain-style queries are asked of still templates (as in the template bench)
            for q in range(args.queries_per_template):
                r = random.Random(f"{args.seed}:query:{tid}:{q}")
                data = tb.plain_meme(picture(tid), r, band=q % 3 == 2)
                t0 = time.perf_counter()
                claimed_i, best_i = top(route.match(route.prepare(data)))
                t1 = time.perf_counter()
                with tempfile.NamedTemporaryFile(suffix=".mp4") as f:
                    f.write(meme_video(data, args.seconds))
                    f.flush()
                    t2 = time.perf_counter()
                    sample = sample_frames(f.name, settings.media_frames, scene_frames=settings.media_scene_frames,
                                           scene_threshold=settings.media_scene_threshold, frame_side=settings.media_frame_side)
                    matches, why = best_of_frames(route, [fr.jpeg for fr in sample.frames])
                    claimed_v, best_v = top(matches)
                    t3 = time.perf_counter()
                rows.append({"tid": tid, "positive": positive, "image_top1": best_i == entity_of.get(tid) and claimed_i, "image_claimed": claimed_i,
                             "video_top1": best_v == entity_of.get(tid) and claimed_v, "video_claimed": claimed_v, "frames": len(sample.frames),
                             "image_ms": (t1 - t0) * 1000, "video_ms": (t3 - t2) * 1000, "why": why})
        kb.close()

    pos = [r for r in rows if r["positive"]]
    neg = [r for r in rows if not r["positive"]]

    def share(sel: list[dict], key: str) -> float:
        return round(sum(r[key] for r in sel) / max(1, len(sel)), 3)

    image_top1, video_top1 = share(pos, "image_top1"), share(pos, "video_top1")
    print(json.dumps({
        "bench": "clip_frames",
        "seed": args.seed,
        "index": {"templates": len(indexed), "images": args.entities},
        "plain_queries": {"in_kb": len(pos), "out_of_kb": len(neg)},
        "image": {"top1": image_top1, "false_claims": share(neg, "image_claimed"),
                  "ms_p50": round(statistics.median([r["image_ms"] for r in rows]), 1)},
        "video_frames": {"top1": video_top1, "false_claims": share(neg, "video_claimed"), "frames_per_clip": sorted({r["frames"] for r in rows}),
                         "ms_p50_sample_and_match": round(statistics.median([r["video_ms"] for r in rows]), 1), "clip_seconds": args.seconds},
        "video_over_image_top1": round(video_top1 / image_top1, 3) if image_top1 else None,
        "disagreements": [{"tid": r["tid"], "image": r["image_top1"], "video": r["video_top1"]} for r in pos if r["image_top1"] != r["video_top1"]][:20],
    }, indent=2))


if __name__ == "__main__":
    main()
