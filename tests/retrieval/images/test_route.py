"""The image route: entity images imported, hashed into the store, matched from memes; both backends."""

from __future__ import annotations

import io
import json
import os
import uuid

import pytest

from culturebase.settings import Settings
from culturebase.store import CultureBaseStore
from culturebase.store.edge import EdgeBackend
from culturebase.store.server import ServerBackend
from retrieval.grounding import EntityGrounder, GroundingCues
from retrieval.images.hashes import hash_image, open_image
from retrieval.knowledge_base import KnowledgeBase
from tests.crawlers.hash_embedder import HashEmbedder
from tests.support.images import meme_of, template_image, to_bytes

INDEXED = (1, 3, 5, 6)  # seeds of the templates put into CultureBase
OTHERS = (11, 12, 13, 14, 15, 16)  # templates never indexed


def _kb(kind: str, tmp_path) -> KnowledgeBase:
    settings = Settings(data_dir=tmp_path / "data", kb_path=tmp_path / "kb")
    emb = HashEmbedder()
    if kind == "embedded":
        backend = EdgeBackend(tmp_path / "kb")
    elif kind == "local":
        backend = ServerBackend(location=":memory:", prefix=f"t{uuid.uuid4().hex[:8]}")
    else:
        if not os.environ.get("KAR_QDRANT_URL"):
            pytest.skip("KAR_QDRANT_URL not set")
        backend = ServerBackend(url=os.environ["KAR_QDRANT_URL"], prefix=f"t{uuid.uuid4().hex[:8]}")
    from retrieval.embedders import embedder_info

    return KnowledgeBase(CultureBaseStore(backend, embedder_info(emb)), emb, settings=settings)


def _import_file(tmp_path) -> tuple:
    folder = tmp_path / "import"
    (folder / "img").mkdir(parents=True)
    lines = []
    for seed in INDEXED:
        (folder / "img" / f"t{seed}.png").write_bytes(to_bytes(template_image(seed)))
        lines.append(json.dumps({
            "name": f"Template {seed}", "aliases": [f"tpl-{seed}"], "language": "en",
            "description": f"A meme template number {seed} with shapes on a gradient.",
            "image": f"img/t{seed}.png",
        }))
    # bad images: the record is stored without them and the problem is reported with the line
    (folder / "img" / "page.png").write_bytes(b"<!DOCTYPE html><html><body>login</body></html>")
    lines.append(json.dumps({"name": "No Image Meme", "description": "A record whose image is an HTML page.",
                             "images": ["img/page.png", "img/missing.png", {"path": "img/t1.png", "kind": "poster"}]}))
    f = folder / "kb.jsonl"
    f.write_text("\n".join(lines) + "\n", "utf-8")
    return f


@pytest.fixture(params=["embedded", "local", pytest.param("server", marks=pytest.mark.server)])
def kb(request, tmp_path):
    kb = _kb(request.param, tmp_path)
    yield kb
    kb.close()


def test_import_stores_images_by_content_hash_and_reports_bad_ones(kb, tmp_path):
    report = kb.import_file(_import_file(tmp_path))
    assert report.stored == 5 and not report.rejected
    assert report.images == len(INDEXED)
    problems = [(p.line, p.image, p.reason.split(":")[0]) for p in report.image_problems]
    assert problems == [(5, "img/page.png", "html"), (5, "img/missing.png", "missing_file"), (5, "img/t1.png", "kind 'poster' is not 'template' or 'example'")]
    ent = kb.store.find_by_name(["tpl-3"])[0]
    (img,) = ent.images
    assert img.kind == "template" and (img.width, img.height) == (320, 240)
    stored = tmp_path / "data" / "images" / img.path
    assert stored.read_bytes() == to_bytes(template_image(3)) and img.path.startswith(img.sha256[:2] + "/")
    assert kb.store.find_by_name(["No Image Meme"])[0].images == []
    assert kb.image_route.index.image_count() == len(INDEXED)


def test_memes_find_their_template_and_unindexed_ones_claim_nothing(kb, tmp_path):
    kb.import_file(_import_file(tmp_path))
    grounder = EntityGrounder(kb.store, kb.embedder, tau=0.9, image_route=kb.image_route)
    for seed in INDEXED:
        for band in (False, True):
            q = kb.image_route.hash_query(meme_of(template_image(seed), seed, band=band))
            result = grounder.ground(GroundingCues(image=q))
            assert result.hits, (seed, band)
            top = result.hits[0]
            assert top.entity.name == f"Template {seed}" and top.route == "image"
            assert top.image_distance is not None and top.image_distance <= kb.image_route.tau
            assert top.to_dict()["image"]["sha256"] == top.entity.images[0].sha256
    for seed in OTHERS:
        q = kb.image_route.hash_query(meme_of(template_image(seed), seed))
        assert grounder.ground(GroundingCues(image=q)).hits == []


def test_exact_image_distance_comes_from_the_store_score(kb, tmp_path):
    kb.import_file(_import_file(tmp_path))
    kb.image_route.crops = False  # the whole image only: distances between two known hashes
    q = kb.image_route.prepare(to_bytes(template_image(5)))
    best = kb.image_route.match(q)[0]
    assert best.distance == 0 and best.crop == "full"  # the very bytes stored
    query_hash = hash_image(open_image(to_bytes(template_image(5))))
    other = hash_image(open_image(to_bytes(template_image(6))))
    d = query_hash.distance(other)
    by_id = {m.entity_id: m.distance for m in kb.image_route.match(q, limit=10)}
    six = kb.store.find_by_name(["tpl-6"])[0].id
    assert by_id[six] == d  # the store's dot product gives the exact Hamming distance


def test_the_same_pixels_in_other_bytes_are_at_distance_zero(kb, tmp_path):
    """Stored and query hashes are taken alike (grey, two-step thumbnails): a stored template's pixels saved
    again in another format (other bytes, so the sha256 shortcut does not apply) are at distance 0."""
    kb.import_file(_import_file(tmp_path))
    kb.image_route.crops = False
    buf = io.BytesIO()
    template_image(5).save(buf, "BMP")
    q = kb.image_route.prepare(buf.getvalue())
    best = kb.image_route.match(q)[0]
    assert best.entity_id == kb.store.find_by_name(["tpl-5"])[0].id
    assert best.distance == 0


def test_image_route_fuses_with_text_and_export_round_trips(kb, tmp_path):
    kb.import_file(_import_file(tmp_path))
    grounder = EntityGrounder(kb.store, kb.embedder, tau=0.9, image_route=kb.image_route)
    q = kb.image_route.hash_query(meme_of(template_image(1), 1))
    res = grounder.ground(GroundingCues(ocr_text="Template 3", image=q))
    names = [h.entity.name for h in res.hits]
    assert "Template 1" in names  # the image route grounds what the text does not name
    t1 = next(h for h in res.hits if h.entity.name == "Template 1")
    assert t1.route == "image" and "image" in t1.route_scores
    out = io.StringIO()
    kb.export(out)
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    with_images = [r for r in records if r["images"]]
    assert len(with_images) == len(INDEXED)
    assert set(with_images[0]["images"][0]) == {"url", "path", "sha256", "width", "height", "kind"}
    again = tmp_path / "again.jsonl"
    again.write_text(out.getvalue(), "utf-8")
    entities, report = kb.validate_file(again)
    assert not report.image_problems and sorted(len(e.images) for e in entities) == sorted(len(r["images"]) for r in records)


def test_deleting_an_entity_removes_its_image_points(kb, tmp_path):
    kb.import_file(_import_file(tmp_path))
    ent = kb.store.find_by_name(["tpl-5"])[0]
    kb.store.delete([ent.id])
    kb.image_route.delete_entities([ent.id])
    assert kb.image_route.index.image_count() == len(INDEXED) - 1
    grounder = EntityGrounder(kb.store, kb.embedder, tau=0.9, image_route=kb.image_route)
    q = kb.image_route.hash_query(to_bytes(template_image(5)))
    assert all(h.entity.id != ent.id for h in grounder.ground(GroundingCues(image=q)).hits)


def test_import_downloads_image_urls_with_a_byte_cap(tmp_path):
    from tests.services.urlserver import ImageServer

    png = to_bytes(template_image(8))
    kb = _kb("embedded", tmp_path)
    try:
        with ImageServer(png) as srv:
            f = tmp_path / "urls.jsonl"
            f.write_text("\n".join([
                json.dumps({"name": "Eight", "description": "A template downloaded from a URL.", "image": srv.url("/ok.png")}),
                json.dumps({"name": "Nine", "description": "A template whose image is too big.", "images": [srv.url("/big.png?n=20000000")]}),
            ]) + "\n", "utf-8")
            report = kb.import_file(f)
        assert report.stored == 2 and report.images == 1
        assert [(p.line, p.reason.split(":")[0]) for p in report.image_problems] == [(2, "too_large")]
        (eight,) = kb.store.find_by_name(["Eight"])
        assert eight.images[0].url.endswith("/ok.png") and kb.image_store.read(eight.images[0]) == png
    finally:
        kb.close()


def test_a_blank_background_template_stored_rotated_by_exif_is_trimmed_where_it_was_measured():
    """An entity JPEG whose EXIF turns it upright: the border trim measures and cuts the same upright frame, so
    the trimmed hash is the hash of the upright picture alone (it was cut from the stored, unturned pixels)."""
    from PIL import Image, ImageOps

    from retrieval.images.route import hash_frames

    picture = template_image(3, (200, 160))
    canvas = Image.new("RGB", (290, 230), (255, 255, 255))
    canvas.paste(picture, (40, 30))  # flat borders of unequal widths on every side (each under a quarter)
    stored = canvas.transpose(Image.Transpose.ROTATE_90)  # what the camera wrote; EXIF 6 turns it back upright
    exif = Image.Exif()
    exif[0x0112] = 6
    buf = io.BytesIO()
    stored.save(buf, "JPEG", quality=95, exif=exif.tobytes())
    upright = ImageOps.exif_transpose(Image.open(io.BytesIO(buf.getvalue())))
    assert upright.size == canvas.size
    hashed = hash_frames(buf.getvalue())
    assert hashed.trimmed is not None
    expected = hash_image(upright.crop((40, 30, 240, 190))).vector()
    assert int((hashed.trimmed != expected).sum()) <= 8  # JPEG edges aside, the upright picture alone
    assert int((hashed.frames[0][3] != hash_image(upright).vector()).sum()) == 0


def test_only_the_nearest_hash_neighbours_within_reach_are_verified(tmp_path, monkeypatch):
    """Stage 2 checks the :attr:`ImageRoute.verify` nearest hash neighbours no farther than ``PARAMS.hash_verify_max``
    (a farther one only when votes shortlist it): the hash's candidates, nearest first, cut at both limits."""
    import dataclasses

    from retrieval.images import route as image_route

    kb = _kb("embedded", tmp_path)
    try:
        kb.import_file(_import_file(tmp_path))
        route = kb.image_route
        seen: dict = {}
        real_geometric = route._geometric

        def capture(features, best, frames, *args, **kwargs):
            seen.setdefault("call", (features, dict(best), frames))
            return real_geometric(features, best, frames, *args, **kwargs)

        monkeypatch.setattr(route, "_geometric", capture)
        route.match(route.prepare(meme_of(template_image(1), 1)))
        features, best, frames = seen["call"]
        assert len(best) == len(INDEXED)  # every indexed template is a hash neighbour of the query
        verified: list[str] = []
        real_verify = route._verify

        def record(queries, hits):
            verified.append(next(eid for eid, images in frames.items() if any(i is hits[-1] for i in images)))
            return real_verify(queries, hits)

        monkeypatch.setattr(route, "_verify", record)
        by_distance = dict(zip(sorted(best), (5, image_route.PARAMS.hash_verify_max, image_route.PARAMS.hash_verify_max + 1, 20)))
        placed = {eid: dataclasses.replace(m, distance=by_distance[eid]) for eid, m in best.items()}
        ordered = sorted((eid for eid in placed if by_distance[eid] <= image_route.PARAMS.hash_verify_max), key=by_distance.get)
        assert len(ordered) == 3
        for limit in (4, 3, 2, 1):  # 4: room for the one past hash_verify_max, which is still not checked
            verified.clear()
            route.verify = limit
            route._geometric(features, placed, frames, None, {})  # no votes: the hash's candidates only
            assert verified == ordered[:limit], limit
    finally:
        kb.close()
