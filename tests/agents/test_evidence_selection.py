"""Evidence selection: entity pages first, entity scoping, the floor, dedup by canonical URL, the budget,
and the reason each piece is there."""

from __future__ import annotations

from types import SimpleNamespace

from agents.pipeline.evidence import format_pieces, none_reason, select_evidence
from retrieval.websearch import SearchResult
from retrieval.websearch.relevance import distinctive_words, mentions, web_above_floor


def ent(name: str, aliases=(), eid: str | None = None):
    return SimpleNamespace(id=eid or f"id:{name}", name=name, aliases=list(aliases), sources=[])


def local(title, url, content, score, above, entity_id=None):
    return SearchResult(title, url, content, score, above, entity_id)


def test_search_cot_keeps_above_floor_and_drops_the_rest_with_counts():
    results = [
        local("Doge | KYM", "https://knowyourmeme.com/memes/doge", "Doge is a Shiba Inu meme", 0.4, True),
        local("Cats", "https://knowyourmeme.com/memes/cats", "cats", 0.01, False),
        local("Dogs", "https://knowyourmeme.com/memes/dogs", "dogs", 0.02, False),
    ]
    sel = select_evidence([("doge meme origin meaning", "local", results)], None)
    assert [p.url for p in sel.pieces] == ["https://knowyourmeme.com/memes/doge"]
    assert sel.pieces[0].reason == "above floor" and sel.pieces[0].entity is None
    assert sel.pieces[0].backend == "local" and sel.pieces[0].rank == 1 and sel.pieces[0].score == 0.4
    assert sel.dropped == {"below floor": 2}


def test_duplicates_across_queries_by_canonical_url_keep_the_most_relevant_copy():
    a = local("Doge", "https://knowyourmeme.com/memes/doge", "first", 0.3, True)
    b = local("Doge", "http://KnowYourMeme.com/memes/doge/?utm_source=x", "second", 0.5, True)
    sel = select_evidence([("q1", "local", [a]), ("q2", "local", [b])], None)
    assert len(sel.pieces) == 1 and sel.pieces[0].query == "q2" and sel.pieces[0].content == "second"
    assert sel.dropped == {"duplicate": 1}


def test_kar_entity_pages_come_first_then_about_entity_then_floor():
    doge = ent("Doge", ["Shiba Inu meme"])
    own = SearchResult("Doge | KYM", "https://knowyourmeme.com/memes/doge", "Doge is…", None, None, doge.id)
    results = [
        local("Unrelated but strong", "https://x.org/a", "about something", 0.9, True),
        local("Dogecoin", "https://x.org/coin", "Dogecoin is a cryptocurrency", 0.01, False),  # not the word "doge"
        local("History of Doge", "https://x.org/history", "the doge meme spread in 2013", 0.01, False),
        local("Doge | KYM", "https://knowyourmeme.com/memes/doge#about", "dup of own page", 0.8, True),
    ]
    sel = select_evidence([("Doge meme origin meaning", "local", results)], [doge], [(doge, own)])
    assert [(p.reason, p.url) for p in sel.pieces] == [
        ("entity page", "https://knowyourmeme.com/memes/doge"),
        ("about entity", "https://x.org/history"),
        ("above floor", "https://x.org/a"),
    ]
    assert sel.pieces[0].entity == "Doge" and sel.pieces[1].entity == "Doge"
    assert sel.dropped == {"below floor": 1, "duplicate": 1}


def test_search_cot_gets_no_entity_scoping():
    results = [local("History of Doge", "https://x.org/history", "the doge meme", 0.01, False)]
    assert select_evidence([("q", "local", results)], None).pieces == []
    assert select_evidence([("q", "local", results)], [ent("Doge")]).pieces[0].reason == "about entity"


def test_a_local_page_below_the_floor_naming_the_entity_only_in_its_text_is_dropped():
    doge = ent("Doge")
    results = [
        local("Filler page 7", "https://x.org/filler/7", "… and then the doge meme spread …", 0.01, False),
        local("Filler page 8", "https://x.org/filler/8", "… the doge meme, a Shiba Inu …", 0.3, True),
        local("Doge and friends", "https://x.org/friends", "a list of dogs", 0.01, False),
    ]
    web = [SearchResult("Some blog", "https://blog.example/1", "the doge meme spread in 2013", None, None)]
    sel = select_evidence([("Doge meme origin meaning", "local", results), ("Doge meme origin meaning", "tavily", web)], [doge])
    assert [(p.reason, p.url) for p in sel.pieces] == [
        ("about entity", "https://x.org/filler/8"),
        ("about entity", "https://x.org/friends"),
        ("about entity", "https://blog.example/1"),
    ]
    assert sel.dropped == {"below floor": 1}


def test_a_name_that_is_an_ordinary_word_counts_only_in_the_title():
    yes = ent("Yes")
    assert not mentions(yes, "Weather today", "yes, it will rain")
    assert mentions(yes, "Yes | Know Your Meme", "")
    zh = ent("王司徒")
    assert mentions(zh, "", "诸葛亮骂死王司徒的名场面")
    assert not mentions(ent("天天"), "", "今天天气很好")


def test_web_results_are_floored_by_the_querys_distinctive_words():
    assert distinctive_words("Potion Seller meme origin meaning") == ["potion"] or "potion" in distinctive_words("Potion Seller meme origin meaning")
    assert web_above_floor("Potion Seller meme origin meaning", "Potion Seller", "a potion seller video")
    assert not web_above_floor("Potion Seller meme origin meaning", "Seller", "a seller of things")
    assert not web_above_floor("can you pick up some milk on the way home", "Milk", "pick up some milk on the way home")
    web = [SearchResult("Milk", "https://x.org/milk", "pick up some milk on the way home")]
    sel = select_evidence([("can you pick up some milk on the way home", "tavily", web)], None)
    assert sel.pieces == [] and sel.dropped == {"below floor": 1}
    assert none_reason(sel, 1) == "every result was dropped (1 below floor)"


def test_budget_drops_what_does_not_fit_and_says_so():
    results = [local(f"Page {i}", f"https://x.org/{i}", "word " * 400, 0.5 - i / 100, True) for i in range(6)]
    sel = select_evidence([("q", "local", results)], None)
    ev = format_pieces(sel, 300)
    assert ev.results_shown == len(sel.pieces) >= 1 and ev.tokens <= 300
    assert sel.dropped.get("over budget", 0) == 6 - len(sel.pieces) > 0
    assert "(above floor)" in ev.text and "URL: https://x.org/0" in ev.text


def test_empty_results_are_counted_and_none_reason_says_why():
    sel = select_evidence([("q", "local", [SearchResult("", "https://x.org/e", "")])], None)
    assert sel.dropped == {"empty": 1}
    assert none_reason(select_evidence([], None), 0) == "no search was run"
    assert none_reason(select_evidence([("q", "local", [])], None), 1) == "the searches returned no results"
