"""`kar kb import` with images and `kar kb search --image` through the real CLI app; the image route's web endpoint."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from services.cli import app
from tests.support.images import meme_of, template_image, to_bytes

runner = CliRunner()


def kar(*args: str, env: dict):
    from culturebase.settings import get_settings

    get_settings.cache_clear()
    return runner.invoke(app, list(args), env=env, catch_exceptions=False)


def test_import_then_search_by_image(tmp_path):
    env = {"KAR_DATA_DIR": str(tmp_path / "data"), "KAR_KB_PATH": str(tmp_path / "kb")}
    (tmp_path / "t.png").write_bytes(to_bytes(template_image(7)))
    (tmp_path / "bad.png").write_bytes(b"<svg xmlns='http://www.w3.org/2000/svg'></svg>")
    lines = [
        {"name": "Seven [template]", "description": "A generated meme template for the CLI test.", "image": "t.png"},
        {"name": "Other", "description": "Another record whose image is an SVG file.", "images": ["bad.png"]},
    ]
    f = tmp_path / "kb.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in lines), "utf-8")
    res = kar("kb", "import", str(f), "--json", env=env)
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["images"] == 1 and report["image_problems"] == [{"line": 2, "image": "bad.png", "reason": "svg: the bytes are an SVG document, not an image"}]
    human = kar("kb", "import", str(f), env=env)
    assert "1 image" in human.output and "line 2: image bad.png: svg" in human.output

    meme = tmp_path / "meme.jpg"
    meme.write_bytes(meme_of(template_image(7), 3))
    res = kar("kb", "search", "--image", str(meme), "--json", env=env)
    assert res.exit_code == 0, res.output
    top = json.loads(res.stdout)["hits"][0]
    assert top["name"] == "Seven [template]" and top["route"] == "image" and top["passes_tau"]
    assert 0 <= top["image_distance"] <= 32
    table = kar("kb", "search", "--image", str(meme), env=env)
    assert "Seven [template]" in table.stdout and f"{top['image_distance']}/128" in table.stdout  # markup escaped

    nothing = tmp_path / "other.jpg"
    nothing.write_bytes(meme_of(template_image(99), 3))
    res = kar("kb", "search", "--image", str(nothing), "--json", env=env)
    assert not [h for h in json.loads(res.stdout)["hits"] if h["passes_tau"] and h["route"] == "image"]

    broken = kar("kb", "search", "--image", str(f), env=env)
    assert broken.exit_code == 2 and "is not a readable image" in broken.stderr
    missing = kar("kb", "search", "--image", str(tmp_path / "nope.png"), env=env)
    assert missing.exit_code == 2 and "cannot read --image" in missing.stderr


def test_image_search_on_a_kb_without_images_says_so(tmp_path):
    env = {"KAR_DATA_DIR": str(tmp_path / "data"), "KAR_KB_PATH": str(tmp_path / "kb")}
    f = tmp_path / "kb.jsonl"
    f.write_text(json.dumps({"name": "Textual", "description": "A record without any image."}), "utf-8")
    assert kar("kb", "import", str(f), env=env).exit_code == 0
    meme = tmp_path / "meme.jpg"
    meme.write_bytes(meme_of(template_image(7), 3))
    out = kar("kb", "search", "--image", str(meme), env=env)
    assert out.exit_code == 0, out.output
    assert "no entity found" in out.stdout and "no entity image is indexed" in out.stdout
    text_only = kar("kb", "search", "Textual", env=env)
    assert "no entity image is indexed" not in text_only.stdout and "image distance" not in text_only.stdout
