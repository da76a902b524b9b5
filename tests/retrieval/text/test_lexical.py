"""The lexical tokenizer, its BM25 weights (qdrant-edge's Bm25), catchphrases and caption matching."""

from __future__ import annotations

from culturebase.entity import Entity
from retrieval.text import lexical
from retrieval.text.lexical import (
    caption_lines,
    caption_score,
    catchphrases,
    encode_document,
    encode_query,
    lexical_text,
    lexical_tokens,
    normalized_bm25,
)


def test_tokens_nfkc_casefold_words_and_cjk_ngrams():
    tokens = lexical_tokens("Ｄｏｇｅ 诸葛亮")
    assert "doge" in tokens  # full width folded, case folded
    assert {"诸", "葛", "亮", "诸葛", "葛亮"} <= set(tokens)
    assert "诸葛亮" not in tokens  # unigrams and bigrams only


def test_latin_ngrams_cross_word_boundaries():
    spaced = set(lexical_tokens("such wow"))
    squashed = set(lexical_tokens("SUCHWOW"))
    assert {"~such", "~uchw", "~chwo", "~hwow"} <= spaced & squashed
    assert "such" in spaced and "suchwow" in squashed  # the words differ, the n-grams meet


def test_no_tokens_from_nothing():
    for text in ("", "   \n\t ", "！？。，、…——", "?!.,;:()[]{}", "\x00\x01\x07\x7f"):
        assert lexical_tokens(text) == [] and encode_query(text) == {} and encode_document(text) == {}
    assert lexical_tokens("\x00doge\x1f") == ["doge", "~doge"]  # control characters separate, never join


def test_huge_text_is_cut_not_refused():
    vec = encode_query("wow " * 30_000)  # 120 kB
    assert 0 < len(vec) < 50


def test_bm25_document_weights_saturate_and_normalise_length():
    short = encode_document("doge meme")
    long = encode_document("doge meme " + " ".join(f"filler{i}" for i in range(400)))
    shared = set(encode_query("doge")) & set(short)
    assert len(shared) == 2  # the word and its 4-gram
    repeated = encode_document("doge " * 50)
    for doge in shared:
        assert short[doge] > long[doge] > 0  # length normalisation
        assert short[doge] < repeated[doge] < 2.2  # tf saturation: at most k + 1
    assert set(encode_query("doge doge doge").values()) == {1.0}


def test_normalized_bm25_is_a_share():
    q = encode_query("神烦狗")
    assert normalized_bm25(0.0, q, 100) == 0.0
    assert 0 < normalized_bm25(3.0, q, 100) < normalized_bm25(30.0, q, 100) == 1.0


def test_catchphrases_are_quoted_usage_lines_aliases_and_name():
    e = Entity(
        name="Doge",
        aliases=["神烦狗", "Such wow"],
        cultural_usage="Captions like 'such wow', 'much amaze' and “very skill”; the dog's name isn't quoted.",
        language="en",
    )
    phrases = catchphrases(e)
    assert phrases[:3] == ["such wow", "much amaze", "very skill"]
    assert "神烦狗" in phrases and "Doge" in phrases
    assert "Such wow" not in phrases  # same key as 'such wow'
    assert "Doge" in lexical_text(e) and "神烦狗" in lexical_text(e)


def test_caption_lines_join_neighbours_and_drop_short_lines():
    lines = caption_lines("我从未见过\n有如此厚颜无耻之人\nok")
    assert "我从未见过有如此厚颜无耻之人" in lines and "我从未见过" in lines
    assert "ok" not in lines
    assert caption_lines("SUCHWOW") == []  # 7 Latin characters: too short
    assert caption_lines("") == [] and caption_lines(" \n \x00 ") == []


def test_caption_score_containment_either_way_and_ocr_errors():
    phrases = ["我从未见过有如此厚颜无耻之人", "诸葛村夫"]
    two_lines = caption_score(caption_lines("我从未见过\n有如此厚颜无耻之人"), phrases)
    assert two_lines is not None and two_lines.score == 1.0
    one_wrong = caption_score(caption_lines("我从末见过有如此厚颜无耻之人"), phrases)
    assert one_wrong is not None and 0.9 < one_wrong.score < 1.0
    doge = caption_score(caption_lines("SUCHWOW\nMUCHAMAZE\nVERYSKILL"), ["such wow", "much amaze", "very skill"])
    assert doge is not None and doge.score == 1.0
    inside = caption_score(caption_lines("他说：我从未见过有如此厚颜无耻之人"), phrases)
    assert inside is not None and inside.score == 1.0  # the catchphrase fills most of the line
    # a short alias inside a long unrelated sentence is weak evidence, not a verbatim line
    assert caption_score(caption_lines("Thank you for shopping with us today"), ["Thank you"]) is None
    half = caption_score(caption_lines("Thank you all so much"), ["Thank you"])
    assert half is not None and 0.8 < half.score < 1.0  # the alias fills 8 of 17 characters
    assert caption_score(caption_lines("今天天气不错适合出去散步"), phrases) is None


def test_names_are_found_at_word_boundaries_only():
    assert not lexical.name_in_text("天天", lexical.normalize("今天天气真好"))
    assert not lexical.name_in_text("火车", lexical.normalize("春节回家的火车票抢到了"))
    assert lexical.name_in_text("老板", lexical.normalize("老板说下个月涨工资"))
    assert lexical.name_in_text("doge", "such doge wow")


def test_commonness_orders_ordinary_words_above_names():
    assert lexical.commonness("老板") > lexical.COMMON_ZIPF > lexical.commonness("琪露诺")
    assert lexical.needs_corroboration("problem") and not lexical.needs_corroboration("stonks")
    assert lexical.commonness("") == 0.0
    # a phrase of ordinary words is no ordinary phrase ("Such wow" is Doge's alias)
    assert lexical.commonness("such wow") < lexical.COMMON_ZIPF < min(lexical.commonness("such"), lexical.commonness("wow"))


def test_an_approximate_caption_match_of_ordinary_words_alone_is_none():
    lines = lexical.caption_lines("My laptop battery died during the presentation")
    assert lexical.caption_score(lines, ["Gru's Presentation"]) is None
    assert lexical.caption_score(lexical.caption_lines("where are you?"), ["Are you OK"]) is None
    # a verbatim catchphrase and one with a look-alike OCR character still match
    assert lexical.caption_score(lexical.caption_lines("NEVER GONNA GIVE YOU UP"), ["Never gonna give you up"]).score == 1.0


def test_ocr_letter_readings_only_for_words_mixing_letters_and_digits():
    from retrieval.text.lexical import ocr_letter_readings

    assert ocr_letter_readings("5tonks") == ["stonks"]
    assert ocr_letter_readings("such w0w") == ["such wow"]
    assert ocr_letter_readings("m1nd") == ["mlnd", "mind"]
    assert ocr_letter_readings("area 51 in 2024") == [] and ocr_letter_readings("doge") == []
    assert ocr_letter_readings("蚌埠住了 666") == []


def test_dictionary_words_are_ordinary_names_are_not():
    from retrieval.text.lexical import is_dictionary_word, needs_corroboration

    for word in ("东坡肉", "烧麦", "火车", "老板", "麻婆豆腐"):
        assert is_dictionary_word(word) and needs_corroboration(word), word
    for name in ("诸葛亮", "鲁迅", "孙悟空", "琪露诺", "Doge", "东坡肉A"):
        assert not is_dictionary_word(name), name


def test_whole_lines_fold_case_punctuation_and_attribution_dashes():
    from retrieval.text.lexical import whole_lines

    keys = whole_lines("横眉冷对千夫指\n—— 鲁迅\nYes.\nOK\n卷\n5TONKS")
    assert {"鲁迅", "yes", "stonks", "5tonks", "横眉冷对千夫指"} <= keys
    assert not {"ok", "卷"} & keys  # too short to name anything
