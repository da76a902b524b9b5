"""Joins through `kar kb import` (crawl output in the spiders' shape), recorded in `--report`, listed by
`kar kb merges` and undone by `kar kb split` (and its API twin), with the images each record brought."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from culturebase.entity import make_entity_id
from services.cli import app
from tests.support.images import template_image, to_bytes

runner = CliRunner()
TEMPLATE = "https://api.memegen.link/templates/afraid"
PAGE = "https://knowyourmeme.com/memes/woman-yelling-at-a-cat"


def kar(*args: str, env: dict):
    from culturebase.settings import get_settings

    get_settings.cache_clear()
    return runner.invoke(app, list(args), env=env, catch_exceptions=False)


def _rows(tmp_path) -> list[dict]:
    """A memegen template, its KnowYourMeme page as `--follow-sources` writes it (same_as), and a page named
    like the template's alias with no redirect: rows of `scrapy crawl -o`, with local images."""
    images = []
    for n in (1, 2):
        path = tmp_path / f"img{n}.png"
        path.write_bytes(to_bytes(template_image(200 + n), "PNG"))
        images.append(str(path))
    template = {"site": "memegen", "url": TEMPLATE, "page_key": TEMPLATE, "name": "Afraid to Ask Andy", "aliases": ["Andy Dwyer"],
                "description": "A meme template of Andy Dwyer from Parks and Recreation.", "language": "en",
                "tags": ["meme template", "Parks and Recreation"], "image_urls": []}
    page = {"site": "knowyourmeme", "url": PAGE, "page_key": PAGE, "name": "Woman Yelling at a Cat", "aliases": [],
            "description": "A two-panel image macro of a woman yelling and a confused cat at a dinner table.",
            "language": "en", "tags": ["exploitable"], "same_as": TEMPLATE, "image_urls": []}
    namesake = {"site": "knowyourmeme", "url": "https://knowyourmeme.com/memes/andy-dwyer", "page_key": "x",
                "name": "Andy Dwyer", "description": "Andy Dwyer is a character of Parks and Recreation.", "language": "en",
                "image_urls": []}
    return [{**template, "image": images[0]}, {**page, "image": images[1]}, namesake]


def test_import_records_the_join_and_split_takes_it_back_with_its_image(tmp_path, tiny_bge_m3_path):
    env = {"KAR_EMBEDDER": "bge-m3", "KAR_EMBEDDER_MODEL": str(tiny_bge_m3_path), "KAR_DATA_DIR": str(tmp_path / "data"),
           "KAR_KB_PATH": str(tmp_path / "kb")}
    dump = tmp_path / "items.jsonl"
    dump.write_text("".join(json.dumps(r) + "\n" for r in _rows(tmp_path)), "utf-8")
    report_file = tmp_path / "report.jsonl"
    res = kar("kb", "import", str(dump), "--format", "crawl", "--fetch-images", "--report", str(report_file), env=env)
    assert res.exit_code == 0, res.output
    assert "joined: 1 (1 by declared); kept apart: 1; split: 0" in " ".join(res.output.split())
    rows = [json.loads(line) for line in report_file.read_text("utf-8").splitlines()]
    kinds = {r["kind"]: r for r in rows}
    assert kinds["merge"]["rule"] == "declared" and (kinds["merge"]["source"], kinds["merge"]["into_source"]) == (PAGE, TEMPLATE)
    assert kinds["kept_apart"]["rule"] == "alias_only" and kinds["kept_apart"]["name"] == "Andy Dwyer"
    assert rows[-1]["kind"] == "summary" and rows[-1]["merged_by_rule"] == {"declared": 1} and rows[-1]["stored"] == 2

    eid = make_entity_id("x", url=TEMPLATE)
    merges = json.loads(kar("kb", "merges", "--json", env=env).stdout)["merged_entities"]
    assert [(m["id"], [(p["name"], p["rule"]) for p in m["parts"]]) for m in merges] == [
        (eid, [("Afraid to Ask Andy", "first"), ("Woman Yelling at a Cat", "declared")])
    ]
    listed = kar("kb", "merges", env=env)
    assert "declared: Woman Yelling at a Cat" in " ".join(listed.stdout.split())
    joined = json.loads(kar("kb", "get", eid, env=env).stdout)
    assert len(joined["images"]) == 2 and "Woman Yelling at a Cat" in joined["aliases"]

    # the refusals name why, exit 2; an unknown id exits 1
    own = kar("kb", "split", eid, "--source", TEMPLATE, env=env)
    assert own.exit_code == 2 and "entity's own page" in own.stderr
    other = kar("kb", "split", eid, "--source", "https://knowyourmeme.com/memes/other", env=env)
    assert other.exit_code == 2 and "not one of the pages" in other.stderr
    assert kar("kb", "split", "cb_nope", "--source", PAGE, env=env).exit_code == 1

    res = kar("kb", "split", eid, "--source", PAGE, env=env)
    assert res.exit_code == 0, res.output
    assert "took Woman Yelling at a Cat" in " ".join(res.output.split()) and "1 image(s)" in res.output
    kept = json.loads(kar("kb", "get", eid, env=env).stdout)
    out = json.loads(kar("kb", "get", make_entity_id("x", url=PAGE), env=env).stdout)
    assert kept["aliases"] == ["Andy Dwyer"] and len(kept["images"]) == 1 and kept["constituents"] == []
    assert out["name"] == "Woman Yelling at a Cat" and len(out["images"]) == 1 and out["images"][0] != kept["images"][0]
    assert json.loads(kar("kb", "merges", "--json", env=env).stdout)["merged_entities"] == []
    # each picture is found under its own entity again (the image route was re-indexed)
    found = json.loads(kar("kb", "search", "--image", str(tmp_path / "img2.png"), "--json", env=env).stdout)
    assert found["hits"][0]["id"] == out["id"]
    assert json.loads(kar("kb", "stats", "--json", env=env).stdout)["entities"] == 3
