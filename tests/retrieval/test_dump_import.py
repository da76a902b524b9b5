"""Streaming dump imports into a real embedded CultureBase, embedded by the remote backend against a
local fake /v1/embeddings server: the report by reason, merges across chunks, the embedding step
(distinct texts only, no vector for an empty route, no `full` vector), model mismatch, reindex, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from culturebase.entity import make_entity_id
from culturebase.identity import TWO_PAGES
from culturebase.settings import Settings
from culturebase.store import EmbedderMismatchError
from retrieval.knowledge_base import KnowledgeBase
from tests.culturebase.test_importers import kym_entry
from tests.fakes.embeddings_server import FakeEmbeddingsServer


@pytest.fixture()
def server():
    with FakeEmbeddingsServer(dim=16) as s:
        yield s


def settings_for(tmp_path: Path, server: FakeEmbeddingsServer, **extra) -> Settings:
    return Settings(
        kb_path=tmp_path / "kb", data_dir=tmp_path / "data", embedder="remote", embedder_urls=[server.base_url],
        embedder_remote_model=server.model, embedder_batch_size=8, **extra,
    )


def write_dump(path: Path, entries: list) -> Path:
    path.write_text(json.dumps(entries), "utf-8")
    return path


def test_kym_dump_report_merges_skips_and_rejects(tmp_path, server):
    dump = [
        kym_entry("Doge"),
        kym_entry("Pepe", category="Subculture"),
        {"category": "Meme"},  # no title
        kym_entry("Trollface"),
        kym_entry("Doge", search_keywords=["shibe"]),  # the same page again (a second scrapy run), in a later chunk
        kym_entry("Trollface"),  # same page again
        kym_entry("Long", details={"year": 9999}),
        kym_entry("Doge", url="https://knowyourmeme.com/memes/doge-2"),  # another page with the same title: another entity
    ]
    path = write_dump(tmp_path / "kym.json", dump)
    with KnowledgeBase.open(settings_for(tmp_path, server)) as kb:
        totals: list = []
        report = kb.import_dump(path, categories=["meme"], chunk=2, total=totals.append)
        assert totals == [8]
        assert (report.format, report.read, report.stored, report.merged_duplicates) == ("kym-imkg", 8, 4, 2)
        assert report.joins.merged_by_rule == {"same_url": 2} and report.joins.kept_apart == 1
        kept = [e.to_dict() for e in report.joins.events if e.kind == "kept_apart"]
        assert kept == [{
            "kind": "kept_apart", "rule": "two_pages", "id": make_entity_id("x", url="https://knowyourmeme.com/memes/doge-2"),
            "name": "Doge", "source": "https://knowyourmeme.com/memes/doge-2",
            "into_id": make_entity_id("x", url="https://knowyourmeme.com/memes/doge"), "into_name": "Doge",
            "into_source": "https://knowyourmeme.com/memes/doge", "detail": TWO_PAGES,
        }]
        assert report.skipped_category == {"Subculture": 1}
        assert [(r.line, r.reason) for r in report.rejected] == [(3, "field 'title': missing or empty: an entry needs a title")]
        assert [n.to_dict() for n in report.notes] == [{"line": 7, "field": "details.year", "reason": "9999 is not a plausible year, left out"}]
        assert report.images_not_fetched == 6 and report.stopped is None and not report.complete
        assert kb.store.count() == 4
        doge = kb.store.get(make_entity_id("x", url="https://knowyourmeme.com/memes/doge"))
        assert {"such wow", "shibe"} <= set(doge.tags) and len(doge.sources) == 1  # united with the stored copy
        assert doge.aliases == [] and doge.constituents == []  # one page read twice is one record, not a join


def test_cut_dump_keeps_what_came_before(tmp_path, server):
    text = json.dumps([kym_entry("A"), kym_entry("B"), kym_entry("C")])
    path = tmp_path / "cut.json"
    path.write_text(text[: text.index('"C"') + 5], "utf-8")
    with KnowledgeBase.open(settings_for(tmp_path, server)) as kb:
        report = kb.import_dump(path)
        assert report.stored == 2 and kb.store.count() == 2
        assert "entry 3" in report.stopped and not report.complete


def test_embedding_step_embeds_each_distinct_text_once_and_no_empty_route(tmp_path, server):
    folder = tmp_path / "moegirl"
    folder.mkdir()
    chars = {f"角色{i}": ["日本作品", "作品甲" if i % 2 else "作品乙"] for i in range(10)}
    chars["角色0(作品乙)"] = ["日本作品", "作品乙"]  # the same name and work as 角色0: the same identity text
    (folder / "char2subject.json").write_text(json.dumps(chars, ensure_ascii=False), "utf-8")
    (folder / "char2cv.json").write_text(json.dumps({"角色1": ["声优甲"]}, ensure_ascii=False), "utf-8")
    with KnowledgeBase.open(settings_for(tmp_path, server)) as kb:
        report = kb.import_dump(folder)
        assert report.stored == 11
        texts = [t for r in server.requests for t in r["body"]["input"] if t != "dimension probe"]
        assert len(texts) == len(set(texts))  # never the same text twice
        # a description alone ("声优：声优甲") is no visual description: not embedded, no visual vector
        assert sorted(texts) == sorted({f"角色{i} | {'作品甲' if i % 2 else '作品乙'}" for i in range(10)})
        spec = kb.store.entities.spec
        assert "full" not in spec.dense and spec.dense == ("identity", "visual", "usage")
        q = np.ones(16, dtype=np.float32)
        assert kb.store.search("visual", q, limit=20) == []
        assert kb.store.search("usage", q, limit=20) == []  # no cultural usage: no usage vector
        assert len(kb.store.search("identity", q, limit=20)) == 11


def test_a_text_shared_across_chunks_is_embedded_once(tmp_path, server):
    """Route texts repeat across the chunks of an import (a work's shared visual description): each
    distinct text reaches the embedder once, and every entity still gets its vector."""
    rows = [
        {"name": f"char {i}", "visual_desc": "a girl in a sailor uniform", "cultural_usage": "said in every episode", "language": "en"}
        for i in range(7)
    ]
    path = tmp_path / "ours.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    with KnowledgeBase.open(settings_for(tmp_path, server)) as kb:
        report = kb.import_dump(path, chunk=2)
        assert report.stored == 7
        texts = [t for r in server.requests for t in r["body"]["input"] if t != "dimension probe"]
        assert texts.count("a girl in a sailor uniform") == 1
        assert len(texts) == len(set(texts)) == 7 + 1 + 7  # identity and usage per entity, one visual text
        q = np.ones(16, dtype=np.float32)
        assert len(kb.store.search("visual", q, limit=20)) == 7


def test_a_kb_refuses_another_model(tmp_path, server):
    path = write_dump(tmp_path / "kym.json", [kym_entry("Doge")])
    with KnowledgeBase.open(settings_for(tmp_path, server)) as kb:
        kb.import_dump(path)
    with FakeEmbeddingsServer(dim=16, model="other/model") as other:
        with pytest.raises(EmbedderMismatchError, match="other/model"):
            KnowledgeBase.open(settings_for(tmp_path, other))


def test_reindex_migrates_a_kb_with_the_full_vector(tmp_path, server):
    path = write_dump(tmp_path / "kym.json", [kym_entry("Doge"), kym_entry("Pepe")])
    old = settings_for(tmp_path, server, entity_full_vector=True)
    with KnowledgeBase.open(old) as kb:
        kb.import_dump(path)
        assert "full" in kb.store.entities.spec.dense
    new = settings_for(tmp_path, server)
    emb = KnowledgeBase.open(new).embedder
    result = KnowledgeBase.reindex(new, emb)
    assert result["entities"] == 2 and result["reused_vectors"]
    with KnowledgeBase.open(new) as kb:
        assert kb.store.entities.spec.dense == ("identity", "visual", "usage") and kb.store.count() == 2


def test_cli_import_with_format_category_and_exit_3(tmp_path, server):
    from culturebase.settings import get_settings
    from services.cli import app

    path = write_dump(tmp_path / "kym.json", [kym_entry("Doge"), kym_entry("Pepe", category="Person"), {"title": ""}])
    env = {"KAR_KB_PATH": str(tmp_path / "kb"), "KAR_DATA_DIR": str(tmp_path / "data"), "KAR_EMBEDDER": "remote",
           "KAR_EMBEDDER_URLS": server.base_url, "KAR_EMBEDDER_REMOTE_MODEL": server.model}
    get_settings.cache_clear()
    res = CliRunner().invoke(app, ["kb", "import", str(path), "--format", "kym-imkg", "--category", "Meme", "--json"], env=env)
    assert res.exit_code == 3, res.output
    report = json.loads(res.stdout)
    assert (report["stored"], report["skipped_category"], report["total_entities"]) == (1, 1, 1)
    assert report["rejected"][0]["line"] == 3
    get_settings.cache_clear()
    res = CliRunner().invoke(app, ["kb", "import", str(path), "--format", "moegirl"], env=env)  # a file in the wrong shape is bad input: exit 2
    assert res.exit_code == 2 and "not a Moegirlpedia map folder" in res.output
    get_settings.cache_clear()


def test_fetch_images_goes_through_the_image_checks_and_refuses_private_addresses(tmp_path, server):
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    from retrieval.images.importing import http_fetcher
    from tests.support.images import template_image, to_bytes

    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "t.png").write_bytes(to_bytes(template_image(3)))
    (tmp_path / "www" / "page.html").write_text("<html>not an image</html>", "utf-8")

    class Quiet(SimpleHTTPRequestHandler):
        def __init__(self, *a, **k):
            super().__init__(*a, directory=str(tmp_path / "www"), **k)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        path = write_dump(tmp_path / "kym.json", [
            kym_entry("With Image", template_image_url=f"{base}/t.png"),
            kym_entry("Html Image", template_image_url=f"{base}/page.html"),
        ])
        with KnowledgeBase.open(settings_for(tmp_path, server)) as kb:
            report = kb.import_dump(path, fetch_images=True, fetcher=http_fetcher(10_000_000))
            assert report.stored == 2 and report.images == 1 and report.images_not_fetched == 0
            assert [(p.line, p.reason.split(":")[0]) for p in report.image_problems] == [(2, "html")]
            (e,) = [x for x in kb.store.find_by_name(["With Image"]) if x.name == "With Image"]
            assert e.images[0].url == f"{base}/t.png" and kb.image_store.exists(e.images[0])
            # a published dump's URL that resolves to a loopback address is refused (the default fetcher for dumps)
            again = kb.import_dump(path, fetch_images=True)
            assert {p.reason.split(":")[0] for p in again.image_problems} == {"forbidden_address"}
            assert again.stored == 2
            (kept,) = [x for x in kb.store.find_by_name(["With Image"]) if x.name == "With Image"]
            assert kept.images == e.images  # a re-import that fetched nothing keeps the image fetched before
    finally:
        httpd.shutdown()


def test_cli_imports_a_zipped_moegirl_folder_and_dry_runs(tmp_path, server):
    import zipfile

    from culturebase.settings import get_settings
    from services.cli import app

    maps = {"char2subject.json": {"米拉(空洞骑士)": ["澳大利亚作品", "空洞骑士"], "泉此方": ["日本作品", "幸运星"]},
            "char2cv.json": {"泉此方": ["平野绫"]}, "subject_index.json": ["空洞骑士", "幸运星"]}
    archive = tmp_path / "moegirl.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for name, value in maps.items():
            zf.writestr(f"moegirl/{name}", json.dumps(value, ensure_ascii=False))
    env = {"KAR_KB_PATH": str(tmp_path / "kb"), "KAR_DATA_DIR": str(tmp_path / "data"), "KAR_EMBEDDER": "remote",
           "KAR_EMBEDDER_URLS": server.base_url, "KAR_EMBEDDER_REMOTE_MODEL": server.model}
    get_settings.cache_clear()
    res = CliRunner().invoke(app, ["kb", "import", str(archive), "--dry-run", "--json"], env=env)
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert (report["format"], report["stored"], report["dry_run"], report["total_entities"], report["path"]) == ("moegirl", 2, True, 0, str(archive))
    get_settings.cache_clear()
    res = CliRunner().invoke(app, ["kb", "import", str(archive)], env=env)
    assert res.exit_code == 0, res.output
    assert "moegirl: read 2 entries" in res.output and "stored 2" in res.output
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("../../escape.json", "{}")
    get_settings.cache_clear()
    res = CliRunner().invoke(app, ["kb", "import", str(bad)], env=env)
    assert res.exit_code == 2 and "'../../escape.json'" in res.output and "outside" in res.output
    get_settings.cache_clear()


def test_real_dumps_join_only_what_the_rules_join():
    """The published samples read through the import (validate and join, nothing stored): the 2023 export's
    second array repeats five pages (joined by their URL); IMKG's entries and Moegirlpedia's 39,619
    characters are all distinct pages, and Moegirl's same-named characters of one work stay apart."""
    from retrieval.dump_import import read_dump
    from tests.culturebase.test_importers import real

    entities, report = read_dump(real("kym-2023/memes.json"))
    assert report.joins.merged_by_rule == {"same_url": 5} and len(entities) == 34 and report.joins.kept_apart == 0
    assert all(e.to_dict()["source"] == e.to_dict()["into_source"] for e in report.joins.events)  # the same page twice
    for sample in ("kym-imkg/scraper_sample_1.json", "kym-imkg/scraper_sample_2.json"):
        entities, report = read_dump(real(sample))
        assert report.joins.merged == 0 and len(entities) == report.read == 10
        assert all(e.aliases == [] for e in entities)  # search keywords are tags now
        assert any(t.startswith("type: ") for e in entities for t in e.tags)  # IMKG's type links, named
    entities, report = read_dump(real("moegirl"))
    assert report.joins.merged == 0 and len(entities) == report.read == 39_619
    kept = {(e.name, e.source) for e in report.joins.events if e.kind == "kept_apart"}
    assert report.joins.kept_apart == len(report.joins.events) and all(e.rule == "two_pages" for e in report.joins.events)
    assert any(name == "地下城与勇士:格斗家" for name, _ in kept)  # its 女 and 男 pages: two characters


def test_an_import_repairs_what_an_older_knowledge_base_joined(tmp_path, server):
    """A stored entity the old alias-key rule made (Jim Halpert's template folded into Schrute Facts, no record
    of the join): importing the two templates' crawl rows takes Jim's page back out and stores it apart."""
    from culturebase.entity import Entity, Source

    def row(tid: str, name: str, keywords: list[str]) -> dict:
        return {"site": "memegen", "url": f"https://api.memegen.link/templates/{tid}", "page_key": tid, "name": name,
                "description": f"The memegen template {name}.", "language": "en", "tags": keywords, "image_urls": []}

    dwight, jim = row("dwight", "Schrute Facts", ["The Office"]), row("jim", "Jim Halpert Pointing to Whiteboard", ["The Office"])
    old = Entity(name="Schrute Facts", aliases=["dwight", "The Office"], description=dwight["description"], language="en",
                 sources=[Source(site="memegen", url=dwight["url"])])
    old = old.merged_with(Entity(name=jim["name"], aliases=["jim", "The Office"], description=jim["description"], language="en",
                                 sources=[Source(site="memegen", url=jim["url"])]))
    assert jim["name"] in old.aliases and len(old.sources) == 2
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps(dwight) + "\n" + json.dumps(jim) + "\n", "utf-8")
    with KnowledgeBase.open(settings_for(tmp_path, server)) as kb:
        kb.add([old])
        report = kb.import_dump(path, fmt="crawl")
        assert report.joins.merged == 0 and report.joins.split >= 1
        assert any(e.kind == "split" and e.source == jim["url"] for e in report.joins.events)
        entities = {e.name: e for e in kb.store.iter_entities()}
        assert set(entities) == {"Schrute Facts", "Jim Halpert Pointing to Whiteboard"} and kb.store.count() == 2
        assert entities["Schrute Facts"].aliases == [] and [s.url for s in entities["Schrute Facts"].sources] == [dwight["url"]]
        assert "The Office" in entities["Jim Halpert Pointing to Whiteboard"].tags
