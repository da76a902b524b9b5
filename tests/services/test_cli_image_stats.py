"""`kar kb stats` counts entity images; `kar kb search --json` carries the image-route fields;
the learned image embedder through the real CLI (tiny SigLIP in the real format)."""

from __future__ import annotations

import json

from tests.services.test_cli_images import kar
from tests.support.images import template_image, to_bytes
from tests.support.tiny_image_embedder import build_tiny_image_embedder


def _import(tmp_path, env):
    for seed in (7, 8):
        (tmp_path / f"t{seed}.png").write_bytes(to_bytes(template_image(seed)))
    lines = [
        {"name": "Seven", "description": "A generated meme template.", "image": "t7.png"},
        {"name": "Eight [x]", "description": "Another one with an example image too.",
         "images": ["t8.png", {"path": "t7.png", "kind": "example"}]},
        {"name": "Plain", "description": "A record without images."},
    ]
    f = tmp_path / "kb.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in lines), "utf-8")
    res = kar("kb", "import", str(f), "--json", env=env)
    assert res.exit_code == 0, res.output


def test_stats_count_entity_images(tmp_path):
    env = {"KAR_DATA_DIR": str(tmp_path / "data"), "KAR_KB_PATH": str(tmp_path / "kb")}
    _import(tmp_path, env)
    stats = json.loads(kar("kb", "stats", "--json", env=env).stdout)
    assert stats["entities"] == 3
    assert stats["entity_images"] == {"images": 3, "entities_with_images": 2, "by_kind": {"example": 1, "template": 2}, "hashed": 3}
    human = kar("kb", "stats", env=env)
    line = next(x for x in human.stdout.splitlines() if "entity images" in x)  # a table row, not a Python dict
    assert human.exit_code == 0 and line.split("entity images")[1].strip() == "3 (example 1, template 2) on 2 entities; hashed 3"

    hit = json.loads(kar("kb", "search", "Seven", "--json", env=env).stdout)["hits"][0]
    assert hit["name"] == "Seven" and "image" in hit and "image_distance" in hit  # null: the image route did not run


def test_learned_embedder_through_the_cli(tmp_path):
    model = build_tiny_image_embedder(tmp_path / "siglip", "siglip")
    env = {"KAR_DATA_DIR": str(tmp_path / "data"), "KAR_KB_PATH": str(tmp_path / "kb"), "KAR_IMAGE_EMBEDDER": "siglip",
           "KAR_IMAGE_EMBEDDER_MODEL": str(model), "KAR_IMAGE_TAU": "0"}
    _import(tmp_path, env)
    stats = json.loads(kar("kb", "stats", "--json", env=env).stdout)["entity_images"]
    assert stats["embedded"] == 3 and stats["image_embedder"] == "siglip:siglip"
    img = template_image(8)
    w, h = img.size
    copy = img.crop((12, 9, w - 12, h - 9)).resize((w * 6 // 10, h * 6 // 10))
    (tmp_path / "copy.jpg").write_bytes(to_bytes(copy, "JPEG", quality=50))
    res = kar("kb", "search", "--image", str(tmp_path / "copy.jpg"), "--json", env=env)
    assert res.exit_code == 0, res.output
    top = json.loads(res.stdout)["hits"][0]
    assert top["name"] == "Eight [x]" and top["route"] == "image" and top["passes_tau"]
    assert top["image"]["signal"] == "learned" and top["image"]["similarity"] >= 0.9 and top["image"]["distance"] > 0

    missing = kar("kb", "search", "Seven", env={**env, "KAR_IMAGE_EMBEDDER_MODEL": str(tmp_path / "no-model")})
    assert missing.exit_code == 2 and "no-model is not a folder: put a siglip model there" in missing.stderr  # configuration



def test_switching_the_embedder_on_later_then_reindex_images(tmp_path):
    env = {"KAR_DATA_DIR": str(tmp_path / "data"), "KAR_KB_PATH": str(tmp_path / "kb")}
    _import(tmp_path, env)  # hashes only (KAR_IMAGE_EMBEDDER=none)
    clip = build_tiny_image_embedder(tmp_path / "clip", "clip")
    siglip = build_tiny_image_embedder(tmp_path / "siglip", "siglip")
    on = {**env, "KAR_IMAGE_EMBEDDER": "clip", "KAR_IMAGE_EMBEDDER_MODEL": str(clip)}
    assert json.loads(kar("kb", "stats", "--json", env=on).stdout)["entity_images"]["embedded"] == 0
    res = kar("kb", "reindex-images", "--json", env=on)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == {"entities": 2, "hashed": 3, "frames": 3, "missing": 0, "unreadable": 0, "embedded": 3}
    assert json.loads(kar("kb", "stats", "--json", env=on).stdout)["entity_images"]["embedded"] == 3
    other = {**on, "KAR_IMAGE_EMBEDDER": "siglip", "KAR_IMAGE_EMBEDDER_MODEL": str(siglip)}
    bad = kar("kb", "search", "--image", str(tmp_path / "t7.png"), env=other)
    assert bad.exit_code == 1 and "kar kb reindex-images" in bad.stderr
    assert kar("kb", "reindex-images", env=other).stdout.strip() == "entities 2, hashed 3, frames 3, missing 0, unreadable 0, embedded 3"
    hit = json.loads(kar("kb", "search", "--image", str(tmp_path / "t8.png"), "--json", env=other).stdout)["hits"][0]
    assert hit["name"] == "Eight [x]" and hit["image"]["signal"] in ("verified", "hash") and hit["image"]["distance"] == 0 and hit["image"]["similarity"] > 0.99
