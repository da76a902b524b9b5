"""The diagnostics' parts on their own: gold entities and knowledge units from an item, the evidence read
off a trace, the lexical proxy, the knowledge judge's reply parsing, the join with the judgments."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from agents.pipeline.evidence import format_evidence
from eval.diagnostics import KBNames, gold_of, knowledge_units, named_entities, proxy_decide
from eval.diagnostics.diagnose import item_row, summarize
from eval.diagnostics.joined import damage_cell, join, repair_cell
from eval.diagnostics.knowledge import parse_reply
from eval.diagnostics.traces import evidence_pieces, evidence_status, parse_evidence_block
from eval.metrics.vikr import VikrMatrix
from retrieval.websearch import SearchResult


class FakeStore:
    """find_by_name / iter_entities over a list of entities (the store's own lookups are tested in culturebase)."""

    def __init__(self, *entities):
        self.entities = list(entities)

    def find_by_name(self, names):
        keys = {n.casefold() for n in names}
        return [e for e in self.entities if {e.name.casefold(), *(a.casefold() for a in e.aliases)} & keys]

    def iter_entities(self):
        return iter(self.entities)


def entity(name, *aliases, id=None):
    return SimpleNamespace(name=name, aliases=list(aliases), id=id or f"id-{name}")


def item(identity, knowledge, id="x"):
    return SimpleNamespace(id=id, identity=identity, knowledge=knowledge)


def test_gold_entities_from_the_release_layer_and_from_free_text():
    assert named_entities({"entities": [{"eid": "E1", "name": "诸葛亮", "aliases": ["孔明"]}, {"eid": "E2", "name": "王朗"}]}) == [
        ("诸葛亮", ["孔明"]), ("王朗", [])]
    kb = KBNames(FakeStore(entity("诸葛亮", "孔明"), entity("Doge", "Kabosu")))
    gold, in_kb = gold_of(item({"entities": [{"name": "孔明"}, {"name": "王朗"}]}, {}), kb)
    assert gold.gold_source == "identity" and in_kb is False  # 王朗 is not in the KB
    assert [e.kb_id for e in gold.entities] == ["id-诸葛亮", None] and "诸葛亮" in gold.keys
    gold, in_kb = gold_of(item("Doge, the Shiba Inu meme based on Kabosu.", "x"), kb)
    assert gold.gold_source == "identity_text" and [e.name for e in gold.entities] == ["Doge"] and in_kb is True
    gold, in_kb = gold_of(item("Someone nobody knows.", "x"), kb)
    assert gold.entities == [] and in_kb is None
    gold, in_kb = gold_of(item({"entities": [{"name": "Doge"}]}, "x"), KBNames(None, "no KB"))
    assert in_kb is None and gold.keys == {"doge"}


def test_knowledge_units_of_each_layer_shape():
    assert knowledge_units({"background": ["fact one", "fact two"], "internet_usage": "usage"}) == ["fact one", "fact two", "usage"]
    assert knowledge_units("诸葛亮骂死王朗。后成为鬼畜素材。") == ["诸葛亮骂死王朗。", "后成为鬼畜素材。"]
    assert knowledge_units("Doge is a meme. It started in 2013.") == ["Doge is a meme.", "It started in 2013."]
    assert knowledge_units(None) == [] and knowledge_units(["a fact"]) == ["a fact"]


def test_evidence_block_as_the_pipeline_writes_it_is_read_back_piece_by_piece():
    block = format_evidence([
        ("q1", [SearchResult(title="Doge | KYM", url="https://kym/doge", content="Doge is a Shiba Inu meme.")]),
        ("q2", []),
        ("q3", [SearchResult(title="Weather", url="https://w/1", content="Rain tomorrow."),
                SearchResult(title="12. Not a number", url="https://w/2", content="2. line")]),
    ], 3000).text
    pieces = parse_evidence_block(block)
    assert [(p.title, p.url, p.text) for p in pieces] == [
        ("Doge | KYM", "https://kym/doge", "Doge is a Shiba Inu meme."), ("Weather", "https://w/1", "Rain tomorrow."),
        ("12. Not a number", "https://w/2", "2. line")]
    # a trace listing its pieces (any of url/title/text/content/snippet) is read from the list
    listed = {"evidence": {"text": block, "pieces": [{"url": "u", "title": "t", "content": "c", "reason": "about Doge"}]}}
    assert [(p.title, p.text) for p in evidence_pieces(listed)] == [("t", "c")]


def test_evidence_status_from_the_trace_or_the_manifest():
    assert evidence_status({}, "vanilla") == "n/a"
    assert evidence_status({"models": {"search_backend": "tavily", "evidence": {"backend": "tavily", "available": True}}}, "kar") == "tavily"
    assert evidence_status({"models": {"evidence": {"backend": "local", "available": False}}}, "kar") == "none"
    assert evidence_status({}, "search_cot", {"models": {"search_backend": "local"}}) == "local"
    assert evidence_status({}, "kar") == "unknown"


def test_proxy_is_lexical_containment():
    material = "94版电视剧里诸葛亮阵前骂死王朗 | Doge is a Shiba Inu meme, popular since 2013"
    assert proxy_decide(["诸葛亮阵前骂死王朗", "the Doge meme has been popular since 2013", "Kabosu died in 2024"], material) == [
        True, True, False]
    assert proxy_decide(["anything"], "  ") == [False]


def test_proxy_over_parts_decides_as_over_the_joined_material():
    """The report asks each part of a prompt's material (a KB entry, the evidence block) once and stops a unit
    once decided; that must decide every unit exactly as the token-by-token containment of the joined text."""
    import random
    import unicodedata

    from eval.diagnostics.gold import fold
    from eval.diagnostics.knowledge import Material, Materials, containment
    from eval.diagnostics.params import PARAMS

    words = ["doge", "Doge", "shiba", "inu", "meme", "2013", "kabosu", "诸葛亮", "骂死", "王朗", "鲁迅", "ＤＯＧＥ", "Straße",
             "strasse", "doge-like", "x_doge", "popular", "since", "wow", "such", "the", "a"]
    rng = random.Random(0)
    for _ in range(300):
        parts = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 12))) for _ in range(rng.randint(0, 4))]
        units = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 7))) for _ in range(rng.randint(1, 5))]
        joined = "\n".join(p for p in parts if p)
        expected = [containment(u, Material(joined)) >= PARAMS.proxy_threshold for u in units]
        assert proxy_decide(units, Materials([Material(p) for p in parts if p])) == expected, (parts, units)
        assert proxy_decide(units, joined) == expected
    for text in ("Doge ＤＯＧＥ Straße 诸葛亮", "plain ASCII, Mixed Case\n", ""):
        assert fold(text) == unicodedata.normalize("NFKC", text).casefold()


def test_knowledge_reply_must_decide_every_unit():
    assert parse_reply('{"units": [{"index": 2, "stated": false}, {"index": 1, "stated": true}]}', 2) == [True, False]
    with pytest.raises(ValueError, match=r"missing \[2\]"):
        parse_reply('{"units": [{"index": 1, "stated": true}]}', 2)
    with pytest.raises(ValueError):
        parse_reply("no json here", 1)


def kar_trace(hits, evidence_text=""):
    return {"id": "x", "response": "r", "error": None,
            "trace": {"grounding": {"hits": hits}, "evidence": {"text": evidence_text},
                      "models": {"search_backend": "local", "evidence": {"backend": "local", "available": True}}}}


def test_item_row_and_cells():
    kb = KBNames(FakeStore(entity("Doge", "Kabosu", id="d")))
    it = item({"entities": [{"name": "Doge"}]}, {"k": ["Doge uses broken English phrases"]})
    gold, in_kb = gold_of(it, kb)
    evidence = format_evidence([("q", [SearchResult(title="Kabosu", url="https://a", content="x" * 100),
                                       SearchResult(title="Cats", url="https://b", content="y" * 300)])], 3000).text
    hits = [{"id": "p", "name": "Pepe", "aliases": []}, {"id": "d", "name": "Doge", "aliases": ["Kabosu"],
                                                         "cultural_usage": "broken English phrases: such wow"}]
    row = item_row(it, gold, in_kb, "m/kar", kar_trace(hits, evidence))
    assert row["identity_grounded"] is True and row["gold_rank"] == 2 and row["extra_entities"] == ["Pepe"]
    assert row["knowledge_in_prompt"] == 1.0 and row["evidence_status"] == "local"
    assert row["evidence_off_entity"] == pytest.approx(304 / (106 + 304))
    assert repair_cell(row) == "repair.grounded.knowledge" and damage_cell(row) == "damage.extra_entity"
    vanilla = item_row(it, gold, in_kb, "m/vanilla", {"id": "x", "response": "r", "trace": {}})
    assert vanilla["identity_grounded"] is None and vanilla["knowledge_in_prompt"] == 0.0 and vanilla["evidence_status"] == "n/a"
    assert damage_cell(vanilla) == "damage.neither" and repair_cell(vanilla) == "repair.ungrounded.no_knowledge"
    missing = item_row(it, gold, in_kb, "kar", None)
    assert missing["traced"] is False and summarize([missing], "kar")["counts"]["traced"] == 0


def matrix(ids, success):
    v = np.array([[s] * 4 for s in success], dtype=bool)
    n = len(ids)
    return VikrMatrix(ids=ids, vectors=v, scored=np.ones(n, bool), items_passed=np.full(n, np.nan), items_total=np.full(n, np.nan),
                      languages=[None] * n, domains=[None] * n, reasons=[None] * n)


def test_join_puts_each_transition_in_one_cell():
    ids = ["a", "b", "c", "d"]
    rows = [{"id": "a", "identity_grounded": True, "knowledge_in_prompt": 0.0, "n_extra": 0, "evidence_off_entity": None},
            {"id": "b", "identity_grounded": False, "knowledge_in_prompt": 0.5, "n_extra": None, "evidence_off_entity": 0.9},
            {"id": "c", "identity_grounded": True, "knowledge_in_prompt": 1.0, "n_extra": 0, "evidence_off_entity": 0.5},
            {"id": "d", "identity_grounded": True, "knowledge_in_prompt": 1.0, "n_extra": 0, "evidence_off_entity": 0.0}]
    layers = join(matrix(ids, [0, 1, 1, 1]), matrix(ids, [1, 0, 0, 1]), rows)
    cells = layers["Success"]["cells"]
    assert cells["repair.grounded.no_knowledge"] == ["a"] and cells["damage.off_entity"] == ["b"]
    assert cells["damage.neither"] == ["c"]  # exactly half off-entity is not "mostly"
    assert layers["Success"]["repaired"] == 1 and layers["Success"]["damaged"] == 2


def test_causes_plot_is_copied_from_the_plot_cache_when_it_shows_the_same_counts(tmp_path, monkeypatch):
    import eval.report.diagnostics as report_diagnostics
    from eval.diagnostics.joined import CELLS

    def diagnostics(repaired, prefix="m"):
        cells = {cell: [] for cell in CELLS}
        cells["repair.grounded.knowledge"] = [f"{prefix}{i}" for i in range(repaired)]
        cells["damage.neither"] = ["m9"]
        return {"kar": {"joined": {"baseline": "vanilla", "layers": {"Success": {"cells": cells}}}}}

    cache = tmp_path / "plots"
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir(), (tmp_path / "c").mkdir()
    drawn = report_diagnostics.causes_plot(diagnostics(2), tmp_path / "a", cache=cache)
    assert [p.read_bytes() for p in cache.glob("*.png")] == [drawn.read_bytes()]
    draws = []
    draw = report_diagnostics._draw_causes
    monkeypatch.setattr(report_diagnostics, "_draw_causes", lambda *args: (draws.append(args), draw(*args)))
    again = report_diagnostics.causes_plot(diagnostics(2, "x"), tmp_path / "b", cache=cache)  # other items, same counts
    assert again.read_bytes() == drawn.read_bytes() and draws == []
    changed = report_diagnostics.causes_plot(diagnostics(3), tmp_path / "c", cache=cache)
    assert len(draws) == 1 and changed.read_bytes() != drawn.read_bytes() and len(list(cache.glob("*.png"))) == 2
