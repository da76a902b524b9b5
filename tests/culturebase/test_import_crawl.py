"""The `crawl` format: rows in the exact shape our spiders' PageItem is exported in (`scrapy crawl -o`),
mapped by the crawl pipeline's own item_to_entity; bad rows rejected with their line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from culturebase.importers import DumpError, detect_format, open_dump
from culturebase.importers.crawl import item_to_entity


def page_row(name: str, slug: str, **extra) -> dict:
    """A KnowYourMeme page as `scrapy crawl knowyourmeme -o items.jsonl` writes it (every PageItem field the spider sets)."""
    url = f"https://knowyourmeme.com/memes/{slug}"
    row = {
        "site": "knowyourmeme", "url": url, "page_key": url, "name": name, "aliases": [name, f"{name} meme"],
        "source_work": "", "description": f"{name} is a meme about something people share a lot.", "visual_desc": "",
        "cultural_usage": "Origin: 4chan, 2010.", "language": "en", "tags": ["image macro", "origin:4chan"],
        "title": name, "page_text": f"{name}\nAbout\n...", "image": f"https://i.kym-cdn.com/entries/icons/original/{slug}.jpg",
        "status": "Confirmed", "details": {"Status": "Confirmed"}, "etag": '"abc"', "last_modified": "Wed, 05 Jun 2024 10:00:00 GMT",
        "entity": {"sources": [{"site": "knowyourmeme", "url": url, "retrieved_at": "2024-06-05T10:00:00+00:00"}]},
    }
    row.update(extra)
    return row


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in rows) + "\n", "utf-8")
    return path


def test_crawl_rows_are_detected_and_mapped_like_the_pipeline(tmp_path):
    rows = [page_row("Doge", "doge"), page_row("Rickroll", "rickroll")]
    path = write_jsonl(tmp_path / "items.jsonl", rows)
    assert detect_format(path) == "crawl"
    fmt, entries = open_dump(path)
    got = list(entries)
    assert fmt == "crawl" and [e.where for e in got] == [1, 2]
    doge = got[0].record
    expected = item_to_entity(rows[0], retrieved_at=1717581600.0).model_dump(mode="json")
    drop = ("image", "updated_at")
    assert {k: v for k, v in doge.items() if k not in drop} == {k: v for k, v in expected.items() if k not in drop}  # the pipeline's mapping
    assert doge["sources"][0]["retrieved_at"].startswith("2024-06-05T10:00:00")
    assert doge["image"] == "https://i.kym-cdn.com/entries/icons/original/doge.jpg"
    assert got[0].category == "knowyourmeme"


def test_a_json_array_export_reads_by_index(tmp_path):
    path = tmp_path / "items.json"
    path.write_text(json.dumps([page_row("Doge", "doge"), page_row("Pepe", "pepe")]), "utf-8")
    assert detect_format(path) == "crawl"
    assert [e.record["name"] for e in open_dump(path)[1]] == ["Doge", "Pepe"]


def test_bad_rows_are_rejected_with_line_and_field(tmp_path):
    rows = [
        page_row("Doge", "doge"),
        page_row("", "no-name"),
        page_row("Thin", "thin", description="short", cultural_usage=""),
        page_row("Listy", "listy", aliases="not a list"),
        {**page_row("Numbered", "numbered"), "name": 12},
        page_row("Dropped", "dropped", drop_reason="blocked page"),
        "[1, 2]",
        "{not json",
        page_row("Rickroll", "rickroll", language="x" * 40),
    ]
    path = write_jsonl(tmp_path / "items.jsonl", rows)
    errors = {e.where: e.error for e in open_dump(path, "crawl")[1] if e.error}
    assert errors[2] == "field 'name': missing or empty"
    assert errors[3].startswith("field 'description': no content") and "under 20 characters" in errors[3]
    assert errors[4] == "field 'aliases': expected a list of strings, got str"
    assert errors[5] == "field 'name': expected a string, got int"
    assert errors[6] == "field 'drop_reason': the spider dropped this page: blocked page"
    assert errors[7] == "row 7 is list, expected a JSON object (a crawled page)"
    assert errors[8].startswith("invalid JSON at column")
    assert errors[9].startswith("field 'language'")
    assert 1 not in errors


def test_a_cut_array_stops_where_it_was_cut(tmp_path):
    path = tmp_path / "items.json"
    text = json.dumps([page_row("Doge", "doge"), page_row("Pepe", "pepe")])
    path.write_text(text[: len(text) - 40], "utf-8")
    got = list(open_dump(path, "crawl")[1])
    assert got[0].record["name"] == "Doge" and got[-1].stopped and "entry 2" in got[-1].error


def test_an_unknown_shape_names_the_crawl_format(tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", [{"foo": 1}])
    with pytest.raises(DumpError, match="crawl: our spiders' feed export"):
        detect_format(path)
