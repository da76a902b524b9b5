"""The dump readers: real shapes (skip-if-absent) and small self-made dumps with the bad input real dumps hold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from culturebase.entity import MAX_NAME_CHARS, Entity
from culturebase.importers import DumpError, detect_format, open_dump
from culturebase.importers.moegirl import parse_infobox, split_title

REAL = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "real"


def real(sub: str) -> Path:
    path = (REAL / sub).resolve()
    if not path.exists():
        pytest.skip(f"real data {sub} not present")
    return path


def entries(path: Path, fmt: str | None = None) -> list:
    return list(open_dump(path, fmt)[1])


def kym_entry(title: str = "Doge", **extra) -> dict:
    entry = {
        "title": title,
        "url": f"https://knowyourmeme.com/memes/{title.lower().replace(' ', '-')}",
        "category": "Meme",
        "template_image_url": "https://i.kym-cdn.com/entries/icons/original/000/013/564/doge.jpg",
        "details": {"status": "Confirmed", "year": "2013", "origin": "Tumblr", "tags": ["shiba", "dog"]},
        "content": {
            "about": {"text": ["<b>Doge</b> is a Shiba Inu &amp; its inner monologue.[1]", "", "  "], "links": [["Shiba", "https://x"]]},
            "origin": {"text": ["Kabosu photographed in 2010."], "links": []},
            "spread": {"text": ["Spread on Reddit."], "on tumblr": {"text": ["Tumblr posts.", ""]}},
        },
        "search_keywords": ["doge", "such wow"],
        "added": 1380000000,
    }
    entry.update(extra)
    return entry


def test_imkg_shape_maps_title_keywords_origin_and_sections(tmp_path):
    path = tmp_path / "kym.json"
    path.write_text(json.dumps([kym_entry()]), "utf-8")
    assert detect_format(path) == "kym-imkg"
    (e,) = entries(path)
    rec = e.record
    assert rec["name"] == "Doge" and rec["aliases"] == []  # search keywords are tags, never aliases
    assert {"doge", "such wow"} <= set(rec["tags"])
    assert rec["description"] == "Doge is a Shiba Inu & its inner monologue."  # HTML, entity, citation and empty strings gone
    assert rec["source_work"] == ""  # details.origin (a site) is not a source work
    assert rec["cultural_usage"].startswith("Origin: Tumblr, 2013.") and "On tumblr:\n\nTumblr posts." in rec["cultural_usage"]
    assert "Meme" in rec["tags"] and "origin: Tumblr" in rec["tags"]
    assert rec["sources"] == [{"site": "knowyourmeme", "url": "https://knowyourmeme.com/memes/doge"}]
    assert e.category == "Meme" and e.same_as is None
    Entity.model_validate({k: v for k, v in rec.items() if k != "image"})


def test_bad_entries_are_named_and_the_rest_read(tmp_path):
    long_title = "x" * (MAX_NAME_CHARS + 1)
    dump = [
        kym_entry("Good One"),
        {"url": "https://knowyourmeme.com/memes/none", "category": "Meme"},  # no title
        kym_entry("<i> </i>"),  # a title that is only HTML
        kym_entry(long_title),
        kym_entry("Year Empty", details={"year": "", "origin": "Unknown"}),
        kym_entry("Year 9999", details={"year": "9999"}),
        "not an object",
        kym_entry("Null Content", content=None),
    ]
    path = tmp_path / "dump.json"
    path.write_text(json.dumps(dump), "utf-8")
    got = entries(path, "kym-imkg")
    errors = {e.where: e.error for e in got if e.error}
    assert set(errors) == {2, 3, 4, 7}
    assert "field 'title'" in errors[2] and "field 'title'" in errors[3]
    assert f"over the limit of {MAX_NAME_CHARS}" in errors[4] and "field 'entry'" in errors[7]
    by_name = {e.record["name"]: e for e in got if e.record}
    assert "Origin" not in by_name["Year Empty"].record["cultural_usage"] and not by_name["Year Empty"].notes
    assert by_name["Year 9999"].notes == [("details.year", "9999 is not a plausible year, left out")]
    assert by_name["Null Content"].record["description"] == ""


def test_concatenated_arrays_and_a_cut_dump(tmp_path):
    path = tmp_path / "memes.json"
    first = json.dumps([kym_entry("A", ld=[], parent="https://knowyourmeme.com/memes/advice-animals")], indent=0)
    second = json.dumps([kym_entry("B"), kym_entry("C")], indent=0)
    path.write_text(first + second, "utf-8")
    assert detect_format(path) == "kym-2023"
    got = entries(path)
    assert [e.record["name"] for e in got] == ["A", "B", "C"]
    assert got[0].record["source_work"] == "Advice Animals"
    cut = tmp_path / "cut.json"
    text = path.read_text("utf-8")
    cut.write_text(text[: text.index('"C"') + 10], "utf-8")
    got = entries(cut, "kym-2023")
    assert [e.record["name"] for e in got[:-1]] == ["A", "B"]
    assert got[-1].stopped and "entry 3" in got[-1].error and "the 2 entries before it were read" in got[-1].error


def test_unknown_shape_names_the_shapes_we_read(tmp_path):
    path = tmp_path / "odd.json"
    path.write_text(json.dumps([{"foo": 1, "bar": 2}]), "utf-8")
    with pytest.raises(DumpError) as err:
        detect_format(path)
    message = str(err.value)
    assert "keys bar, foo" in message
    for fmt in ("jsonl", "release", "kym-imkg", "kym-2023", "kymkb", "moegirl"):
        assert fmt in message
    text = tmp_path / "notes.txt"
    text.write_text("hello", "utf-8")
    with pytest.raises(DumpError, match="not JSON"):
        detect_format(text)


def test_moegirl_titles_regions_voice_actors_and_extra_info(tmp_path):
    (tmp_path / "char2subject.json").write_text(json.dumps({
        "米拉(空洞骑士)": ["澳大利亚作品", "空洞骑士"],
        "碧蓝航线:瑞凤": ["中国作品", "碧蓝航线"],
        "泉此方": ["日本作品", "幸运星", "幸运星OVA"],
        "小红(萌属性)": ["日本作品", "某作品"],
    }, ensure_ascii=False), "utf-8")
    (tmp_path / "char2cv.json").write_text(json.dumps({"泉此方": ["平野绫", "广桥凉"]}, ensure_ascii=False), "utf-8")
    (tmp_path / "subject_index.json").write_text(json.dumps(["空洞骑士", "碧蓝航线", "幸运星", "某作品"], ensure_ascii=False), "utf-8")
    wikitext = "{{人物信息\n|本名=泉此方\n|别号=小此、[[宅方]]、次方<ref>x</ref>\n|萌点={{萌点|呆毛|长直|Cosplay(萌属性),Cosplay}}\n|身高=143\n}}"
    (tmp_path / "extra_info.json").write_text(json.dumps({"泉此方": [wikitext]}, ensure_ascii=False), "utf-8")
    assert detect_format(tmp_path) == "moegirl"
    got = {e.record["name"]: e for e in entries(tmp_path)}
    mira = got["米拉"].record
    assert mira["source_work"] == "空洞骑士" and mira["aliases"] == [] and "澳大利亚作品" in mira["tags"]
    assert got["米拉"].category == "澳大利亚作品"
    assert got["瑞凤"].record["source_work"] == "碧蓝航线"
    konata = got["泉此方"].record
    assert konata["source_work"] == "幸运星" and konata["aliases"] == ["小此", "宅方", "次方"]
    assert konata["description"] == "声优：平野绫、广桥凉；出自：幸运星OVA"  # voice actors are traits, not aliases
    assert konata["visual_desc"] == "萌点：呆毛、长直、Cosplay"
    assert got["小红"].record["aliases"] == ["小红(萌属性)"]  # a disambiguator that is not the work stays as an alias
    for e in got.values():
        Entity.model_validate(e.record)


def test_moegirl_helpers():
    assert split_title("米拉（空洞骑士）", set()) == ("米拉", "空洞骑士")
    assert split_title("Re:从零开始", {"碧蓝航线"}) == ("Re:从零开始", "")
    box = "{{人物信息\n|本名={{jpn|泉|いずみ|こなた}}\n|别名=甲,乙<br/>丁\n|萌点={{萌点|丙}}\n}}"
    assert parse_infobox(box) == {"别名": ["甲", "乙", "丁"], "萌点": ["丙"]}  # a 本名 that is only a template gives nothing


def test_kymkb_template_info_and_metadata_folders(tmp_path):
    root = tmp_path / "kymkb"
    (root / "jsons").mkdir(parents=True)
    info = {"url": "https://i.kym-cdn.com/a.jpg", "title": "Drake Hotline Bling", "about": "Drake dislikes, then likes.",
            "origin": "Know Your Meme", "pic_title": "pictures/1_Drake.jpg", "other_meta": {"twitter:title": "Drakeposting"}}
    lines = [{"Drake Hotline Bling": {"title": "Drake Hotline Bling", "original_info": [info], "out_paths": []}},
             {"No Title": {"title": "", "original_info": [], "out_paths": []}}]
    (root / "jsons" / "template_info.json").write_text("\n".join(json.dumps(x) for x in lines) + "\n{broken", "utf-8")
    assert detect_format(root) == "kymkb"
    got = entries(root)
    rec = got[0].record
    assert rec["name"] == "Drake Hotline Bling" and rec["aliases"] == ["Drakeposting"]
    assert rec["description"] == "Drake dislikes, then likes." and rec["image"] == "https://i.kym-cdn.com/a.jpg"
    assert "Know Your Meme" not in json.dumps(rec)  # og:site_name is the site, not an origin
    assert "field 'title'" in got[1].error and got[2].where == 3 and "invalid JSON" in got[2].error
    folders = tmp_path / "folders"
    (folders / "distracted").mkdir(parents=True)
    (folders / "distracted" / "metadata.json").write_text(json.dumps(
        {"Title": "Distracted Boyfriend", "About": ["A stock photo."], "Origin": {"text": ["Antonio Guillem, 2015."]}, "Spread": "Everywhere."}
    ), "utf-8")
    assert detect_format(folders) == "kymkb"
    (e,) = entries(folders)
    assert e.record["cultural_usage"] == "Antonio Guillem, 2015.\n\nEverywhere." and e.record["description"] == "A stock photo."


def test_real_imkg_sample_reads_every_entry():
    path = real("kym-imkg/scraper_sample_1.json")
    assert detect_format(path) == "kym-imkg"
    got = entries(path)
    assert len(got) == 10 and all(e.record for e in got)
    origins = {e.record["name"]: e.record for e in got}
    relevant = origins["This is Relevant To My Interests"]
    assert relevant["source_work"] == "" and "origin: I Can Has Cheezburger" in relevant["tags"]
    for e in got:
        Entity.model_validate({k: v for k, v in e.record.items() if k != "image"})


def test_real_2023_export_with_two_arrays_reads_all_39():
    path = real("kym-2023/memes.json")
    with pytest.raises(json.JSONDecodeError):
        json.loads(path.read_text("utf-8"))
    assert detect_format(path) == "kym-2023"
    got = entries(path)
    assert len(got) == 39 and all(e.record for e in got)
    interesting = next(e.record for e in got if e.record["name"] == "The Most Interesting Man in the World")
    assert interesting["source_work"] == "Advice Animals" and "Retirement:" in interesting["cultural_usage"]
    urls = [e.record["sources"][0]["url"] for e in got]
    assert len(set(urls)) < 39  # the second run repeats pages: joined on import by their URL (same_url)


def test_real_moegirl_maps_stream_every_character():
    folder = real("moegirl")
    count = 0
    regions_as_work = 0
    for e in open_dump(folder)[1]:
        count += 1
        if e.record and e.record["source_work"].endswith("作品") and e.record["source_work"] in {"日本作品", "中国作品"}:
            regions_as_work += 1
    assert count == 39_619 and regions_as_work == 0
