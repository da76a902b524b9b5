"""The image route's second stage and its bad input: screenshots, animated templates, flat templates,
tiny / transparent / endless images, corrupt entity images (generated images only)."""

from __future__ import annotations

import dataclasses
import io
import random

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont

from culturebase.entity import Entity
from culturebase.settings import Settings
from culturebase.store import CultureBaseStore
from culturebase.store.edge import EdgeBackend
from retrieval.images import features as feats
from retrieval.embedders import embedder_info
from retrieval.grounding import EntityGrounder, GroundingCues
from retrieval.images.hashes import PARAMS as HASH_PARAMS, open_image, picture_region, sample_frames
from retrieval.knowledge_base import KnowledgeBase
from tests.crawlers.hash_embedder import HashEmbedder
from tests.support.images import meme_of, to_bytes


def textured(seed: int, size: tuple[int, int] = (400, 300)) -> Image.Image:
    """A picture with real texture (noise, shapes, lines, text): what a photo template gives local features."""
    rng = random.Random(seed)
    gen = np.random.default_rng(seed)
    w, h = size
    base = np.linspace(gen.integers(0, 255, 3), gen.integers(0, 255, 3), h)[:, None, :].repeat(w, 1)
    base = base + gen.normal(0, 12, (h, w, 3))
    img = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
    d = ImageDraw.Draw(img)
    for _ in range(18):
        x0, y0 = rng.randint(-30, w), rng.randint(-30, h)
        box = [x0, y0, x0 + rng.randint(15, w // 3), y0 + rng.randint(15, h // 3)]
        fill = tuple(rng.randint(0, 255) for _ in range(3))
        rng.choice([d.ellipse, d.rectangle])(box, fill=fill, outline=(0, 0, 0))
    return img


def screenshot_of(meme: bytes, share: float = 0.5) -> bytes:
    """The meme pasted into a post: a header with an avatar and text above, counts below, on a white page."""
    img = Image.open(io.BytesIO(meme)).convert("RGB")
    width = int(img.width / share)
    page = Image.new("RGB", (width, img.height + 160), "white")
    d = ImageDraw.Draw(page)
    d.ellipse((10, 10, 50, 50), fill=(30, 120, 200))
    font = ImageFont.load_default(size=16)
    d.text((60, 14), "@someone · 3h", font=font, fill="black")
    d.text((14, 60), "this is exactly how my week went", font=font, fill="black")
    page.paste(img, (14, 100))
    d.text((14, 110 + img.height + 20), "12 replies   1.2K reposts   9K likes", font=font, fill=(90, 100, 110))
    return to_bytes(page, "JPEG", quality=80)


def animated(seed: int, frames: int = 8, size: tuple[int, int] = (320, 240)) -> bytes:
    """A GIF whose frames are different pictures (a cut every frame): frame k is ``textured(seed * 100 + k)``."""
    pictures = [textured(seed * 100 + k, size).quantize(colors=128) for k in range(frames)]
    buf = io.BytesIO()
    pictures[0].save(buf, "GIF", save_all=True, append_images=pictures[1:], duration=50, loop=0)
    return buf.getvalue()


@pytest.fixture
def kb(tmp_path):
    settings = Settings(data_dir=tmp_path / "data", kb_path=tmp_path / "kb")
    emb = HashEmbedder()
    kb = KnowledgeBase(CultureBaseStore(EdgeBackend(tmp_path / "kb"), embedder_info(emb)), emb, settings=settings)
    yield kb
    kb.close()


def add_entity(kb: KnowledgeBase, name: str, data: bytes) -> Entity:
    entity = Entity(name=name, description=f"a template called {name}", images=[kb.image_store.put(data)])
    kb.add([entity])
    return kb.store.find_by_name([name])[0]


def image_hits(kb: KnowledgeBase, data: bytes) -> list:
    grounder = EntityGrounder(kb.store, kb.embedder, tau=0.9, image_route=kb.image_route)
    result = grounder.ground(GroundingCues(image_bytes=data))
    return [h for h in result.hits if h.route == "image"]


def test_features_are_stored_at_indexing_and_read_back_not_recomputed(kb, tmp_path):
    ent = add_entity(kb, "Textured", to_bytes(textured(1)))
    sha = ent.images[0].sha256
    store = kb.image_route.features
    arrays = store.get(sha, 0, feats.METHOD)
    assert arrays is not None and arrays["descriptors"].shape[1] == 32 and arrays["points"].shape[0] >= feats.VERIFICATION_PARAMS.min_keypoints
    assert store.path_of(sha, 0, feats.METHOD).is_file() and str(store.path_of(sha, 0, feats.METHOD)).startswith(str(tmp_path / "data"))
    # the query verifies against the stored file: make the stored descriptors useless and the match fails
    # (a screenshot: its whole-image hash is far from the template, only verification can find it)
    np.savez(store.path_of(sha, 0, feats.METHOD), points=arrays["points"], descriptors=np.zeros_like(arrays["descriptors"]), size=arrays["size"])
    store._cache.clear()
    meme = screenshot_of(meme_of(textured(1), 1), 0.6)
    assert image_hits(kb, meme) == []
    kb.image_route.features.put(sha, 0, feats.METHOD, arrays)
    (hit,) = image_hits(kb, meme)
    assert hit.entity.id == ent.id and hit.image["signal"] == "verified" and hit.image["inliers"] >= feats.VERIFICATION_PARAMS.min_inliers


def test_features_described_before_coarse_keypoints_are_read_until_the_image_is_described_again(kb):
    ent = add_entity(kb, "Older", to_bytes(textured(2)))
    sha = ent.images[0].sha256
    store, route = kb.image_route.features, kb.image_route
    arrays = store.get(sha, 0, feats.METHOD)
    assert int(arrays["coarse"][0]) > 0
    fine = int(arrays["points"].shape[0] - arrays["coarse"][0])
    # a KB indexed before: only the previous method's file, fine keypoints, no coarse count
    store.put(sha, 0, feats.PREVIOUS_METHOD, {"points": arrays["points"][:fine], "descriptors": arrays["descriptors"][:fine], "size": arrays["size"]})
    store.path_of(sha, 0, feats.METHOD).unlink()
    store._cache.clear()
    older = route._stored_features({"sha256": sha, "frame": 0})
    assert older is not None and older.coarse == 0 and older.count == fine
    (hit,) = image_hits(kb, screenshot_of(meme_of(textured(2), 2), 0.6))
    assert hit.entity.id == ent.id and hit.image["signal"] == "verified"
    # indexing again describes it with the current method (the older file is not taken for it)
    route.index_entities([ent])
    assert store.has(sha, 0, feats.METHOD) and route._stored_features({"sha256": sha, "frame": 0}).coarse > 0


def test_a_screenshot_of_a_post_finds_the_template_filling_half_of_it(kb):
    ent = add_entity(kb, "Post Template", to_bytes(textured(2)))
    add_entity(kb, "Other Template", to_bytes(textured(3)))
    for share in (0.4, 0.55, 0.7):
        shot = screenshot_of(meme_of(textured(2), 2), share)
        hits = image_hits(kb, shot)
        assert hits and hits[0].entity.id == ent.id, share
        assert hits[0].image["signal"] == "verified"
    region = picture_region(open_image(screenshot_of(meme_of(textured(2), 2), 0.5)))
    assert region is not None and 0.35 < region.width / (open_image(screenshot_of(meme_of(textured(2), 2), 0.5)).width) < 0.65


def test_unindexed_templates_claim_nothing_in_any_style(kb):
    for seed in (10, 11, 12):
        add_entity(kb, f"Indexed {seed}", to_bytes(textured(seed)))
    for seed in (20, 21, 22, 23):
        assert image_hits(kb, meme_of(textured(seed), seed)) == []
        assert image_hits(kb, screenshot_of(meme_of(textured(seed), seed))) == []


def test_an_animated_template_is_found_from_a_later_frame(kb):
    data = animated(4)
    ent = add_entity(kb, "Animated", data)
    assert kb.image_route.index.count() >= HASH_PARAMS.max_frames  # indexed by several frames
    img = Image.open(io.BytesIO(data))
    img.seek(7)  # the last frame: a picture the first frame does not show
    hits = image_hits(kb, meme_of(img.convert("RGB"), 7))
    assert hits and hits[0].entity.id == ent.id and hits[0].image["frame"] > 0


def test_a_500_frame_gif_is_indexed_by_a_bounded_number_of_frames(kb):
    frames = []
    for i in range(500):  # a dot moving over a grey field: every frame differs from the one before
        frame = Image.new("L", (64, 48), 128)
        ImageDraw.Draw(frame).rectangle((i % 60, (i // 60) % 44, i % 60 + 3, (i // 60) % 44 + 3), fill=255)
        frames.append(frame)
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=20)
    data = buf.getvalue()
    assert Image.open(io.BytesIO(data)).n_frames == 500
    sampled = sample_frames(data)
    assert 1 < len(sampled) <= HASH_PARAMS.max_frames and max(i for i, _ in sampled) < HASH_PARAMS.frame_scan
    counts = kb.image_route.index_entities([add_entity(kb, "Long Gif", data)])
    assert counts["frames"] <= HASH_PARAMS.max_frames and counts["hashed"] == 1


def test_flat_colour_template_has_no_keypoints_and_matches_by_hash_only(kb):
    flat = Image.new("RGB", (300, 200), (40, 160, 90))
    ent = add_entity(kb, "Flat", to_bytes(flat))
    assert feats.describe(flat).count == 0
    (hit,) = image_hits(kb, to_bytes(flat, "JPEG", quality=60))
    assert hit.entity.id == ent.id and hit.image["signal"] == "hash" and hit.image["inliers"] is None
    assert image_hits(kb, meme_of(textured(5), 5)) == []  # a textured meme does not claim the flat template


@pytest.mark.parametrize(
    "data",
    [
        to_bytes(Image.new("RGB", (1, 1), "red")),
        to_bytes(Image.new("RGBA", (200, 150), (0, 0, 0, 0))),  # fully transparent
        b"GIF89a not really",  # undecodable: the image route is skipped, grounding goes on
    ],
    ids=["1x1", "transparent", "undecodable"],
)
def test_tiny_transparent_and_broken_queries_claim_nothing(kb, data):
    add_entity(kb, "Textured", to_bytes(textured(6)))
    grounder = EntityGrounder(kb.store, kb.embedder, tau=0.9, image_route=kb.image_route)
    result = grounder.ground(GroundingCues(ocr_text="Textured", image_bytes=data))
    assert all(h.route != "image" for h in result.hits)
    assert result.routes["image"] == "ran" or result.routes["image"].startswith("skipped: the image cannot be decoded")


def test_tiny_and_transparent_entity_images_are_indexed_without_features(kb):
    for name, img in (("One Pixel", Image.new("RGB", (1, 1), "red")), ("Clear", Image.new("RGBA", (120, 80), (0, 0, 0, 0)))):
        ent = add_entity(kb, name, to_bytes(img))
        arrays = kb.image_route.features.get(ent.images[0].sha256, 0, feats.METHOD)
        assert arrays is not None and arrays["points"].shape[0] == 0


def test_a_corrupt_entity_image_is_skipped_with_its_reason_and_the_rest_indexed(kb):
    good = Entity(name="Good", description="fine", images=[kb.image_store.put(to_bytes(textured(7)))])
    bad_image = kb.image_store.put(to_bytes(textured(8)))
    path = kb.image_store.path_of(bad_image)
    path.write_bytes(path.read_bytes()[:300])  # the stored file is cut short after it was checked
    bad = Entity(name="Bad", description="broken file", images=[bad_image])
    route = kb.image_route
    route.skipped.clear()
    counts = route.index_entities([good, bad])
    assert counts["hashed"] == 1 and counts["unreadable"] == 1
    (skipped,) = route.skipped
    assert skipped.entity_id == bad.id and skipped.image == bad_image.path and skipped.reason.startswith("corrupt:")
    assert {p["entity_id"] for p in route.index.payloads()} == {good.id}


def test_a_template_as_small_as_a_narrow_grid_cell_is_placed_only_by_many_inliers(monkeypatch):
    """An outline over 2 % of the picture (below MIN_COVERAGE) verifies with many inliers, not with few."""
    template = textured(5, (400, 300))
    stored = feats.describe_entity(template)
    page = Image.new("RGB", (1000, 750), (255, 255, 255))
    page.paste(template.resize((140, 105)), (333, 200))
    query = feats.describe_query(page)
    v = feats.verify(query, stored)
    assert v.verified and v.coverage is not None and v.coverage < feats.VERIFICATION_PARAMS.min_coverage
    assert v.inliers >= feats.VERIFICATION_PARAMS.small_coverage_inliers * feats.required_inliers(stored.fine)
    monkeypatch.setattr(feats, "VERIFICATION_PARAMS", dataclasses.replace(feats.VERIFICATION_PARAMS, small_coverage_inliers=1 + v.inliers // feats.required_inliers(stored.fine)))
    assert feats.verify(query, stored).coverage is None  # the same outline with fewer inliers than the rule asks
