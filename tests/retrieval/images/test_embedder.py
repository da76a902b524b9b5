"""The learned signal of the image route: a tiny CLIP/SigLIP in the real format, both backends, the default off."""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest

from culturebase.settings import Settings
from culturebase.store import CultureBaseStore
from culturebase.store.edge import EdgeBackend
from culturebase.store.images import IMAGE_EMBEDDINGS
from culturebase.store.server import ServerBackend
from retrieval.embedders import embedder_info
from retrieval.grounding import EntityGrounder, GroundingCues
from retrieval.images.embedder import ImageEmbedder, ImageEmbedderError, build_image_embedder
from retrieval.images.hashes import hash_image, open_image
from retrieval.knowledge_base import KnowledgeBase
from tests.crawlers.hash_embedder import HashEmbedder
from tests.support.images import template_image, to_bytes
from tests.support.tiny_image_embedder import build_tiny_image_embedder

INDEXED = (1, 3, 5, 6)
OTHERS = (11, 12, 13, 14)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("image_models")
    return {kind: build_tiny_image_embedder(root / kind, kind) for kind in ("clip", "siglip")}


def _copy(seed: int) -> bytes:
    """The template with 4 % trimmed off each side, down-scaled to 60 % and re-encoded as JPEG (quality 50)."""
    img = template_image(seed)
    w, h = img.size
    img = img.crop((int(w * 0.04), int(h * 0.04), w - int(w * 0.04), h - int(h * 0.04)))
    return to_bytes(img.resize((img.width * 6 // 10, img.height * 6 // 10)), "JPEG", quality=50)


def _kb(kind: str, tmp_path, **settings) -> KnowledgeBase:
    s = Settings(data_dir=tmp_path / "data", kb_path=tmp_path / "kb", **settings)
    emb = HashEmbedder()
    backend = EdgeBackend(tmp_path / "kb") if kind == "embedded" else ServerBackend(location=":memory:", prefix=f"t{uuid.uuid4().hex[:8]}")
    return KnowledgeBase(CultureBaseStore(backend, embedder_info(emb)), emb, settings=s)


def _import(kb: KnowledgeBase, tmp_path) -> None:
    folder = tmp_path / "import"
    folder.mkdir()
    lines = []
    for seed in INDEXED:
        (folder / f"t{seed}.png").write_bytes(to_bytes(template_image(seed)))
        lines.append(json.dumps({"name": f"Template {seed}", "description": f"Meme template {seed}.", "image": f"t{seed}.png"}))
    (folder / "kb.jsonl").write_text("\n".join(lines) + "\n", "utf-8")
    report = kb.import_file(folder / "kb.jsonl")
    assert report.stored == len(INDEXED) and report.images == len(INDEXED)


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_both_kinds_load_from_the_folder_and_give_unit_vectors(models, kind):
    emb = ImageEmbedder(kind, models[kind])
    vecs = emb.embed([template_image(1), template_image(2)])
    assert vecs.shape == (2, emb.dim) and emb.dim == 32 and emb.info.name == f"{kind}:{kind}"
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert emb.embed([]).shape == (0, 32)


def test_a_missing_folder_is_a_clear_error_and_nothing_is_downloaded(tmp_path):
    missing = tmp_path / "nowhere" / "siglip-base"
    with pytest.raises(ImageEmbedderError, match=r"KAR_IMAGE_EMBEDDER_MODEL=.*nowhere.*siglip-base is not a folder: put a siglip model there"):
        build_image_embedder(Settings(image_embedder="siglip", image_embedder_model=missing))
    with pytest.raises(ImageEmbedderError, match="KAR_IMAGE_EMBEDDER=clip needs KAR_IMAGE_EMBEDDER_MODEL"):
        build_image_embedder(Settings(image_embedder="clip"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ImageEmbedderError, match=r"lacks config.json, preprocessor_config.json"):
        build_image_embedder(Settings(image_embedder="clip", image_embedder_model=tmp_path / "empty"))
    kb = _kb("embedded", tmp_path, image_embedder="siglip", image_embedder_model=missing)
    try:
        with pytest.raises(ImageEmbedderError, match="never downloaded"):
            kb.image_route  # noqa: B018 - the route is built on first use
    finally:
        kb.close()


def test_a_folder_of_the_other_kind_is_refused(models):
    with pytest.raises(ImageEmbedderError, match="could not be loaded as a siglip model"):
        ImageEmbedder("siglip", models["clip"])


def test_the_default_none_changes_nothing(tmp_path):
    kb = _kb("embedded", tmp_path)
    try:
        assert Settings().image_embedder == "none" and kb.settings.image_embedder == "none"
        _import(kb, tmp_path)
        route = kb.image_route
        assert route.embedder is None and route.learned is None
        assert kb.store.backend.collection_info(IMAGE_EMBEDDINGS) is None
        q = route.hash_query(to_bytes(template_image(5)))
        assert q.embeddings == () and [n for n, _ in q.variants][0] == "full"
        (best, *_) = route.match(q)
        assert best.distance == 0 and best.similarity is None
        hit = EntityGrounder(kb.store, kb.embedder, tau=0.9, image_route=route).ground(GroundingCues(image=q)).hits[0]
        # an exact copy: hash distance 0 (evidence 1.0) beats the verification's evidence; both are measured
        assert hit.entity.name == "Template 5" and hit.cue.startswith("image (")
        assert hit.image["signal"] == "hash" and hit.image["distance"] == 0 and hit.image["similarity"] is None
        assert hit.image["inliers"] >= 15
    finally:
        kb.close()


@pytest.fixture(params=["embedded", "local"])
def learned_kb(request, tmp_path, models):
    # image_tau=0: only an exact hash match would count, so a re-encoded copy can match only through the learned signal
    kb = _kb(request.param, tmp_path, image_embedder="siglip", image_embedder_model=models["siglip"], image_tau=0, image_embed_tau=0.9)
    _import(kb, tmp_path)
    yield kb
    kb.close()


def test_a_downscaled_reencoded_copy_matches_through_the_learned_signal(learned_kb):
    kb = learned_kb
    route = kb.image_route
    assert route.learned is not None and route.learned.count() == len(INDEXED)
    grounder = EntityGrounder(kb.store, kb.embedder, tau=0.9, image_route=route)
    route.verify, route.vote, route.mirror = 0, 0, False  # no geometric verification either (nor descriptor-vote candidates): the learned signal alone must carry the match
    for seed in INDEXED:
        data = _copy(seed)
        distance = hash_image(open_image(data)).distance(hash_image(template_image(seed)))
        assert distance > route.tau  # the hash signal alone refuses this copy
        hits = grounder.ground(GroundingCues(image=route.hash_query(data))).hits
        assert hits, seed
        top = hits[0]
        assert top.entity.name == f"Template {seed}" and top.route == "image" and top.cue.endswith(", learned)")
        trace = top.to_dict()["image"]
        assert trace["signal"] == "learned" and trace["similarity"] >= 0.9 and trace["sha256"] == top.entity.images[0].sha256
        assert top.route_scores["image"] > grounder.tau
    for seed in OTHERS:  # templates never indexed claim nothing
        assert grounder.ground(GroundingCues(image=route.hash_query(_copy(seed)))).hits == []


def test_deleting_an_entity_removes_its_learned_points(learned_kb):
    kb = learned_kb
    ent = kb.store.find_by_name(["Template 5"])[0]
    kb.store.delete([ent.id])
    kb.image_route.delete_entities([ent.id])
    assert kb.image_route.learned.count() == len(INDEXED) - 1 and kb.image_route.index.image_count() == len(INDEXED) - 1
