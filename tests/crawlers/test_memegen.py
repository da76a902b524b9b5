"""memegen spider (real API shape from ../shared/data), entity images via the media pipeline, bad images, KYM series fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES, fixture_response
from test_jobs import run

from culturebase.entity import canonical_url, make_entity_id
from crawlers.pipelines import item_to_entity
from crawlers.spiders.knowyourmeme import KnowYourMemeSpider
from crawlers.spiders.memegen import template_item

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "memegen_templates.json"


def real_templates() -> list[dict]:
    if not SHARED.is_file():
        pytest.skip(f"shared data not found at {SHARED} (../shared/data next to the repository)")
    return json.loads(SHARED.read_text("utf-8"))


def test_every_real_template_becomes_an_entity():
    templates = real_templates()
    entities = [item_to_entity(template_item(t, "https://api.memegen.link/templates/")) for t in templates]
    assert len(entities) == len(templates) == 211
    by_name = {e.name: e for e in entities}
    dragon = by_name["Three-Headed Dragon"]
    assert dragon.aliases == ["3hd", "King Ghidorah"]
    assert dragon.cultural_usage == "Example captions: Pepperoni / Mushroom / Pineapple"
    assert [s.site for s in dragon.sources] == ["memegen", "knowyourmeme"]
    # the id is the KnowYourMeme page's, so that entry merges into the template
    assert dragon.id == make_entity_id("x", url="https://knowyourmeme.com/memes/three-headed-dragon")
    with_source = [t for t in templates if t.get("source")]
    assert sum(1 for e in entities if any(s.site == "knowyourmeme" for s in e.sources)) == len(with_source)
    # templates naming the same KnowYourMeme page (db/dg, sad-biden/sad-bush/sad-obama ...) are one entity
    keys = {canonical_url(t.get("source") or t["_self"]) for t in templates}
    assert len({e.id for e in entities}) == len(keys) == 206


class _Stats:
    def __init__(self):
        self.values = {}

    def inc_value(self, key, n=1):
        self.values[key] = self.values.get(key, 0) + n


def test_kym_series_is_the_link_after_the_words_not_the_category_badge():
    spider = KnowYourMemeSpider()
    spider.crawler = type("C", (), {"stats": _Stats()})()
    url = "http://127.0.0.1:8999/memes/woman-yelling-at-a-cat"
    (item,) = spider.parse_entry(fixture_response(url, FIXTURES / "kym" / "memes" / "woman-yelling-at-a-cat.html"))
    assert item["source_work"] == "The Real Housewives"
    assert item["image_urls"] == ["https://i.kym-cdn.com/entries/icons/original/000/000/002/woman-yelling-at-a-cat.jpg"]
    (paimon,) = spider.parse_entry(fixture_response(url, FIXTURES / "kym" / "memes" / "paimon-emergency-food.html"))
    assert paimon["source_work"] == "Genshin Impact"


def _templates(server) -> list[dict]:
    real = {t["id"]: t for t in real_templates()}
    chosen = [dict(real[i]) for i in ("3hd", "afraid", "doge", "ants")]
    from tests.support.images import template_image, to_bytes

    for n, t in enumerate(chosen):
        server.memegen_images[t["id"]] = to_bytes(template_image(100 + n), "JPEG", quality=90)
    chosen[1]["source"] = "https://knowyourmeme.com/memes/woman-yelling-at-a-cat"  # a KYM page the fixture site has
    chosen[3]["source"] = "https://knowyourmeme.com/memes/no-such-entry"  # 404: counted, not fatal
    # every source points at the fixture site (tests never reach the internet); 3hd's page is not there
    server.kym_sources = {"doge", "woman-yelling-at-a-cat", "no-such-entry", "three-headed-dragon", "ants"}
    bad = ["html", "empty", "truncated", "bomb", "huge", "svg", "redirect-private", "redirect-localhost", "missing"]
    for kind in bad:
        chosen.append({"id": f"bad-{kind}", "name": f"Bad {kind}", "lines": 2, "overlays": 1, "styles": [],
                       "blank": f"/bad/{kind}", "example": {"text": ["a", "b"], "url": ""}, "source": None,
                       "keywords": [], "_self": ""})
    chosen.append({"name": "no id"})
    return chosen


def test_memegen_crawl_downloads_hashes_and_merges_sources(server, manager, settings, open_kb):
    server.memegen_templates = _templates(server)
    job = run(manager, "memegen", [f"{server.url}/templates/"], options={"follow_sources": "1"},
              scrapy_settings={"RETRY_TIMES": 0})
    assert job.status == "succeeded", manager.logs(job.id, tail=60)
    c = job.counters
    assert c["dropped"] == {"template without id": 1}
    assert c["images_failed"] == {
        "html": 1, "empty": 1, "corrupt": 1, "too_many_pixels": 1, "too_large": 1, "svg": 1,
        "forbidden_address": 2, "http_404": 1,
    }, c
    assert c["refused_address"] == 2 and c["sources_unreachable"] == 2 and c["sources_fetched"] == 2
    assert not server.requests("/kym-cdn/x.jpg")  # the redirect to another host name of this machine was not followed
    kb = open_kb()
    store = kb.store
    assert store.count() == 4 + 9
    bad = store.find_by_name(["Bad html"])[0]
    assert bad.images == []  # stored without its image
    (dragon,) = store.find_by_name(["3hd"])
    (img,) = dragon.images
    assert img.kind == "template" and img.url == f"{server.url}/images/3hd.jpg"
    assert (settings.images_dir / img.path).read_bytes() == server.memegen_images["3hd"]
    (cat,) = store.find_by_name(["afraid"])  # the template merged with its KYM page (same canonical URL)
    assert cat.id == make_entity_id("x", url=f"{server.url}/memes/woman-yelling-at-a-cat")
    assert {s.site for s in cat.sources} == {"memegen", "knowyourmeme"} and cat.source_work == "The Real Housewives"
    assert len(cat.images) == 2 and {"Afraid to Ask Andy", "Woman Yelling at a Cat"} <= {cat.name, *cat.aliases}
    (ants,) = store.find_by_name(["ants"])  # its source page was unreachable: the template entity is stored anyway
    assert len(ants.images) == 1 and ants.source_work == ""

    # the image route finds the template from a meme made of its blank
    from retrieval.grounding import EntityGrounder, GroundingCues
    from tests.support.images import meme_of, template_image

    kb.settings = settings
    grounder = EntityGrounder(store, kb.embedder, tau=2.0, image_route=kb.image_route)
    hits = grounder.ground(GroundingCues(image=kb.image_route.hash_query(meme_of(template_image(100), 1)))).hits
    assert hits and hits[0].entity.id == dragon.id and hits[0].route == "image"


def test_without_follow_sources_no_off_site_page_is_fetched(server, manager):
    server.memegen_templates = _templates(server)[:4]
    job = run(manager, "memegen", [f"{server.url}/templates/"])
    assert job.status == "succeeded", manager.logs(job.id, tail=60)
    assert not server.requests("/memes/") and job.counters["images_stored"] == 4
