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
    assert dragon.aliases == []  # the id and the keywords are tags: a franchise keyword names many memes
    assert {"memegen:3hd", "King Ghidorah"} <= set(dragon.tags)
    assert dragon.cultural_usage == "Example captions: Pepperoni / Mushroom / Pineapple"
    assert [s.site for s in dragon.sources] == ["memegen", "knowyourmeme"]  # the KYM page linked, not joined by
    assert dragon.id == make_entity_id("x", url="https://api.memegen.link/templates/3hd")  # its own page's id
    with_source = [t for t in templates if t.get("source")]
    assert sum(1 for e in entities if len(e.sources) == 2) == len(with_source)
    kym = [t for t in with_source if "knowyourmeme.com/memes/" in t["source"]]
    assert sum(1 for e in entities if any(s.site == "knowyourmeme" for s in e.sources)) == len(kym)
    # templates naming the same KnowYourMeme page (db/dg, sad-biden/sad-bush/sad-obama ...) stay apart
    assert len({e.id for e in entities}) == 211 and all(e.aliases == [] for e in entities)
    keys = {canonical_url(t["source"]) for t in with_source}
    assert len(keys) == len(with_source) - 5  # 3 pages named by 2 or 3 templates


class _Stats:
    def __init__(self):
        self.values = {}

    def inc_value(self, key, n=1):
        self.values[key] = self.values.get(key, 0) + n


def _old_style_store(templates: list[dict], base: str) -> list:
    """What the crawl stored before the identity rules: the id and keywords as aliases, the id of the template's
    KnowYourMeme page, and any two templates sharing an alias key (or a page) folded into one entity."""
    from culturebase.entity import normalize_text

    entities: dict[str, object] = {}
    by_alias: dict[str, str] = {}
    for t in templates:
        e = item_to_entity(template_item(t, base))
        e = e.model_copy(update={"aliases": [t["id"], *t["keywords"]],
                                 "id": make_entity_id("x", url=t["source"]) if t.get("source") else e.id})
        hit = entities.get(e.id) or entities.get(next((by_alias[k] for k in e.match_keys if k in by_alias), ""))
        if hit is not None:
            e = hit.merged_with(e)
        entities[e.id] = e
        for key in e.match_keys:
            by_alias.setdefault(normalize_text(key), e.id)
    return list(entities.values())


def _crawl_over(old: list, server, manager, open_kb) -> dict:
    """The memegen crawl of the server's templates into a knowledge base holding ``old``: the job's counters."""
    kb = open_kb()
    kb.add(old)
    kb.close()
    job = run(manager, "memegen", [f"{server.url}/templates/"], timeout=300)
    assert job.status == "succeeded", manager.logs(job.id, tail=60)
    return job.counters


def test_the_real_template_list_is_one_entity_per_template(server, manager, open_kb):
    """All 211 templates of the real list, served in the API's shape: as many entities as templates (no rule
    joins two of them), keywords as tags; a knowledge base the old alias-key rule built is repaired."""
    templates = real_templates()
    server.memegen_templates = templates
    # the knowledge base as the old crawl left it: templates of one franchise (The Office, Futurama, ...) joined
    old = _old_style_store(server.memegen_list(), f"{server.url}/templates/")
    folded = {canonical_url(s.url) for e in old for s in [s for s in e.sources if s.site == "memegen"][1:]}
    assert len(old) == 211 - len(folded) and len(folded) >= 9
    c = _crawl_over(old, server, manager, open_kb)
    assert c["items_parsed"] == 211 and c["merged"] == 0 and c["kept_apart"] == 0, [j for j in c["joins"] if j["kind"] != "split"]
    splits = [j for j in c["joins"] if j["kind"] == "split"]
    assert {j["source"] for j in splits if "/templates/" in j["source"]} == folded  # each template page an old join folded in
    assert c["split"] == len(splits) and all(j["rule"] == "repair" for j in splits)
    kb = open_kb()
    entities = list(kb.store.iter_entities())
    assert len(entities) == 211  # as many as templates
    assert all(e.aliases == [] and e.constituents == [] for e in entities)
    assert all(sum(s.site == "memegen" for s in e.sources) == 1 for e in entities)
    by_name = {e.name: e for e in entities}
    for name in ("Jim Halpert Pointing to Whiteboard", "Schrute Facts", "You Should Feel Bad", "Shut Up and Take My Money!",
                 "I'm Going to Build My Own Theme Park", "See? Nobody Cares", "Life... Finds a Way", "Confused Gandalf",
                 "Why Shouldn't I Keep It", "Distracted Boyfriend", "Distracted Girlfriend"):
        assert name in by_name, name
    assert "The Office" in by_name["Jim Halpert Pointing to Whiteboard"].tags
    kb.close()


def test_a_template_an_old_join_folded_in_is_split_off_even_when_crawled_before_its_owner(server, manager, open_kb):
    """Crawled without the template whose entity an old join folded it into, a template is taken out of that
    entity (split) and not reported as named like the entity's alias: its name left with its page."""
    server.memegen_templates = real_templates()
    old = _old_style_store(server.memegen_list(), f"{server.url}/templates/")
    folded = {canonical_url(s.url) for e in old for s in [s for s in e.sources if s.site == "memegen"][1:]}
    server.memegen_templates = [t for t in real_templates() if canonical_url(f"{server.url}/templates/{t['id']}") in folded]
    assert len(server.memegen_templates) == len(folded) >= 9
    c = _crawl_over(old, server, manager, open_kb)
    assert c["kept_apart"] == 0, [j for j in c["joins"] if j["kind"] == "kept_apart"]
    assert {j["source"] for j in c["joins"] if j["kind"] == "split"} >= folded


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
    # each fetched KYM page is the one template naming it (memegen says so): joined by rule "declared"
    assert c["merged"] == 2 and c["merged_by_rule"] == {"declared": 2}, (c["joins"], c)
    assert {(j["name"], j["into_name"], j["rule"]) for j in c["joins"]} == {
        ("Doge", "Doge", "declared"), ("Woman Yelling at a Cat", "Afraid to Ask Andy", "declared"),
    }
    assert not server.requests("/kym-cdn/x.jpg")  # the redirect to another host name of this machine was not followed
    kb = open_kb()
    store = kb.store
    assert store.count() == 4 + 9
    bad = store.find_by_name(["Bad html"])[0]
    assert bad.images == []  # stored without its image
    (dragon,) = store.find_by_name(["Three-Headed Dragon"])
    (img,) = dragon.images
    assert img.kind == "template" and img.url == f"{server.url}/images/3hd.jpg"
    assert (settings.images_dir / img.path).read_bytes() == server.memegen_images["3hd"]
    (cat,) = store.find_by_name(["Afraid to Ask Andy"])  # the template joined with its KYM page
    assert cat.id == make_entity_id("x", url=f"{server.url}/templates/afraid")
    assert {s.site for s in cat.sources} == {"memegen", "knowyourmeme"} and cat.source_work == "The Real Housewives"
    assert len(cat.images) == 2 and {"Afraid to Ask Andy", "Woman Yelling at a Cat"} <= {cat.name, *cat.aliases}
    assert [(p.name, p.rule) for p in cat.constituents] == [("Afraid to Ask Andy", "first"), ("Woman Yelling at a Cat", "declared")]
    (ants,) = store.find_by_name(["Do You Want Ants?"])  # its source page was unreachable: the template entity is stored anyway
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
