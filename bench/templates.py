"""Template recognition benchmark (the image route, two stages): prints JSON.

Data: the memegen blank templates (``../shared/data/memegen``, option ``--data``).  A seeded
shuffle gives every template one kind of entity image: *still* (the JPEG as is, half of
them), *blank_background* (the template's picture at 45-60 % of the width on a flat canvas:
a drawing on white) or *animated* (a 12-frame GIF panning and zooming over the template).
Two thirds of each kind are indexed as entities; the other third is never indexed (out of KB).
Synthetic textured distractors (shapes, gradients, noise, text; generated once and cached) fill the
image index up to ``--entities`` images, so accuracy and latency are measured at that size (20,000 images:
``--entities 20000``; ``--synthetic-fill`` adds byte-permuted descriptor copies, which skew a retrained IVF).

Queries, ``--queries-per-template`` per template and style, each seeded:

* ``plain``: new captions drawn on (every third one a white caption band above instead),
  down-scaled 0.6-1.0, cropped ≤ 5 % a side, JPEG 50-85 (still templates);
* ``screenshot``: that meme pasted into a post (header with avatar, name and text, footer with
  counts), 40-70 % of the post's width, light or dark page, then down-scaled and JPEG'd;
* ``blank_background``: a plain-style meme of the blank-background entity image;
* ``animated``: a plain-style meme of one frame (any, the first included) of the animation.

Positives are queries of indexed templates (top-1 = the best accepted image match is the
template's entity); negatives are every style's queries of the out-of-KB templates (false
claim = any accepted image match).  The hash-only route (nearest hash within τ_image, the
previous accept rule) is printed beside it on the same queries, with ratios.  Latency: the
image route per query (prepare = hash + crops + features, then match = store search +
verification) p50/p95 over all queries; index time per image (decode, hash, describe).

Untouched figures: thresholds were set on ``--seed 11``; report ``--seed 23`` (its split and
memes are new).  Features and images of the distractors are cached under
``data/bench_cache/templates`` (a rerun only re-hashes them into a fresh store).

Diagnostics on stderr: ``BENCH_MISSES=1`` lists every missed positive and every false claim (layout, the
right template's votes and inliers, what was claimed), ``BENCH_HITS=1`` every hit's query part, inliers,
share, votes and coverage (for calibrating the route's thresholds on the tuning seed only).

``--kb-from crawl`` builds the templates' knowledge base the way a user does: ``kar crawl memegen`` (the crawl
job, its identity rules and image pipeline) over a local memegen API serving the indexed templates in the real
list's shape, each with its entity image as the blank; a query's right entity is then the one holding its
template's page under the template's name.
``--kb-from direct`` (default) writes one entity a template straight into the store.

Usage: ``python bench/templates.py [--seed 23] [--entities 5000] [--queries-per-template 2] [--kb-from crawl]``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "crawlers"))
sys.path.insert(0, str(ROOT / "bench"))

import social_layouts  # noqa: E402  (bench/social_layouts.py)

WORDS = (
    "when you finally understand the meme but nobody asked me explaining to my cat why monday is the worst day ever "
    "boss said deadline tomorrow coffee again my code works on my machine friday night plans cancelled"
).split()
STYLES = ("plain", "screenshot", "grid", "lookalike", "blank_background", "animated", "grid_narrow")
KIND_OF_STYLE = {"plain": "still", "screenshot": "still", "grid": "still", "lookalike": "still", "blank_background": "blank",
                 "animated": "animated", "grid_narrow": "still"}
#: memegen templates with the same drawing style or the same people (same show, same film, same politician
#: series, same hat): all are indexed, as still images, so that each competes with its look-alikes
LOOKALIKE_PAIRS = (
    ("fry", "bad"), ("fry", "whatyear"), ("bad", "whatyear"), ("touch", "cbg"), ("officespace", "cake"),
    ("patrick", "stop"), ("patrick", "spongebob"), ("stop", "spongebob"), ("sad-bush", "sad-obama"),
    ("sad-bush", "sad-boehner"), ("sad-obama", "sad-boehner"), ("mordor", "gandalf"), ("bilbo", "gandalf"),
    ("ss", "sb"), ("awesome-awkward", "awkward"), ("sadfrog", "fbf"), ("cb", "sarcasticbear"), ("sk", "success"),
)
LOOKALIKES = sorted({t for pair in LOOKALIKE_PAIRS for t in pair})


def caption(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6)))


def _jpeg(img, rng: random.Random) -> bytes:
    buf = io.BytesIO()
    img.convert("RGB").save(buf, "JPEG", quality=rng.randint(50, 85))
    return buf.getvalue()


def captioned(img, rng: random.Random, band: bool):
    """New captions drawn on (memegen style) or a white caption band with black text above."""
    from PIL import Image, ImageDraw, ImageFont

    img = img.convert("RGB").copy()
    size = max(12, img.height // rng.randint(9, 13))
    font = ImageFont.load_default(size=size)
    if band:
        bh = int(img.height * rng.uniform(0.15, 0.3))
        canvas = Image.new("RGB", (img.width, img.height + bh), "white")
        canvas.paste(img, (0, bh))
        ImageDraw.Draw(canvas).text((8, bh // 3), caption(rng), font=font, fill="black")
        return canvas
    d = ImageDraw.Draw(img)
    for y in (int(img.height * 0.03), int(img.height * 0.97) - size - 4):
        text = caption(rng).upper()
        x = max(2, (img.width - d.textlength(text, font=font)) / 2)
        d.text((x, y), text, font=font, fill="white", stroke_width=max(1, size // 12), stroke_fill="black")
    return img


def degrade(img, rng: random.Random):
    """Down-scaled 0.6-1.0 and cropped ≤ 5 % per side."""
    from PIL import Image

    s = rng.uniform(0.6, 1.0)
    img = img.resize((max(16, int(img.width * s)), max(16, int(img.height * s))), Image.LANCZOS)
    w, h = img.size
    l, t, r, b = (int(rng.uniform(0, 0.05) * v) for v in (w, h, w, h))
    return img.crop((l, t, w - r, h - b))


def plain_meme(img, rng: random.Random, band: bool) -> bytes:
    return _jpeg(degrade(captioned(img, rng, band), rng), rng)


def screenshot(img, rng: random.Random) -> bytes:
    """The meme pasted into a post: header (avatar, name, text), the meme at 40-70 % width, footer."""
    from PIL import Image, ImageDraw, ImageFont

    meme = degrade(captioned(img, rng, False), rng)
    share = rng.uniform(0.4, 0.7)
    width = int(meme.width / share)
    dark = rng.random() < 0.3
    page, ink, grey = ((21, 32, 43), (231, 233, 234), (113, 118, 123)) if dark else ((255, 255, 255), (15, 20, 25), (83, 100, 113))
    font = ImageFont.load_default(size=max(12, width // 40))
    header = int(width * rng.uniform(0.15, 0.3))
    footer = int(width * rng.uniform(0.06, 0.14))
    canvas = Image.new("RGB", (width, header + meme.height + footer), page)
    d = ImageDraw.Draw(canvas)
    r = max(10, width // 30)
    d.ellipse((12, 12, 12 + 2 * r, 12 + 2 * r), fill=tuple(rng.randint(0, 255) for _ in range(3)))
    d.text((24 + 2 * r, 14), f"@{rng.choice(WORDS)}_{rng.randint(1, 999)} · {rng.randint(1, 23)}h", font=font, fill=ink)
    y = 24 + 2 * r
    while y < header - font.size - 6:
        d.text((14, y), caption(rng), font=font, fill=ink)
        y += font.size + 6
    x = rng.randint(10, max(10, width - meme.width - 10)) if rng.random() < 0.5 else 14
    canvas.paste(meme, (x, header))
    fy = header + meme.height + max(4, footer // 4)
    d.text((14, fy), f"{rng.randint(1, 999)} replies   {rng.randint(1, 9)}.{rng.randint(0, 9)}K reposts   {rng.randint(1, 99)}K likes", font=font, fill=grey)
    s = rng.uniform(0.7, 1.0)
    canvas = canvas.resize((int(canvas.width * s), int(canvas.height * s)), Image.LANCZOS)
    return _jpeg(canvas, rng)


def blank_background(img, rng: random.Random):
    """The template's picture at 45-60 % of the width on a flat canvas (a blank-background template)."""
    from PIL import Image

    share = rng.uniform(0.45, 0.6)
    width = int(img.width / share)
    height = int(img.height / rng.uniform(0.55, 0.8))
    canvas = Image.new("RGB", (width, height), rng.choice([(255, 255, 255), (250, 250, 245), (0, 0, 0)]))
    canvas.paste(img.convert("RGB"), ((width - img.width) // 2, (height - img.height) // 2))
    return canvas


def animation(img, rng: random.Random, frames: int = 12) -> bytes:
    """A GIF panning and zooming over the template (frame k: a crop of 80-100 % of the picture)."""
    from PIL import Image

    img = img.convert("RGB")
    w, h = img.size
    out = []
    for k in range(frames):
        z = 1.0 - 0.2 * k / (frames - 1)
        cw, ch = int(w * z), int(h * z)
        x, y = int((w - cw) * k / (frames - 1)), int((h - ch) * (frames - 1 - k) / (frames - 1))
        out.append(img.crop((x, y, x + cw, y + ch)).resize((w, h)).quantize(colors=128, method=Image.Quantize.FASTOCTREE))
    buf = io.BytesIO()
    out[0].save(buf, "GIF", save_all=True, append_images=out[1:], duration=80, loop=0)
    return buf.getvalue()


def animation_frame(img, k: int, frames: int = 12):
    """Frame ``k`` of :func:`animation` (the same crop and palette), without encoding the whole GIF."""
    from PIL import Image

    img = img.convert("RGB")
    w, h = img.size
    z = 1.0 - 0.2 * k / (frames - 1)
    cw, ch = int(w * z), int(h * z)
    x, y = int((w - cw) * k / (frames - 1)), int((h - ch) * (frames - 1 - k) / (frames - 1))
    return img.crop((x, y, x + cw, y + ch)).resize((w, h)).quantize(colors=128, method=Image.Quantize.FASTOCTREE).convert("RGB")


def gif_frame(data: bytes, rng: random.Random):
    from PIL import Image

    img = Image.open(io.BytesIO(data))
    img.seek(rng.randrange(getattr(img, "n_frames", 1)))
    return img.convert("RGB")


def distractor(i: int) -> bytes:
    """A synthetic textured template: gradient, shapes, noise and a line of text (seeded by ``i``)."""
    import numpy as np
    from PIL import Image, ImageDraw, ImageFont

    rng = random.Random(f"distractor:{i}")
    w, h = rng.choice([(480, 360), (400, 400), (500, 300), (360, 480)])
    gen = np.random.default_rng(i)
    base = np.linspace(gen.integers(0, 255, 3), gen.integers(0, 255, 3), h).astype(np.float32)[:, None, :].repeat(w, 1)
    base += gen.normal(0, rng.uniform(4, 20), (h, w, 3))
    img = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
    d = ImageDraw.Draw(img)
    for _ in range(rng.randint(8, 20)):
        x0, y0 = rng.randint(-40, w), rng.randint(-40, h)
        x1, y1 = x0 + rng.randint(15, w // 2), y0 + rng.randint(15, h // 2)
        fill = tuple(rng.randint(0, 255) for _ in range(3))
        shape = rng.choice([d.ellipse, d.rectangle, d.line])
        shape([x0, y0, x1, y1], fill=fill, **({"width": rng.randint(2, 9)} if shape == d.line else {}))
    d.text((rng.randint(0, w // 3), rng.randint(0, h - 30)), caption(rng), font=ImageFont.load_default(size=rng.randint(14, 30)), fill="white")
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=88)
    return buf.getvalue()


def image_route_margin() -> float:
    import retrieval.images.route as image_route_module

    return image_route_module.PARAMS.lookalike_margin


def _contest_row(matches, right: str | None) -> dict | None:
    """For look-alike calibration: of the verified templates that competed over the same part of the
    query, the right one's strength over the strongest other one (``right``: how it fared), or the
    strongest's over the runner-up when the right one was not among them."""
    contested = [m for m in matches if m.contest]
    if not contested:
        return None
    mine = next((m for m in contested if m.entity_id == right), None)
    others = sorted((m.strength for m in contested if m.entity_id != right), reverse=True)
    if mine is not None:
        return {"right": mine.contest, "ratio": round(mine.strength / others[0], 3) if others and others[0] else None}
    return {"right": None, "ratio": round(others[0] / others[1], 3) if len(others) > 1 and others[1] else None}


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def _index_copy(index, nprobe: int | None):
    """An empty descriptor index with ``index``'s settings and slot table (its IVF is the caller's to set)."""
    from retrieval.images import descriptor_index as di

    copy = di.DescriptorIndex(None, per_image=index.per_image, ivf_from=index.ivf_from, nprobe=nprobe,
                              per_image_coarse=index.per_image_coarse)
    copy._slots, copy._counts, copy._slot_of = list(index._slots), list(index._counts), dict(index._slot_of)
    copy._mirror_counts, copy._mirror_total = list(index._mirror_counts), index._mirror_total
    return copy


def _index_grown_as(index, growth: int, nprobe: int):
    """A copy of a descriptor index as it would stand had it been retrained only every ``growth``× (main's
    rule before the retrain round: 8×, lists for 2 probes, 2 probes): the same codes and slots, an IVF trained
    on the codes added first, as many as it held at its last retrain (bench variants: ``"index"``)."""
    import math

    import faiss
    import numpy as np

    from retrieval.images import descriptor_index as di

    codes, ids = index._all_codes()
    order = np.argsort(ids, kind="stable")  # slots are handed out in the order images were added
    codes, ids = codes[order], ids[order]
    trained = index.ivf_from
    while trained * growth <= len(codes):
        trained *= growth
    copy = _index_copy(index, nprobe)
    nlist = int(max(64, min(65_536, math.sqrt(di.PARAMS.nlist_cost * 2 * trained))))
    quantizer = faiss.IndexBinaryFlat(di.CODE_BYTES * 8)
    ivf = faiss.IndexBinaryIVF(quantizer, di.CODE_BYTES * 8, nlist)
    ivf.own_fields = True
    quantizer.this.disown()
    sample = codes[:trained][np.random.default_rng(0).choice(trained, size=min(trained, nlist * 64), replace=False)]
    ivf.train(np.ascontiguousarray(sample))
    ivf.add_with_ids(np.ascontiguousarray(codes), ids)
    ivf.nprobe = nprobe
    copy._index, copy._trained_at = ivf, trained
    return copy


def _index_retrained(index):
    """A copy of the descriptor index retrained now, under the parameters in force (a variant's ``set``:
    ``retrieval.images.descriptor_index.PARAMS.nlist_cost``, ...); the index itself is left as it is."""
    copy = _index_copy(index, index.nprobe)
    copy._index = index._index  # read by the retrain, replaced by the new IVF
    copy.retrain()
    return copy


def _set(route, name: str, value):
    """Set one variant setting; returns ``(holder, attribute, old value)`` to restore it.  ``route.attr`` (or
    ``route.descriptors.attr``) sets the route's attribute; ``module.NAME`` a module constant; ``module.PARAMS.field``
    one field of a module's parameters object (the object is replaced by a copy with that field changed)."""
    import dataclasses
    import importlib

    if name.startswith("route."):
        obj, attr = route, name[len("route."):]
        while "." in attr:
            head, attr = attr.split(".", 1)
            obj = getattr(obj, head)
        old = getattr(obj, attr)
        setattr(obj, attr, value)
        return obj, attr, old
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
            break
        except ImportError:
            continue
    rest = parts[cut:]
    old = getattr(module, rest[0])
    setattr(module, rest[0], value if len(rest) == 1 else dataclasses.replace(old, **{rest[1]: value}))
    return module, rest[0], old


def _apply_variant(variant: dict, route) -> list:
    """A variant's descriptor index and settings put in place; returns what restores them (last first)."""
    saved = []
    if variant.get("index"):
        other = _index_grown_as(route.descriptors, int(variant["index"]["growth"]), int(variant["index"]["nprobe"]))
        saved.append((route, "descriptors", route.descriptors))
        route.descriptors = other
        print(f"variant {variant.get('name')}: IVF {int(other._index.nlist)} lists, trained at {other._trained_at}",
              file=sys.stderr, flush=True)
    for name, value in variant.get("set", {}).items():
        saved.append(_set(route, name, value))
    if variant.get("retrain"):  # the index as a retrain under these settings leaves it
        other = _index_retrained(route.descriptors)
        saved.append((route, "descriptors", route.descriptors))
        route.descriptors = other
        print(f"variant {variant.get('name')}: retrained {json.dumps(other.last_retrain)}", file=sys.stderr, flush=True)
    return saved


def _variant_rows(route, queries: list, entity_of: dict) -> dict[str, dict]:
    """The queries run again: per style, positives' top-1, negatives' claims, CPU, wall time and misses."""
    per: dict[str, dict] = {}
    for style, tid, positive, data, _layout in queries:
        c0, w0 = time.process_time(), time.perf_counter()
        matches = route.match(route.prepare(data))
        ms = (time.process_time() - c0) * 1000
        wall = (time.perf_counter() - w0) * 1000
        accepted = sorted((m for m in matches if m.signal(route.tau)), key=lambda m: -m.evidence(route.tau))
        row = per.setdefault(style, {"pos": [], "neg": [], "cpu": [], "cpu_neg": [], "wall": [], "misses": []})
        row["wall"].append(wall)
        if positive:
            ok = bool(accepted) and accepted[0].entity_id == entity_of.get(tid)
            row["pos"].append(ok)
            row["cpu"].append(ms)
            if not ok:
                row["misses"].append(tid)
        else:
            row["neg"].append(bool(accepted))
            row["cpu_neg"].append(ms)
    return per


def _p50_p95(values: list[float]) -> list[float]:
    return [round(statistics.median(values), 1), round(pct(values, 0.95), 1)]


def _print_variant(name: str | None, per: dict[str, dict]) -> None:
    allcpu = [c for r in per.values() for c in r["cpu"] + r["cpu_neg"]]
    allwall = [w for r in per.values() for w in r["wall"]]
    print("variant " + json.dumps({
        "name": name, "cpu_p50_p95": _p50_p95(allcpu), "wall_p50_p95": _p50_p95(allwall),
        **{style: {"top1": round(sum(r["pos"]) / max(1, len(r["pos"])), 3), "false_claims": round(sum(r["neg"]) / max(1, len(r["neg"])), 3),
                   "cpu": _p50_p95(r["cpu"]) if r["cpu"] else None,
                   "cpu_not_in_kb": _p50_p95(r["cpu_neg"]) if r["cpu_neg"] else None,
                   "misses": sorted(r["misses"])}
           for style, r in per.items()},
    }), file=sys.stderr, flush=True)


def _run_variants(variants: list[dict], route, queries: list, entity_of: dict) -> None:
    """Each variant's settings applied (:func:`_set`; ``"index": {"growth": 8, "nprobe": 2}``: the descriptor index
    as another retrain rule would have left it, :func:`_index_grown_as`; ``"retrain": true``: the index retrained
    under the variant's settings, :func:`_index_retrained`), the queries run again, top-1 / false claims /
    CPU p50,p95 per style printed on stderr as one JSON line, the settings restored."""
    for variant in variants:
        saved = _apply_variant(variant, route)
        try:
            per = _variant_rows(route, queries, entity_of)
        finally:
            for obj, attr, value in reversed(saved):
                setattr(obj, attr, value)
        _print_variant(variant.get("name"), per)


def crawl_templates(settings, templates: list[dict], blobs: dict[str, bytes]) -> tuple[dict, float, str]:
    """``kar crawl memegen`` (its job manager, as the CLI runs it) over a local memegen API serving ``templates``
    with ``blobs`` as their blank images, into ``settings``' KB; returns the job's counters, its seconds and the
    API's base URL."""
    from crawl_fixture_server import FixtureServer

    from crawlers.jobs import CrawlJobManager

    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests" / "crawlers"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    with FixtureServer() as server:
        server.memegen_templates = templates
        server.memegen_images = dict(blobs)
        manager = CrawlJobManager(settings)
        try:
            t0 = time.perf_counter()
            job = manager.start("memegen", start_urls=[f"{server.url}/templates/"],
                                scrapy_settings={"KAR_EMBEDDER_FACTORY": "hash_embedder:build"})
            job = manager.wait(job.id, timeout=1800)
            seconds = time.perf_counter() - t0
            if job.status != "succeeded":
                raise SystemExit(f"the crawl failed: {job.status} {job.error}\n{manager.logs(job.id, tail=40)}")
        finally:
            manager.close()
        return job.counters, seconds, server.url


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--kb-from", choices=("direct", "crawl"), default="direct",
                        help="build the templates' entities directly, or by `kar crawl memegen` over a local memegen API")
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data"), help="folder holding memegen/ and memegen_templates.json")
    parser.add_argument("--entities", type=int, default=5000, help="entity images in the index (distractors fill up to this)")
    parser.add_argument("--queries-per-template", type=int, default=2)
    parser.add_argument("--cache", default=str(ROOT / "data" / "bench_cache" / "templates"))
    parser.add_argument("--families", default=",".join(social_layouts.FAMILIES),
                        help="layout families drawn (tuning: " + ",".join(social_layouts.TUNING_FAMILIES) + ")")
    parser.add_argument("--styles", default=",".join(STYLES), help="query styles run")
    parser.add_argument("--margin", type=float, default=None, help="look-alike margin (default: the route's PARAMS.lookalike_margin)")
    parser.add_argument("--baseline", action="store_true", help="also run the route without descriptor votes and the mirrored pass")
    parser.add_argument("--synthetic-fill", type=int, default=0,
                        help="latency at scale: add this many synthetic images (random hash vectors; descriptors of a cached "
                             "distractor with its 32 bytes permuted by one random order per image) after the real ones. No picture "
                             "gives such codes: a retrained IVF spends most of its lists on them, so for the descriptor "
                             "index at scale use --entities (generated distractors) instead")
    parser.add_argument("--query-threads", type=int, default=None,
                        help="threads a query's work is split over (default: KAR_IMAGE_QUERY_THREADS' default); cpu is then "
                             "the process's CPU over the query, every thread counted")
    return parser.parse_args()


@dataclass
class TemplateSplit:
    """The memegen templates with a picture, each's kind of entity image, and which are indexed."""

    data_dir: Path
    seed: int
    templates: list[dict]
    with_image: list[str]
    order: list[str]
    kind_of: dict[str, str]
    indexed: set[str]
    held_out: list[str]
    lookalikes: list[str]

    def picture(self, tid: str):
        from PIL import Image

        return Image.open(self.data_dir / "memegen" / f"{tid}.jpg").convert("RGB")

    def entity_image(self, tid: str) -> bytes:
        r = random.Random(f"{self.seed}:entity:{tid}")
        kind = self.kind_of[tid]
        if kind == "still":
            return (self.data_dir / "memegen" / f"{tid}.jpg").read_bytes()
        if kind == "blank":
            buf = io.BytesIO()
            blank_background(self.picture(tid), r).save(buf, "PNG")
            return buf.getvalue()
        return animation(self.picture(tid), r)

    def same_page(self, a: str, b: str | None) -> bool:
        """Both templates are filed under one KnowYourMeme page (memegen's ``source``)."""
        page_of = {t["id"]: (t.get("source") or "").rstrip("/").split("://")[-1] for t in self.templates}
        return b is not None and bool(page_of.get(a)) and page_of.get(a) == page_of.get(b)


def split_templates(data_dir: Path, seed: int) -> TemplateSplit:
    """A seeded shuffle: look-alikes always indexed as stills; the rest half still, a quarter blank-background, a
    quarter animated, two thirds of each kind indexed."""
    templates = json.loads((data_dir / "memegen_templates.json").read_text("utf-8"))
    with_image = [t["id"] for t in templates if (data_dir / "memegen" / f"{t['id']}.jpg").is_file()]
    rng = random.Random(seed)
    order = sorted(with_image)
    rng.shuffle(order)
    lookalikes = [t for t in LOOKALIKES if t in order]
    rest = [t for t in order if t not in lookalikes]
    n = len(rest)
    kind_of = {tid: ("still" if i < n // 2 else "blank" if i < 3 * n // 4 else "animated") for i, tid in enumerate(rest)}
    kind_of.update({t: "still" for t in lookalikes})
    indexed: set[str] = set(lookalikes)
    for kind in ("still", "blank", "animated"):
        ids = [t for t in rest if kind_of[t] == kind]
        indexed.update(ids[: len(ids) * 2 // 3])
    held_out = [t for t in order if t not in indexed]
    return TemplateSplit(data_dir, seed, templates, with_image, order, kind_of, indexed, held_out, lookalikes)


@dataclass
class Run:
    """What one bench run built and measured (filled step by step)."""

    args: argparse.Namespace
    split: TemplateSplit
    cache: Path
    styles: list[str]
    families: list[str]
    settings: Any = None
    store: Any = None
    emb: Any = None
    kb: Any = None
    route: Any = None
    images: Any = None
    blobs: dict[str, bytes] = field(default_factory=dict)
    crawl: dict | None = None
    api: str = ""
    real: list = field(default_factory=list)
    entity_of: dict[str, str] = field(default_factory=dict)
    times: dict[str, float] = field(default_factory=dict)
    n_distractors: int = 0
    fresh: int = 0
    queries: list = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)
    lat: list[float] = field(default_factory=list)
    lat_prepare: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    baseline: list[dict] = field(default_factory=list)
    agree: str = ""
    points: int = 0
    index_figures: dict[str, Any] = field(default_factory=dict)


def build_route(run: Run, tmp: Path) -> None:
    """The store, the knowledge base and the image route (the crawl first, with ``--kb-from crawl``)."""
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

    args, split = run.args, run.split
    run.settings = Settings(data_dir=tmp / "data", kb_path=tmp / "kb", crawl_delay_s=0)
    run.blobs = {tid: split.entity_image(tid) for tid in sorted(split.indexed)}
    if args.kb_from == "crawl":
        by_id = {t["id"]: t for t in split.templates}
        counters, crawl_s, run.api = crawl_templates(run.settings, [by_id[tid] for tid in sorted(split.indexed)], run.blobs)
        run.crawl = {k: counters.get(k) for k in ("items_parsed", "items_stored", "merged", "merged_by_rule", "kept_apart", "split",
                                                    "images_stored", "images_failed_total")}
        run.crawl["seconds"] = round(crawl_s, 1)
    run.emb = HashEmbedder()
    run.store = CultureBaseStore(EdgeBackend(tmp / "kb"), embedder_info(run.emb))
    run.kb = KnowledgeBase(run.store, run.emb, settings=run.settings)
    run.images = ImageStore(run.cache / "images")
    threads = args.query_threads or run.settings.image_query_threads
    run.route = ImageRoute(run.store, run.images, tau=run.settings.image_tau, crops=True,
                           features=ImageFeatureStore(run.cache / "image_features"), threads=threads,
                           descriptors=DescriptorIndex(tmp / "descriptor_index"))
    if args.margin is not None:
        import dataclasses

        import retrieval.images.route as image_route_module

        image_route_module.PARAMS = dataclasses.replace(image_route_module.PARAMS, lookalike_margin=args.margin)
    run.kb._image_route = run.route


def index_templates(run: Run) -> None:
    """The real templates indexed: the crawled entities' images, or one entity a template written into the KB."""
    from culturebase.entity import Entity
    from culturebase.images import ImageStore

    route, split = run.route, run.split
    if run.crawl is not None:  # the crawl stored the entities and their images: index them into this route
        run.real = list(run.store.iter_entities())
        crawled = ImageStore(run.settings.images_dir)
        for image in (i for e in run.real for i in e.images):
            run.images.put(crawled.read(image))  # the same content-addressed path in the route's image store
        t0 = time.perf_counter()
        route.index_entities(run.real)
        run.times["real"] = time.perf_counter() - t0
        # a template's picture belongs to the entity that holds its page under its own name (a picture stored
        # under another meme's entity, as a wrong join leaves it, counts as missed)
        name_of = {t["id"]: t["name"] for t in split.templates}
        for e in run.real:
            for source in e.sources:
                tid = source.url.rstrip("/").rsplit("/", 1)[-1] if f"{run.api}/templates/" in source.url else None
                if tid in split.indexed and e.name == name_of[tid]:
                    run.entity_of[tid] = e.id
    else:
        run.real = [Entity(name=f"tpl {tid}", aliases=[tid], description=f"memegen template {tid}", images=[run.images.put(run.blobs[tid])])
                    for tid in sorted(split.indexed)]
        t0 = time.perf_counter()
        run.kb.add(run.real)
        run.times["real"] = time.perf_counter() - t0
        run.entity_of = {e.aliases[0]: e.id for e in run.real}
    print(f"indexed {len(run.real)} templates in {run.times['real']:.1f} s", file=sys.stderr, flush=True)


def index_distractors(run: Run) -> list:
    """Cached synthetic distractors (generated when missing) indexed up to ``--entities`` images; their entities."""
    from culturebase.entity import Entity

    run.n_distractors = max(0, run.args.entities - len(run.real))
    t_gen = 0.0
    dis_entities = []
    for i in range(run.n_distractors):
        path = run.cache / "distractors" / f"{i}.jpg"
        if not path.is_file():
            t = time.perf_counter()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(distractor(i))
            t_gen += time.perf_counter() - t
            run.fresh += 1
        dis_entities.append(Entity(name=f"distractor {i}", description="synthetic", images=[run.images.put(path.read_bytes())]))
    t0 = time.perf_counter()
    for start in range(0, len(dis_entities), 256):
        run.route.index_entities(dis_entities[start : start + 256])
    run.times["distractors"] = time.perf_counter() - t0
    run.times["generation"] = t_gen
    print(f"indexed {len(dis_entities)} distractors in {run.times['distractors']:.1f} s ({run.fresh} generated)", file=sys.stderr, flush=True)
    return dis_entities


def add_synthetic(run: Run, dis_entities: list) -> None:
    """``--synthetic-fill`` images: random hash vectors, a cached distractor's descriptors byte-permuted."""
    import numpy as np

    from culturebase.entity import EntityImage
    from retrieval.images.descriptor_index import ImageKey

    route, fill = run.route, run.args.synthetic_fill
    t0 = time.perf_counter()
    gen = np.random.default_rng(run.args.seed)
    sources = [f for f in (route._stored_features({"sha256": e.images[0].sha256, "frame": 0}) for e in dis_entities[:300]) if f is not None]
    for start in range(0, fill, 1000):
        rows = []
        for i in range(start, min(fill, start + 1000)):
            sha = f"{i:064x}"
            src = sources[i % len(sources)]
            key = ImageKey(f"synthetic-{i}", sha, 0, "")
            route.descriptors.add(key, src.points, np.ascontiguousarray(src.descriptors[:, gen.permutation(32)]), src.width, src.height,
                                  coarse=src.coarse)
            image = EntityImage(path=f"{sha[:2]}/{sha}.jpg", sha256=sha, width=480, height=360)
            rows.append((key.entity_id, None, image, np.where(gen.random(128) < 0.5, 1.0, -1.0).astype(np.float32), 0))
        route.index.replace_for(rows, [])
    route.descriptors.save()
    print(f"added {fill} synthetic images in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)


def query_of(run: Run, style: str, tid: str, q: int, r: random.Random, base, fillers_pool: list[str]):
    """One query's bytes and layout (None but for the social layouts) in one style."""
    split, families = run.split, run.families
    layout = None
    if style in ("plain", "lookalike"):
        data = plain_meme(base, r, band=q % 3 == 2)
    elif style == "grid_narrow":  # its own draws: the other styles' queries stay the same
        rn = random.Random(f"{run.args.seed}:query:{tid}:{q}:narrow")
        fillers = [split.picture(f) for f in rn.sample([f for f in fillers_pool if f != tid], 4)]
        meme = degrade(captioned(base, rn, False), rn) if rn.random() < 0.7 else base
        data, layout = social_layouts.draw_layout(meme, fillers, rn, rn.choice(families), rn.choice(["2x2", "1x3"]), narrow=True)
    elif style in ("screenshot", "grid"):
        fillers = [split.picture(f) for f in r.sample([f for f in fillers_pool if f != tid], 4)]
        grid = "single" if style == "screenshot" else r.choice(["2x2", "1x3"])
        meme = degrade(captioned(base, r, False), r) if r.random() < 0.7 else base
        data, layout = social_layouts.draw_layout(meme, fillers, r, r.choice(families), grid)
    elif style == "blank_background":
        data = plain_meme(blank_background(base, r), r, band=False)
    else:
        data = plain_meme(animation_frame(base, r.randrange(12)), r, band=False)
    return data, layout


def draw_queries(run: Run) -> None:
    """``--queries-per-template`` queries per template and style, each seeded: ``(style, tid, positive, bytes, layout)``."""
    split = run.split
    fillers_pool = sorted(split.held_out)
    for tid in split.order:
        for q in range(run.args.queries_per_template):
            r = random.Random(f"{run.args.seed}:query:{tid}:{q}")
            positive = tid in split.indexed
            base = split.picture(tid)
            for style in run.styles:
                if positive and split.kind_of[tid] != KIND_OF_STYLE[style]:
                    continue  # an indexed template is asked about in the styles of its entity image
                if style == "lookalike" and (tid not in split.lookalikes or not positive):
                    continue  # look-alike queries: plain memes of templates whose look-alikes are all indexed
                data, layout = query_of(run, style, tid, q, r, base, fillers_pool)
                run.queries.append((style, tid, positive, data, layout))
    print(f"{len(run.queries)} queries drawn", file=sys.stderr, flush=True)


def _diagnose(run: Run, style: str, tid: str, positive: bool, layout, prepared, matches: list, accepted: list) -> None:
    """``BENCH_HITS`` / ``BENCH_MISSES`` lines on stderr."""
    entity_of, template_of, tau = run.entity_of, {eid: tid for tid, eid in run.entity_of.items()}, run.route.tau
    if os.environ.get("BENCH_HITS") and positive and accepted and accepted[0].entity_id == entity_of.get(tid):
        print(f"hit {style} {accepted[0].crop} {accepted[0].inliers} {accepted[0].share} {accepted[0].votes} {accepted[0].coverage}", file=sys.stderr)
    if os.environ.get("BENCH_MISSES") and not positive and accepted:
        print(f"false claim {style} {tid} {layout}: {[(template_of.get(m.entity_id, m.entity_id), m.signal(tau), m.inliers, m.share, m.votes, m.crop, m.coverage) for m in accepted[:2]]}",
              file=sys.stderr, flush=True)
    if os.environ.get("BENCH_MISSES") and positive and not (accepted and accepted[0].entity_id == entity_of.get(tid)):
        right = next((m for m in matches if m.entity_id == entity_of.get(tid)), None)
        print(f"miss {style} {tid} {layout}: regions {len(getattr(prepared, 'regions', ()))}, right: "
              f"{None if right is None else (right.votes, right.inliers, right.crop, right.contest)}, claimed: "
              f"{[(template_of.get(m.entity_id), m.inliers) for m in accepted[:2]]}", file=sys.stderr, flush=True)


def _row(run: Run, style: str, tid: str, positive: bool, layout, matches: list, accepted: list) -> dict:
    """One query's outcome: the route's claim, the hash-only rule's, the look-alike contest."""
    tau, right = run.route.tau, run.entity_of.get(tid)
    template_of = {eid: t for t, eid in run.entity_of.items()}
    nearest = min((m for m in matches if m.distance is not None), key=lambda m: m.distance, default=None)
    return {
        "style": style, "tid": tid, "positive": positive,
        "top1": bool(accepted) and accepted[0].entity_id == right,
        "claimed": bool(accepted),
        # the claimed template is filed under the query template's own KnowYourMeme page (memegen's
        # `source`): e.g. "Socially Awesome Awkward Penguin" is a variant on the Socially Awkward Penguin page
        "claimed_same_page": bool(accepted) and run.split.same_page(tid, template_of.get(accepted[0].entity_id)),
        "hash_top1": nearest is not None and nearest.distance <= tau and nearest.entity_id == right,
        "hash_claimed": nearest is not None and nearest.distance <= tau,
        "signal": accepted[0].signal(tau) if accepted else None,
        "family": layout.family if layout is not None else None,
        "layout": layout,
        # look-alike calibration: the verified templates that competed for the same part, right one first?
        "contest": _contest_row(matches, right),
    }


def run_queries(run: Run) -> None:
    """Every query prepared and matched (CPU and wall time each); ``BENCH_PROFILE`` profiles them (stderr)."""
    route = run.route
    profiler = None
    if os.environ.get("BENCH_PROFILE"):  # where the query time goes (stderr)
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    for style, tid, positive, data, layout in run.queries:
        c0 = time.process_time()  # every thread's: the query's work may be split over the route's threads
        t0 = time.perf_counter()
        prepared = route.prepare(data)
        t1 = time.perf_counter()
        matches = route.match(prepared)
        t2 = time.perf_counter()
        run.cpu.append((time.process_time() - c0) * 1000)
        run.lat.append((t2 - t0) * 1000)
        run.lat_prepare.append((t1 - t0) * 1000)
        accepted = sorted((m for m in matches if m.signal(route.tau)), key=lambda m: -m.evidence(route.tau))
        _diagnose(run, style, tid, positive, layout, prepared, matches, accepted)
        run.rows.append(_row(run, style, tid, positive, layout, matches, accepted))
    if os.environ.get("BENCH_VARIANTS"):  # tries on the same index and queries (stderr): [{"name", "set": {"module.NAME" or "route.attr": value}}]
        _run_variants(json.loads(os.environ["BENCH_VARIANTS"]), route, run.queries, run.entity_of)
    if run.args.baseline:
        run_baseline(run)
    if profiler is not None:
        import pstats

        profiler.disable()
        for key in ("cumulative", "tottime"):  # where the time goes, by call tree and by function
            pstats.Stats(profiler, stream=sys.stderr).sort_stats(key).print_stats(40)


def run_baseline(run: Run) -> None:
    """``--baseline``: the route before descriptor votes (hash neighbours only, no mirrored pass) on the same queries."""
    from retrieval.images.route import PARAMS

    route = run.route
    route.vote, route.mirror = 0, False
    for style, tid, positive, data, layout in run.queries:
        t0 = time.perf_counter()
        matches = route.match(route.prepare(data))
        ms = (time.perf_counter() - t0) * 1000
        accepted = sorted((m for m in matches if m.signal(route.tau)), key=lambda m: -m.evidence(route.tau))
        run.baseline.append({"top1": bool(accepted) and accepted[0].entity_id == run.entity_of.get(tid), "claimed": bool(accepted), "ms": ms})
    route.vote, route.mirror = PARAMS.vote, True


def grounder_agreement(run: Run) -> None:
    """The grounder on a sample: the same answer through EntityGrounder (image bytes as the only cue)."""
    from retrieval.grounding import EntityGrounder, GroundingCues

    grounder = EntityGrounder(run.store, run.emb, tau=0.9, image_route=run.route)
    agree = total = 0
    for (style, tid, positive, data, _), row in list(zip(run.queries, run.rows))[:: max(1, len(run.rows) // 40)]:
        res = grounder.ground(GroundingCues(image_bytes=data))
        top = next((h for h in res.hits if h.route == "image"), None)
        agree += (top is not None and top.entity.id == run.entity_of.get(tid)) == row["top1"]
        total += 1
    run.agree = f"{agree}/{total}"


def descriptor_figures(route) -> dict[str, Any]:
    """The descriptor index as the run left it."""
    d = route.descriptors
    kind = d.kind
    return {"kind": kind, "descriptors": d.size, "frames": d.images, "mirrored_frames": d.mirrored_frames,
            "memory_mb": round(d.memory_bytes() / 2**20, 1),
            "lists": int(d._index.nlist) if kind == "ivf" else 0, "nprobe": d.probes(), "retrains": list(d.retrains)}


def uncached_index_time(run: Run) -> tuple[float, float]:
    """Index time per image without any cache (wall, this thread's CPU): decode, sample frames, hash and describe
    each, add to a flat descriptor index (an IVF's retrains are measured apart)."""
    from retrieval.images import features as feats
    from retrieval.images.descriptor_index import DescriptorIndex, ImageKey
    from retrieval.images.route import hash_frames

    indexed = run.split.indexed
    scratch = DescriptorIndex(None, ivf_from=10**12)
    t0, c0 = time.perf_counter(), time.thread_time()
    for tid in sorted(indexed):
        frames = hash_frames(run.blobs[tid]).frames  # what ImageRoute.index_entities does with each image
        for n, _, grey, _ in frames:
            f, mirrored = feats.describe_entity_mirrored(grey)
            scratch.add(ImageKey(tid, tid, n), f.points, f.descriptors, f.width, f.height, scratch.per_frame(len(frames)),
                        coarse=f.coarse, coarse_limit=scratch.coarse_per_frame(len(frames)), mirrored=mirrored)
    return (time.perf_counter() - t0) / max(1, len(indexed)), (time.thread_time() - c0) / max(1, len(indexed))


def measure(run: Run) -> None:
    """Build the KB and index it, draw and run the queries, and take the index's figures (in a scratch folder)."""
    with tempfile.TemporaryDirectory() as tmp:
        build_route(run, Path(tmp))
        index_templates(run)
        dis_entities = index_distractors(run)
        if run.args.synthetic_fill:
            add_synthetic(run, dis_entities)
        run.route.index.collection.optimize()
        draw_queries(run)
        run_queries(run)
        grounder_agreement(run)
        run.points = run.route.index.count()
        run.index_figures = descriptor_figures(run.route)
        run.times["index_s"], run.times["index_cpu_s"] = uncached_index_time(run)
        run.kb.close()
    run.index_figures["nprobe"] = run.route.descriptors.probes()  # (as the index stands once the KB is closed)
    for r, b in zip(run.rows, run.baseline):
        r["base_top1"], r["base_claimed"] = b["top1"], b["claimed"]


def figures(pos: list[dict], neg: list[dict], baseline: bool) -> dict:
    out = {"positives": len(pos), "negatives": len(neg), "top1": round(sum(r["top1"] for r in pos) / max(1, len(pos)), 3),
           "false_claims": round(sum(r["claimed"] for r in neg) / max(1, len(neg)), 3)}
    if baseline:
        out["before_top1"] = round(sum(r["base_top1"] for r in pos) / max(1, len(pos)), 3)
        out["before_false_claims"] = round(sum(r["base_claimed"] for r in neg) / max(1, len(neg)), 3)
    return out


def per_family_figures(rows: list[dict], families: list[str], baseline: bool) -> dict[str, dict]:
    """The social-layout styles' figures per layout family, and over the tuning and held-out families."""
    per_family: dict[str, dict] = {}
    for style in ("screenshot", "grid", "grid_narrow"):
        for fam in families:
            sel = [r for r in rows if r["style"] == style and r["family"] == fam]
            per_family.setdefault(style, {})[fam] = figures([r for r in sel if r["positive"]], [r for r in sel if not r["positive"]], baseline)
        for name, group in (("tuning_families", social_layouts.TUNING_FAMILIES), ("held_out_families", social_layouts.HELD_OUT_FAMILIES)):
            sel = [r for r in rows if r["style"] == style and r["family"] in group]
            if sel:
                per_family[style][name] = figures([r for r in sel if r["positive"]], [r for r in sel if not r["positive"]], baseline)
    return per_family


def per_axis_figures(rows: list[dict]) -> dict[str, dict]:
    """Top-1 of the social-layout positives by each layout axis."""
    axes: dict[str, dict] = {}
    for axis in ("dark", "quote", "status_bar", "border", "watermark", "mirrored", "grid"):
        sel = [r for r in rows if r["layout"] is not None and r["positive"]]
        for value in sorted({getattr(r["layout"], axis) for r in sel}, key=str):
            part = [r for r in sel if getattr(r["layout"], axis) == value]
            axes.setdefault(axis, {})[str(value)] = f"{sum(r['top1'] for r in part)}/{len(part)}"
    for name, test in (("share<0.4", lambda l: l.share < 0.4), ("share>=0.4", lambda l: l.share >= 0.4),
                       ("rotated", lambda l: abs(l.rotation) > 0.5), ("q<55", lambda l: l.quality < 55)):
        part = [r for r in rows if r["layout"] is not None and r["positive"] and test(r["layout"])]
        axes.setdefault("other", {})[name] = f"{sum(r['top1'] for r in part)}/{len(part)}"
    return axes


def ratio(a: float, b: float) -> float | None:
    return round(a / b, 2) if b else None


def per_style_figures(rows: list[dict], styles: list[str], baseline: bool) -> dict[str, dict]:
    """Each style's top-1 and false claims, beside the hash-only rule's, what won, the misses and claims."""
    per_style = {}
    for style in styles:
        pos = [r for r in rows if r["style"] == style and r["positive"]]
        neg = [r for r in rows if r["style"] == style and not r["positive"]]
        top1 = sum(r["top1"] for r in pos) / max(1, len(pos))
        fc = sum(r["claimed"] for r in neg) / max(1, len(neg))
        h_top1 = sum(r["hash_top1"] for r in pos) / max(1, len(pos))
        h_fc = sum(r["hash_claimed"] for r in neg) / max(1, len(neg))
        signals: dict[str, int] = {}
        for r in pos:
            if r["top1"]:
                signals[r["signal"]] = signals.get(r["signal"], 0) + 1
        per_style[style] = {
            "positives": len(pos), "negatives": len(neg),
            "top1": round(top1, 3), "false_claims": round(fc, 3),
            "hash_only_top1": round(h_top1, 3), "hash_only_false_claims": round(h_fc, 3),
            "top1_ratio_to_hash_only": ratio(top1, h_top1),
            "won_by_signal": signals,
            "misses": sorted({r["tid"] for r in pos if not r["top1"]}),
            "false_claim_ids": sorted({r["tid"] for r in neg if r["claimed"]}),
            # the same, not counting a claim of a template filed under the query's own KnowYourMeme page
            "false_claims_other_page": round(sum(r["claimed"] and not r["claimed_same_page"] for r in neg) / max(1, len(neg)), 3),
        }
        if baseline:
            per_style[style].update({k: v for k, v in figures(pos, neg, baseline).items() if k.startswith("before_")})
    return per_style


def contest_figures(rows: list[dict]) -> dict[str, Any]:
    """How the look-alike contests went: the right template won, lost, tied, or was not among them."""
    contests = [r["contest"] for r in rows if r["contest"]]
    return {
        "n": len(contests),
        "right_won": sum(c["right"] == "won" for c in contests),
        "right_outranked": sum(c["right"] == "outranked" for c in contests),
        "ambiguous": sum(c["right"] == "ambiguous" for c in contests),
        "wrong_only": sum(c["right"] is None for c in contests),
        "strength_ratios_right_first": sorted(c["ratio"] for c in contests if c["right"] is not None and c["ratio"] is not None),
        "strength_ratios_wrong_first": sorted(c["ratio"] for c in contests if c["right"] is None and c["ratio"] is not None),
    }


def latency_figures(run: Run) -> dict[str, Any]:
    """The query's wall and CPU time (p50, p95), per style and side (found / not in the KB)."""
    rows, styles, baseline, lat, cpu = run.rows, run.styles, run.baseline, run.lat, run.cpu
    return {
        "image_images_indexed": len(run.real) + run.n_distractors + run.args.synthetic_fill, "queries": len(lat),
        "route_p50": round(statistics.median(lat), 2), "route_p95": round(pct(lat, 0.95), 2),
        "prepare_p50": round(statistics.median(run.lat_prepare), 2), "prepare_p95": round(pct(run.lat_prepare, 0.95), 2),
        "route_cpu_p50": round(statistics.median(cpu), 2), "route_cpu_p95": round(pct(cpu, 0.95), 2),
        # the query's CPU and wall time per style and side (found / not in the KB): where the p95 comes from
        **{f"route_{name}p50_p95_by_style": {
            f"{style}{'' if side else ' (not in KB)'}": [round(statistics.median(sel), 1), round(pct(sel, 0.95), 1)]
            for style in styles for side in (True, False)
            for sel in [[c for c, r in zip(values, rows) if r["style"] == style and r["positive"] == side]] if sel
        } for name, values in (("cpu_", cpu), ("", lat))},
        "before_route_p50": round(statistics.median([b["ms"] for b in baseline]), 2) if baseline else None,
        "before_route_p95": round(pct([b["ms"] for b in baseline], 0.95), 2) if baseline else None,
        "query_threads": run.route.threads.threads,
        "note": "wall time on a shared 2-core machine (see load_avg_1m); cpu = the process's CPU time over the query, "
                "every thread of it (the route's query threads included)",
    }


def index_time_figures(run: Run) -> dict[str, Any]:
    """Index time per image: uncached, through the KB, for the distractors, and the IVF's retrains per frame."""
    t, retrains = run.times, run.index_figures["retrains"]
    return {
        "s_per_image_uncached": round(t["index_s"], 4),
        "cpu_s_per_image_uncached": round(t["index_cpu_s"], 4),
        "real_templates_s_per_image_in_kb_add": round(t["real"] / max(1, len(run.real)), 4),
        "distractors_s_per_image": round(t["distractors"] / max(1, run.n_distractors), 4),
        "distractors_generated_now": run.fresh, "distractor_generation_s": round(t["generation"], 1),
        # the IVF's retrains (k-means and refill at every doubling) spread over the images indexed so far
        "retrain_cpu_s_per_frame": round(sum(r.get("train_cpu_s", 0.0) + r.get("fill_cpu_s", 0.0) for r in retrains)
                                         / max(1, run.index_figures["frames"]), 4),
        "note": "uncached, per image: decode, up to 4 frames hashed, described and added to a descriptor index; "
                "in_kb_add / distractors: through the store (features cached on disk are reused); "
                "retrain: the descriptor index's retrains so far, CPU per indexed frame",
    }


def report(run: Run) -> dict[str, Any]:
    """The printed JSON."""
    split, rows, baseline = run.split, run.rows, bool(run.baseline)
    return {
        "data": {"templates": len(split.with_image), "indexed": len(split.indexed), "held_out": len(split.held_out), "seed": run.args.seed,
                 "kb_from": run.args.kb_from, "crawl": run.crawl,
                 "kinds": {k: sum(1 for t in split.order if split.kind_of[t] == k) for k in ("still", "blank", "animated")},
                 "distractors": run.n_distractors, "synthetic_fill": run.args.synthetic_fill, "image_index_points": run.points},
        "tau_image": run.settings.image_tau,
        "families": run.families,
        # the font of the Chinese chrome (None: pseudo-Han glyphs): another font draws other queries
        "cjk_font": Path(social_layouts.CJK_FONT).name if social_layouts.CJK_FONT else None,
        "lookalike_margin": image_route_margin(),
        "per_style": per_style_figures(rows, run.styles, baseline),
        "per_family": per_family_figures(rows, run.families, baseline),
        "per_axis_top1": per_axis_figures(rows),
        "lookalike_contests": contest_figures(rows),
        "descriptor_index": run.index_figures,
        "grounder_agrees_on_sample": run.agree,
        "latency_ms": latency_figures(run),
        "index": index_time_figures(run),
        "targets": {"plain_top1": ">= 0.97", "screenshot_top1": ">= 0.9 (held-out layouts)", "grid_top1": ">= 0.85",
                    "false_claims": "<= 0.01 per style", "lookalike_right": ">= 0.95", "route_p95_ms": "<= 60 at 5,000; <= 120 at 20,000",
                    "index_s_per_image": "<= 0.03"},
        "cpu_count": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    args = parse_args()
    run = Run(args, split_templates(Path(args.data), args.seed), Path(args.cache),
              styles=[s for s in args.styles.split(",") if s], families=[f for f in args.families.split(",") if f])
    run.cache.mkdir(parents=True, exist_ok=True)
    measure(run)
    print(json.dumps(report(run), indent=2))


if __name__ == "__main__":
    main()
