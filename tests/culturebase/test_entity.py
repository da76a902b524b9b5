"""Entity records: validation names the field, ids are stable, aliases dedupe, release import."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from culturebase.entity import Entity, canonical_url, make_entity_id, normalize_text


def test_aliases_are_deduplicated_by_width_and_case_and_name_is_dropped():
    e = Entity(name="Doge", aliases=["doge", "ＤＯＧＥ", "神烦狗", " 神烦狗 ", "Shiba  Inu", "shiba inu"], language="en")
    assert e.aliases == ["神烦狗", "Shiba Inu"]
    assert normalize_text("ＤＯＧＥ") == "doge"
    assert set(e.match_keys) == {"doge", "神烦狗", "shiba inu"}


def test_id_derives_from_canonical_source_url_and_is_stable():
    a = Entity(name="诸葛亮", sources=[{"site": "moegirl", "url": "https://zh.moegirl.org.cn/%E8%AF%B8%E8%91%9B%E4%BA%AE"}])
    b = Entity(name="Zhuge Liang", sources=[{"site": "moegirl", "url": "http://ZH.moegirl.org.cn/诸葛亮/#top"}])
    assert a.id == b.id
    assert canonical_url("https://knowyourmeme.com/memes/doge/?utm_source=x") == "https://knowyourmeme.com/memes/doge"


def test_id_without_url_uses_language_name_and_source_work():
    a = Entity(name="孔明", source_work="三国演义", language="zh")
    assert a.id == make_entity_id("孔明", "三国演义", "zh")
    assert a.id != Entity(name="孔明", source_work="三国志", language="zh").id
    assert a.id == Entity(name=" 孔明 ", source_work="三国演义", language="ZH").id


@pytest.mark.parametrize(
    ("record", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": "   "}, "name"),
        ({"name": "x", "aliases": "a,b"}, "aliases"),
        ({"name": "x", "aliases": [1, 2]}, "aliases.0"),
        ({"name": "x", "sources": [{"site": "kym", "url": "ftp://x"}]}, "sources.0.url"),
        ({"name": "x", "language": "not a language"}, "language"),
        ({"name": "x", "unknown": 1}, "unknown"),
        ({"name": "x" * 201}, "name"),
    ],
)
def test_validation_errors_name_the_field(record, field):
    with pytest.raises(ValidationError) as err:
        Entity.model_validate(record)
    locs = {".".join(str(p) for p in e["loc"]) for e in err.value.errors()}
    assert field in locs


def test_release_record_imports_as_is():
    rec = {
        "name": "诸葛亮",
        "aliases": ["孔明", "卧龙"],
        "source": "三国演义",
        "description": "蜀汉丞相",
        "cultural_usage": "智慧的化身",
        "visual_desc": "羽扇纶巾",
        "meme_ids": [12, "a7"],
    }
    e = Entity.from_release(rec)
    assert e.source_work == "三国演义" and e.language == "zh" and e.meme_ids == ["12", "a7"]
    assert e.embedding_text() == "诸葛亮 | 孔明, 卧龙 | 三国演义 | 蜀汉丞相 | 羽扇纶巾 | 智慧的化身"


def test_merge_unites_aliases_sources_and_fills_empty_fields():
    a = Entity(name="Doge", aliases=["Shiba"], language="en", sources=[{"site": "knowyourmeme", "url": "https://knowyourmeme.com/memes/doge"}])
    b = Entity(
        name="神烦狗",
        aliases=["doge"],
        description="A Shiba Inu meme.",
        language="zh",
        sources=[
            {"site": "moegirl", "url": "https://zh.moegirl.org.cn/神烦狗"},
            {"site": "knowyourmeme", "url": "https://knowyourmeme.com/memes/doge/"},
        ],
    )
    m = a.merged_with(b)
    assert m.id == a.id and m.name == "Doge"
    assert m.aliases == ["Shiba", "神烦狗"]
    assert m.description == "A Shiba Inu meme."
    assert [s.site for s in m.sources] == ["knowyourmeme", "moegirl"]


def test_route_texts_cover_every_route():
    e = Entity(name="Doge", aliases=["神烦狗"], source_work="KYM", visual_desc="shiba", cultural_usage="wow", language="en")
    texts = e.route_texts()
    assert set(texts) == {"full", "identity", "visual", "usage"}
    assert "神烦狗" in texts["identity"] and "shiba" in texts["visual"] and "wow" in texts["usage"]


def test_route_texts_leave_empty_routes_empty():
    """A name-only record has nothing to say on the visual and usage routes: no text there, so no vector."""
    e = Entity(name="米拉", source_work="空洞骑士", language="zh")
    texts = e.route_texts()
    assert texts["identity"] == "米拉 | 空洞骑士"
    assert texts["visual"] == "" and texts["usage"] == ""
    rich = Entity(name="Doge", visual_desc="A Shiba Inu.", description="A dog.", cultural_usage="wow", language="en")
    assert rich.route_texts()["visual"] == "A Shiba Inu. | A dog." and rich.route_texts()["usage"] == "Doge | wow"


def test_a_description_alone_is_no_visual_description():
    """What an entity is (a Moegirl character's "《work》中的角色", shared by hundreds) is not what it looks like:
    without a visual description the entity has no visual text, so no visual vector."""
    e = Entity(name="瑞凤", description="《碧蓝航线》中的角色", language="zh")
    assert e.route_texts()["visual"] == ""
    assert Entity(name="瑞凤", visual_desc="银发", language="zh").route_texts()["visual"] == "银发"
