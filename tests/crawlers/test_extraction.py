"""Spiders and helpers on saved pages (no reactor, no network): field extraction, listings, blocks, merging."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES, fixture_response
from scrapy.http import HtmlResponse, Request, TextResponse


from crawlers.middlewares import PAGE_KEY, detect_block, retry_after_seconds
from crawlers.pipelines import item_to_entity
from crawlers.spiders.knowyourmeme import KnowYourMemeSpider, clean_link, is_entry_path
from crawlers.spiders.moegirl import MoegirlSpider, parse_wikitext
from crawlers.text import aliases_from_aka, chunk_text, title_variants, wikitext_to_text

BASE = "http://127.0.0.1:8999"
KYM = FIXTURES / "kym"


class _Stats:
    def __init__(self):
        self.values = {}

    def inc_value(self, key, n=1):
        self.values[key] = self.values.get(key, 0) + n


class _Crawler:
    def __init__(self):
        self.stats = _Stats()


def kym_spider(**kw) -> KnowYourMemeSpider:
    spider = KnowYourMemeSpider(**kw)
    spider.crawler = _Crawler()
    return spider


def entry(slug: str, spider=None, **kw):
    spider = spider or kym_spider(**kw)
    resp = fixture_response(f"{BASE}/memes/{slug}", KYM / "memes" / f"{slug}.html", headers={"ETag": '"abc"'})
    return list(spider.parse_entry(resp))


def test_kym_entry_fields():
    (item,) = entry("doge")
    assert item["name"] == "Doge"
    assert {"Shibe", "Shiba Inu Meme"} <= set(item["aliases"])  # "also known as" phrasing in About
    assert item["description"].startswith("Doge, also known as")
    assert "Dogecoin was launched" in item["cultural_usage"]  # Spread, list items included
    assert item["status"] == "Confirmed"
    assert item["details"]["Type"] == "Animal, Image Macro" and item["details"]["Origin"] == "Tumblr"
    assert {"shiba inu", "comic sans", "type:Animal", "origin:Tumblr", "year:2010", "region:Japan"} <= set(item["tags"])
    assert item["image"].endswith("/doge.jpg")
    assert item["url"] == f"{BASE}/memes/doge" and item["etag"] == '"abc"'
    assert item["language"] == "en" and item["site"] == "knowyourmeme"
    # sections stop at "Search Interest": no trends script, no external references
    assert "Origin\nThe use of the misspelled word" in item["page_text"]
    assert "External References" not in item["page_text"] and "gstatic" not in item["page_text"]
    entity = item_to_entity(item)
    assert entity.name == "Doge" and entity.sources[0].site == "knowyourmeme"


def test_kym_title_variants_series_and_canonical():
    (item,) = entry("paimon-emergency-food")
    assert item["name"] == "Paimon Emergency Food"
    assert {"Emergency Food", "Paimon"} <= set(item["aliases"])
    assert item["source_work"] == "Genshin Impact"  # "Part of a series on"
    (old,) = entry("doge-old")
    assert old["url"] == f"{BASE}/memes/doge"  # same-host rel=canonical wins
    assert item_to_entity(old).id == item_to_entity(entry("doge")[0]).id


def test_kym_canonical_to_another_host_is_not_trusted():
    html = (KYM / "memes" / "doge.html").read_text().replace('href="/memes/doge">\n', 'href="https://evil.example/x">\n')
    html = html.replace('<link rel="canonical" href="/memes/doge">', '<link rel="canonical" href="https://evil.example/x">')
    resp = HtmlResponse(url=f"{BASE}/memes/doge", body=html.encode(), encoding="utf-8", request=Request(f"{BASE}/memes/doge"))
    (item,) = kym_spider().parse_entry(resp)
    assert item["url"] == f"{BASE}/memes/doge"


def test_kym_confirmed_only_skips_submissions():
    spider = kym_spider(confirmed_only="1")
    assert entry("submission-meme", spider=spider) == []
    assert spider.crawler.stats.values["kar/skipped_filtered"] == 1
    assert len(entry("doge", spider=spider)) == 1


def test_kym_malformed_entry_is_dropped_with_reason():
    (item,) = entry("broken-entry")
    with pytest.raises(ValueError, match="missing name"):
        item_to_entity(item)


def test_kym_listing_pagination_and_limit():
    spider = kym_spider()
    out = list(spider.parse_listing(fixture_response(f"{BASE}/memes", KYM / "listing" / "memes-page-1.html")))
    entries = [r.url for r in out if r.callback == spider.parse_entry]
    assert entries == [f"{BASE}/memes/{s}" for s in ("doge", "distracted-boyfriend", "rickroll", "submission-meme", "private-meme")]
    assert [r.url for r in out if r.callback == spider.parse_listing] == [f"{BASE}/memes/page/2"]
    assert all(r.meta[PAGE_KEY] for r in out if r.callback == spider.parse_entry)
    page2 = list(spider.parse_listing(fixture_response(f"{BASE}/memes/page/2", KYM / "listing" / "memes-page-2.html")))
    # /memes/doge?ref=listing is the same entry (already scheduled); /memes/doge/photos is not an entry; no next page
    assert [r.url for r in page2] == [f"{BASE}/memes/{s}" for s in ("paimon-emergency-food", "doge-old", "broken-entry")]
    limited = kym_spider(limit=2)
    out = list(limited.parse_listing(fixture_response(f"{BASE}/memes", KYM / "listing" / "memes-page-1.html")))
    assert len(out) == 2  # two entries, and no next page once the limit is reached


def test_kym_search_page():
    spider = kym_spider()
    out = list(spider.parse_listing(fixture_response(f"{BASE}/search?q=doge", KYM / "search" / "doge.html")))
    assert [r.url for r in out] == [f"{BASE}/memes/doge", f"{BASE}/memes/doge-old"]


def test_entry_paths_and_links():
    assert is_entry_path("/memes/doge") and is_entry_path("/memes/subcultures/genshin-impact")
    for path in ("/memes", "/memes/page/2", "/memes/confirmed", "/memes/doge/photos", "/photos/1-doge", "/memes/trending"):
        assert not is_entry_path(path), path
    assert clean_link("http://x/memes/doge?ref=search&utm_source=t#c") == "http://x/memes/doge"


def test_text_helpers():
    assert title_variants("Doge / Shibe (Shiba Inu)") == ("Doge", ["Shibe", "Shiba Inu"])
    assert aliases_from_aka('Doge, also known as "Shibe" or "Shiba Inu Meme", is a slang term') == ["Shibe", "Shiba Inu Meme"]
    assert aliases_from_aka("Rickroll, sometimes referred to as Rick Rolling or Rickrolling, is a prank.") == ["Rick Rolling", "Rickrolling"]
    chunks = chunk_text("\n".join(f"Sentence number {i} is here." for i in range(200)), max_chars=300)
    assert len(chunks) > 5 and all(len(c) <= 300 for c in chunks)


def test_wikitext_display_templates_to_plain_text():
    text = wikitext_to_text(
        "'''派蒙'''是{{黑幕|应急食品}}，{{ruby|漢字|かんじ}}，{{lang|ja|パイモン}}，{{jpn|こんにちは}}，"
        "[[原神|游戏]]和[[提瓦特]]。<ref>来源</ref><!-- 注释 -->{{原神:导航}}[[File:P.png|thumb|图]][[分类:原神角色]]"
        "{{heimu|秘密}}<br />下一行"
    )
    assert text == "派蒙是应急食品，漢字，パイモン，こんにちは，游戏和提瓦特。秘密\n下一行"


def test_moegirl_wikitext_fields():
    wikitext = (FIXTURES / "moegirl" / "pages" / "派蒙.wiki").read_text("utf-8")
    f = parse_wikitext("派蒙", '<span style="color:#1f4e79">派蒙</span>', wikitext, ["原神角色"], ["白飞飞", "Paimon"])
    assert f["name"] == "派蒙"
    assert {"应急食品", "小派蒙", "飞行矮堇瓜", "白飞飞", "Paimon"} <= set(f["aliases"])  # 别号 (黑幕 stripped) + redirects
    assert f["source_work"] == "原神"
    assert f["description"].startswith("派蒙是米哈游制作发行的开放世界冒险游戏《原神》") and "<ref" not in f["description"]
    assert "发色：白发" in f["visual_desc"] and "萌点：吃货、飞行能力" in f["visual_desc"]
    assert "星形发饰" in f["visual_desc"]  # the 人物形象 section
    assert "应急食品" in f["cultural_usage"] and "前面的区域" in f["cultural_usage"]  # 经典台词与梗 with subsections
    assert {"原神角色", "声优:花玲", "出身地区:提瓦特", "所属团体:旅行者一行"} <= set(f["tags"])
    for field in ("description", "visual_desc", "cultural_usage", "page_text"):
        assert "{{" not in f[field] and "[[" not in f[field] and "'''" not in f[field], field


def _moegirl_spider(**kw) -> MoegirlSpider:
    spider = MoegirlSpider(**kw)
    spider.crawler = _Crawler()
    return spider


def _json_response(url: str, data: dict, meta: dict | None = None) -> TextResponse:
    return TextResponse(url=url, body=json.dumps(data, ensure_ascii=False).encode(), encoding="utf-8", request=Request(url, meta=meta or {}))


def test_moegirl_start_urls_and_continuation():
    spider = _moegirl_spider(start_urls=[f"{BASE}/Category:原神角色", f"{BASE}/派蒙", f"{BASE}/index.php?title=胡桃"])
    assert spider.api_url == f"{BASE}/api.php"
    assert spider.categories == ["Category:原神角色"] and spider.titles == ["派蒙", "胡桃"]
    members = _json_response(
        f"{BASE}/api.php?action=query",
        {"continue": {"cmcontinue": "page|ab|2", "continue": "-||"}, "query": {"categorymembers": [
            {"pageid": 101, "ns": 0, "title": "派蒙"}, {"pageid": 9014, "ns": 14, "title": "Category:原神NPC"}]}},
        meta={"category": "Category:原神角色", "cat_depth": 0},
    )
    out = list(spider.parse_members(members))
    urls = [r.url for r in out]
    assert any("cmtitle=Category%3A%E5%8E%9F%E7%A5%9ENPC" in u for u in urls)  # sub-category
    assert any("pageids=101" in u and "prop=info%7Credirects" in u for u in urls)
    assert any("cmcontinue=page%7Cab%7C2" in u for u in urls)  # continuation token carried over
    assert all("maxlag=5" in u for u in urls)


def test_moegirl_api_error_page_becomes_a_dropped_item():
    spider = _moegirl_spider(titles="x", api_url=f"{BASE}/api.php")
    resp = _json_response(f"{BASE}/api.php?action=parse&pageid=999", {"error": {"code": "nosuchpageid", "info": "There is no page with ID 999."}},
                          meta={"title": "被删除的页面", PAGE_KEY: "k"})
    (item,) = spider.parse_page(resp)
    assert item["drop_reason"] == "api error nosuchpageid"


@pytest.mark.parametrize(
    "path,status,expected",
    [("blocks/cloudflare.html", 403, "cloudflare challenge"), ("blocks/moegirl-captcha.html", 200, "captcha (人机验证)"),
     ("blocks/login.html", 200, "login wall"), ("kym/memes/doge.html", 200, None), ("kym/listing/memes-page-1.html", 200, None)],
)
def test_block_page_detection(path, status, expected):
    reason = detect_block(fixture_response(f"{BASE}/x", FIXTURES / path, status=status))
    assert (reason is None) if expected is None else reason.startswith(expected)


def test_block_detection_on_api_and_headers():
    body = json.dumps({"error": {"code": "readapidenied", "info": "You need read permission to use this module."}}).encode()
    resp = TextResponse(url=f"{BASE}/api.php", body=body, headers={"Content-Type": "application/json"}, request=Request(f"{BASE}/api.php"))
    assert detect_block(resp).startswith("login wall")
    cf = HtmlResponse(url=f"{BASE}/x", body=b"<html></html>", headers={"cf-mitigated": "challenge"}, request=Request(f"{BASE}/x"))
    assert detect_block(cf).startswith("cloudflare challenge")


def test_retry_after_parsing():
    assert retry_after_seconds(b"3") == 3.0
    assert retry_after_seconds(None) is None and retry_after_seconds("soon") is None
    assert 0 <= retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") < 1  # a past date: retry now
