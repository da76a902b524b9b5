"""The identity rules (culturebase/identity.py): what joins two records, what never does, and joins undone."""

from __future__ import annotations

import pytest

from culturebase.entity import Entity, EntityImage, Source, make_entity_id
from culturebase.identity import (
    DECLARED, SAME_ID, SAME_NAME_AND_WORK, SAME_URL, IdentityIndex, Signature, SplitError, join, join_rule, repair, split,
)


def _e(name, url=None, site="knowyourmeme", source_work="", aliases=(), tags=(), images=(), **extra):
    sources = [Source(site=site, url=url)] if url else []
    return Entity(name=name, source_work=source_work, aliases=list(aliases), tags=list(tags), description="d" * 30,
                  sources=sources, images=list(images), **extra)


def _rule(a, b, same_as=None):
    return join_rule(Signature.of(a), Signature.of(b), same_as)


def _image(n: int) -> EntityImage:
    sha = f"{n:064x}"
    return EntityImage(url=f"https://img.example/{n}.jpg", path=f"{sha[:2]}/{sha}.jpg", sha256=sha, width=10, height=10)


def test_the_rules_that_join():
    doge = _e("Doge", "https://k.com/memes/doge")
    assert _rule(_e("Doge", "https://k.com/memes/doge/"), doge) == SAME_URL  # the same canonical URL
    assert _rule(_e("doge", "https://m.org/Doge", site="moegirl"), doge) == SAME_NAME_AND_WORK  # name + (empty) work, two sites
    assert _rule(_e("Doge", "https://m.org/Doge", site="moegirl", source_work="Some Game"), doge) is None
    assert _rule(_e("X", id="mine"), _e("Y", id="mine")) == SAME_ID  # our own records name their id
    template = _e("Afraid to Ask Andy", "https://api.memegen.link/templates/afraid", site="memegen")
    page = _e("Woman Yelling at a Cat", "https://k.com/memes/woman-yelling-at-a-cat")
    assert _rule(page, template) is None
    assert _rule(page, template, same_as="https://api.memegen.link/templates/afraid") == DECLARED


def test_what_never_joins():
    paimon = _e("派蒙", "https://m.org/派蒙", site="moegirl", source_work="原神", aliases=["应急食品"], tags=["原神"])
    # a page named like another's alias, with no redirect saying so
    assert _rule(_e("应急食品", "https://m.org/应急食品", site="moegirl", source_work="原神"), paimon) is None
    # a shared tag, keyword or franchise
    assert _rule(_e("Other", "https://m.org/Other", site="moegirl", source_work="原神", tags=["原神"]), paimon) is None
    # two pages of one site with one name and work: the site keeps two entities
    assert _rule(_e("Doge", "https://k.com/memes/doge-2"), _e("Doge", "https://k.com/memes/doge")) is None
    # a page an entity only links (a memegen template's KnowYourMeme source) is no page of it
    template = _e("Sad Obama", "https://api.memegen.link/templates/sad-obama", site="memegen")
    template = template.model_copy(update={"sources": [*template.sources, Source(site="knowyourmeme", url="https://k.com/memes/sad-joe-biden")]})
    assert _rule(_e("Sad Joe Biden", "https://k.com/memes/sad-joe-biden"), template) is None


def test_a_join_is_recorded_and_split_gives_back_both_records():
    a = _e("Schrute Facts", "https://api.memegen.link/templates/dwight", site="memegen", images=[_image(1)], aliases=["Dwight"])
    b = _e("Schrute Facts", "https://k.com/memes/schrute-facts", images=[_image(2)], aliases=["False Bear"])
    joined = join(a, b, SAME_NAME_AND_WORK)
    assert joined.id == a.id and [p.rule for p in joined.constituents] == ["first", SAME_NAME_AND_WORK]
    assert {"Dwight", "False Bear"} <= set(joined.aliases) and len(joined.images) == 2 and len(joined.sources) == 2
    kept, out = split(joined, "https://k.com/memes/schrute-facts/")
    assert (kept.id, kept.aliases, kept.images, kept.sources) == (a.id, a.aliases, a.images, a.sources)
    assert (out.id, out.aliases, out.images, out.sources) == (b.id, b.aliases, b.images, b.sources)
    assert kept.constituents == [] and out.constituents == []
    with pytest.raises(SplitError, match="entity's own page"):
        split(joined, "https://api.memegen.link/templates/dwight")
    with pytest.raises(SplitError, match="not one of the pages"):
        split(joined, "https://k.com/memes/other")
    with pytest.raises(SplitError, match="not joined"):
        split(a, "https://k.com/memes/schrute-facts")


def test_a_page_read_again_refreshes_its_part_and_keeps_the_other_parts():
    a = _e("Doge", "https://api.memegen.link/templates/doge", site="memegen")
    b = _e("Doge", "https://k.com/memes/doge", aliases=["Shibe"], images=[_image(3)])
    joined = join(a, b, SAME_NAME_AND_WORK)
    again = _e("Doge", "https://k.com/memes/doge", aliases=["Shiba Inu"])  # no image this time
    refreshed = join(joined, again, SAME_URL, refresh=True)
    assert len(refreshed.constituents) == 2 and refreshed.constituents[1].rule == SAME_NAME_AND_WORK
    assert "Shiba Inu" in refreshed.aliases and "Shibe" not in refreshed.aliases  # the page's names as it reads now
    assert [i.sha256 for i in refreshed.images] == [_image(3).sha256]  # stored images kept when the new read has none
    united = join(joined, again, SAME_URL)  # within one run: both copies' names
    assert {"Shibe", "Shiba Inu"} <= set(united.aliases)


def test_repair_takes_an_old_join_apart():
    # what the old alias-key rule made: Jim Halpert's template folded into Schrute Facts, with no merge record
    schrute = _e("Schrute Facts", "https://api.memegen.link/templates/dwight", site="memegen", images=[_image(1)], tags=["The Office"])
    jim = _e("Jim Halpert Pointing to Whiteboard", "https://api.memegen.link/templates/jim", site="memegen", images=[_image(2)])
    old = schrute.merged_with(jim)
    assert old.constituents == [] and "Jim Halpert Pointing to Whiteboard" in old.aliases
    left = repair(old, jim)
    assert left is not None and left.aliases == [] and [i.sha256 for i in left.images] == [_image(1).sha256]
    assert [s.url for s in left.sources] == ["https://api.memegen.link/templates/dwight"]
    assert repair(left, jim) is None  # nothing left to repair
    # a recorded join the rules still make is left alone; one they no longer make is taken apart
    kym = _e("Schrute Facts", "https://k.com/memes/schrute-facts")
    assert repair(join(schrute, kym, SAME_NAME_AND_WORK), kym) is None
    wrong = join(schrute, jim, "alias")  # recorded under a rule that no longer exists
    assert repair(wrong, jim).constituents == [] and repair(wrong, jim).name == "Schrute Facts"


def test_a_declared_page_is_found_whichever_record_comes_first():
    page = _e("Woman Yelling at a Cat", "https://k.com/memes/woman-yelling-at-a-cat")
    template = _e("Afraid to Ask Andy", "https://api.memegen.link/templates/afraid", site="memegen")
    declared = "https://api.memegen.link/templates/afraid"
    first = IdentityIndex()  # the declared page first, then the record that declares it
    first.add(template)
    assert first.match(page, same_as=declared)[1] == DECLARED and first.declared_by(page) is None
    later = IdentityIndex()  # the record that declares it first: the page, when it comes, is found by the declaration
    later.add(page, same_as=declared)
    sig, rule = later.match(template)
    assert sig.id == page.id and rule == DECLARED and later.declared_by(template) is sig
    assert later.declared_by(_e("Afraid to Ask Andy", "https://api.memegen.link/templates/other", site="memegen")) is None
    joined = join(template, page, DECLARED)  # the crawl joins the declaring record into the declared page's
    later.add(joined, replaces=page.id)
    assert [eid for eid, _ in later.declared.values()] == [joined.id]  # the declaration follows the join


def test_identity_index_finds_the_entity_and_the_alias_it_does_not_join():
    index = IdentityIndex()
    paimon = _e("派蒙", "https://m.org/派蒙", site="moegirl", source_work="原神", aliases=["应急食品"])
    index.add(paimon)
    food = _e("应急食品", "https://m.org/应急食品", site="moegirl", source_work="原神")
    assert index.match(food) == (None, None) and index.alias_owner(food).id == paimon.id
    other_site = _e("派蒙", "https://k.com/memes/paimon", source_work="原神")
    sig, rule = index.match(other_site)
    assert sig.id == paimon.id and rule == SAME_NAME_AND_WORK
    page = _e("Woman Yelling at a Cat", "https://k.com/memes/woman-yelling-at-a-cat")
    template = _e("Afraid to Ask Andy", "https://api.memegen.link/templates/afraid", site="memegen")
    index.add(template)
    sig, rule = index.match(page, same_as="https://api.memegen.link/templates/afraid")
    assert sig.id == template.id == make_entity_id("", url="https://api.memegen.link/templates/afraid") and rule == DECLARED
